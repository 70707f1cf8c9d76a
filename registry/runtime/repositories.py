"""`github_repository` resources, cloned by the runtime outside the sandbox: fetched shallow into a
per-worker cache with the token in git's environment only, checked out once per (url, commit), then
copied, token-free, into a root-only staging folder of the session's disk, given to the session's uid
there and renamed into place through descriptors (the workspace is the sandbox's: a folder of it may be
swapped for a link to a host directory at any moment, so the host never writes through its paths).

Every call asks the server for its refs with the session's own token first, so a tree another
session cached is never handed to a session whose token cannot read the repository.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from registry.core.secrets import unseal
from registry.gitcreds.selectors import git_credential_for_url, live_git_credential
from registry.gitcreds.services import DEFAULT_USERNAME, token_of
from registry.sandbox.fsops import chown_tree, exists_beneath, locked, place_tree

CLONE_ERROR = "repository_clone_error"
NOT_FOUND = "repository_not_found_error"
AUTHENTICATION = "repository_authentication_error"
FORBIDDEN = "repository_forbidden_error"
CHECKOUT = "repository_checkout_error"
GIT_TIMEOUT_SECONDS = 600
HEXADECIMAL = re.compile(r"[0-9a-f]{4,64}")
FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# What git prints (in the C locale) for each failure, checked in this order.
STDERR_SIGNS = (
    (NOT_FOUND, ("returned error: 404", "' not found")),
    (
        AUTHENTICATION,
        ("returned error: 401", "authentication failed", "could not read username", "could not read password"),
    ),
    (FORBIDDEN, ("returned error: 403",)),
    (CHECKOUT, ("couldn't find remote ref", "not our ref", "unadvertised object")),
)
LEADS = {
    NOT_FOUND: "Repository {url} was not found, or the token given cannot see it.",
    AUTHENTICATION: "Authentication to {url} failed: the resource's authorization_token, or else the workspace's "
    "git credential for its host, is missing or was refused.",
    FORBIDDEN: "The token given may not read {url}.",
    CHECKOUT: "The requested checkout of {url} does not exist.",
    CLONE_ERROR: "{url} could not be cloned.",
}


class RepositoryError(Exception):
    """A repository that could not be cloned or checked out; `error_type` is the SDK's error type."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def resource_token(*, workspace_id: str, resource: dict[str, Any]) -> str | None:
    """The resource's own token; else its git credential, or (that one archived or never found) the
    workspace's live credential for the repository's host now."""
    sealed = resource.get("sealed_authorization_token")
    if sealed:
        return unseal(sealed, context=resource["id"])
    credential_id = resource.get("git_credential_id")
    credential = live_git_credential(workspace_id=workspace_id, credential_id=credential_id) if credential_id else None
    credential = credential or git_credential_for_url(workspace_id=workspace_id, url=resource["url"])
    return token_of(credential) if credential else None


def materialize(
    *, resource: dict[str, Any], token: str | None, cache_root: Path, place: Placement, owner_uid: int
) -> None:
    """Give the session its own checkout of the resource at `place`, owned by `owner_uid`. Something
    already there is the session's copy from an earlier call (or its own folder), kept as it is."""
    if exists_beneath(place.root, place.relative):
        return
    git = Git(resource["url"], token)
    cache = cache_root / hashlib.sha256(git.url.encode()).hexdigest()[:32]
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with locked(cache / "lock"):
            branch, commit = _resolve(git, _bare(git, cache), resource.get("checkout"))
            tree = _tree(git, cache, commit)
        _hand_over(git, tree, place, branch=branch, owner_uid=owner_uid)
    except OSError as error:
        raise RepositoryError(CLONE_ERROR, f"{git.public_url} could not be checked out: {error}") from None


@dataclass(frozen=True)
class Placement:
    """Where a checkout goes: `relative` below `root` (a folder of the session's disk), built first in
    `staging` (a root-only folder on the same filesystem), so nothing is written where the sandbox can
    point the host elsewhere."""

    root: Path
    relative: str
    staging: Path


