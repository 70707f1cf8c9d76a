"""Plugin kinds per slot, each registered by name."""
