"""The staff console's gateway pages: JSON boxes with help generated from the typed config's schema, a history
of every save with a diff and a confirmed rollback written through the store services (an invalid one refused,
writing nothing), the banner naming the file a running gateway serves instead, and the usage and spend page
(totals per day, workspace, key and model from the stored usage records; staff see their workspaces only)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils import timezone

from gatewayproxy.store import selectors, services
from gatewayproxy.store.document import EntryKey
from gatewayproxy.store.models import ConfigRevision, Destination, Route
from registry.internal.models import UsageRecord
from registry.workspaces.models import Workspace
from tests.support.admin_staff import staff_client

DOCUMENT = {
    "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
    "destinations": {
        "one": {"kind": "vendor_a", "credentials": {"vault": "v"}},
        "two": {"kind": "vendor_b", "credentials": {"vault": "v"}},
    },
    "routes": [{"name": "all", "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}],
}


@pytest.fixture
def superuser(db: None) -> Client:
    services.config_import(document=DOCUMENT)
    return staff_client("root", superuser=True)


def to(destination: str) -> str:
    return json.dumps({"strategy": {"mode": "fallback", "targets": [{"destination": destination}]}})


def change_route(client: Client, destination: str) -> None:
    route = Route.objects.get(name="all")
    response = client.post(f"/admin/store/route/{route.pk}/change/", {"name": "all", "body": to(destination)})
    assert response.status_code == 302, response.content.decode()[-2000:]


def history_of(client: Client, collection: str, name: str) -> str:
    response = client.get(f"/admin/store/configrevision/entry/{collection}/{name}/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_json_box_is_pretty_printed_with_the_allowed_keys_under_it(superuser: Client) -> None:
    route = Route.objects.get(name="all")
    page = superuser.get(f"/admin/store/route/{route.pk}/change/").content.decode()
    assert "<details>" in page and "Allowed keys" in page
    for shown in ("strategy.mode", "&quot;fallback&quot; | &quot;loadbalance&quot; | &quot;conditional&quot;"):
        assert shown in page
    assert "strategy.targets[].destination" in page and "idempotency_safe" in page
    assert "{\n  &quot;strategy&quot;: {\n    &quot;mode&quot;: &quot;fallback&quot;" in page  # indented JSON
    added = superuser.get("/admin/store/section/add/").content.decode()
    assert "Allowed keys of <code>server</code>" in added and "max_concurrent_requests" in added


def test_a_save_records_a_revision_with_a_diff_and_a_log_entry_linking_it(superuser: Client) -> None:
    change_route(superuser, "two")
    revision = ConfigRevision.objects.filter(collection="routes", name="all", origin="admin").get()
    assert revision.author_name == "root" and revision.version == selectors.config_version()
    assert revision.before is not None and revision.before["strategy"]["targets"] == [{"destination": "one"}]
    assert revision.after is not None and revision.after["strategy"]["targets"] == [{"destination": "two"}]
    page = history_of(superuser, "routes", "all")
    assert f'id="revision-{revision.pk}"' in page
    assert "-        &quot;destination&quot;: &quot;one&quot;" in page  # the diff, escaped
    assert "+        &quot;destination&quot;: &quot;two&quot;" in page
    logged = LogEntry.objects.get(object_id=str(Route.objects.get(name="all").pk))
    assert f"Revision {revision.pk}: /admin/store/configrevision/entry/routes/all/#revision-{revision.pk}" in (
        logged.get_change_message()
    )


def test_the_history_button_leads_to_the_revisions(superuser: Client) -> None:
    route = Route.objects.get(name="all")
    response = superuser.get(f"/admin/store/route/{route.pk}/history/")
    assert response.status_code == 302 and response["Location"] == "/admin/store/configrevision/entry/routes/all/"


def test_a_rollback_restores_the_row_and_records_a_revision(superuser: Client) -> None:
    change_route(superuser, "two")
    imported = ConfigRevision.objects.get(collection="routes", name="all", origin="import")
    url = f"/admin/store/configrevision/{imported.pk}/rollback/"
    asked = superuser.get(url).content.decode()
    assert "Yes, roll back" in asked and "csrfmiddlewaretoken" in asked
    version = selectors.config_version()
    response = superuser.post(url)
    assert response.status_code == 302
    assert Route.objects.get(name="all").body["strategy"]["targets"] == [{"destination": "one"}]
    assert selectors.config_version() == version + 1
    rollback = ConfigRevision.objects.get(origin="rollback")
    assert rollback.author_name == "root" and rollback.after == imported.after
    logged = LogEntry.objects.filter(change_message__startswith="Rolled routes.all back").get()
    assert f"Revision {rollback.pk}:" in logged.change_message


def test_a_rollback_needs_a_post_with_the_csrf_token(superuser: Client, db: None) -> None:
    checked = staff_client("strict", superuser=True)
    checked.handler.enforce_csrf_checks = True  # type: ignore[attr-defined]
    change_route(superuser, "two")
    imported = ConfigRevision.objects.get(collection="routes", name="all", origin="import")
    response = checked.post(f"/admin/store/configrevision/{imported.pk}/rollback/")
    assert response.status_code == 403
    assert Route.objects.get(name="all").body["strategy"]["targets"] == [{"destination": "two"}]


def test_an_invalid_rollback_is_refused_with_the_problems_and_writes_nothing(superuser: Client) -> None:
    services.config_entry_put(key=EntryKey("routes", "all"), body=json.loads(to("two")))
    services.config_entry_delete(key=EntryKey("destinations", "one"))
    imported = ConfigRevision.objects.get(collection="routes", name="all", origin="import")
    version, revisions = selectors.config_version(), ConfigRevision.objects.count()
    response = superuser.post(f"/admin/store/configrevision/{imported.pk}/rollback/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Not rolled back" in page and "destination &#x27;one&#x27; is not declared" in page
    assert selectors.config_version() == version and ConfigRevision.objects.count() == revisions
    assert Route.objects.get(name="all").body["strategy"]["targets"] == [{"destination": "two"}]
    assert not Destination.objects.filter(name="one").exists()


def test_the_pages_say_which_file_the_running_gateway_serves(
    superuser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "The running gateway serves the file" not in superuser.get("/admin/store/route/").content.decode()
    monkeypatch.setenv("GATEWAY_SERVES_FILE", "/srv/gateway.yaml")
    for url in ("/admin/store/route/", f"/admin/store/route/{Route.objects.get(name='all').pk}/change/"):
        assert "The running gateway serves the file /srv/gateway.yaml" in superuser.get(url).content.decode()


def usage(workspace: Workspace | None, key: str, model: str, cost: str, tokens: int, days_ago: int) -> None:
    ts = timezone.now().replace(hour=12) - timedelta(days=days_ago)
    number = UsageRecord.objects.count()
    UsageRecord.objects.create(
        request_id=f"req-{number}",
        workspace_id=workspace.pk if workspace else None,
        model=model,
        input_tokens=tokens,
        output_tokens=1,
        cost_usd=Decimal(cost),
        ts=ts,
        record={"principal": key, "model": model},
    )


@pytest.fixture
def workspaces(db: None) -> tuple[Workspace, Workspace]:
    mine, theirs = Workspace.objects.create(name="mine"), Workspace.objects.create(name="theirs")
    usage(mine, "key-a", "m1", "0.10", 10, 0)
    usage(mine, "key-a", "m1", "0.20", 20, 0)
    usage(mine, "key-b", "m2", "1.00", 5, 1)
    usage(theirs, "key-c", "m1", "5.00", 100, 0)
    usage(None, "operator", "m1", "9.00", 1, 0)
    usage(mine, "key-a", "m1", "7.00", 1, 40)  # outside the default 30 days
    return mine, theirs


def test_the_usage_page_totals_per_day_workspace_key_and_model(
    workspaces: tuple[Workspace, Workspace], db: None
) -> None:
    mine, theirs = workspaces
    response = staff_client("root", superuser=True).get("/admin/internal/usagerecord/")
    assert response.status_code == 200
    totals = {(t.day, t.workspace_id, t.key, t.model): t for t in response.context["totals"]}
    today = datetime.now(UTC).date()
    first = totals[(today, mine.pk, "key-a", "m1")]
    assert (first.requests, first.input_tokens, first.output_tokens, first.cost_usd) == (2, 30, 2, Decimal("0.3"))
    assert totals[(today - timedelta(days=1), mine.pk, "key-b", "m2")].cost_usd == Decimal("1")
    assert totals[(today, theirs.pk, "key-c", "m1")].requests == 1 and (today, None, "operator", "m1") in totals
    assert len(totals) == 4
    page = response.content.decode()
    assert "<svg" in page and page.count("<rect") == 2 and "15.300000000" in page  # two days; 0.3 + 5 + 9 + 1
    filtered = staff_client("other", superuser=True).get("/admin/internal/usagerecord/", {"model": "m2"})
    assert [t.key for t in filtered.context["totals"]] == ["key-b"]


def test_staff_see_the_usage_of_their_workspaces_only(workspaces: tuple[Workspace, Workspace]) -> None:
    mine, _ = workspaces
    response = staff_client("viewer", {mine: "viewer"}).get("/admin/internal/usagerecord/")
    assert response.status_code == 200
    assert {total.workspace_id for total in response.context["totals"]} == {mine.pk}
    assert staff_client("nobody").get("/admin/internal/usagerecord/").status_code == 403


def test_staff_never_reach_the_gateway_pages(superuser: Client, workspaces: tuple[Workspace, Workspace]) -> None:
    mine, _ = workspaces
    operator = staff_client("admin-of-mine", {mine: "admin"})
    revision = ConfigRevision.objects.first()
    assert revision is not None
    for url in (
        "/admin/store/route/",
        "/admin/store/configrevision/",
        "/admin/store/configrevision/entry/routes/all/",
        f"/admin/store/configrevision/{revision.pk}/rollback/",
    ):
        assert operator.get(url).status_code == 403, url
    assert operator.post(f"/admin/store/configrevision/{revision.pk}/rollback/").status_code == 403
