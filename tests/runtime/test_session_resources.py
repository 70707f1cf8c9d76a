"""What a session brings into its sandbox, end to end through the reference client: skills, memory
stores (read-only and read-write, synced both ways), files sent to the model as content, and a
resource added to a live session."""

from __future__ import annotations

import base64

import pytest

from fakes import model as replies
from fakes.git_server import GitServer
from fakes.pki import make_pki
from registry.memory.models import MemoryVersion
from tests.support.package_index import served_index
from tests.support.recording_servers import recording_servers
from tests.support.runtime.sessions import Conversation, of_type, transcript

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOOLSET = {"type": "agent_toolset_20260401"}
REPO_TOKEN = "ghs_CANARY_repository_token"
API_SECRET = "sk-live-CANARY-0123456789"
SPLIT_TOKEN = "ghs_CANARY_rep'o'sitory_token"  # the shell joins it; the tool call's input never holds the token
SKILL_MANIFEST = (
    b"---\nname: release-notes\ndescription: Write release notes from a changelog.\n---\n# How\nGroup by type.\n"
)
PNG_PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def outputs(events: list[dict]) -> list[tuple[str, bool]]:
    return [
        ("\n".join(block["text"] for block in result["content"]), result["is_error"])
        for result in of_type(events, "agent.tool_result")
    ]


def system_text(body: dict) -> str:
    return "\n".join(block["text"] for block in body.get("system") or [])


def test_a_skill_is_mounted_and_listed_in_the_system_prompt(model, open_session, sdk):
    skill = sdk.beta.skills.create(
        files=[("release-notes/SKILL.md", SKILL_MANIFEST), ("release-notes/templates/notes.md", b"## Added\n")]
    )
    model.add(
        replies.tool_call("read", {"file_path": "/mnt/session/skills/release-notes/SKILL.md"}),
        replies.tool_call(
            "bash",
            {
                "command": "cat /mnt/session/skills/release-notes/templates/notes.md; "
                "touch /mnt/session/skills/release-notes/x"
            },
        ),
        replies.text("done"),
    )
    chat = open_session(tools=[TOOLSET], skills=[{"type": "custom", "skill_id": skill.id}])
    chat.say("write the notes")
    events = chat.wait_idle()
    (manifest, _), (template, _) = outputs(events)
    assert "Group by type." in manifest
    assert "## Added" in template and "Read-only file system" in template
    system = system_text(model.requests[0].body)
    assert "release-notes: Write release notes from a changelog." in system
    assert "/mnt/session/skills/release-notes/SKILL.md" in system


def test_an_anthropic_skill_this_deployment_lacks_is_a_session_error(model, open_session):
    model.add(replies.text("never asked"))
    chat = open_session(tools=[TOOLSET], skills=[{"type": "anthropic", "skill_id": "xlsx"}])
    chat.say("make a sheet")
    events = chat.wait_idle()
    (error,) = of_type(events, "session.error")
    assert "xlsx" in error["error"]["message"] and "Anthropic skills" in error["error"]["message"]
    assert model.requests == []


