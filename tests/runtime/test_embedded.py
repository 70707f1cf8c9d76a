"""The embedded default (`make run`): SQLite, the in-memory channel layer, the runtime inside daphne.

Streams there get `event_deltas` previews, which a runtime in another process could not deliver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import model as replies
from fakes.model import FakeModel
from tests.support.clients import registry_client
from tests.support.live import ROOT, live_registry_process

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def embedded_registry(fake_model: FakeModel, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """daphne on a fresh SQLite file with the runtime embedded; yields (url, a workspace key). The data
    folder does not exist yet, as in a fresh clone: `migrate` makes it."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings.base",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "REGISTRY_DATA_DIR": str(tmp_path / "var"),
        "REGISTRY_RUNTIME_EMBEDDED": "1",
        "REGISTRY_MODEL_BASE_URL": fake_model.url,
    }
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True, cwd=ROOT)
    created = subprocess.run(
        [*manage, "workspace", "create", "embedded", "--json"], env=env, check=True, cwd=ROOT, capture_output=True
    )
    key = json.loads(created.stdout)["api_key"]
    with live_registry_process(env) as url:
        yield url, key


def test_deltas_stream_with_the_runtime_embedded(fake_model, embedded_registry):
    fake_model.reset()
    url, key = embedded_registry
    sdk = registry_client(url, key)
    agent = sdk.beta.agents.create(name="embedded", model="claude-test-model")
    environment = sdk.beta.environments.create(name="env")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    answer = "Deltas without Redis."
    fake_model.add(replies.text(answer, delay=0.3, chunks=4, chunk_delay=0.02))
    frames: list[Any] = []
    with sdk.beta.sessions.events.stream(session.id, event_deltas=["agent.message"]) as stream:
        sdk.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
        )
        for frame in stream:
            frames.append(frame)
            if frame.type == "session.status_idle":
                break
    deltas = [frame for frame in frames if frame.type == "event_delta"]
    message = next(frame for frame in frames if frame.type == "agent.message")
    assert len(deltas) == 4 and "".join(delta.delta.content.text for delta in deltas) == answer
    assert all(delta.event_id == message.id for delta in deltas)
    sdk.close()
