"""Workspaces, their API keys and OIDC memberships, and the `workspace` command."""
