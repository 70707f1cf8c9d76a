"""Gateway benchmark: a fake provider hit directly, through this gateway, and through the LiteLLM proxy."""
