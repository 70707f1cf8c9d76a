"""Cross-cutting pieces every registry app uses: ids, errors, auth, lists, idempotency, tenancy."""
