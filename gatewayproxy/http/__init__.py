"""Sans-IO HTTP/1.1: the h11 connection wrapper with its limits, and Server-Sent Events."""
