"""The AI gateway: a raw-asyncio (uvloop + h11) proxy with a data plane and an admin plane."""
