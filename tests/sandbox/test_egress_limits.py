"""What one sandbox's egress proxy may take of the host: connections past the cap are turned away by the
accepting thread (no thread of their own), the threads stay bounded, and the sandbox fetches again once
its connections close."""

from __future__ import annotations

import socket
import threading

from fakes.waiting import wait_until
from registry.sandbox.backend import SandboxSpec
from tests.support.sandbox_network import refused

IDLE_CONNECTIONS = 400
FETCH = "python3 -c \"import urllib.request as r; print(r.urlopen('{url}', timeout=20).read().decode())\""


def test_connections_past_the_cap_are_turned_away_without_a_thread(backend, loopback_site, settings):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    cap = settings.REGISTRY_SANDBOX_MAX_CONNECTIONS
    url = loopback_site(lambda path: (b"hello from the host", "text/plain")) + "/"
    box = backend.ensure(SandboxSpec(session_id="sesn_cap", workspace_id="wsp"))
    assert box.run(FETCH.format(url=url)).output.strip() == "hello from the host"
    threads_before, turned_away_before = threading.active_count(), refused("too_many_connections")

    idle = [socket.socket(socket.AF_UNIX) for _ in range(IDLE_CONNECTIONS)]
    for connection in idle:
        connection.connect(str(box.proxy.socket_path))
    wait_until(lambda: refused("too_many_connections") == turned_away_before + IDLE_CONNECTIONS - cap)
    grown = threading.active_count() - threads_before

    answers = []
    for connection in idle[cap:]:
        connection.settimeout(5)
        answers.append(connection.recv(100))
    for connection in idle:
        connection.close()
    assert grown <= 2 * cap + 4, f"{grown} threads for {IDLE_CONNECTIONS} idle connections"
    assert all(answer.startswith(b"HTTP/1.1 503 Service Unavailable") for answer in answers)
    wait_until(lambda: threading.active_count() <= threads_before + 4)
    assert box.run(FETCH.format(url=url)).output.strip() == "hello from the host"
