"""Sessions through the API: create, list, update, archive, delete, and the event log's rules."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from registry.sessions import log
from registry.sessions.models import Session, SessionEvent
from tests.support.api_errors import assert_error

TEXT = [{"type": "text", "text": "hello"}]


@pytest.fixture
def agent(api):
    return api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()


@pytest.fixture
def environment(api):
    return api.post("/v1/environments", {"name": "e"}, format="json").json()


@pytest.fixture
def session(api, agent, environment):
    return create(api, agent=agent["id"], environment_id=environment["id"])


def create(api, **body):
    response = api.post("/v1/sessions", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def send(api, session_id, *events, **headers):
    return api.post(f"/v1/sessions/{session_id}/events", {"events": list(events)}, format="json", **headers)


def test_create_pins_agent_version(api, agent, environment):
    api.post(f"/v1/agents/{agent['id']}", {"system": "v2"}, format="json")
    latest = create(api, agent=agent["id"], environment_id=environment["id"], title="t", metadata={"k": "v"})
    pinned = create(api, agent={"type": "agent", "id": agent["id"], "version": 1}, environment_id=environment["id"])
    assert latest["id"].startswith("sesn_") and latest["type"] == "session"
    assert latest["agent"]["version"] == 2 and latest["agent"]["system"] == "v2"
    assert pinned["agent"]["version"] == 1 and pinned["agent"]["system"] is None
    assert latest["status"] == "idle" and latest["title"] == "t" and latest["metadata"] == {"k": "v"}
    assert latest["usage"]["input_tokens"] == 0 and latest["outcome_evaluations"] == []
    assert latest["harness"] == {"type": "default"}


def test_resources_are_recorded_and_tokens_never_returned(api, agent, environment, settings, tmp_path):
    store = api.post("/v1/memory_stores", {"name": "notes"}, format="json").json()
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {**settings.STORAGES["default"], "OPTIONS": {"location": tmp_path}},
    }
    uploaded = api.post("/v1/files", {"file": SimpleUploadedFile("a.txt", b"a")}, format="multipart").json()
    session = create(
        api,
        agent=agent["id"],
        environment_id=environment["id"],
        resources=[
            {"type": "file", "file_id": uploaded["id"]},
            {"type": "memory_store", "memory_store_id": store["id"], "access": "read_only"},
            {
                "type": "github_repository",
                "url": "https://github.com/acme/tool.git",
                "authorization_token": "ghp_CANARY",
            },
        ],
    )
    file, memory, repository = session["resources"]
    assert file["mount_path"].endswith(uploaded["id"]) and memory["access"] == "read_only"
    assert repository["mount_path"] == "/workspace/tool"
    assert "ghp_CANARY" not in str(session) and "authorization_token" not in repository
    stored = Session.objects.get(pk=session["id"]).resources[2]
    assert "ghp_CANARY" not in str(stored) and stored["sealed_authorization_token"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"environment_id": "env_x"}, "agent"),
        ({"agent": "agent_missing", "environment_id": "ENV"}, "agent"),
        ({"agent": "AGENT"}, "environment_id"),
        ({"agent": "AGENT", "environment_id": "env_missing"}, "environment_id"),
        ({"agent": {"type": "agent", "id": "AGENT", "version": 7}, "environment_id": "ENV"}, "version"),
        ({"agent": "AGENT", "environment_id": "ENV", "resources": [{"type": "disk"}]}, "type"),
        ({"agent": "AGENT", "environment_id": "ENV", "vault_ids": ["nope"]}, "vault_ids"),
        ({"agent": "AGENT", "environment_id": "ENV", "initial_events": [{"type": "user.interrupt"}]}, "type"),
        ({"agent": "AGENT", "environment_id": "ENV", "harness": {"type": "code_harness", "mode": "separate"}}, "mode"),
    ],
)
def test_invalid_create_is_400_and_writes_nothing(api, agent, environment, body, field):
    body = {
        key: (
            value.replace("AGENT", agent["id"]).replace("ENV", environment["id"]) if isinstance(value, str) else value
        )
        for key, value in body.items()
    }
    if isinstance(body.get("agent"), dict):
        body["agent"] = {**body["agent"], "id": agent["id"]}
    assert_error(api.post("/v1/sessions", body, format="json"), 400, "invalid_request_error", field)
    assert Session.objects.count() == 0


def test_vaults_and_memory_stores_must_exist_and_be_live(api, agent, environment, other_tenant):
    base = {"agent": agent["id"], "environment_id": environment["id"]}
    vault = api.post("/v1/vaults", {"display_name": "v"}, format="json").json()
    foreign = other_tenant.client.post("/v1/vaults", {"display_name": "theirs"}, format="json").json()
    assert create(api, **base, vault_ids=[vault["id"]])["vault_ids"] == [vault["id"]]
    assert_error(
        api.post("/v1/sessions", {**base, "vault_ids": [foreign["id"]]}, format="json"),
        400,
        "invalid_request_error",
        "vault_ids",
    )
    api.post(f"/v1/vaults/{vault['id']}/archive")
    assert_error(
        api.post("/v1/sessions", {**base, "vault_ids": [vault["id"]]}, format="json"),
        400,
        "invalid_request_error",
        "vault_ids",
    )
    missing_store = {"type": "memory_store", "memory_store_id": "mems_missing"}
    assert_error(
        api.post("/v1/sessions", {**base, "resources": [missing_store]}, format="json"),
        400,
        "invalid_request_error",
        "memory store",
    )


def test_repository_without_token_uses_the_hosts_git_credential(api, agent, environment):
    credential = api.post("/v1/git-creds", {"host": "github.com", "token": "ghp_FROMVAULT"}, format="json").json()
    session = create(
        api,
        agent=agent["id"],
        environment_id=environment["id"],
        resources=[{"type": "github_repository", "url": "https://github.com/acme/tool"}],
    )
    assert session["resources"][0]["git_credential_id"] == credential["id"]


def test_archived_agent_or_environment_cannot_start_sessions(api, agent, environment, session):
    api.post(f"/v1/agents/{agent['id']}/archive")
    assert_error(
        api.post("/v1/sessions", {"agent": agent["id"], "environment_id": environment["id"]}, format="json"),
        400,
        "invalid_request_error",
        "archived",
    )
    assert api.get(f"/v1/sessions/{session['id']}").json()["status"] == "idle"  # existing sessions unaffected


def test_initial_events_wait_for_the_runtime(api, agent, environment):
    session = create(
        api,
        agent=agent["id"],
        environment_id=environment["id"],
        initial_events=[{"type": "user.message", "content": TEXT}],
    )
    assert api.get(f"/v1/sessions/{session['id']}/events").json()["data"] == []
    assert Session.objects.get(pk=session["id"]).has_pending_events


def test_list_filters_and_prev_page(api, agent, environment):
    ids = [create(api, agent=agent["id"], environment_id=environment["id"])["id"] for _ in range(5)]
    Session.objects.filter(pk=ids[0]).update(status="running")
    assert [s["id"] for s in api.get("/v1/sessions", {"statuses[]": "running"}).json()["data"]] == [ids[0]]
    assert len(api.get("/v1/sessions", {"statuses": ["running", "idle"]}).json()["data"]) == 5
    assert len(api.get("/v1/sessions", {"agent_id": agent["id"], "agent_version": 1}).json()["data"]) == 5
    assert api.get("/v1/sessions", {"agent_version": 9}).json()["data"] == []
    first = api.get("/v1/sessions", {"limit": 2}).json()
    assert first["prev_page"] is None
    second = api.get("/v1/sessions", {"limit": 2, "page": first["next_page"]}).json()
    assert [s["id"] for s in second["data"]] == ids[::-1][2:4]
    back = api.get("/v1/sessions", {"limit": 2, "page": second["prev_page"]}).json()
    assert [s["id"] for s in back["data"]] == [s["id"] for s in first["data"]]
    assert_error(api.get("/v1/sessions", {"statuses": "sleeping"}), 400, "invalid_request_error", "statuses")


def test_update_title_and_metadata(api, session):
    updated = api.post(f"/v1/sessions/{session['id']}", {"title": "new", "metadata": {"a": "1"}}, format="json")
    assert updated.json()["title"] == "new" and updated.json()["metadata"] == {"a": "1"}
    assert_error(
        api.post(f"/v1/sessions/{session['id']}", {"status": "idle"}, format="json"),
        400,
        "invalid_request_error",
        "status",
    )


def test_archive_terminates(api, session):
    archived = api.post(f"/v1/sessions/{session['id']}/archive").json()
    assert archived["status"] == "terminated" and archived["archived_at"]
    types = [event["type"] for event in api.get(f"/v1/sessions/{session['id']}/events").json()["data"]]
    assert types == ["session.status_terminated"]
    assert_error(
        send(api, session["id"], {"type": "user.message", "content": TEXT}), 400, "invalid_request_error", "terminated"
    )


def test_delete(api, session):
    assert api.delete(f"/v1/sessions/{session['id']}").json() == {"id": session["id"], "type": "session_deleted"}
    assert_error(api.get(f"/v1/sessions/{session['id']}"), 404, "not_found_error")
    assert SessionEvent.objects.count() == 0


def test_append_answers_ids_with_null_processed_at(api, session):
    response = send(api, session["id"], {"type": "user.message", "content": TEXT}, {"type": "user.interrupt"})
    data = response.json()["data"]
    assert [item["type"] for item in data] == ["user.message", "user.interrupt"]
    assert all(item["id"].startswith("sevt_") and item["processed_at"] is None for item in data)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"type": "user.message", "content": "a bare string"}, "content"),
        ({"type": "user.message", "content": []}, "content"),
        (
            {
                "type": "user.message",
                "content": [{"type": "search_result", "source": "s", "title": "t", "content": TEXT}],
            },
            "type",
        ),
        ({"type": "user.message", "content": [{"type": "image", "source": {"type": "base64"}}]}, "media_type"),
        ({"type": "user.interrupt", "reason": "x"}, "reason"),
        ({"type": "user.tool_confirmation", "tool_use_id": "sevt_nothing", "result": "allow"}, "tool_use_id"),
        ({"type": "user.tool_confirmation", "tool_use_id": "x", "result": "maybe"}, "result"),
        (
            {"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nothing", "content": TEXT},
            "custom_tool_use_id",
        ),
        (
            {
                "type": "user.define_outcome",
                "description": "d",
                "rubric": {"type": "text", "content": "r"},
                "max_iterations": 21,
            },
            "max_iterations",
        ),
        (
            {
                "type": "user.define_outcome",
                "description": "d",
                "rubric": {"type": "text", "content": "r"},
                "max_iterations": 0,
            },
            "max_iterations",
        ),
        ({"type": "user.tool_result", "tool_use_id": "x", "content": TEXT}, "agent_sdk_harness"),
        ({"type": "agent.message", "content": TEXT}, "type"),
    ],
)
def test_invalid_events_are_400_and_the_batch_writes_nothing(api, session, event, field):
    good = {"type": "user.message", "content": TEXT}
    assert_error(send(api, session["id"], good, event), 400, "invalid_request_error", field)
    assert SessionEvent.objects.filter(session_id=session["id"]).count() == 0


def test_define_outcome_defaults_and_outcome_endpoint(api, session):
    assert_error(api.get(f"/v1/sessions/{session['id']}/outcome"), 404, "not_found_error")
    send(
        api,
        session["id"],
        {"type": "user.define_outcome", "description": "A poem", "rubric": {"type": "text", "content": "rhymes"}},
    )
    outcome = api.get(f"/v1/sessions/{session['id']}/outcome").json()
    assert outcome["type"] == "outcome_evaluation" and outcome["max_iterations"] == 3
    assert outcome["result"] == "pending" and outcome["description"] == "A poem"
    assert outcome["outcome_id"].startswith("outc_") and outcome["completed_at"] is None


def test_tool_confirmation_answers_a_pending_call_once(api, session):
    call = log.emit(
        session_id=session["id"],
        type="agent.mcp_tool_use",
        body={"name": "search", "input": {}, "mcp_server_name": "docs", "evaluated_permission": "ask"},
    )
    confirm = {"type": "user.tool_confirmation", "tool_use_id": call.id, "result": "allow"}
    assert send(api, session["id"], confirm).status_code == 200
    assert_error(send(api, session["id"], confirm), 400, "invalid_request_error", "tool_use_id")


def test_custom_tool_result_names_a_custom_tool_use(api, session):
    call = log.emit(session_id=session["id"], type="agent.custom_tool_use", body={"name": "lookup", "input": {"q": 1}})
    result = {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": call.id,
        "is_error": True,
        "content": [{"type": "search_result", "source": "s", "title": "t", "content": TEXT}],
    }
    assert send(api, session["id"], result).status_code == 200
    assert_error(send(api, session["id"], result), 400, "invalid_request_error", "custom_tool_use_id")


def test_tool_result_allowed_for_separate_sdk_harness_on_self_hosted(api, agent):
    self_hosted = api.post("/v1/environments", {"name": "sh", "config": {"type": "self_hosted"}}, format="json").json()
    session = create(
        api,
        agent=agent["id"],
        environment_id=self_hosted["id"],
        harness={"type": "agent_sdk_harness", "mode": "separate"},
    )
    unknown = {"type": "user.tool_result", "tool_use_id": "sevt_unknown", "content": TEXT}
    assert_error(send(api, session["id"], unknown), 400, "invalid_request_error", "no unanswered agent.tool_use")
    call = log.emit(session_id=session["id"], type="agent.tool_use", body={"name": "bash", "input": {}})
    event = {**unknown, "tool_use_id": call.id}
    assert send(api, session["id"], event).status_code == 200
    assert_error(send(api, session["id"], event), 400, "invalid_request_error", "no unanswered agent.tool_use")


def test_tool_result_waits_for_the_confirmation_of_an_always_ask_call(api, agent):
    self_hosted = api.post("/v1/environments", {"name": "sh", "config": {"type": "self_hosted"}}, format="json").json()
    session = create(api, agent=agent["id"], environment_id=self_hosted["id"])
    assert session["harness"] == {"type": "agent_sdk_harness", "mode": "separate"}  # the default there
    body = {"name": "bash", "input": {}, "evaluated_permission": "ask"}
    call = log.emit(session_id=session["id"], type="agent.tool_use", body=body)
    event = {"type": "user.tool_result", "tool_use_id": call.id, "content": TEXT}
    assert_error(send(api, session["id"], event), 400, "invalid_request_error", "awaits a user.tool_confirmation")
    confirm = {"type": "user.tool_confirmation", "tool_use_id": call.id, "result": "allow"}
    assert send(api, session["id"], confirm).status_code == 200
    assert send(api, session["id"], event).status_code == 200


def test_list_shows_processed_events_in_dialects(api, session):
    sent = send(api, session["id"], {"type": "user.message", "content": TEXT}).json()["data"][0]
    log.acknowledge(session_id=session["id"], event_ids=[sent["id"]])
    log.emit(session_id=session["id"], type="span.model_request_start", body={})
    log.emit(session_id=session["id"], type="agent.message", body={"content": TEXT, "subpath": "/x"})
    portable = api.get(f"/v1/sessions/{session['id']}/events").json()["data"]
    assert [event["type"] for event in portable] == ["user.message", "agent.message"]
    assert all("seq" not in event and "subpath" not in event for event in portable)
    assert portable[0]["processed_at"] is not None
    native = api.get(f"/v1/sessions/{session['id']}/events", HTTP_NATIVE_BETA="1").json()["data"]
    assert [(event["type"], event["seq"]) for event in native] == [
        ("user.message", 1),
        ("span.model_request_start", 2),
        ("agent.message", 3),
    ]
    assert native[2]["subpath"] == "/x"
    only = api.get(f"/v1/sessions/{session['id']}/events", {"types[]": "agent.message"}).json()["data"]
    assert [event["type"] for event in only] == ["agent.message"]
    newest = api.get(f"/v1/sessions/{session['id']}/events", {"order": "desc", "limit": 1}).json()
    assert newest["data"][0]["type"] == "agent.message" and newest["next_page"]


def test_sequence_numbers_are_gap_free_in_acknowledgment_order(api, session):
    first, second = send(
        api, session["id"], {"type": "user.message", "content": TEXT}, {"type": "user.message", "content": TEXT}
    ).json()["data"]
    log.emit(session_id=session["id"], type="agent.message", body={"content": TEXT})
    log.acknowledge(session_id=session["id"], event_ids=[second["id"], first["id"]])
    seqs = list(SessionEvent.objects.filter(session_id=session["id"]).order_by("seq").values_list("seq", "id"))
    assert [seq for seq, _ in seqs] == [1, 2, 3]
    assert [event_id for _, event_id in seqs][1:] == [first["id"], second["id"]]  # append order kept
    assert not Session.objects.get(pk=session["id"]).has_pending_events
