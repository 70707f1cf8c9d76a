"""A git server for tests and benchmarks: `git http-backend` as CGI behind a loopback HTTP server that demands a
token (HTTP Basic with the token as password, GitHub's way), answers 403 for forbidden repositories and 404 for
missing ones, and records each request, so a test can tell ref discovery from a pack fetch.
"""

from __future__ import annotations

import base64
import gzip
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fakes.http_server import LoopbackHttpServer, QuietHandler

SERVICE_SUFFIXES = ("/info/refs", "/git-upload-pack", "/git-receive-pack")


def git_env(home: Path) -> dict[str, str]:
    """An environment for the server's own git: no system or user configuration, a fixed author."""
    return {
        "PATH": os.environ["PATH"], "HOME": str(home), "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.com",
        "GIT_COMMITTER_NAME": "Test Author", "GIT_COMMITTER_EMAIL": "author@example.com",
    }  # fmt: skip


def run_git(env: dict[str, str], *arguments: str | Path) -> str:
    return subprocess.run(
        ["git", *map(str, arguments)], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass(frozen=True)
class GitRequest:
    method: str
    path: str
    query: str
    fetches: bool  # the request asked for objects (a `want` line): more than ref discovery


class Repository:
    """A bare repository the server serves, and a work tree beside it where tests make commits."""

    def __init__(self, bare: Path, work: Path, env: dict[str, str]) -> None:
        self.bare = bare
        self.work = work
        self.env = env

    def commit(self, files: dict[str, str], *, message: str = "change", branch: str = "main") -> str:
        """Write `files` on `branch` (made from the current commit if new), commit, push; the commit's id."""
        known = run_git(self.env, "-C", self.work, "branch", "--list", branch)
        run_git(self.env, "-C", self.work, "switch", "--quiet", *([] if known else ["-c"]), branch)
        for name, content in files.items():
            (self.work / name).parent.mkdir(parents=True, exist_ok=True)
            (self.work / name).write_text(content)
        run_git(self.env, "-C", self.work, "add", "--all")
        run_git(self.env, "-C", self.work, "commit", "--quiet", "--allow-empty", "-m", message)
        run_git(self.env, "-C", self.work, "push", "--quiet", self.bare, branch)
        return run_git(self.env, "-C", self.work, "rev-parse", "HEAD")


class GitServer(LoopbackHttpServer):
    """Serves the bare repositories under its root at `<url>/<name>.git` (or without `.git`, as GitHub
    does) to whoever sends `token` as the Basic password (to anyone when `token` is None, as a public
    repository is); `forbidden` names get a 403. Serving once made."""

    def __init__(self, token: str | None) -> None:
        super().__init__(GitHandler)
        self.token = token
        self.root = Path(tempfile.mkdtemp(prefix="git-server-"))
        self.env = git_env(self.root)
        self.forbidden: set[str] = set()
        self.requests: list[GitRequest] = []
        self.start()

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}.git"

    def create_repository(self, name: str, *, sha_wants: bool = True) -> Repository:
        """An empty repository whose default branch is `main`; `sha_wants` lets clients fetch any
        reachable commit by id (as GitHub does), else only advertised refs."""
        bare = self.root / f"{name}.git"
        run_git(self.env, "init", "--quiet", "--bare", "--initial-branch=main", bare)
        run_git(self.env, "-C", bare, "config", "uploadpack.allowReachableSHA1InWant", str(sha_wants).lower())
        work = self.root / "work" / name
        run_git(self.env, "init", "--quiet", "--initial-branch=main", work)
        return Repository(bare, work, self.env)

    def fetches(self) -> int:
        return sum(request.fetches for request in self.requests)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- one request -------------------------------------------------------------------------
    def answer(self, handler: QuietHandler) -> None:
        path, _, query = handler.path.partition("?")
        body = _request_body(handler)
        plain = gzip.decompress(body) if handler.headers.get("Content-Encoding") == "gzip" else body
        self.requests.append(GitRequest(handler.command, path, query, b"want " in plain))
        if not self._authorized(handler.headers.get("Authorization", "")):
            return handler.reply(401, b"token required\n", {"WWW-Authenticate": 'Basic realm="git"'})
        suffix = next((suffix for suffix in SERVICE_SUFFIXES if path.endswith(suffix)), None)
        name = path[: -len(suffix)].strip("/").removesuffix(".git") if suffix else ""
        if name in self.forbidden:
            return handler.reply(403, b"forbidden\n")
        if not suffix or not (self.root / f"{name}.git").is_dir():
            return handler.reply(404, b"not found\n")
        self._backend(handler, f"/{name}.git{suffix}", query, body)

    def _authorized(self, header: str) -> bool:
        if self.token is None:
            return True
        scheme, _, encoded = header.partition(" ")
        if scheme != "Basic":
            return False
        try:
            password = base64.b64decode(encoded).decode().partition(":")[2]
        except ValueError:
            return False
        return password == self.token

    def _backend(self, handler: QuietHandler, path_info: str, query: str, body: bytes) -> None:
        """Run `git http-backend` as a CGI program and relay what it prints."""
        env = {
            **self.env, "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path_info, "QUERY_STRING": query, "REQUEST_METHOD": handler.command,
            "CONTENT_TYPE": handler.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "x-access-token", "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": handler.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": handler.headers.get("Content-Encoding", ""),
        }  # fmt: skip
        output = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        separator = b"\r\n\r\n" if b"\r\n\r\n" in output else b"\n\n"
        head, _, payload = output.partition(separator)
        headers = dict(line.split(": ", 1) for line in head.decode().splitlines() if ": " in line)
        status = int(headers.pop("Status", "200").split()[0])
        handler.reply(status, payload, headers)


class GitHandler(QuietHandler):
    """Hands every request to the `GitServer`."""

    def do_GET(self) -> None:
        self.owner.answer(self)

    def do_POST(self) -> None:
        self.owner.answer(self)


def _request_body(handler: QuietHandler) -> bytes:
    """The request's body, de-chunked (git streams large requests with chunked transfer encoding)."""
    if handler.headers.get("Transfer-Encoding", "").lower() != "chunked":
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    chunks = []
    while size := int(handler.rfile.readline().split(b";")[0], 16):
        chunks.append(handler.rfile.read(size))
        handler.rfile.readline()
    while handler.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
        pass
    return b"".join(chunks)
