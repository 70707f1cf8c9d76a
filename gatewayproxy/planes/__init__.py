"""The two request handlers: the data plane (pipeline) and the admin plane (health, metrics, config)."""