def test_memory_stores_read_only_and_read_write(model, open_session, sdk):
    shared = sdk.beta.memory_stores.create(name="house/style", description="How we write.")
    sdk.beta.memory_stores.memories.create(shared.id, path="/tone.md", content="Plain words.")
    notes = sdk.beta.memory_stores.create(name="notes")
    sdk.beta.memory_stores.memories.create(notes.id, path="/old.md", content="stale")
    sdk.beta.memory_stores.memories.create(notes.id, path="/keep/me.md", content="kept")
    model.add(
        replies.tool_call(
            "bash", {"command": "cat /mnt/memory/house_style/tone.md; echo no > /mnt/memory/house_style/tone.md"}
        ),
        replies.tool_call("write", {"file_path": "/mnt/memory/notes/new/idea.md", "content": "Ship Friday."}),
        replies.tool_call(
            "bash", {"command": "rm /mnt/memory/notes/old.md && echo 'kept, edited' > /mnt/memory/notes/keep/me.md"}
        ),
        replies.tool_call("bash", {"command": "head -c 200000 /dev/zero | tr '\\0' a > /mnt/memory/notes/huge.md"}),
        replies.text("remembered"),
    )
    chat = open_session(
        tools=[TOOLSET],
        resources=[
            {"type": "memory_store", "memory_store_id": shared.id, "access": "read_only", "instructions": "Follow it."},
            {"type": "memory_store", "memory_store_id": notes.id, "instructions": "Write down decisions."},
        ],
    )
    chat.say("work")
    events = chat.wait_idle()
    (tone, _), (_, write_error), (_, edit_error), (huge, huge_error) = outputs(events)
    assert tone.startswith("Plain words.") and "Read-only file system" in tone
    assert not write_error and not edit_error
    assert huge_error and "larger than the memory limit" in huge

    memories = {item.path: item for item in sdk.beta.memory_stores.memories.list(notes.id)}
    assert set(memories) == {"/new/idea.md", "/keep/me.md"}
    idea = sdk.beta.memory_stores.memories.retrieve(memories["/new/idea.md"].id, memory_store_id=notes.id)
    assert idea.content == "Ship Friday."
    versions = MemoryVersion.objects.filter(store_id=notes.id, path="/keep/me.md").order_by("created_at")
    assert [version.operation for version in versions] == ["created", "modified"]
    assert versions[len(versions) - 1].created_by == {"type": "session_actor", "session_id": chat.session_id}
    assert MemoryVersion.objects.filter(store_id=notes.id, path="/old.md", operation="deleted").exists()
    assert [item.path for item in sdk.beta.memory_stores.memories.list(shared.id)] == ["/tone.md"]

    system = system_text(model.requests[0].body)
    assert "/mnt/memory/house_style" in system and "Follow it." in system and "How we write." in system
    assert "/mnt/memory/notes" in system and "Write down decisions." in system


def test_a_memory_changed_through_the_api_reaches_a_running_session(model, open_session, sdk):
    store = sdk.beta.memory_stores.create(name="live")
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a.md", content="first")
    model.add(replies.tool_call("bash", {"command": "cat /mnt/memory/live/a.md"}), replies.text("one"))
    chat = open_session(tools=[TOOLSET], resources=[{"type": "memory_store", "memory_store_id": store.id}])
    chat.say("read")
    chat.wait_idle()
    sdk.beta.memory_stores.memories.update(memory.id, memory_store_id=store.id, content="second")
    model.add(replies.tool_call("bash", {"command": "cat /mnt/memory/live/a.md"}), replies.text("two"))
    chat.say("again")
    events = chat.wait_idle(2)
    assert [text.removesuffix("exit code: 0") for text, _ in outputs(events)] == ["first", "second"]


def test_image_and_document_blocks_reach_the_model_as_content(model, open_session, sdk):
    image = sdk.beta.files.upload(file=("pixel.png", PNG_PIXEL, "image/png"))
    notes = sdk.beta.files.upload(file=("notes.txt", b"the launch is on Friday", "text/plain"))
    model.add(replies.text("seen"))
    chat = open_session()
    chat.send(
        {
            "type": "user.message",
            "content": [
                {"type": "image", "source": {"type": "file", "file_id": image.id}},
                {"type": "document", "source": {"type": "file", "file_id": notes.id}},
                {"type": "text", "text": "what is this?"},
            ],
        }
    )
    chat.wait_idle()
    blocks = transcript(model.requests[0].body)[0]["content"]
    assert blocks[0]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(PNG_PIXEL).decode(),
    }
    assert blocks[1]["source"] == {"type": "text", "media_type": "text/plain", "data": "the launch is on Friday"}
    assert image.id not in str(model.requests[0].body) and notes.id not in str(model.requests[0].body)


