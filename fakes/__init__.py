"""Loopback stand-ins shared by the tests and the benchmarks: a scripted model, a git server, a test PKI, an
nginx balancer, the HTTP server they are built on, and the one polling wait they start with.

`tests/` and `bench/` both import this package; neither imports the other, and product code (`registry/`,
`gatewayproxy/`) never imports it. It does not ship in the product image (`.dockerignore`).
"""
