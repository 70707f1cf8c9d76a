"""Sockets live here only: uvloop listeners, the per-connection protocol, flow control, the upstream pool."""
