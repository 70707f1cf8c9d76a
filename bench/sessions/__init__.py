"""Session benchmarks: event append throughput and stream fan-out latency."""
