"""The fleet end-to-end test's kit: child processes with log files, an echo model, and the whole fleet behind
nginx."""
