"""Management commands of the session runtime."""