def test_a_file_added_to_a_live_session_is_mounted_before_the_next_tool_call(model, open_session, sdk):
    model.add(replies.tool_call("bash", {"command": "echo before > marker; ls /data"}), replies.text("one"))
    chat = open_session(tools=[TOOLSET])
    chat.say("look")
    chat.wait_idle()
    uploaded = sdk.beta.files.upload(file=("late.txt", b"arrived late", "text/plain"))
    sdk.beta.sessions.resources.add(chat.session_id, type="file", file_id=uploaded.id, mount_path="/data/late.txt")
    model.add(replies.tool_call("bash", {"command": "cat /data/late.txt; echo; cat marker"}), replies.text("two"))
    chat.say("look again")
    events = chat.wait_idle(2)
    (before, _), (after, after_error) = outputs(events)
    assert "late.txt" not in before
    assert after == "arrived late\nbefore\nexit code: 0" and not after_error
    assert "/data/late.txt" not in system_text(model.requests[0].body)
    files_section = system_text(model.requests[-1].body).partition("# Files")[2]
    assert "- /data/late.txt: late.txt (text/plain, 12 bytes)" in files_section


@pytest.fixture
def git_server(tmp_path):
    server = GitServer(token=REPO_TOKEN)
    yield server
    server.stop()


def test_repositories_are_cloned_outside_the_sandbox(
    model, open_session, sdk, workers, start_worker, git_server, tmp_path
):
    repository = git_server.create_repository("tool")
    old = repository.commit({"README.md": "version one\n"})
    repository.commit({"README.md": "version two\n"})
    repository.commit({"README.md": "feature work\n"}, branch="feature")
    git_server.create_repository("private")
    git_server.forbidden.add("private")
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "{git_server.url}/"]\n\tinsteadOf = https://git.test/\n')
    workers.pause()
    worker = start_worker(GIT_CONFIG_GLOBAL=str(config), GIT_CONFIG_NOSYSTEM="1")

    def clone(*resources: dict) -> list[dict]:
        chat = open_session(tools=[TOOLSET], resources=list(resources))
        chat.processes.append(worker)
        chat.say("look")
        return chat.wait_idle()

    url = "https://git.test/tool"
    model.add(
        replies.tool_call(
            "bash", {"command": "cat /workspace/tool/README.md /workspace/branch/README.md /srv/old/README.md"}
        ),
        replies.tool_call(
            "bash",
            {"command": f"env; grep -r {SPLIT_TOKEN} /workspace /srv; git -C /workspace/tool status --short | wc -l"},
        ),
        replies.text("read"),
    )
    events = clone(
        {"type": "github_repository", "url": url, "authorization_token": REPO_TOKEN},
        {
            "type": "github_repository",
            "url": url,
            "authorization_token": REPO_TOKEN,
            "mount_path": "/workspace/branch",
            "checkout": {"type": "branch", "name": "feature"},
        },
        {
            "type": "github_repository",
            "url": url,
            "authorization_token": REPO_TOKEN,
            "mount_path": "/srv/old",
            "checkout": {"type": "commit", "sha": old},
        },
    )
    (contents, _), (leak_check, _) = outputs(events)
    assert contents == "version two\nfeature work\nversion one\nexit code: 0"
    assert REPO_TOKEN not in leak_check and leak_check.endswith("0\nexit code: 0")
    assert REPO_TOKEN not in str(events) and of_type(events, "session.error") == []
    system = system_text(model.requests[0].body)
    assert f"- /workspace/tool: a clone of {url}, its default branch checked out" in system
    assert f"- /workspace/branch: a clone of {url}, branch feature checked out" in system
    assert f"- /srv/old: a clone of {url}, commit {old} checked out" in system
    assert REPO_TOKEN not in system and git_server.url not in system

    failures: dict[str, dict] = {
        "repository_authentication_error": {"type": "github_repository", "url": url, "authorization_token": "wrong"},
        "repository_not_found_error": {
            "type": "github_repository",
            "url": "https://git.test/missing",
            "authorization_token": REPO_TOKEN,
        },
        "repository_forbidden_error": {
            "type": "github_repository",
            "url": "https://git.test/private",
            "authorization_token": REPO_TOKEN,
        },
        "repository_checkout_error": {
            "type": "github_repository",
            "url": url,
            "authorization_token": REPO_TOKEN,
            "checkout": {"type": "branch", "name": "no-such-branch"},
        },
    }
    for error_type, resource in failures.items():
        model.add(replies.tool_call("bash", {"command": "echo still usable"}), replies.text("ok"))
        events = clone(resource)
        (error,) = of_type(events, "session.error")
        assert error["error"]["type"] == error_type, error
        assert outputs(events) == [("still usable\nexit code: 0", False)]
        assert "wrong" not in error["error"]["message"]
        assert resource["url"] in error["error"]["message"] and git_server.url not in error["error"]["message"]


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path)


