"""The agent registry: a DRF service whose every credential resolves to one workspace."""
