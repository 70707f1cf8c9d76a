"""The test support kit: every helper module of the suite (loopback servers, process runners, SDK clients,
documents, fakes that only tests use), by area in sub-packages (`gateway/`, `runtime/`, `fleet/`). Fixtures
live in the conftest files (shared ones are defined here and imported by them); stand-ins that benchmarks use
too are in the top-level `fakes/` package, imported from there."""
