"""Triggers through the API: every field, partial updates, each action's effect on status and
next_fire_at, the sessions `start` begins, validation errors naming the field, and tenancy."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from registry.core.schedule import next_fire_after
from registry.core.serialization import timestamp
from registry.sessions.models import Session, SessionEvent
from tests.support.admin_pages import on
from tests.support.api_errors import assert_error

ACTIONS = ("pause", "unpause", "start", "stop", "restart", "archive")


def created(api, family, body):
    response = api.post(f"/v1/{family}", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def agent(api):
    return created(api, "agents", {"name": "reporter", "model": "claude-sonnet-4-5"})


@pytest.fixture
def environment(api):
    return created(api, "environments", {"name": "sandbox"})


@pytest.fixture
def vault(api):
    return created(api, "vaults", {"display_name": "ops"})


@pytest.fixture
def body(agent, environment, vault):
    return {
        "name": "nightly report",
        "agent": agent["id"],
        "source": {"type": "cron", "schedule": "*/5 * * * *", "timezone": "Europe/Berlin", "payload": "Report."},
        "session": {
            "environment_id": environment["id"],
            "title_template": "{trigger_name} at {fired_at}",
            "metadata": {"team": "ops", "kind": "report"},
            "vault_ids": [vault["id"]],
        },
    }


@pytest.fixture
def trigger(api, body):
    return created(api, "triggers", body)


def post(api, path, body=None):
    response = api.post(path, body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def at(value):
    return datetime.fromisoformat(value)


def test_create_renders_every_field(trigger, agent, environment, vault):
    before = datetime.now().astimezone()
    assert trigger["id"].startswith("trg_") and trigger["type"] == "trigger"
    assert trigger["name"] == "nightly report"
    assert trigger["agent"] == {"type": "agent", "id": agent["id"], "version": 1}
    assert trigger["session_mode"] == "SESSION_PER_EVENT"
    assert trigger["source"] == {
        "type": "cron",
        "schedule": "*/5 * * * *",
        "timezone": "Europe/Berlin",
        "payload": "Report.",
    }
    assert trigger["session"] == {
        "environment_id": environment["id"],
        "title_template": "{trigger_name} at {fired_at}",
        "metadata": {"team": "ops", "kind": "report"},
        "vault_ids": [vault["id"]],
    }
    assert trigger["replicas"] == 1 and trigger["status"] == "active" and trigger["error"] is None
    assert trigger["last_fired_at"] is None and trigger["archived_at"] is None
    next_fire = at(trigger["next_fire_at"])
    assert next_fire.minute % 5 == 0 and next_fire.second == 0
    assert before - timedelta(minutes=1) < next_fire <= before + timedelta(minutes=5)
    assert set(trigger) >= {"created_at", "updated_at"}


def test_create_defaults(api, body):
    body["source"].pop("timezone")
    body["session"] = {"environment_id": body["session"]["environment_id"]}
    trigger = created(api, "triggers", {**body, "replicas": 3, "session_mode": "SESSION_PER_EVENT"})
    assert trigger["source"]["timezone"] == "UTC"
    assert trigger["session"]["title_template"] is None
    assert trigger["session"]["metadata"] == {} and trigger["session"]["vault_ids"] == []
    assert trigger["replicas"] == 3


def test_agent_version_pinned_or_latest(api, body, agent):
    post(api, f"/v1/agents/{agent['id']}", {"system": "v2"})
    assert created(api, "triggers", body)["agent"]["version"] == 2
    pinned = created(api, "triggers", {**body, "agent": {"type": "agent", "id": agent["id"], "version": 1}})
    assert pinned["agent"]["version"] == 1
    post(api, f"/v1/agents/{agent['id']}", {"system": "v3"})
    assert api.get(f"/v1/triggers/{pinned['id']}").json()["agent"]["version"] == 1


def test_retrieve_and_list(api, trigger):
    assert api.get(f"/v1/triggers/{trigger['id']}").json() == trigger
    assert api.get("/v1/triggers").json() == {"data": [trigger], "next_page": None}


def test_partial_update_keeps_omitted_fields_and_merges_metadata(api, trigger):
    vault_ids = [created(api, "vaults", {"display_name": name})["id"] for name in ("x", "y")]
    updated = post(
        api,
        f"/v1/triggers/{trigger['id']}",
        {"name": "renamed", "session": {"metadata": {"kind": None, "owner": "me"}, "vault_ids": vault_ids}},
    )
    assert updated["name"] == "renamed"
    assert updated["session"]["metadata"] == {"team": "ops", "owner": "me"}
    assert updated["session"]["vault_ids"] == vault_ids
    assert updated["session"]["title_template"] == trigger["session"]["title_template"]
    assert updated["source"] == trigger["source"] and updated["next_fire_at"] == trigger["next_fire_at"]


def test_payload_change_keeps_next_fire_at(api, trigger):
    updated = post(api, f"/v1/triggers/{trigger['id']}", {"source": {"payload": "Other."}})
    assert updated["source"] == {**trigger["source"], "payload": "Other."}
    assert updated["next_fire_at"] == trigger["next_fire_at"]


def test_source_change_recomputes_next_fire_at(api, trigger):
    before = datetime.now().astimezone()
    updated = post(
        api, f"/v1/triggers/{trigger['id']}", {"source": {"schedule": "0 2 1 1 *", "timezone": "America/New_York"}}
    )
    assert updated["source"]["payload"] == "Report."
    assert at(updated["next_fire_at"]) == next_fire_after("0 2 1 1 *", "America/New_York", before)


def test_pause_and_unpause(api, trigger):
    paused = post(api, f"/v1/triggers/{trigger['id']}/pause")
    assert paused["status"] == "paused" and paused["next_fire_at"] is None
    assert post(api, f"/v1/triggers/{trigger['id']}/pause")["status"] == "paused"
    before = datetime.now().astimezone()
    resumed = post(api, f"/v1/triggers/{trigger['id']}/unpause")
    after = datetime.now().astimezone()
    assert resumed["status"] == "active"
    assert at(resumed["next_fire_at"]) in {
        next_fire_after("*/5 * * * *", "Europe/Berlin", moment) for moment in (before, after)
    }
    assert post(api, f"/v1/triggers/{trigger['id']}/unpause") == resumed


def test_update_of_a_paused_trigger_keeps_it_unscheduled(api, trigger):
    post(api, f"/v1/triggers/{trigger['id']}/pause")
    updated = post(api, f"/v1/triggers/{trigger['id']}", {"source": {"schedule": "* * * * *"}})
    assert updated["status"] == "paused" and updated["next_fire_at"] is None


def test_start_begins_one_session_from_the_template(api, trigger, agent, environment, vault):
    started = post(api, f"/v1/triggers/{trigger['id']}/start")
    assert started["status"] == "active" and started["error"] is None
    assert started["next_fire_at"] == trigger["next_fire_at"]
    session = Session.objects.get(trigger_fires__trigger_id=trigger["id"])
    assert started["last_fired_at"] == timestamp(session.trigger_fires.get().fire_at)
    assert session.agent_id == agent["id"] and session.agent_version == 1
    assert session.environment_id == environment["id"]
    assert session.title == f"nightly report at {started['last_fired_at']}"
    assert session.metadata == {"team": "ops", "kind": "report"} and session.vault_ids == [vault["id"]]
    event = SessionEvent.objects.get(session=session)
    assert event.type == "user.message"
    assert event.body == {"content": [{"type": "text", "text": "Report."}]}


def test_start_of_a_paused_trigger_fires_and_keeps_it_paused(api, trigger):
    post(api, f"/v1/triggers/{trigger['id']}/pause")
    started = post(api, f"/v1/triggers/{trigger['id']}/start")
    assert started["status"] == "paused" and started["next_fire_at"] is None
    assert started["last_fired_at"] is not None


def test_failed_start_sets_error_until_a_fire_succeeds(api, trigger, environment):
    post(api, f"/v1/environments/{environment['id']}/archive")
    failed = post(api, f"/v1/triggers/{trigger['id']}/start")
    assert failed["status"] == "error" and "archived" in failed["error"]
    assert failed["next_fire_at"] == trigger["next_fire_at"] and failed["last_fired_at"] is None
    fresh = created(api, "environments", {"name": "fresh"})
    post(api, f"/v1/triggers/{trigger['id']}", {"session": {"environment_id": fresh["id"]}})
    recovered = post(api, f"/v1/triggers/{trigger['id']}/start")
    assert recovered["status"] == "active" and recovered["error"] is None


def test_unpause_clears_the_error_status(api, trigger, environment):
    post(api, f"/v1/environments/{environment['id']}/archive")
    assert post(api, f"/v1/triggers/{trigger['id']}/start")["status"] == "error"
    assert post(api, f"/v1/triggers/{trigger['id']}/unpause")["status"] == "active"


def running(trigger_id):
    return Session.objects.filter(trigger_fires__trigger_id=trigger_id).exclude(status=Session.Status.TERMINATED)


def test_stop_terminates_the_sessions_it_started(api, trigger):
    post(api, f"/v1/triggers/{trigger['id']}/start")
    post(api, f"/v1/triggers/{trigger['id']}/start")
    assert running(trigger["id"]).count() == 2
    stopped = post(api, f"/v1/triggers/{trigger['id']}/stop")
    assert running(trigger["id"]).count() == 0
    assert Session.objects.filter(archived_at__isnull=False).count() == 2
    assert stopped["status"] == "active" and stopped["next_fire_at"] == trigger["next_fire_at"]


def test_restart_stops_then_starts(api, trigger):
    post(api, f"/v1/triggers/{trigger['id']}/start")
    first = running(trigger["id"]).get()
    restarted = post(api, f"/v1/triggers/{trigger['id']}/restart")
    second = running(trigger["id"]).get()
    assert second.pk != first.pk
    first.refresh_from_db()
    assert first.status == Session.Status.TERMINATED
    assert restarted["status"] == "active" and restarted["next_fire_at"] == trigger["next_fire_at"]


def test_archive_is_final(api, trigger):
    archived = post(api, f"/v1/triggers/{trigger['id']}/archive")
    assert archived["status"] == "archived" and archived["next_fire_at"] is None
    assert archived["archived_at"] is not None
    for action in ("pause", "unpause", "start", "restart"):
        assert_error(api.post(f"/v1/triggers/{trigger['id']}/{action}"), 409, "conflict_error", "archived")
    assert post(api, f"/v1/triggers/{trigger['id']}/stop")["status"] == "archived"
    assert post(api, f"/v1/triggers/{trigger['id']}/archive") == archived
    updated = post(api, f"/v1/triggers/{trigger['id']}", {"source": {"schedule": "* * * * *"}})
    assert updated["status"] == "archived" and updated["next_fire_at"] is None
    assert api.get("/v1/triggers").json()["data"] == []
    assert [item["id"] for item in api.get("/v1/triggers", {"include_archived": "true"}).json()["data"]] == [
        trigger["id"]
    ]


def test_delete(api, trigger):
    response = api.delete(f"/v1/triggers/{trigger['id']}")
    assert response.json() == {"id": trigger["id"], "type": "trigger_deleted"}
    assert_error(api.get(f"/v1/triggers/{trigger['id']}"), 404, "not_found_error")


def test_list_pages_by_keyset(api, body):
    ids = [created(api, "triggers", {**body, "name": f"t{index}"})["id"] for index in range(3)]
    first = api.get("/v1/triggers", {"limit": 2, "order": "asc"}).json()
    rest = api.get("/v1/triggers", {"limit": 2, "order": "asc", "page": first["next_page"]}).json()
    assert [item["id"] for item in first["data"] + rest["data"]] == ids and rest["next_page"] is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"source": {"type": "cron", "schedule": "61 * * * *", "payload": "p"}}, "source.schedule"),
        ({"source": {"type": "cron", "schedule": "0 0 * * * *", "payload": "p"}}, "source.schedule"),
        ({"source": {"type": "cron", "schedule": "@daily", "payload": "p"}}, "source.schedule"),
        ({"source": {"type": "cron", "schedule": "0 0 30 2 *", "payload": "p"}}, "source.schedule"),
        (
            {"source": {"type": "cron", "schedule": "* * * * *", "timezone": "Mars/Olympus", "payload": "p"}},
            "source.timezone",
        ),
        ({"source": {"type": "cron", "schedule": "* * * * *", "timezone": "EST+5", "payload": "p"}}, "source.timezone"),
        ({"source": {"type": "webhook", "schedule": "* * * * *", "payload": "p"}}, "source.type"),
        ({"source": {"type": "cron", "schedule": "* * * * *"}}, "source.payload"),
        ({"agent": "agent_missing"}, "agent"),
        ({"agent": {"type": "agent", "id": "AGENT", "version": None}}, "agent.id"),
        ({"session": {"environment_id": "env_missing"}}, "session.environment_id"),
        ({"session": {"environment_id": "sesn_x"}}, "session.environment_id"),
        ({"session": {"environment_id": "env_x", "vault_ids": ["secret"]}}, "session.vault_ids"),
        ({"session": {"environment_id": "env_x", "title_template": "{fired_at:%Y}"}}, "session.title_template"),
        ({"session": {"environment_id": "env_x", "title_template": "{unclosed"}}, "session.title_template"),
        ({"session": {"environment_id": "env_x", "metadata": {"k": 1}}}, "session.metadata"),
        ({"replicas": 0}, "replicas"),
        ({"replicas": "2"}, "replicas"),
        ({"session_mode": "SESSION_PER_DAY"}, "session_mode"),
        ({"workspace": "wsp_x"}, "workspace"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_create_names_the_field(api, body, change, field):
    assert_error(api.post("/v1/triggers", {**body, **change}, format="json"), 400, "invalid_request_error", field)
    assert api.get("/v1/triggers", {"include_archived": "true"}).json()["data"] == []


def test_archived_agent_or_environment_is_refused(api, body, agent, environment):
    post(api, f"/v1/environments/{environment['id']}/archive")
    assert_error(api.post("/v1/triggers", body, format="json"), 400, "invalid_request_error", "session.environment_id")
    post(api, f"/v1/agents/{agent['id']}/archive")
    assert_error(api.post("/v1/triggers", body, format="json"), 400, "invalid_request_error", "agent: agent")


def test_unknown_or_archived_vault_is_refused(api, body, vault):
    response = api.post(
        "/v1/triggers", {**body, "session": {**body["session"], "vault_ids": ["vlt_gone"]}}, format="json"
    )
    assert_error(response, 400, "invalid_request_error", "session.vault_ids: no live vault vlt_gone")
    post(api, f"/v1/vaults/{vault['id']}/archive")
    assert_error(api.post("/v1/triggers", body, format="json"), 400, "invalid_request_error", "session.vault_ids")


def test_unknown_agent_version_is_refused(api, body, agent):
    body["agent"] = {"type": "agent", "id": agent["id"], "version": 7}
    assert_error(api.post("/v1/triggers", body, format="json"), 400, "invalid_request_error", "agent.version")


def test_bad_update_changes_nothing(api, trigger):
    for change, field in (
        ({"name": "renamed", "source": {"timezone": "Nowhere/Town"}}, "source.timezone"),
        ({"name": "renamed", "source": {"schedule": "0 0 31 2 *"}}, "source.schedule"),
        ({"name": "renamed", "session": {"environment_id": "env_missing"}}, "session.environment_id"),
        ({"status": "paused"}, "status"),
    ):
        response = api.post(f"/v1/triggers/{trigger['id']}", change, format="json")
        assert_error(response, 400, "invalid_request_error", field)
    assert api.get(f"/v1/triggers/{trigger['id']}").json() == trigger


def test_malformed_ids_are_404(api):
    assert_error(api.get("/v1/triggers/agent_x"), 404, "not_found_error")
    assert_error(api.post("/v1/triggers/trg_missing/pause"), 404, "not_found_error")


# -- tenancy ----------------------------------------------------------------------------------------
OPERATIONS = [
    ("get", "", None),
    ("post", "", {"name": "stolen"}),
    ("delete", "", None),
    *(("post", f"/{action}", None) for action in ACTIONS),
]


@pytest.mark.parametrize(("method", "suffix", "payload"), OPERATIONS)
def test_other_workspace_sees_404(api, trigger, other_tenant, method, suffix, payload):
    path = f"/v1/triggers/{trigger['id']}{suffix}"
    assert_error(getattr(other_tenant.client, method)(path, payload, format="json"), 404, "not_found_error")
    assert api.get(f"/v1/triggers/{trigger['id']}").json() == trigger
    assert not Session.objects.exists()


def test_other_workspace_lists_nothing(trigger, other_tenant):
    for params in ({}, {"include_archived": "true"}, {"order": "asc", "limit": 100}):
        assert other_tenant.client.get("/v1/triggers", params).json()["data"] == []


def test_agent_and_environment_of_another_workspace_are_unknown(body, other_tenant):
    response = other_tenant.client.post("/v1/triggers", body, format="json")
    assert_error(response, 400, "invalid_request_error", "agent: no agent")
    mine = created(other_tenant.client, "agents", {"name": "mine", "model": "m"})
    response = other_tenant.client.post("/v1/triggers", {**body, "agent": mine["id"]}, format="json")
    assert_error(response, 400, "invalid_request_error", "session.environment_id: no environment")


def test_admin_pages_render(client, trigger, django_user_model):
    django_user_model.objects.create_superuser("staff", "staff@example.com", "pw")
    client.login(username="staff", password="pw")
    for path in ("/admin/triggers/trigger/", on("/admin/triggers/trigger/", trigger["id"])):
        response = client.get(path)
        assert response.status_code == 200, path
        assert trigger["name"] in response.content.decode()
