"""Agents: versioned definitions of model, system prompt, tools, MCP servers and skills."""
