"""The session runtime: claims sessions with pending work and runs their turns against a model."""
