"""The admin pages of deployments and runs: read-only, scoped to the staff member's workspaces, and acting on
deployments only through the services (pause, unpause, run now, archive: each confirmed, each with its event)."""

from __future__ import annotations

import pytest

from registry.deployments.models import Deployment, DeploymentRun
from registry.webhooks.models import WebhookEvent
from tests.support.admin_pages import on, page
from tests.support.admin_staff import staff_client

pytestmark = pytest.mark.django_db(transaction=True)

DEPLOYMENTS = "/admin/deployments/deployment/"
RUNS = "/admin/deployments/deploymentrun/"


def act(console, action: str, pk: str) -> None:
    response = console.post(DEPLOYMENTS, {"action": action, "_selected_action": [pk], "confirmed": "yes"})
    assert response.status_code == 302, response.content.decode()


def test_staff_read_and_act_through_the_services(workspace, make_workspace):
    deployment = workspace.deploy()
    workspace.sdk.beta.deployments.run(deployment.id)
    theirs = make_workspace("theirs").deploy()
    console = staff_client("operator", {workspace.tenant.workspace: "admin"})

    listing = page(console, DEPLOYMENTS)
    assert deployment.id in listing and theirs.id not in listing
    assert DeploymentRun.objects.get().pk in page(console, on(DEPLOYMENTS, deployment.id))
    assert DeploymentRun.objects.get().pk in page(console, RUNS)
    assert console.get(on(DEPLOYMENTS, theirs.id)).status_code in (302, 403, 404)
    assert console.get(on(DEPLOYMENTS, deployment.id, "delete")).status_code == 403

    confirm = console.post(DEPLOYMENTS, {"action": "pause", "_selected_action": [deployment.id]})
    assert confirm.status_code == 200 and "Pause" in confirm.content.decode()
    assert Deployment.objects.get(pk=deployment.id).status == "active"  # asked, not done
    act(console, "pause", deployment.id)
    assert Deployment.objects.get(pk=deployment.id).paused_reason == {"type": "manual"}
    act(console, "unpause", deployment.id)
    act(console, "run_now", deployment.id)
    assert DeploymentRun.objects.filter(deployment_id=deployment.id).count() == 2
    act(console, "archive", deployment.id)
    assert Deployment.objects.get(pk=deployment.id).archived_at is not None
    act(console, "pause", theirs.id)  # another workspace's: not reached
    assert Deployment.objects.get(pk=theirs.id).status == "active"
    assert list(WebhookEvent.objects.filter(data__id=deployment.id).order_by("seq").values_list("type", flat=True)) == [
        "deployment.created",
        "deployment.paused",
        "deployment.unpaused",
        "deployment.archived",
    ]
