"""Multi-process tests on loopback: the whole product as a fleet behind a real load balancer."""
