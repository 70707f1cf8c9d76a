"""Repositories cloned by the runtime outside the sandbox, from a git server on loopback that demands
the token: checkouts, the SDK's error types, the per-worker cache, the runtime's git configuration
(`insteadOf` mirrors), tokens from git credentials, and no token anywhere the sandbox can see.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakes.git_server import GitServer, Repository
from registry.core.secrets import seal
from registry.gitcreds.services import git_credential_create
from registry.runtime.repositories import Placement, RepositoryError, materialize, resource_token
from registry.sandbox.backend import BwrapBackend, Limits, Mount, SandboxSpec
from registry.workspaces.services import workspace_create
from tests.support.sandbox_attacks import RACE_SECONDS, start_swapper
from tests.support.sandbox_roots import traversable_root

TOKEN = "ghs_" + secrets.token_hex(16)
OWNER_UID = 201_234
NAMES = itertools.count()


@dataclass(frozen=True)
class Served:
    """A served repository: `main` has two commits (`first`, `second`), `feature` one more on top."""

    url: str
    repository: Repository
    first: str
    second: str
    feature: str


@pytest.fixture(scope="module")
def server() -> Iterator[GitServer]:
    made = GitServer(TOKEN)
    yield made
    made.stop()


@pytest.fixture(autouse=True)
def git_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runtime's git configuration: an empty global file of the test's own, no system file."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return config


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def sessions() -> Iterator[Path]:
    """Where sessions' copies go: under /tmp, so a sandbox's uid can traverse to them."""
    with traversable_root("repositories-") as root:
        yield root


def serve(server: GitServer, *, sha_wants: bool = True) -> Served:
    name = f"org/repo{next(NAMES)}"
    repository = server.create_repository(name, sha_wants=sha_wants)
    first = repository.commit({"README.md": "first\n"}, message="first")
    second = repository.commit({"README.md": "second\n", "src/app.py": "print('hi')\n"}, message="second")
    feature = repository.commit({"feature.txt": "feature\n"}, message="feature", branch="feature")
    return Served(server.url_of(name), repository, first, second, feature)


def fetch(
    served: Served | str,
    destination: Path,
    cache: Path,
    checkout: dict[str, str] | None = None,
    token: str | None = TOKEN,
) -> Path:
    url = served if isinstance(served, str) else served.url
    resource = {"type": "github_repository", "url": url, "checkout": checkout}
    staging = destination.parent / ".staging"
    staging.mkdir(mode=0o700, parents=True, exist_ok=True)
    place = Placement(destination.parent, destination.name, staging)
    materialize(resource=resource, token=token, cache_root=cache, place=place, owner_uid=OWNER_UID)
    return destination


def failure(served: Served | str, destination: Path, cache: Path, **options: Any) -> RepositoryError:
    with pytest.raises(RepositoryError) as raised:
        fetch(served, destination, cache, **options)
    assert not destination.exists()
    return raised.value


def git(directory: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(directory), *arguments], check=True, capture_output=True, text=True
    ).stdout.strip()


def secrets_of(token: str) -> list[bytes]:
    return [token.encode(), base64.b64encode(f"x-access-token:{token}".encode())]


# -- checkouts ------------------------------------------------------------------------------------
def test_default_branch_is_cloned_shallow_on_its_branch(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    copy = fetch(served, sessions / "repo", cache)
    assert (copy / "README.md").read_text() == "second\n"
    assert (copy / "src" / "app.py").exists() and not (copy / "feature.txt").exists()
    assert git(copy, "rev-parse", "HEAD") == served.second
    assert git(copy, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(copy, "rev-parse", "--abbrev-ref", "main@{upstream}") == "origin/main"
    assert git(copy, "rev-list", "--count", "HEAD") == "1"  # shallow: the older commit was not fetched
    assert git(copy, "remote", "get-url", "origin") == served.url
    assert git(copy, "status", "--porcelain") == ""


def test_branch_checkout(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    copy = fetch(served, sessions / "repo", cache, {"type": "branch", "name": "feature"})
    assert (copy / "feature.txt").read_text() == "feature\n"
    assert git(copy, "rev-parse", "HEAD") == served.feature
    assert git(copy, "symbolic-ref", "HEAD") == "refs/heads/feature"


def test_commit_checkout_of_an_older_commit(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    copy = fetch(served, sessions / "repo", cache, {"type": "commit", "sha": served.first})
    assert (copy / "README.md").read_text() == "first\n"
    assert not (copy / "src").exists()
    assert git(copy, "rev-parse", "HEAD") == served.first
    assert (copy / ".git" / "HEAD").read_text().strip() == served.first  # detached
    assert git(copy, "rev-list", "--count", "HEAD") == "1"


def test_commit_checkout_when_the_server_refuses_ids_falls_back_to_a_full_fetch(
    server: GitServer, cache: Path, sessions: Path
) -> None:
    served = serve(server, sha_wants=False)
    copy = fetch(served, sessions / "repo", cache, {"type": "commit", "sha": served.first})
    assert (copy / "README.md").read_text() == "first\n"
    assert git(copy, "rev-parse", "HEAD") == served.first


def test_abbreviated_commit_id(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    copy = fetch(served, sessions / "repo", cache, {"type": "commit", "sha": served.first[:10].upper()})
    assert git(copy, "rev-parse", "HEAD") == served.first


# -- failures -------------------------------------------------------------------------------------
def test_wrong_or_missing_token_is_an_authentication_error(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    wrong = "ghs_" + secrets.token_hex(16)
    error = failure(served, sessions / "repo", cache, token=wrong)
    assert error.error_type == "repository_authentication_error"
    assert served.url in error.message
    assert not any(secret.decode() in error.message for secret in secrets_of(wrong))
    assert failure(served, sessions / "repo", cache, token=None).error_type == "repository_authentication_error"


def test_missing_repository_is_not_found(server: GitServer, cache: Path, sessions: Path) -> None:
    error = failure(server.url_of("org/no-such-repo"), sessions / "repo", cache)
    assert error.error_type == "repository_not_found_error"
    assert TOKEN not in error.message


def test_forbidden_repository(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    server.forbidden.add(served.url.removeprefix(server.url + "/").removesuffix(".git"))
    assert failure(served, sessions / "repo", cache).error_type == "repository_forbidden_error"


def test_missing_branch_or_commit_is_a_checkout_error(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    missing_branch = failure(served, sessions / "repo", cache, checkout={"type": "branch", "name": "no-such-branch"})
    assert missing_branch.error_type == "repository_checkout_error"
    assert "no-such-branch" in missing_branch.message
    missing_commit = failure(served, sessions / "repo", cache, checkout={"type": "commit", "sha": "ab" * 20})
    assert missing_commit.error_type == "repository_checkout_error"
    assert "ab" * 20 in missing_commit.message
    # The repository stays usable after failed checkouts.
    assert git(fetch(served, sessions / "repo", cache), "rev-parse", "HEAD") == served.second


def test_a_url_that_is_not_http_is_refused_before_git_runs(cache: Path, sessions: Path) -> None:
    error = failure("ext::sh -c touch% /tmp/pwned", sessions / "repo", cache)
    assert error.error_type == "repository_clone_error"


# -- the token stays outside ------------------------------------------------------------------------
def test_the_copy_holds_no_token_and_belongs_to_the_session(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    copy = fetch(served, sessions / "repo", cache)
    config = (copy / ".git" / "config").read_text().lower()
    assert "extraheader" not in config and "credential" not in config and "authorization" not in config
    paths = [copy, *copy.rglob("*")]
    assert len(paths) > 10
    for path in paths:
        assert path.lstat().st_uid == OWNER_UID and path.lstat().st_gid == OWNER_UID, path
        if path.is_file() and not path.is_symlink():
            content = path.read_bytes()
            assert not any(secret in content for secret in secrets_of(TOKEN)), path


def test_inside_the_sandbox_the_repository_is_writable_and_the_token_is_nowhere(
    server: GitServer, cache: Path, sessions: Path
) -> None:
    served = serve(server)
    session_id = "sesn_repositories_" + secrets.token_hex(4)
    backend = BwrapBackend(sessions, Limits(memory_mb=1024, pids=64, workspace_mb=64, output_limit=20000,
                                            command_timeout_ms=30_000))  # fmt: skip
    place = backend.place(session_id)
    materialize(
        resource={"type": "github_repository", "url": served.url, "checkout": None}, token=TOKEN, cache_root=cache,
        place=Placement(place.disk.mounts, "repo", place.disk.staging), owner_uid=place.uid,
    )  # fmt: skip
    mount = Mount(place.disk.mounts / "repo", "/workspace/repo", read_only=False)
    sandbox = backend.ensure(SandboxSpec(session_id=session_id, workspace_id="wsp_test", mounts=(mount,)))
    try:
        edited = sandbox.run(
            "cd /workspace/repo && echo more >> README.md && git add README.md && "
            "git -c user.name=agent -c user.email=agent@example.com commit -qm edit && git log --format=%s"
        )
        assert edited.exit_code == 0, edited.output
        assert edited.output.split() == ["edit", "second"]
        environment = sandbox.run("env")
        assert environment.exit_code == 0 and "HOME=/workspace" in environment.output
        assert not any(secret.decode() in environment.output for secret in secrets_of(TOKEN))
        for secret in secrets_of(TOKEN):
            searched = sandbox.run(f"grep -r -l -F -e '{secret.decode()}' /workspace; echo status=$?")
            assert searched.output.strip().endswith("status=1"), searched.output  # 1: searched, nothing found
        listed = sandbox.run("grep -r -c -F -e second /workspace/repo/README.md")
        assert listed.output.strip() == "1"  # the same search does find what is there
    finally:
        backend.destroy(session_id)


def test_a_checkout_is_never_placed_through_a_folder_the_sandbox_swaps_for_a_link(
    server: GitServer, cache: Path, sessions: Path, host_secret: tuple[Path, str]
) -> None:
    """The session's folder on the way to the checkout flips between a folder and a link to a host folder
    (`renameat2(RENAME_EXCHANGE)` in a loop); the host's naive copy by path lands in the host folder,
    the runtime's placement never does."""
    folder, _ = host_secret
    served = serve(server)
    source = fetch(served, sessions / "source", cache)
    backend = BwrapBackend(sessions / "root", Limits(memory_mb=1024, pids=64, workspace_mb=64, output_limit=20000,
                                                     command_timeout_ms=30_000))  # fmt: skip
    box = backend.ensure(SandboxSpec(session_id="sesn_clone_race", workspace_id="wsp_test"))
    try:
        start_swapper(box, str(folder), under="/workspace/sub")
        naive_wins = escapes = rounds = 0
        deadline = time.monotonic() + RACE_SECONDS
        while (naive_wins == 0 or rounds < 5) and time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # what the runtime used to do: copy by path, as root
                shutil.copytree(source, box.workspace / "sub" / "d0" / "naive", symlinks=True)
            naive_wins += (folder / "naive").exists()
            shutil.rmtree(folder / "naive", ignore_errors=True)
            resource = {"type": "github_repository", "url": served.url, "checkout": None}
            with contextlib.suppress(RepositoryError):  # a link met on the way is refused, never followed
                materialize(resource=resource, token=TOKEN, cache_root=cache, owner_uid=box.uid,
                            place=Placement(box.workspace, "sub/d0/repo", box.disk.staging))  # fmt: skip
            escapes += sorted(path.name for path in folder.iterdir()) != ["secret.txt"]
            box.run("rm -rf /workspace/sub/*/repo /workspace/sub/*/naive")
            rounds += 1
        assert naive_wins > 0, f"the swap never won against the naive copy in {rounds} rounds"
        assert escapes == 0, f"{escapes} of {rounds} checkouts were written into the host folder"
    finally:
        backend.destroy("sesn_clone_race")


