"""Vaults: per-workspace credential storage that sessions reference for MCP authentication."""
