"""Extension groups: `policy` (guardrails), `pricing` (model prices), `runtime` (the harness catalog).

Served under `/apis/<short>.<REGISTRY_EXTENSION_DOMAIN>/v1/...` when listed in REGISTRY_EXTENSION_GROUPS
(`policy` and `pricing` by default).
Reads need any workspace credential; writes need an organization-admin API key.
"""
