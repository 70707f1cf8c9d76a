"""Registry benchmark: loopback latency of agent reads under daphne, and SQL queries per request."""
