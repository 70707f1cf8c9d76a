"""Helpers shared by the test packages (servers on loopback, certificates, clients)."""
