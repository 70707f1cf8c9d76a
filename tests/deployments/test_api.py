"""Deployments through the reference client: create, retrieve, update, list (its filters), pause, unpause,
archive; what a create or update refuses (and that a refusal writes nothing); tenancy; the webhook events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anthropic
import pytest
from django.utils import timezone

from registry.deployments.models import Deployment, DeploymentRun
from registry.deployments.serializers import DeploymentRunSerializer, DeploymentSerializer
from registry.webhooks.models import WebhookEvent
from tests.deployments.conftest import EVERY_MINUTE, GO
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)

WEEKDAYS_AT_NINE = {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"}
OUTCOME = {
    "type": "user.define_outcome",
    "description": "A report with every metric.",
    "rubric": {"type": "text", "content": "Every metric has a number."},
}


def events_of(object_id: str) -> list[str]:
    return list(WebhookEvent.objects.filter(data__id=object_id).order_by("seq").values_list("type", flat=True))


def test_create_retrieve_update_archive(workspace):
    sdk = workspace.sdk
    created = workspace.deploy(
        description="Every weekday.",
        initial_events=[*GO, OUTCOME],
        schedule=WEEKDAYS_AT_NINE,
        metadata={"team": "ops", "tier": "1"},
    )
    assert created.id.startswith("depl_") and created.type == "deployment"
    assert created.agent.id == workspace.agent_id and created.agent.version == 1 and created.agent.type == "agent"
    assert created.status == "active" and created.paused_reason is None and created.archived_at is None
    assert [event.type for event in created.initial_events] == ["user.message", "user.define_outcome"]
    assert created.resources == [] and created.vault_ids == [] and created.budget is None
    assert created.schedule.expression == "0 9 * * 1-5" and created.schedule.timezone == "Europe/Berlin"
    assert created.schedule.last_run_at is None
    upcoming = created.schedule.upcoming_runs_at
    assert len(upcoming) == 5 and upcoming == sorted(upcoming) and upcoming[0] > datetime.now(UTC)
    assert all(tick.astimezone(timezone.get_fixed_timezone(0)).weekday() < 5 for tick in upcoming)
    assert workspace.row(created.id).next_fire_at == upcoming[0]
    assert sdk.beta.deployments.retrieve(created.id) == created

    sdk.beta.agents.update(workspace.agent_id, version=1, system="Be thorough.")
    updated = sdk.beta.deployments.update(
        created.id, name="weekly report", description="", metadata={"tier": None, "owner": "a"}, schedule=None
    )
    assert updated.name == "weekly report" and updated.description is None
    assert updated.metadata == {"team": "ops", "owner": "a"}
    assert updated.schedule is None and workspace.row(created.id).next_fire_at is None
    assert updated.agent.version == 1  # pinned: a new agent version changes nothing until re-pinned
    assert sdk.beta.deployments.update(created.id, agent=workspace.agent_id).agent.version == 2
    pinned = sdk.beta.deployments.update(created.id, agent={"type": "agent", "id": workspace.agent_id, "version": 1})
    assert pinned.agent.version == 1 and pinned.initial_events == updated.initial_events

    archived = sdk.beta.deployments.archive(created.id)
    assert archived.archived_at is not None and archived.status == "active" and archived.paused_reason is None
    assert sdk.beta.deployments.archive(created.id).archived_at == archived.archived_at  # again: unchanged
    for refused in (
        lambda: sdk.beta.deployments.update(created.id, name="again"),
        lambda: sdk.beta.deployments.pause(created.id),
        lambda: sdk.beta.deployments.unpause(created.id),
        lambda: sdk.beta.deployments.run(created.id),
    ):
        with pytest.raises(anthropic.ConflictError):
            refused()
    assert events_of(created.id) == [
        "deployment.created",
        "deployment.updated",
        "deployment.updated",
        "deployment.updated",
        "deployment.archived",
    ]


def test_the_objects_render_exactly_their_declared_fields(workspace):
    deployment = workspace.deploy(schedule=EVERY_MINUTE)
    run = workspace.sdk.beta.deployments.run(deployment.id)
    row = workspace.row(deployment.id)
    assert set(DeploymentSerializer.render(row)) == set(DeploymentSerializer._declared_fields)
    assert DeploymentSerializer(row).data == DeploymentSerializer.render(row)
    run_row = DeploymentRun.objects.get(pk=run.id)
    assert set(DeploymentRunSerializer.render(run_row)) == set(DeploymentRunSerializer._declared_fields)


def test_an_archived_deployments_schedule_lists_no_upcoming_run_but_keeps_its_last(workspace):
    deployment = workspace.deploy(schedule=EVERY_MINUTE)
    Deployment.objects.filter(pk=deployment.id).update(last_run_at=timezone.now())
    archived = workspace.sdk.beta.deployments.archive(deployment.id)
    assert archived.schedule.upcoming_runs_at == [] and archived.schedule.last_run_at is not None
    assert workspace.row(deployment.id).next_fire_at is None


def test_pause_and_unpause(workspace):
    sdk = workspace.sdk
    deployment = workspace.deploy(schedule=EVERY_MINUTE)
    Deployment.objects.filter(pk=deployment.id).update(next_fire_at=timezone.now() - timedelta(hours=1))

    paused = sdk.beta.deployments.pause(deployment.id)
    assert paused.status == "paused" and paused.paused_reason.type == "manual"
    assert len(paused.schedule.upcoming_runs_at) == 5  # what unpausing would give
    assert workspace.row(deployment.id).next_fire_at is None
    assert sdk.beta.deployments.pause(deployment.id) == paused  # pausing a paused deployment: no change

    before = timezone.now()
    unpaused = sdk.beta.deployments.unpause(deployment.id)
    assert unpaused.status == "active" and unpaused.paused_reason is None
    next_fire_at = workspace.row(deployment.id).next_fire_at
    assert next_fire_at is not None and before < next_fire_at <= before + timedelta(minutes=1)  # missed: not fired
    assert unpaused.schedule.upcoming_runs_at[0] == next_fire_at
    assert sdk.beta.deployments.unpause(deployment.id).status == "active"
    assert events_of(deployment.id) == ["deployment.created", "deployment.paused", "deployment.unpaused"]


def test_list_and_its_filters(workspace):
    sdk = workspace.sdk
    other_agent = sdk.beta.agents.create(name="other", model="claude-sonnet-4-5").id
    first = workspace.deploy(name="first").id
    second = workspace.deploy(name="second", agent=other_agent).id
    third = workspace.deploy(name="third").id
    fourth = workspace.deploy(name="fourth").id
    sdk.beta.deployments.pause(second)
    sdk.beta.deployments.archive(fourth)

    assert [item.id for item in sdk.beta.deployments.list(limit=1)] == [third, second, first]  # follows next_page
    assert [item.id for item in sdk.beta.deployments.list(include_archived=True)] == [fourth, third, second, first]
    assert [item.id for item in sdk.beta.deployments.list(status="paused")] == [second]
    assert [item.id for item in sdk.beta.deployments.list(status="active")] == [third, first]
    assert [item.id for item in sdk.beta.deployments.list(agent_id=other_agent)] == [second]
    created = {row.pk: row.created_at for row in Deployment.objects.all()}
    assert [item.id for item in sdk.beta.deployments.list(created_at_gte=created[second])] == [third, second]
    assert [item.id for item in sdk.beta.deployments.list(created_at_lte=created[second])] == [second, first]
    with pytest.raises(anthropic.BadRequestError, match="include_archived"):
        sdk.beta.deployments.list(status="active", include_archived=True)
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.deployments.list(status="archived")  # type: ignore[arg-type]


def test_resources_vaults_and_budget_are_kept_and_the_token_never_shown(workspace, uploads_dir):
    sdk = workspace.sdk
    file = sdk.beta.files.upload(file=("notes.txt", b"notes", "text/plain"))
    store = sdk.beta.memory_stores.create(name="notes")
    vault = sdk.beta.vaults.create(display_name="keys")
    repository = {
        "type": "github_repository",
        "url": "https://github.com/acme/app",
        "authorization_token": "ghp_secret",
        "checkout": {"type": "branch", "name": "main"},
    }
    deployment = workspace.deploy(
        resources=[
            {"type": "file", "file_id": file.id},
            {"type": "memory_store", "memory_store_id": store.id},
            repository,
        ],
        vault_ids=[vault.id],
    )
    assert [resource.type for resource in deployment.resources] == ["file", "memory_store", "github_repository"]
    assert deployment.resources[2].checkout.name == "main" and deployment.vault_ids == [vault.id]
    raw = workspace.sdk.beta.deployments.with_raw_response.retrieve(deployment.id).text()
    assert "ghp_secret" not in raw and "authorization_token" not in raw and "sealed" not in raw
    assert "ghp_secret" not in str(workspace.row(deployment.id).resources)

    cleared = sdk.beta.deployments.update(deployment.id, resources=None, vault_ids=[])
    assert cleared.resources == [] and cleared.vault_ids == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"schedule": {"type": "cron", "expression": "0 9 L * *", "timezone": "UTC"}}, "extended cron"),
        ({"schedule": {"type": "cron", "expression": "0 9 * * 1#2", "timezone": "UTC"}}, "extended cron"),
        ({"schedule": {"type": "cron", "expression": "@daily", "timezone": "UTC"}}, "extended cron"),
        ({"schedule": {"type": "cron", "expression": "0 0 9 * * *", "timezone": "UTC"}}, "five fields"),
        ({"schedule": {"type": "cron", "expression": "0 9 * * *", "timezone": "Mars/Base"}}, "IANA"),
        ({"schedule": {"type": "cron", "expression": "0 9 30 2 *", "timezone": "UTC"}}, "never matches"),
        ({"initial_events": []}, "initial_events"),
        ({"initial_events": GO * 51}, "initial_events"),
        ({"initial_events": [{"type": "user.interrupt"}]}, "initial_events"),
        (
            {"initial_events": [*GO, {"type": "system.message", "content": [{"type": "text", "text": "Be brief."}]}]},
            "system.message",
        ),
        ({"name": ""}, "name"),
        ({"environment_id": "env_missing0000000000000000"}, "environment_id"),
        ({"vault_ids": ["vlt_missing0000000000000000"]}, "vault_not_found"),
        ({"resources": [{"type": "file", "file_id": "file_missing0000000000000000"}]}, "file_not_found"),
        (
            {"resources": [{"type": "memory_store", "memory_store_id": "mems_missing00000000000000"}]},
            "session_resource_not_found",
        ),
        (
            {
                "resources": [
                    {"type": "github_repository", "url": "https://github.com/a/b", "checkout": {"type": "commit"}}
                ]
            },
            "checkout.sha",
        ),
        ({"budget": {"type": "limit", "max_list_cost": {"amount": "100", "currency": "USD"}}}, "model_not_budgetable"),
        ({"agent": "agent_missing00000000000000000"}, "agent"),
        ({"agent": {"type": "agent", "id": "{agent}", "version": 9}}, "agent.version"),
    ],
)
def test_a_deployment_that_could_not_fire_is_refused_and_nothing_is_written(workspace, overrides, message):
    if isinstance(overrides.get("agent"), dict):
        overrides = {"agent": {**overrides["agent"], "id": workspace.agent_id}}
    with pytest.raises(anthropic.BadRequestError, match=message) as refused:
        workspace.deploy(**overrides)
    assert refused.value.type == "invalid_request_error"
    assert not Deployment.objects.exists()
    assert not WebhookEvent.objects.filter(type__startswith="deployment").exists()


def test_archived_references_are_refused(workspace, uploads_dir):
    sdk = workspace.sdk
    vault = sdk.beta.vaults.create(display_name="keys")
    sdk.beta.vaults.archive(vault.id)
    with pytest.raises(anthropic.BadRequestError, match="vault_archived"):
        workspace.deploy(vault_ids=[vault.id])
    store = sdk.beta.memory_stores.create(name="notes")
    sdk.beta.memory_stores.archive(store.id)
    with pytest.raises(anthropic.BadRequestError, match="memory_store_archived"):
        workspace.deploy(resources=[{"type": "memory_store", "memory_store_id": store.id}])
    self_hosted = sdk.beta.environments.create(name="workers", config={"type": "self_hosted"})
    file = sdk.beta.files.upload(file=("notes.txt", b"notes", "text/plain"))
    with pytest.raises(anthropic.BadRequestError, match="self_hosted_resources_unsupported"):
        workspace.deploy(environment_id=self_hosted.id, resources=[{"type": "file", "file_id": file.id}])
    sdk.beta.agents.archive(workspace.agent_id)
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        workspace.deploy()
    assert not Deployment.objects.exists()


def test_an_update_is_checked_against_what_it_meets(workspace, uploads_dir):
    """A new environment is checked with the resources already there, and a refused update changes nothing."""
    sdk = workspace.sdk
    file = sdk.beta.files.upload(file=("notes.txt", b"notes", "text/plain"))
    deployment = workspace.deploy(resources=[{"type": "file", "file_id": file.id}])
    self_hosted = sdk.beta.environments.create(name="workers", config={"type": "self_hosted"})
    with pytest.raises(anthropic.BadRequestError, match="self_hosted_resources_unsupported"):
        sdk.beta.deployments.update(deployment.id, environment_id=self_hosted.id, name="moved")
    with pytest.raises(anthropic.BadRequestError, match="initial_events"):
        sdk.beta.deployments.update(deployment.id, initial_events=[])
    assert sdk.beta.deployments.retrieve(deployment.id) == deployment
    assert events_of(deployment.id) == ["deployment.created"]


def test_a_budget_needs_a_list_price(workspace):
    from registry.extensions import services as extensions

    price = extensions.model_price_create(
        values={"provider": "vendor_b", "model": "claude-sonnet-4-5", "input_per_1m": "3", "output_per_1m": "15"}
    )
    budget = {"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}}
    deployment = workspace.deploy(budget=budget)
    assert deployment.budget.max_list_cost.amount == "2500" and deployment.budget.type == "limit"
    assert workspace.sdk.beta.deployments.update(deployment.id, budget=None).budget is None
    extensions.model_price_delete(price_id=str(price.pk))
    with pytest.raises(anthropic.BadRequestError, match="model_not_budgetable"):
        workspace.sdk.beta.deployments.update(deployment.id, budget=budget)


def test_another_workspace_sees_nothing(workspace, live_server):
    deployment = workspace.deploy()
    run = workspace.sdk.beta.deployments.run(deployment.id)
    stranger = make_tenant("stranger")
    from tests.support.clients import registry_client

    sdk = registry_client(live_server.url, stranger.api_key)
    for reach in (
        lambda: sdk.beta.deployments.retrieve(deployment.id),
        lambda: sdk.beta.deployments.update(deployment.id, name="mine"),
        lambda: sdk.beta.deployments.pause(deployment.id),
        lambda: sdk.beta.deployments.run(deployment.id),
        lambda: sdk.beta.deployments.archive(deployment.id),
        lambda: sdk.beta.deployment_runs.retrieve(run.id),
    ):
        with pytest.raises(anthropic.NotFoundError):
            reach()
    assert list(sdk.beta.deployments.list()) == []
    assert list(sdk.beta.deployment_runs.list()) == []
    assert list(sdk.beta.deployment_runs.list(deployment_id=deployment.id)) == []
    with pytest.raises(anthropic.NotFoundError):
        workspace.sdk.beta.deployments.retrieve("trg_notadeployment000000000")
