"""Internal endpoints for the gateway, under `/internal/v1/`, authenticated by a service bearer token.

Kept apart from the public API: their own prefix, their own credential (REGISTRY_INTERNAL_TOKEN_FILE),
and REGISTRY_INTERNAL_API turns them off on a public listener (serve them from an internal one).
"""
