"""Typed gateway configuration: models, loader, legacy expansion and live validation."""
