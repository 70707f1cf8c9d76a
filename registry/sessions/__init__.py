"""Sessions: running instances of an agent, their append-only event log and its resumable stream."""
