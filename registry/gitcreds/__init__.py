"""Git credentials: tokens used to clone repositories into a session's sandbox (sealed at rest)."""
