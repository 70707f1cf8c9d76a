"""An environment whose packages cannot be installed, end to end through a worker: the turn's `session.error`
names the installer, the package and the cause; the next turn gets the same error at once instead of
building again; an environment with new packages builds at once."""

from __future__ import annotations

import pytest

from fakes import model as replies
from tests.support.package_index import served_index
from tests.support.runtime.sessions import Conversation, of_type

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOOLSET = {"type": "agent_toolset_20260401"}
FAILED = (
    "The environment's packages could not be installed: pip could not install latepkg: "
    "No matching distribution found for latepkg. Tried again by a turn after {}, "
    "or at once when the environment's packages or networking change."
)


def errors(chat: Conversation, turns: int) -> list[dict]:
    return [event["error"] for event in of_type(chat.wait_idle(turns, timeout=90), "session.error")]


def test_a_failed_build_is_explained_and_not_rebuilt_every_turn(model, sdk, workers, start_worker):
    index = served_index(tinypkg="from the layer")
    workers.pause()
    worker = start_worker(**index.worker_env())
    try:
        config = {"type": "cloud", "packages": {"pip": ["latepkg"]}}
        environment = sdk.beta.environments.create(name="py", config=config)
        agent = sdk.beta.agents.create(name="py", model="claude-sonnet-4-5", tools=[TOOLSET])
        session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        chat = Conversation(sdk=sdk, session_id=session.id, processes=[worker])
        chat.say("import it")
        [first] = errors(chat, 1)
        assert first == {
            "type": "unknown_error",
            "message": FAILED.format("60 s"),
            "retry_status": {"type": "terminal"},
        }
        asked = len(index.requests)
        assert asked > 0

        chat.say("try again")
        later = errors(chat, 2)[-1]["message"]
        before_wait, after_wait = FAILED.split("{}")
        assert later.startswith(before_wait) and later.endswith(" s" + after_wait)
        assert len(index.requests) == asked and model.requests == []  # no build, and the model was never asked

        config["packages"] = {"pip": ["tinypkg"]}
        sdk.beta.environments.update(environment.id, config=config)
        model.add(replies.tool_call("bash", {"command": "python3 -c 'import tinypkg; print(tinypkg.VALUE)'"}))
        model.add(replies.text("imported"))
        fresh = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        chat = Conversation(sdk=sdk, session_id=fresh.id, processes=[worker])
        chat.say("import it")
        events = chat.wait_idle(timeout=90)
        assert of_type(events, "session.error") == []
        assert of_type(events, "agent.tool_result")[0]["content"][0]["text"] == "from the layer\nexit code: 0"
    finally:
        index.stop()
