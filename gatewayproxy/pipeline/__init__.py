"""The data-plane pipeline: the request context and one module per stage."""
