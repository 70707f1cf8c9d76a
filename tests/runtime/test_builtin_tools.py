"""The built-in toolset end to end: the scripted model calls tools, the runtime runs them in the
session's sandbox, the reference client reads `agent.tool_use` / `agent.tool_result`."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import anthropic
import pytest

from fakes import model as replies
from fakes.waiting import wait_until
from registry.sandbox.uids import recorded_uid
from tests.support.runtime.sessions import of_type, stop_reasons, text_of, transcript

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def toolset(*configs: dict) -> dict:
    return {"type": "agent_toolset_20260401", "configs": list(configs)}


def results(events: list[dict]) -> list[tuple[str, bool]]:
    return [(result["content"][0]["text"], result["is_error"]) for result in of_type(events, "agent.tool_result")]


def test_tools_run_in_the_sandbox_and_the_shell_persists(model, open_session):
    model.add(
        replies.tool_call("write", {"file_path": "notes/plan.md", "content": "step one\nstep two\n"}),
        replies.tool_call("bash", {"command": "cd notes && export MARK=kept && wc -l < plan.md"}),
        replies.tool_call("bash", {"command": "pwd; echo $MARK"}),
        replies.tool_call("edit", {"file_path": "notes/plan.md", "old_string": "two", "new_string": "2"}),
        replies.tool_call("read", {"file_path": "/workspace/notes/plan.md"}),
        replies.tool_call("bash", {"command": "echo fresh; pwd", "restart": True}),
        replies.text("All done."),
    )
    chat = open_session(tools=[toolset()])
    chat.say("plan it")
    events = chat.wait_idle()

    uses = of_type(events, "agent.tool_use")
    assert [use["name"] for use in uses] == ["write", "bash", "bash", "edit", "read", "bash"]
    assert {use["evaluated_permission"] for use in uses} == {"allow"}
    assert [result["tool_use_id"] for result in of_type(events, "agent.tool_result")] == [use["id"] for use in uses]
    outputs = [text for text, _ in results(events)]
    assert outputs[1] == "2\nexit code: 0"
    assert outputs[2] == "/workspace/notes\nkept\nexit code: 0"
    assert outputs[4] == "1\tstep one\n2\tstep 2"
    assert outputs[5] == "fresh\n/workspace\nexit code: 0"
    assert not any(is_error for _, is_error in results(events))
    assert text_of(of_type(events, "agent.message")[-1]) == "All done." and stop_reasons(events) == ["end_turn"]
    assert transcript(model.requests[2].body)[-1]["content"][0]["tool_use_id"] == uses[1]["id"]


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_always_ask_pauses_a_built_in_tool(model, open_session, answer):
    model.add(replies.tool_call("bash", {"command": "echo ran > proof.txt"}), replies.text("ok"))
    chat = open_session(tools=[toolset({"name": "bash", "permission_policy": {"type": "always_ask"}})])
    chat.say("go")
    events = chat.wait_idle()
    [use] = of_type(events, "agent.tool_use")
    assert use["evaluated_permission"] == "ask" and stop_reasons(events) == ["requires_action"]
    chat.send({"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": answer})
    events = chat.wait_idle(2)
    [(text, is_error)] = results(events)
    assert is_error is (answer == "deny") and (text == "exit code: 0") is (answer == "allow")


def test_a_disabled_tool_is_not_offered_and_a_call_to_it_is_denied(model, open_session):
    model.add(replies.tool_call("bash", {"command": "id"}), replies.text("ok"))
    chat = open_session(tools=[toolset({"name": "bash", "enabled": False})])
    chat.say("go")
    events = chat.wait_idle()
    assert "bash" not in {tool["name"] for tool in model.requests[0].body["tools"]}
    [use] = of_type(events, "agent.tool_use")
    assert use["evaluated_permission"] == "deny"
    [(text, is_error)] = results(events)
    assert is_error and "disabled" in text


def test_bad_tool_input_is_an_error_result_not_a_crash(model, open_session):
    model.add(replies.tool_call("read", {"path": "x"}), replies.text("sorry"))
    chat = open_session(tools=[toolset()])
    chat.say("go")
    events = chat.wait_idle()
    [(text, is_error)] = results(events)
    assert is_error and "file_path" in text and stop_reasons(events) == ["end_turn"]


def session_uid(child_env: dict[str, str], session_id: str) -> int | None:
    return recorded_uid(Path(child_env["REGISTRY_SANDBOX_ROOT"]) / "sessions" / session_id)


def test_archiving_the_session_kills_its_background_processes(model, open_session, child_env):
    model.add(replies.tool_call("bash", {"command": "sleep 300 > /dev/null 2>&1 & echo started"}), replies.text("ok"))
    chat = open_session(tools=[toolset()])
    chat.say("start something")
    events = chat.wait_idle()
    assert results(events) == [("started\nexit code: 0", False)]
    uid = session_uid(child_env, chat.session_id)

    def sandbox_processes() -> list[str]:
        return subprocess.run(["pgrep", "-u", str(uid)], capture_output=True, text=True).stdout.split()

    assert sandbox_processes()
    chat.sdk.beta.sessions.archive(chat.session_id)
    wait_until(lambda: sandbox_processes() == [], timeout=10, what="the sandbox's processes to be gone")


def test_without_a_sandbox_the_tools_are_not_offered_and_the_session_says_why_once(
    model, open_session, workers, start_worker
):
    model.add(replies.text("no tools here"), replies.text("still none"))
    chat = open_session(tools=[toolset()])
    workers.pause()
    chat.processes.append(start_worker(REGISTRY_SANDBOX_BACKEND="none"))
    chat.say("run something")
    chat.wait_idle()
    chat.say("and now?")
    events = chat.wait_idle(2)
    [error] = of_type(events, "session.error")
    assert (
        error["error"]["type"] == "sandbox_unavailable_error"
        and "REGISTRY_SANDBOX_BACKEND" in error["error"]["message"]
    )
    assert "tools" not in model.requests[0].body and stop_reasons(events) == ["end_turn", "end_turn"]


def test_an_idle_sandbox_is_stopped_and_keeps_its_files(model, open_session, workers, start_worker, child_env):
    model.add(
        replies.tool_call("bash", {"command": "echo kept > file.txt; sleep 300 > /dev/null 2>&1 & echo started"}),
        replies.text("ok"),
        replies.tool_call("bash", {"command": "cat file.txt"}),
        replies.text("ok"),
    )
    chat = open_session(tools=[toolset()])
    workers.pause()
    chat.processes.append(start_worker(REGISTRY_SANDBOX_IDLE_SECONDS="1", REGISTRY_RUNTIME_POLL_SECONDS="0.2"))
    chat.say("start")
    chat.wait_idle()
    uid = session_uid(child_env, chat.session_id)

    def sandbox_processes() -> list[str]:
        return subprocess.run(["pgrep", "-u", str(uid)], capture_output=True, text=True).stdout.split()

    wait_until(lambda: sandbox_processes() == [], timeout=15, what="the idle sandbox to be stopped")
    chat.say("read it")
    events = chat.wait_idle(2)
    assert results(events)[-1] == ("kept\nexit code: 0", False)


def test_a_sandbox_that_cannot_start_ends_the_turn_and_the_session_goes_on(model, open_session, workers, start_worker):
    model.add(replies.tool_call("bash", {"command": "true"}), replies.text("next turn works"))
    chat = open_session(tools=[toolset()])
    workers.pause()
    # A root that cannot be made; Debian's bubblewrap, which needs no copy under it (the wheel's, from a
    # private clone, would: then the worker's start-up check fails and it offers no built-in tools at all).
    chat.processes.append(
        start_worker(REGISTRY_SANDBOX_ROOT="/proc/no-sandboxes-here", REGISTRY_SANDBOX_BWRAP="/usr/bin/bwrap")
    )
    chat.say("run it")
    events = chat.wait_idle()
    [error] = of_type(events, "session.error")
    assert (
        error["error"]["type"] == "sandbox_unavailable_error" and "could not be prepared" in error["error"]["message"]
    )
    assert stop_reasons(events) == ["retries_exhausted"] and results(events)[0][1] is True
    chat.say("just talk")
    events = chat.wait_idle(2)
    assert text_of(of_type(events, "agent.message")[-1]) == "next turn works"


def test_file_resources_are_mounted_read_only_with_their_exact_bytes(model, open_session, sdk):
    payload = bytes(range(256)) * 4
    uploaded = sdk.beta.files.upload(file=("data.bin", payload, "application/octet-stream"))
    custom = "/workspace/inputs/data.bin"
    model.add(
        replies.tool_call("bash", {"command": f"sha256sum /mnt/session/uploads/{uploaded.id} {custom} | cut -c1-64"}),
        replies.tool_call("bash", {"command": f"echo changed > /mnt/session/uploads/{uploaded.id}"}),
        replies.text("ok"),
    )
    chat = open_session(tools=[toolset()])
    resources = [
        {"type": "file", "file_id": uploaded.id},
        {"type": "file", "file_id": uploaded.id, "mount_path": custom},
    ]
    agent_id, environment_id = chat.session()["agent"]["id"], chat.session()["environment_id"]
    chat.session_id = sdk.beta.sessions.create(agent=agent_id, environment_id=environment_id, resources=resources).id
    chat.say("check the file")
    events = chat.wait_idle()
    digest = hashlib.sha256(payload).hexdigest()
    (hashes, _), (refused, _) = results(events)
    assert hashes == f"{digest}\n{digest}\nexit code: 0"
    assert "Read-only file system" in refused and not refused.endswith("exit code: 0")
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.create(
            agent=agent_id,
            environment_id=environment_id,
            resources=[{"type": "file", "file_id": uploaded.id, "mount_path": "/proc/self/x"}],
        )


def test_an_interrupted_tool_call_gets_its_result_in_the_log(model, open_session):
    model.add(replies.tool_call("bash", {"command": "sleep 30"}), replies.text("not asked"))
    chat = open_session(tools=[toolset()])
    chat.say("wait a while")
    wait_until(lambda: of_type(chat.events(), "agent.tool_use"), timeout=30, what="the tool call")
    chat.send({"type": "user.interrupt"})
    events = chat.wait_idle(timeout=20)
    [use] = of_type(events, "agent.tool_use")
    [result] = of_type(events, "agent.tool_result")  # exactly one, as the model would see it
    assert result["tool_use_id"] == use["id"] and result["is_error"] is True
    assert "abandoned" in result["content"][0]["text"] and stop_reasons(events) == ["end_turn"]
    assert len(model.requests) == 1


def test_a_call_awaiting_confirmation_is_closed_by_a_new_message(model, open_session):
    model.add(replies.tool_call("bash", {"command": "echo never"}), replies.text("moved on"))
    chat = open_session(tools=[toolset({"name": "bash", "permission_policy": {"type": "always_ask"}})])
    chat.say("go")
    [use] = of_type(chat.wait_idle(), "agent.tool_use")
    chat.say("never mind")
    events = chat.wait_idle(2)
    [result] = of_type(events, "agent.tool_result")
    assert result["tool_use_id"] == use["id"] and result["is_error"] is True
    assert "abandoned" in result["content"][0]["text"]
    closed = [block for message in transcript(model.requests[1].body) for block in message["content"]]
    assert [block["tool_use_id"] for block in closed if block["type"] == "tool_result"] == [use["id"]]
    assert text_of(of_type(events, "agent.message")[-1]) == "moved on"
