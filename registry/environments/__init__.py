"""Environments: reusable sandbox templates (network policy and packages) that sessions run in."""
