"""The pieces the apps share from registry.core: response serializer bases and their rendering, metadata in
updates, the limit of a list, links to another app's admin list, the caller's permissions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from rest_framework import serializers
from rest_framework.test import APIRequestFactory

from registry.core.admin import changelist_link
from registry.core.callers import Caller, IsOrganizationAdmin, IsWorkspaceMember
from registry.core.errors import ApiError
from registry.core.fields import MetadataField, StrictSerializer, validated
from registry.core.pagination import parse_limit
from registry.core.serialization import (
    ArchivableObjectSerializer,
    ConstantField,
    CreatedObjectSerializer,
    MetadataMapField,
    timestamp,
)
from registry.core.views import WorkspaceViewSet

CREATED = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


class ThingSerializer(ArchivableObjectSerializer):
    """A thing."""

    type = ConstantField("thing")
    title = serializers.CharField(source="name")
    size = serializers.IntegerField(allow_null=True)
    metadata = MetadataMapField()
    shape = serializers.DictField()

    @staticmethod
    def get_shape(thing: Any) -> dict[str, str]:
        return {"type": "round"}


class NumberedSerializer(CreatedObjectSerializer):
    """A thing whose id is another attribute, with a field after which `created_at` still comes last."""

    id = serializers.CharField(source="pk")
    type = ConstantField("numbered")
    price = serializers.FloatField()


@dataclass
class Thing:
    id: str
    name: str
    size: int | None
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = None


def test_the_bases_put_the_id_first_and_the_timestamps_last() -> None:
    assert list(ThingSerializer().fields) == [
        "id",
        "type",
        "title",
        "size",
        "metadata",
        "shape",
        "created_at",
        "updated_at",
        "archived_at",
    ]
    assert list(NumberedSerializer().fields) == ["id", "type", "price", "created_at"]


def test_render_reads_the_declared_fields_in_order() -> None:
    thing = Thing("thg_1", "a", None, {"k": "v"}, CREATED, CREATED)

    rendered = ThingSerializer.render(thing)

    assert list(rendered.items()) == [
        ("id", "thg_1"),
        ("type", "thing"),
        ("title", "a"),
        ("size", None),
        ("metadata", {"k": "v"}),
        ("shape", {"type": "round"}),
        ("created_at", timestamp(CREATED)),
        ("updated_at", timestamp(CREATED)),
        ("archived_at", None),
    ]
    assert ThingSerializer(thing).data == rendered


def test_scalars_are_rendered_as_their_fields_represent_them() -> None:
    @dataclass
    class Price:
        pk: int
        price: Any
        created_at: datetime

    assert NumberedSerializer.render(Price(7, 2, CREATED)) == {
        "id": "7",
        "type": "numbered",
        "price": 2.0,
        "created_at": timestamp(CREATED),
    }


def test_a_constant_field_is_documented_as_a_one_value_choice() -> None:
    field = ConstantField("thing")

    assert field.value == "thing"
    assert list(field.choices) == ["thing"]


class Labelled(StrictSerializer):
    metadata = MetadataField(required=False)


def test_metadata_null_values_delete_keys_only_in_updates() -> None:
    assert validated(Labelled, {"metadata": {"a": None}}, partial=True) == {"metadata": {"a": None}}
    with pytest.raises(serializers.ValidationError):
        validated(Labelled, {"metadata": {"a": None}})


def test_limit_defaults_and_bounds_are_the_caller_s() -> None:
    assert parse_limit(None) == 20
    assert parse_limit("", default=1000, maximum=1000) == 1000
    assert parse_limit("999", maximum=1000) == 999
    with pytest.raises(ApiError, match="from 1 to 1000"):
        parse_limit("1001", maximum=1000)


def test_a_viewset_s_resource_type_defaults_to_its_objects_type() -> None:
    class ThingViewSet(WorkspaceViewSet):
        serializer_class = ThingSerializer

    class OtherViewSet(WorkspaceViewSet):
        resource_type = "other"
        serializer_class = ThingSerializer

    assert ThingViewSet.resource_type == "thing"
    assert OtherViewSet.resource_type == "other"


def test_changelist_link_names_the_model_by_its_label() -> None:
    link = changelist_link("agent_sessions.Session", "sessions", agent="agent_1")

    assert link == '<a href="/admin/agent_sessions/session/?agent=agent_1">sessions</a>'


@dataclass(frozen=True)
class Member(Caller):
    workspace: Any
    credential_kind: str = "api_key"
    subject: str = "sk-reg-abc"
    is_org_admin: bool = False


def test_permissions_ask_for_a_caller() -> None:
    request = APIRequestFactory().get("/")

    @dataclass
    class Workspace:
        pk: str

    for user, member, admin in (
        (AnonymousUser(), False, False),
        (Member(Workspace("wsp_1")), True, False),
        (Member(Workspace("wsp_1"), is_org_admin=True), True, True),
    ):
        request.user = user  # type: ignore[assignment]
        assert IsWorkspaceMember().has_permission(request, None) is member  # type: ignore[arg-type]
        assert IsOrganizationAdmin().has_permission(request, None) is admin  # type: ignore[arg-type]
    assert Member(Workspace("wsp_1")).workspace_id == "wsp_1"
