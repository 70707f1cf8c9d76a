"""Webhooks: workspace endpoints, the outbox of events written with the change that caused them, and
their signed delivery (Standard Webhooks) by `runwebhooks`, with retries, attempts and redelivery."""