class Git:
    """Runs the `git` client for one repository URL: with the runtime's environment (its git
    configuration included) and, for requests to the server, the token as an extra header."""

    def __init__(self, url: str, token: str | None) -> None:
        parts = urlsplit(url)
        self.url = url
        self.public_url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RepositoryError(CLONE_ERROR, f"{self.public_url} is not an https repository URL.")
        self.local_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
        self.remote_env = dict(self.local_env)
        self.secrets: list[str] = []
        if token:
            credentials = base64.b64encode(f"{DEFAULT_USERNAME}:{token}".encode()).decode()
            self.secrets = [token, credentials]
            index = int(self.remote_env.get("GIT_CONFIG_COUNT") or 0)
            self.remote_env["GIT_CONFIG_COUNT"] = str(index + 1)
            self.remote_env[f"GIT_CONFIG_KEY_{index}"] = "http.extraHeader"
            self.remote_env[f"GIT_CONFIG_VALUE_{index}"] = f"Authorization: Basic {credentials}"

    def remote(self, *arguments: str | Path) -> str:
        """A git command that talks to the server."""
        return self._run(arguments, self.remote_env)

    def local(self, *arguments: str | Path) -> str:
        """A git command on this machine's repositories only: no token in its environment."""
        return self._run(arguments, self.local_env)

    def commit_in(self, repository: Path, revision: str) -> str | None:
        """The full id of `revision`'s commit if `repository` holds it."""
        found = subprocess.run(
            ["git", "-C", str(repository), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
            env=self.local_env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
        )  # fmt: skip
        return found.stdout.strip() if found.returncode == 0 else None

    def _run(self, arguments: tuple[str | Path, ...], env: dict[str, str]) -> str:
        with subprocess.Popen(
            ["git", *map(str, arguments)],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        ) as process:  # fmt: skip
            try:
                output, errors = process.communicate(timeout=GIT_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # git's HTTP helper too, which holds the pipes
                process.communicate()
                raise RepositoryError(CLONE_ERROR, f"git timed out on {self.public_url}.") from None
        if process.returncode:
            raise self.error(errors)
        return output

    def error(self, stderr: str) -> RepositoryError:
        """The failure git reported, as an SDK error type and a message without any secret."""
        lowered = stderr.lower()
        error_type = next((kind for kind, signs in STDERR_SIGNS if any(sign in lowered for sign in signs)), CLONE_ERROR)
        detail = next((line for line in reversed(stderr.splitlines()) if line.strip()), "no output")
        for secret in self.secrets:
            detail = detail.replace(secret, "[redacted]")
        detail = self._as_given(detail)
        return RepositoryError(error_type, f"{LEADS[error_type].format(url=self.public_url)} (git: {detail.strip()})")

    def _as_given(self, text: str) -> str:
        """`text` naming the URL the user gave where git named the one its configuration rewrote it to
        (an operator's `insteadOf` mirror), whole or just its origin."""
        rewritten = self._run(("ls-remote", "--get-url", self.url), self.local_env).strip() or self.url
        public = self.public_url
        for seen, given in ((rewritten, public), (self.url, public), (_origin(rewritten), _origin(public))):
            text = text.replace(seen, given)
        return text


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _bare(git: Git, cache: Path) -> Path:
    """The cache's bare repository of the URL, made on first use (gc off: fetched commits have no refs)."""
    bare = cache / "repository.git"
    if not bare.exists():
        making = Path(tempfile.mkdtemp(dir=cache))
        git.local("init", "--quiet", "--bare", making)
        git.local("-C", making, "config", "gc.auto", "0")
        git.local("-C", making, "config", "uploadpack.allowAnySHA1InWant", "true")  # for _tree's fetch
        making.rename(bare)
    return bare


def _resolve(git: Git, bare: Path, checkout: dict[str, Any] | None) -> tuple[str | None, str]:
    """(the branch to be on, or None for a detached commit; the commit), fetched into `bare` if new."""
    if checkout and checkout["type"] == "commit":
        git.remote("ls-remote", git.url, "HEAD")  # the session's own token must read the repository
        return None, _fetch_commit(git, bare, checkout["sha"].lower())
    branch, advertised = _advertised_branch(git, checkout["name"] if checkout else None)
    if git.commit_in(bare, advertised):
        return branch, advertised
    git.remote("-C", bare, "fetch", "--quiet", "--depth", "1", "--no-tags", git.url, f"refs/heads/{branch}")
    return branch, git.commit_in(bare, "FETCH_HEAD") or advertised  # the branch may have moved meanwhile


def _advertised_branch(git: Git, name: str | None) -> tuple[str, str]:
    """The branch (the default one when `name` is None) and its commit, as the server advertises them."""
    wanted = f"refs/heads/{name}" if name else "HEAD"
    listing = git.remote("ls-remote", *(["--symref"] if name is None else []), git.url, wanted)
    for line in listing.splitlines():
        if line.startswith("ref: ") and line.endswith("\tHEAD"):
            name = line.removeprefix("ref: refs/heads/").partition("\t")[0]
        elif line.endswith(f"\t{wanted}") and name:
            return name, line.partition("\t")[0]
    missing = f"no branch {name!r}" if name else "no default branch"
    raise RepositoryError(CHECKOUT, f"{git.public_url} has {missing}.")


def _fetch_commit(git: Git, bare: Path, sha: str) -> str:
    """The full id of commit `sha`: shallow by id where the server allows it, else from a full fetch."""
    if not HEXADECIMAL.fullmatch(sha):
        raise RepositoryError(CHECKOUT, f"{sha!r} is not a commit id.")
    found = git.commit_in(bare, sha)
    if found is None and FULL_SHA.fullmatch(sha):
        with contextlib.suppress(RepositoryError):
            git.remote("-C", bare, "fetch", "--quiet", "--depth", "1", "--no-tags", git.url, sha)
        found = git.commit_in(bare, sha)
    if found is None:
        deepen = ["--unshallow"] if (bare / "shallow").exists() else []
        git.remote("-C", bare, "fetch", "--quiet", *deepen, "--tags", git.url, "+refs/heads/*:refs/heads/*")
        found = git.commit_in(bare, sha)
    if found is None:
        raise RepositoryError(CHECKOUT, f"{git.public_url} has no commit {sha}.")
    return found


def _tree(git: Git, cache: Path, commit: str) -> Path:
    """The cache's checkout of `commit` (a one-commit repository, origin the plain URL), made once."""
    tree = cache / "trees" / commit
    if tree.exists():
        return tree
    making = Path(tempfile.mkdtemp(dir=cache))
    try:
        git.local("init", "--quiet", making)
        source = (cache / "repository.git").as_uri()
        git.local("-C", making, "fetch", "--quiet", "--depth", "1", "--no-tags", source, commit)
        git.local("-C", making, "checkout", "--quiet", "--detach", commit)
        git.local("-C", making, "remote", "add", "origin", git.public_url)
        (making / ".git" / "FETCH_HEAD").unlink()
        tree.parent.mkdir(exist_ok=True)
        making.rename(tree)
    except BaseException:
        shutil.rmtree(making, ignore_errors=True)
        raise
    return tree


def _hand_over(git: Git, tree: Path, place: Placement, *, branch: str | None, owner_uid: int) -> None:
    """Copy the tree into the staging folder, put it on `branch`, give it to `owner_uid` there, then rename
    it into place through descriptors (`fsops.place_tree`: no link on the way is followed)."""
    aside = Path(tempfile.mkdtemp(prefix="repository-", dir=place.staging))
    try:
        copy = aside / "tree"
        shutil.copytree(tree, copy, symlinks=True)
        if branch:
            git.local("-C", copy, "update-ref", f"refs/remotes/origin/{branch}", "HEAD")
            git.local("-C", copy, "checkout", "--quiet", "--track", "-B", branch, f"origin/{branch}")
        chown_tree(copy, owner_uid)
        with contextlib.suppress(FileExistsError):  # the session (or a concurrent call) has a folder there
            place_tree(copy, place.root, place.relative, owner=owner_uid)
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def repositories_prompt(resources: list[dict[str, Any]]) -> str | None:
    """The system prompt's repositories section: each repository's mount path, URL as given and checkout."""
    lines = [
        f"- {resource['mount_path']}: a clone of {resource['url']}, {_checkout_named(resource.get('checkout'))}"
        for resource in resources
        if resource["type"] == "github_repository"
    ]
    if not lines:
        return None
    intro = "These git repositories are cloned in your sandbox (work in them with your tools; git works there):"
    return "\n".join(["# Repositories", intro, *lines])


def _checkout_named(checkout: dict[str, Any] | None) -> str:
    if checkout and checkout["type"] == "commit":
        return f"commit {checkout['sha']} checked out (detached HEAD)"
    if checkout:
        return f"branch {checkout['name']} checked out"
    return "its default branch checked out"
