"""Trace exporters (`plugins.trace_exporters`): OTLP spans and the signed tape."""

from __future__ import annotations

from gatewayproxy.pipeline.stages import Stage, StageDeps


def build(deps: StageDeps) -> list[Stage]:
    """This family's stages for a snapshot (none until it is built)."""
    return []