# -- the cache --------------------------------------------------------------------------------------
def test_a_cached_commit_is_not_fetched_again_but_access_is_checked_each_time(
    server: GitServer, cache: Path, sessions: Path
) -> None:
    """A second session of the same (url, commit) costs ref discovery only (with its own token, so a
    cached tree never reaches a session whose token cannot read the repository); no pack is fetched."""
    served = serve(server)
    for checkout in ({"type": "commit", "sha": served.first}, {"type": "branch", "name": "feature"}, None):
        fetch(served, sessions / "first", cache, checkout)
        requests, fetches = len(server.requests), server.fetches()
        again = fetch(served, sessions / "second", cache, checkout)
        assert server.fetches() == fetches
        assert 0 < len(server.requests) - requests <= 2
        assert git(again, "rev-parse", "HEAD") == git(sessions / "first", "rev-parse", "HEAD")
        denied = failure(served, sessions / "third", cache, checkout=checkout, token="wrong")
        assert denied.error_type == "repository_authentication_error"
        shutil.rmtree(sessions / "first")
        shutil.rmtree(sessions / "second")


def test_an_existing_copy_is_kept_with_its_changes(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    copy = fetch(served, sessions / "repo", cache)
    (copy / "README.md").write_text("edited by the session\n")
    requests = len(server.requests)
    fetch(served, copy, cache)
    assert (copy / "README.md").read_text() == "edited by the session\n"
    assert len(server.requests) == requests


def test_concurrent_sessions_share_one_fetch(server: GitServer, cache: Path, sessions: Path) -> None:
    served = serve(server)
    errors: list[BaseException] = []

    def clone(index: int) -> None:
        try:
            fetch(served, sessions / f"repo{index}", cache, {"type": "branch", "name": "feature"})
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=clone, args=(index,)) for index in range(6)]
    fetches = server.fetches()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert server.fetches() == fetches + 1
    assert {git(sessions / f"repo{index}", "rev-parse", "HEAD") for index in range(6)} == {served.feature}