@pytest.fixture
def serve():
    yield from recording_servers()


def test_an_environment_variable_credential_is_injected_by_the_proxy(
    model, open_session, sdk, workers, start_worker, pki, serve
):
    port, received = serve(pki.server_chain)
    vault = sdk.beta.vaults.create(display_name="keys")
    sdk.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_KEY",
            "secret_value": API_SECRET,
            "networking": {"type": "limited", "allowed_hosts": ["localhost"]},
        },
    )
    workers.pause()
    worker = start_worker(REGISTRY_SANDBOX_EGRESS_ALLOW="127.0.0.1", REGISTRY_SANDBOX_EXTRA_CA_FILE=str(pki.ca_file))
    curl = 'curl -sS -H "Authorization: Bearer $API_KEY"'
    write_ca = f"cat > /tmp/ca.pem <<'EOF'\n{pki.ca_file.read_text()}EOF\n"
    model.add(
        replies.tool_call("bash", {"command": "env | grep API_KEY"}),
        replies.tool_call("bash", {"command": f"{curl} https://localhost:{port}/listed"}),
        replies.tool_call(
            "bash", {"command": f"{write_ca}{curl} --cacert /tmp/ca.pem https://127.0.0.1:{port}/unlisted"}
        ),
        replies.text("called"),
    )
    chat = open_session(tools=[TOOLSET], vault_ids=[vault.id])
    chat.processes.append(worker)
    chat.say("call the api")
    events = chat.wait_idle()
    (environment, _), (listed, _), (unlisted, _) = outputs(events)
    placeholder = environment.removeprefix("API_KEY=").split("\n")[0]
    assert placeholder.startswith("regsec_") and API_SECRET not in environment
    assert listed.startswith("ok") and unlisted.startswith("ok")
    by_path = {request.path: request.headers.get("authorization") for request in received}
    assert by_path == {"/listed": f"Bearer {API_SECRET}", "/unlisted": f"Bearer {placeholder}"}
    assert API_SECRET not in str(events)


def test_a_pip_package_is_installed_once_for_two_sessions(model, open_session, sdk, workers, start_worker):
    index = served_index(tinypkg="from the layer")
    workers.pause()
    worker = start_worker(**index.worker_env())
    environment = sdk.beta.environments.create(name="py", config={"type": "cloud", "packages": {"pip": ["tinypkg"]}})
    agent = sdk.beta.agents.create(name="py", model="claude-sonnet-4-5", tools=[TOOLSET])
    probe = "python3 -c 'import tinypkg; print(tinypkg.VALUE)'"
    try:
        for _ in range(2):
            model.add(replies.tool_call("bash", {"command": probe}), replies.text("imported"))
            session = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id)
            chat = Conversation(sdk=sdk, session_id=session.id, processes=[worker])
            chat.say("import it")
            assert outputs(chat.wait_idle()) == [("from the layer\nexit code: 0", False)]
        assert index.downloads("tinypkg") == 1
    finally:
        index.stop()
