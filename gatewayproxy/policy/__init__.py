"""Policy guardrails: bundles (parsing, signatures, rollback marks), where they come from, per-subject state, rules."""
