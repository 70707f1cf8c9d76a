"""Running a deployment now: the session it creates (with the deployment's initial events, resources, vaults
and budget), the run that records it, the runs list and its filters, the webhook events; and each typed error
reached by its real cause, the run recording it and the deployment pausing with it as its reason."""

from __future__ import annotations

from datetime import timedelta

import anthropic
import pytest
from django.utils import timezone

from registry.agents.models import Agent
from registry.deployments import services
from registry.deployments.models import Deployment, DeploymentRun
from registry.environments.models import Environment
from registry.sessions.models import Session, SessionEvent
from registry.webhooks.models import WebhookEvent
from tests.deployments.conftest import GO

pytestmark = pytest.mark.django_db(transaction=True)

OUTCOME = {
    "type": "user.define_outcome",
    "description": "A report with every metric.",
    "rubric": {"type": "text", "content": "Every metric has a number."},
    "max_iterations": 2,
}


def event_types(object_id: str) -> list[str]:
    return list(WebhookEvent.objects.filter(data__id=object_id).order_by("seq").values_list("type", flat=True))


def assert_failed_and_paused(workspace, deployment_id: str, error_type: str) -> None:
    """A run now fails with `error_type`, and the deployment is paused with it as its reason."""
    sdk = workspace.sdk
    run = sdk.beta.deployments.run(deployment_id)
    assert run.session_id is None and run.error is not None
    assert run.error.type == error_type and run.error.message
    deployment = sdk.beta.deployments.retrieve(deployment_id)
    assert deployment.status == "paused"
    assert deployment.paused_reason.type == "error" and deployment.paused_reason.error.type == error_type
    assert event_types(run.id) == ["deployment_run.started", "deployment_run.failed"]
    assert event_types(deployment_id)[-1] == "deployment.paused"
    assert sdk.beta.deployment_runs.retrieve(run.id) == run


def test_a_run_creates_a_session_with_the_initial_events(workspace, uploads_dir):
    sdk = workspace.sdk
    store = sdk.beta.memory_stores.create(name="notes")
    vault = sdk.beta.vaults.create(display_name="keys")
    deployment = workspace.deploy(
        initial_events=[*GO, OUTCOME],
        resources=[{"type": "memory_store", "memory_store_id": store.id, "access": "read_only"}],
        vault_ids=[vault.id],
    )
    sdk.beta.agents.update(workspace.agent_id, version=1, system="A newer version the deployment does not run.")

    run = sdk.beta.deployments.run(deployment.id)
    assert run.id.startswith("drun_") and run.type == "deployment_run"
    assert run.deployment_id == deployment.id and run.error is None
    assert run.trigger_context.type == "manual"
    assert run.agent.id == workspace.agent_id and run.agent.version == 1
    session = Session.objects.get(pk=run.session_id)
    assert session.workspace_id == workspace.tenant.workspace.pk and session.agent_version == 1
    assert session.environment_id == workspace.environment_id and session.title == "daily report"
    assert session.vault_ids == [vault.id]
    assert [(item["type"], item["memory_store_id"], item["access"]) for item in session.resources] == [
        ("memory_store", store.id, "read_only")
    ]
    events = list(SessionEvent.objects.filter(session=session).order_by("created_at", "id"))
    assert [event.type for event in events] == ["user.message", "user.define_outcome"]
    assert events[0].body["content"] == GO[0]["content"]
    assert events[1].body["description"] == OUTCOME["description"] and events[1].body["max_iterations"] == 2
    assert sdk.beta.sessions.retrieve(run.session_id).id == run.session_id

    assert sdk.beta.deployment_runs.retrieve(run.id) == run
    assert event_types(run.id) == ["deployment_run.started", "deployment_run.succeeded"]
    succeeded = WebhookEvent.objects.get(type="deployment_run.succeeded")
    assert (
        succeeded.data["workspace_id"] == workspace.tenant.workspace.pk
        and succeeded.workspace_id == succeeded.data["workspace_id"]
    )
    again = sdk.beta.deployments.run(deployment.id)
    assert again.session_id not in (None, run.session_id)
    assert sdk.beta.deployments.retrieve(deployment.id).schedule is None  # a run is not a scheduled one


def test_a_repository_token_reaches_the_session_sealed(workspace):
    deployment = workspace.deploy(
        resources=[{"type": "github_repository", "url": "https://github.com/acme/app", "authorization_token": "ghp_x"}]
    )
    run = workspace.sdk.beta.deployments.run(deployment.id)
    (record,) = Session.objects.get(pk=run.session_id).resources
    assert record["type"] == "github_repository" and record["sealed_authorization_token"]
    assert "ghp_x" not in str(record)


