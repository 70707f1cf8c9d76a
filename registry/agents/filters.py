"""List filters for agents."""

from __future__ import annotations

from registry.agents.models import Agent
from registry.core.filters import CreatedAtRangeFilter


class AgentFilter(CreatedAtRangeFilter):
    class Meta:
        model = Agent
        fields: list[str] = []