# -- the runtime's git configuration and credentials ------------------------------------------------
def test_an_operator_mirror_by_insteadof_is_honoured(
    server: GitServer, cache: Path, sessions: Path, git_config: Path
) -> None:
    served = serve(server)
    git_config.write_text(f'[url "{server.url}/"]\n\tinsteadOf = https://github.example/\n')
    name = served.url.removeprefix(server.url + "/").removesuffix(".git")
    copy = fetch(f"https://github.example/{name}", sessions / "repo", cache)
    assert git(copy, "rev-parse", "HEAD") == served.second
    assert (copy / ".git" / "config").read_text().count(f"https://github.example/{name}") == 1
    assert server.url not in (copy / ".git" / "config").read_text()


@pytest.mark.django_db
def test_the_token_comes_from_the_resource_else_the_workspace_git_credential(
    server: GitServer, cache: Path, sessions: Path, git_config: Path
) -> None:
    served = serve(server)
    git_config.write_text(f'[url "{server.url}/"]\n\tinsteadOf = https://github.example/\n')
    url = served.url.replace(server.url, "https://github.example")
    workspace, _ = workspace_create(name="repositories")
    credential = git_credential_create(workspace=workspace, values={"host": "github.example", "token": TOKEN})
    from_credential = {"id": "sesrsc_1", "type": "github_repository", "url": url, "git_credential_id": credential.id}
    token = resource_token(workspace_id=workspace.pk, resource=from_credential)
    assert token == TOKEN
    fetch(url, sessions / "repo", cache, token=token)
    assert git(sessions / "repo", "rev-parse", "HEAD") == served.second
    # No credential named (one added after the resource): the workspace's credential for the host.
    assert resource_token(workspace_id=workspace.pk, resource={**from_credential, "git_credential_id": None}) == TOKEN
    own = {**from_credential, "sealed_authorization_token": seal("resource-token", context="sesrsc_1")}
    assert resource_token(workspace_id=workspace.pk, resource=own) == "resource-token"
    other, _ = workspace_create(name="another")
    assert resource_token(workspace_id=other.pk, resource=from_credential) is None