def test_a_paused_deployment_runs_when_asked_and_stays_paused(workspace):
    deployment = workspace.deploy()
    workspace.sdk.beta.deployments.pause(deployment.id)
    run = workspace.sdk.beta.deployments.run(deployment.id)
    assert run.session_id is not None
    assert workspace.sdk.beta.deployments.retrieve(deployment.id).paused_reason.type == "manual"


def test_runs_list_and_its_filters(workspace):
    sdk = workspace.sdk
    first = workspace.deploy(name="first")
    second = workspace.deploy(name="second")
    ok_one = sdk.beta.deployments.run(first.id)
    ok_two = sdk.beta.deployments.run(second.id)
    Environment.objects.filter(pk=workspace.environment_id).update(archived_at=timezone.now())
    failed = sdk.beta.deployments.run(first.id)

    assert [run.id for run in sdk.beta.deployment_runs.list()] == [failed.id, ok_two.id, ok_one.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(limit=1)] == [failed.id, ok_two.id, ok_one.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(deployment_id=first.id)] == [failed.id, ok_one.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(deployment_id="depl_missing00000000000000")] == []
    assert [run.id for run in sdk.beta.deployment_runs.list(has_error=True)] == [failed.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(has_error=False)] == [ok_two.id, ok_one.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(trigger_type="manual")] == [failed.id, ok_two.id, ok_one.id]
    assert list(sdk.beta.deployment_runs.list(trigger_type="schedule")) == []
    created = {row.pk: row.created_at for row in DeploymentRun.objects.all()}
    middle = created[ok_two.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(created_at_gt=middle)] == [failed.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(created_at_gte=middle)] == [failed.id, ok_two.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(created_at_lt=middle)] == [ok_one.id]
    assert [run.id for run in sdk.beta.deployment_runs.list(created_at_lte=middle)] == [ok_two.id, ok_one.id]
    page = sdk.beta.deployment_runs.list(limit=1000)
    assert len(page.data) == 3
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.deployment_runs.list(limit=1001)
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.deployment_runs.list(page="not-a-cursor")
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.deployment_runs.retrieve("drun_missing000000000000000")


# -- each pause reason, by its real cause ----------------------------------------------------------------
def test_agent_archived_by_the_api_pauses_its_deployments_at_once(workspace):
    sdk = workspace.sdk
    scheduled = workspace.deploy()
    paused_by_hand = workspace.deploy()
    sdk.beta.deployments.pause(paused_by_hand.id)
    other_agent = sdk.beta.agents.create(name="other", model="claude-sonnet-4-5").id
    untouched = workspace.deploy(agent=other_agent)

    sdk.beta.agents.archive(workspace.agent_id)
    paused = sdk.beta.deployments.retrieve(scheduled.id)
    assert paused.status == "paused" and paused.paused_reason.error.type == "agent_archived_error"
    assert sdk.beta.deployments.retrieve(paused_by_hand.id).paused_reason.type == "manual"
    assert sdk.beta.deployments.retrieve(untouched.id).status == "active"
    assert event_types(scheduled.id) == ["deployment.created", "deployment.paused"]

    run = sdk.beta.deployments.run(scheduled.id)
    assert run.error.type == "agent_archived_error"
    assert sdk.beta.deployments.retrieve(scheduled.id).paused_reason.error.type == "agent_archived_error"


def test_agent_archived(workspace):
    deployment = workspace.deploy()
    Agent.objects.filter(pk=workspace.agent_id).update(archived_at=timezone.now())  # behind the deployment's back
    assert_failed_and_paused(workspace, deployment.id, "agent_archived_error")


def test_environment_archived_by_the_api(workspace):
    deployment = workspace.deploy()
    workspace.sdk.beta.environments.archive(workspace.environment_id)
    paused = workspace.sdk.beta.deployments.retrieve(deployment.id)
    assert paused.paused_reason.error.type == "environment_archived_error"
    assert workspace.sdk.beta.deployments.run(deployment.id).error.type == "environment_archived_error"


def test_environment_archived(workspace):
    deployment = workspace.deploy()
    Environment.objects.filter(pk=workspace.environment_id).update(archived_at=timezone.now())
    assert_failed_and_paused(workspace, deployment.id, "environment_archived_error")


def test_environment_deleted(workspace):
    deployment = workspace.deploy()
    workspace.sdk.beta.environments.delete(workspace.environment_id)
    assert_failed_and_paused(workspace, deployment.id, "environment_not_found_error")


