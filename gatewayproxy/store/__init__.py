"""The database-backed gateway configuration: config sections as rows, written atomically with a version."""
