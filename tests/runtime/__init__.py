"""End-to-end tests of the session runtime: a live registry, `runsessions` workers, a fake model."""
