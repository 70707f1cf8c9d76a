"""Session sandboxes: the backend interface, the bubblewrap backend, and the built-in toolset run in it."""
