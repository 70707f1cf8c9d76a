"""The kit of the tests that run the registry's processes (runtime, observability, tracing): their shared
fixtures and a session driven through the reference client."""