def test_vault_archived(workspace):
    vault = workspace.sdk.beta.vaults.create(display_name="keys")
    deployment = workspace.deploy(vault_ids=[vault.id])
    workspace.sdk.beta.vaults.archive(vault.id)
    assert_failed_and_paused(workspace, deployment.id, "vault_archived_error")


def test_vault_deleted(workspace):
    vault = workspace.sdk.beta.vaults.create(display_name="keys")
    deployment = workspace.deploy(vault_ids=[vault.id])
    workspace.sdk.beta.vaults.delete(vault.id)
    assert_failed_and_paused(workspace, deployment.id, "vault_not_found_error")


def test_file_deleted(workspace, uploads_dir):
    file = workspace.sdk.beta.files.upload(file=("notes.txt", b"notes", "text/plain"))
    deployment = workspace.deploy(resources=[{"type": "file", "file_id": file.id}])
    workspace.sdk.beta.files.delete(file.id)
    assert_failed_and_paused(workspace, deployment.id, "file_not_found_error")


def test_rubric_file_deleted(workspace, uploads_dir):
    rubric = workspace.sdk.beta.files.upload(file=("rubric.md", b"Every metric.", "text/markdown"))
    outcome = {**OUTCOME, "rubric": {"type": "file", "file_id": rubric.id}}
    deployment = workspace.deploy(initial_events=[outcome])
    workspace.sdk.beta.files.delete(rubric.id)
    assert_failed_and_paused(workspace, deployment.id, "file_not_found_error")


def test_memory_store_archived(workspace):
    store = workspace.sdk.beta.memory_stores.create(name="notes")
    deployment = workspace.deploy(resources=[{"type": "memory_store", "memory_store_id": store.id}])
    workspace.sdk.beta.memory_stores.archive(store.id)
    assert_failed_and_paused(workspace, deployment.id, "memory_store_archived_error")


def test_memory_store_deleted(workspace):
    store = workspace.sdk.beta.memory_stores.create(name="notes")
    deployment = workspace.deploy(resources=[{"type": "memory_store", "memory_store_id": store.id}])
    workspace.sdk.beta.memory_stores.delete(store.id)
    assert_failed_and_paused(workspace, deployment.id, "session_resource_not_found_error")


def test_skill_deleted(workspace, uploads_dir):
    sdk = workspace.sdk
    skill = sdk.beta.skills.create(files=[("notes/SKILL.md", b"---\nname: notes\ndescription: Take notes.\n---\n")])
    agent = sdk.beta.agents.create(
        name="noter", model="claude-sonnet-4-5", skills=[{"type": "custom", "skill_id": skill.id}]
    )
    deployment = workspace.deploy(agent=agent.id)
    assert sdk.beta.deployments.run(deployment.id).session_id is not None
    sdk.beta.skills.delete(skill.id)
    assert_failed_and_paused(workspace, deployment.id, "skill_not_found_error")


def test_mcp_server_now_private(workspace, settings):
    settings.REGISTRY_EGRESS_ALLOW = ""
    settings.REGISTRY_MCP_VIA_GATEWAY = False
    sdk = workspace.sdk
    tools = [{"type": "mcp_toolset", "mcp_server_name": "docs"}]
    agent = sdk.beta.agents.create(
        name="reader",
        model="claude-sonnet-4-5",
        tools=tools,
        mcp_servers=[{"type": "url", "name": "docs", "url": "https://93.184.215.14/mcp"}],  # a public address
    )
    deployment = workspace.deploy(agent=agent.id)
    assert sdk.beta.deployments.run(deployment.id).session_id is not None
    sdk.beta.agents.update(
        agent.id, version=1, mcp_servers=[{"type": "url", "name": "docs", "url": "http://10.1.2.3/mcp"}]
    )
    sdk.beta.deployments.update(deployment.id, agent=agent.id)  # re-pinned to the version with a private address
    assert_failed_and_paused(workspace, deployment.id, "mcp_egress_blocked_error")


def test_self_hosted_resources_unsupported(workspace, uploads_dir):
    file = workspace.sdk.beta.files.upload(file=("notes.txt", b"notes", "text/plain"))
    deployment = workspace.deploy(resources=[{"type": "file", "file_id": file.id}])
    workspace.sdk.beta.environments.update(workspace.environment_id, config={"type": "self_hosted"})
    assert_failed_and_paused(workspace, deployment.id, "self_hosted_resources_unsupported_error")


