"""The gateway tests' kit: the gateway in a thread (and its factory), config documents, fake providers and
upstreams, decision servers, and the helpers of the limit, policy, sink and store tests."""
