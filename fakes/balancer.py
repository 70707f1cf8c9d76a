"""A real load balancer for multi-process tests and benchmarks: Debian's nginx, started in the foreground
on a generated config listening on the pools' loopback ports, stopped when the block ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fakes.waiting import wait_until


@dataclass(frozen=True)
class Pool:
    """One balanced service: its name, the port the balancer listens on, and the `host:port` of each replica.

    `retry_posts` lets the balancer send a request that failed to connect or lost its replica before any
    answer to the next replica, POSTs included (nginx's `non_idempotent`): the registry's clients send an
    Idempotency-Key, and a model call that never reached a provider is safe to send again.
    """

    name: str
    port: int
    replicas: tuple[str, ...]
    retry_posts: bool = True
    read_timeout: str = "1h"  # session event streams stay open; keep-alive comments flow every 15 s


def nginx_config(prefix: Path, pools: list[Pool], *, worker_processes: int = 1) -> str:
    """The whole nginx.conf: one `upstream` and one `server` per pool, no buffering (SSE passes at once),
    the replica of each answer named in `x-upstream`."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # the scratch directories are private to this user
    blocks = []
    for pool in pools:
        servers = "".join(f"        server {replica} max_fails=1 fail_timeout=5s;\n" for replica in pool.replicas)
        retries = "error timeout non_idempotent" if pool.retry_posts else "error timeout"
        blocks.append(
            f"""
    upstream {pool.name} {{
{servers}        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{pool.port} backlog=4096;
        client_max_body_size 101m;
        location / {{
            proxy_pass http://{pool.name};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_buffering off;
            proxy_read_timeout {pool.read_timeout};
            proxy_connect_timeout 2s;
            proxy_next_upstream {retries};
            proxy_next_upstream_tries {len(pool.replicas)};
            add_header x-upstream $upstream_addr always;
        }}
    }}"""
        )
    temp = "\n".join(
        f"    {kind}_temp_path {prefix}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}worker_processes {worker_processes};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
{temp}
{"".join(blocks)}
}}
"""


def nginx_binary() -> str:
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if binary is None:
        raise RuntimeError("nginx is not installed (make pytest installs Debian's nginx-light)")
    return binary


@contextlib.contextmanager
def nginx(pools: list[Pool], *, worker_processes: int = 1) -> Iterator[subprocess.Popen[bytes]]:
    """nginx in the foreground balancing `pools`; yields its process once every pool's port accepts."""
    prefix = Path(tempfile.mkdtemp(prefix="fleet-nginx-"))
    config = prefix / "nginx.conf"
    config.write_text(nginx_config(prefix, pools, worker_processes=worker_processes))
    command = [nginx_binary(), "-p", str(prefix), "-e", str(prefix / "error.log"), "-c", str(config)]
    process = subprocess.Popen([*command, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for pool in pools:
            _wait_accepting(pool.port, process, prefix)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # nginx's fast shutdown
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(prefix, ignore_errors=True)


def _wait_accepting(port: int, process: subprocess.Popen[bytes], prefix: Path) -> None:
    def accepting() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited with {process.returncode}:\n{(prefix / 'error.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return False
        return True

    wait_until(accepting, timeout=10, what=f"nginx listening on {port}")
