"""Memory stores: durable, path-addressed memories with a full version history and preconditions."""
