"""Management commands of the gateway."""
