"""Agent (the current definition) and AgentVersion (every definition it ever had)."""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import ArchivableResource


class Agent(ArchivableResource):
    """The agent with its current definition in `spec`; every change adds an AgentVersion."""

    id = public_id_field("agent")
    name = models.CharField(max_length=256)
    version = models.PositiveIntegerField(default=1)
    spec = models.JSONField(help_text="The current definition: model, system, tools, mcp_servers, skills, ...")


class AgentVersion(models.Model):
    """An immutable definition of an agent at one version."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    spec = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="agent_version_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} v{self.version}"
