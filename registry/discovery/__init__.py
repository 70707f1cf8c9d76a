"""Discovery (`/api`, `/apis`, `/apis/<group>/v1`) and health (`/healthz`, `/readyz`)."""
