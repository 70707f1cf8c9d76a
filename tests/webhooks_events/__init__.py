"""The webhook events each change writes into the outbox, through the API and the runtime."""
