"""The fleet benchmark: registry scaling behind nginx, gateway workers, trigger scheduler lag."""
