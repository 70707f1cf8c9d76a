"""The Django admin pages of the gateway's config rows refuse a save that would make the whole config
invalid, showing why on the form, and save valid changes through the services (the version moves)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from gatewayproxy.store import selectors, services
from gatewayproxy.store.models import Destination, Route

DOCUMENT = {
    "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
    "destinations": {"one": {"kind": "vendor_a", "credentials": {"vault": "v"}}},
    "routes": [{"name": "all", "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}],
}


@pytest.fixture
def staff(db: None) -> Client:
    services.config_import(document=DOCUMENT)
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    return client


def to(destination: str) -> str:
    return json.dumps({"strategy": {"mode": "fallback", "targets": [{"destination": destination}]}})


def form_errors(response: Any) -> str:
    return " ".join(str(error) for error in response.context["adminform"].form.non_field_errors())


def test_an_invalid_route_is_refused_with_the_reason(staff: Client) -> None:
    response = staff.post("/admin/store/route/add/", {"name": "bad", "body": to("nowhere")})
    assert response.status_code == 200
    assert (
        "routes[1].strategy.targets[0].destination: destination &#x27;nowhere&#x27; is not declared"
        in response.content.decode()
    )
    assert "destination 'nowhere' is not declared" in form_errors(response)
    assert selectors.config_version() == 1 and not Route.objects.filter(name="bad").exists()


def test_a_valid_route_is_saved_and_moves_the_version(staff: Client) -> None:
    response = staff.post("/admin/store/route/add/", {"name": "second", "body": to("one")})
    assert response.status_code == 302
    assert [route["name"] for route in selectors.stored_document()["routes"]] == ["all", "second"]
    assert Route.objects.get(name="second").position == 1 and selectors.config_version() == 2


def test_renaming_a_destination_still_in_use_is_refused(staff: Client) -> None:
    destination = Destination.objects.get(name="one")
    response = staff.post(
        f"/admin/store/destination/{destination.pk}/change/", {"name": "uno", "body": json.dumps(destination.body)}
    )
    assert response.status_code == 200
    assert "destinations.one: still referenced by route 'all'" in form_errors(response)
    assert Destination.objects.get(pk=destination.pk).name == "one" and selectors.config_version() == 1


def test_deleting_a_destination_still_in_use_is_refused(staff: Client) -> None:
    destination = Destination.objects.get(name="one")
    response = staff.post(f"/admin/store/destination/{destination.pk}/delete/", {"post": "yes"}, follow=True)
    shown = [str(message) for message in response.context["messages"]]
    assert shown == ["not deleted: destinations.one: still referenced by route 'all'"]
    assert Destination.objects.filter(name="one").exists() and selectors.config_version() == 1


def test_deleting_an_unused_route_moves_the_version(staff: Client) -> None:
    route = Route.objects.get(name="all")
    response = staff.post(f"/admin/store/route/{route.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert "routes" not in selectors.stored_document() and selectors.config_version() == 2


def test_a_plugin_is_added_in_its_slot(staff: Client) -> None:
    response = staff.post(
        "/admin/store/plugininstance/add/", {"slot": "audit_sinks", "name": "a", "body": json.dumps({"kind": "noop"})}
    )
    assert response.status_code == 302
    assert selectors.stored_document()["plugins"] == {"audit_sinks": [{"name": "a", "kind": "noop"}]}
