"""Usage and audit sinks: one module per sink kind, plus the shared queue, batching and spool machinery."""
