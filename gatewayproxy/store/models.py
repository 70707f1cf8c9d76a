"""Rows of the database-backed gateway configuration; each body is the JSON form of its config section."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from gatewayproxy.store.document import PLUGIN_SLOTS, SINGLETON_SECTIONS, EntryKey


class ConfigVersion(models.Model):
    """The one counter bumped in the transaction of every write; replicas poll it to reload. `source` is the
    file last imported: relative paths in plugin options resolve against its directory, as they did there."""

    number = models.BigIntegerField(default=0)
    source = models.CharField(max_length=1000, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"config version {self.number}"


class Section(models.Model):
    """A singleton top-level section (server, identity, spend, guardrail_*)."""

    name = models.CharField(max_length=64, unique=True, choices=[(name, name) for name in SINGLETON_SECTIONS])
    body = models.JSONField(default=dict)

    def __str__(self) -> str:
        return self.name


class NamedEntry(models.Model):
    """A document entry keyed by its name, which is unique among its collection's."""

    name = models.CharField(max_length=200, unique=True)
    body = models.JSONField(default=dict)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.name


class Destination(NamedEntry):
    """A destination, keyed by its name."""

    class Meta:
        ordering = ("name",)


class OrderedEntry(NamedEntry):
    """A named list entry whose place in the list is its `position` (routes and limits apply in order)."""

    position = models.IntegerField(default=0)

    class Meta:
        abstract = True
        ordering = ("position", "id")


class Route(OrderedEntry):
    """A route; routes are tried in `position` order."""


class RateLimit(OrderedEntry):
    """A rate or spend limit; ties between equally specific limits go to the lower `position`."""


class Vault(NamedEntry):
    """A vault, keyed by its name."""

    class Meta:
        ordering = ("id",)


class PluginInstance(models.Model):
    """A plugin instance in its slot; list slots keep `position` order."""

    slot = models.CharField(max_length=32, choices=[(slot, slot) for slot in PLUGIN_SLOTS])
    name = models.CharField(max_length=200)
    position = models.IntegerField(default=0)
    body = models.JSONField(default=dict)

    class Meta:
        ordering = ("slot", "position", "id")
        constraints = [models.UniqueConstraint(fields=("slot", "name"), name="store_plugin_unique_in_slot")]

    def __str__(self) -> str:
        return f"{self.slot}/{self.name}"


class ConfigRevision(models.Model):
    """One change of one entry, recorded in the transaction of the write that made it: who (`author`, kept by
    name too), how (`origin`: the admin, a rollback, an import, the gateway's admin plane), which entry, its
    body before and after (null: absent) and the config version the write produced."""

    created_at = models.DateTimeField(auto_now_add=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_name = models.CharField(max_length=150, blank=True, default="")
    origin = models.CharField(max_length=32)
    collection = models.CharField(max_length=32)
    slot = models.CharField(max_length=32, blank=True, default="")
    name = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    version = models.BigIntegerField()

    class Meta:
        ordering = ("-id",)
        indexes = [models.Index(fields=("collection", "slot", "name"), name="store_revision_entry")]

    def __str__(self) -> str:
        return f"revision {self.pk} of {self.key}"

    @property
    def key(self) -> EntryKey:
        """The entry the revision changed."""
        return EntryKey(self.collection, self.name, self.slot or None)


# The row model of each document collection (see gatewayproxy.store.document.EntryKey).
ROW_MODELS: dict[str, type[models.Model]] = {
    "sections": Section,
    "destinations": Destination,
    "routes": Route,
    "rate_limits": RateLimit,
    "vaults": Vault,
    "plugins": PluginInstance,
}
