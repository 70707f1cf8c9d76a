"""`manage.py workspace`: the JSON contract other tools script against."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from registry.workspaces.models import OidcMembership
from registry.workspaces.selectors import api_key_for_plaintext


def run(*args):
    out = io.StringIO()
    call_command("workspace", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_create_key_member():
    created = json.loads(run("create", "acme", "--json"))
    assert created["workspace"]["name"] == "acme"
    workspace_id = created["workspace"]["id"]
    assert workspace_id.startswith("wsp_")
    assert getattr(api_key_for_plaintext(created["api_key"]), "workspace_id", None) == workspace_id

    issued = json.loads(run("key", workspace_id, "--json"))
    assert set(issued) == {"api_key"} and issued["api_key"] != created["api_key"]
    assert getattr(api_key_for_plaintext(issued["api_key"]), "workspace_id", None) == workspace_id

    run("member", workspace_id, "--subject", "user-123")
    assert OidcMembership.objects.get(subject="user-123").workspace_id == workspace_id


@pytest.mark.django_db
def test_unknown_workspace_fails():
    with pytest.raises(CommandError, match="no workspace"):
        run("key", "wsp_missing", "--json")
