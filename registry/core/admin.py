"""registry.core has no admin pages: idempotency keys are internal bookkeeping."""