def test_an_unexpected_failure_is_an_unknown_error(workspace, monkeypatch):
    deployment = workspace.deploy()

    def broken(**kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(services, "session_create", broken)
    assert_failed_and_paused(workspace, deployment.id, "unknown_error")
    assert "disk on fire" not in str(DeploymentRun.objects.get().error)


def test_a_rejected_session_is_recorded_and_does_not_pause(workspace):
    from registry.extensions import services as extensions

    price = extensions.model_price_create(
        values={"provider": "vendor_b", "model": "claude-sonnet-4-5", "input_per_1m": "3", "output_per_1m": "15"}
    )
    deployment = workspace.deploy(budget={"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}})
    first = workspace.sdk.beta.deployments.run(deployment.id)
    assert Session.objects.get(pk=first.session_id).budget == deployment.budget.model_dump()
    extensions.model_price_delete(price_id=str(price.pk))

    run = workspace.sdk.beta.deployments.run(deployment.id)
    assert run.error.type == "session_creation_rejected_error" and "model_not_budgetable" in run.error.message
    assert workspace.sdk.beta.deployments.retrieve(deployment.id).status == "active"
    assert event_types(run.id) == ["deployment_run.started", "deployment_run.failed"]


def test_unpause_after_the_cause_is_fixed(workspace):
    vault = workspace.sdk.beta.vaults.create(display_name="keys")
    deployment = workspace.deploy(
        vault_ids=[vault.id], schedule={"type": "cron", "expression": "0 * * * *", "timezone": "UTC"}
    )
    workspace.sdk.beta.vaults.archive(vault.id)
    assert_failed_and_paused(workspace, deployment.id, "vault_archived_error")
    assert workspace.row(deployment.id).next_fire_at is None

    fixed = workspace.sdk.beta.deployments.update(deployment.id, vault_ids=[])
    assert fixed.status == "paused"  # an update does not unpause
    unpaused = workspace.sdk.beta.deployments.unpause(deployment.id)
    assert unpaused.status == "active" and unpaused.paused_reason is None
    assert workspace.row(deployment.id).next_fire_at > timezone.now()
    assert workspace.sdk.beta.deployments.run(deployment.id).session_id is not None


# -- the archive services' entry point -------------------------------------------------------------------
def test_pause_for_archive_pauses_the_live_active_deployments_that_use_it(workspace, make_workspace):
    sdk = workspace.sdk
    by_agent = workspace.deploy()
    other_environment = sdk.beta.environments.create(name="other").id
    other_agent = sdk.beta.agents.create(name="other", model="claude-sonnet-4-5").id
    by_environment = workspace.deploy(agent=other_agent)
    neither = workspace.deploy(agent=other_agent, environment_id=other_environment)
    archived = workspace.deploy()
    sdk.beta.deployments.archive(archived.id)
    elsewhere = make_workspace("elsewhere")
    foreign = elsewhere.deploy()
    workspace_id = workspace.tenant.workspace.pk

    assert services.deployments_pause_for_archive(workspace_id=workspace_id) == 0
    assert services.deployments_pause_for_archive(workspace_id=workspace_id, agent_id=workspace.agent_id) == 1
    assert services.deployments_pause_for_archive(workspace_id=workspace_id, agent_id=workspace.agent_id) == 0
    count = services.deployments_pause_for_archive(workspace_id=workspace_id, environment_id=workspace.environment_id)
    assert count == 1

    reasons = {row.pk: row.paused_reason for row in Deployment.objects.all()}
    assert reasons[by_agent.id] == {"type": "error", "error": {"type": "agent_archived_error"}}
    assert reasons[by_environment.id] == {"type": "error", "error": {"type": "environment_archived_error"}}
    assert reasons[neither.id] is None and reasons[archived.id] is None and reasons[foreign.id] is None
    paused = WebhookEvent.objects.filter(type="deployment.paused")
    assert sorted(paused.values_list("data__id", flat=True)) == sorted([by_agent.id, by_environment.id])
    assert {event.data["workspace_id"] for event in paused} == {workspace_id}


def test_pause_for_archive_of_both_names_each_reason(workspace):
    deployment = workspace.deploy()
    services.deployments_pause_for_archive(
        workspace_id=workspace.tenant.workspace.pk,
        agent_id="agent_other0000000000000000",
        environment_id=workspace.environment_id,
    )
    assert workspace.row(deployment.id).paused_reason["error"]["type"] == "environment_archived_error"
    assert workspace.row(deployment.id).next_fire_at is None
    assert timezone.now() - workspace.row(deployment.id).updated_at < timedelta(minutes=1)
