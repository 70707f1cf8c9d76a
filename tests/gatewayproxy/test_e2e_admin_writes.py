"""Admin-plane writes on a database-backed gateway: upserts and removals that validate the whole document,
commit, and swap the snapshot; invalid writes change nothing; traffic never fails because of a change."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from gatewayproxy.store import selectors
from tests.support.gateway.documents import destination
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.store import STORE_ONLY_DATABASE, database_gateway, import_document, provider_document
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = [pytest.mark.e2e, STORE_ONLY_DATABASE]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def to(destination: str, **match: str) -> dict[str, Any]:
    return {"match": match, "strategy": {"mode": "fallback", "targets": [{"destination": destination}]}}


@pytest.fixture
def gateway(
    gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider, secondary: FakeProvider
) -> GatewayThread:
    import_document(tmp_path, initial_document(primary, secondary))
    return gateway_factory.around(database_gateway())


def initial_document(primary: FakeProvider, secondary: FakeProvider) -> dict[str, Any]:
    document = provider_document(primary)
    document["destinations"]["two"] = destination("vendor_a", f"{secondary.url}/v1")
    document["routes"] = [{"name": "all", **to("one", model="m")}]
    return document


def served_by(gateway: GatewayThread, model: str = "m") -> str:
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json={**CHAT, "model": model})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["choices"][0]["message"]["content"])


def test_put_and_delete_take_effect_at_once(gateway: GatewayThread) -> None:
    admin, version = gateway.admin_url, selectors.config_version()
    first = httpx.put(f"{admin}/admin/v1/routes/special", json=to("two", model="special"))
    assert first.status_code == 200
    assert first.json() == {"name": "special", **to("two", model="special")}
    assert served_by(gateway, "special") == "Hello from secondary"
    routes = [route["name"] for route in httpx.get(f"{admin}/admin/v1/routes").json()["data"]]
    assert routes == ["all", "special"]
    assert httpx.delete(f"{admin}/admin/v1/routes/special").status_code == 204
    gone = httpx.post(f"{gateway.url}/v1/chat/completions", json={**CHAT, "model": "special"})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "no_route"
    assert httpx.delete(f"{admin}/admin/v1/routes/special").json()["error"]["code"] == "not_found"
    assert selectors.config_version() == version + 2


@pytest.mark.parametrize(
    ("method", "path", "body", "problem"),
    [
        (
            "PUT",
            "/admin/v1/routes/bad",
            to("nowhere"),
            "routes[1].strategy.targets[0].destination: destination 'nowhere' is not declared",
        ),
        ("PUT", "/admin/v1/destinations/one", {"kind": "vendor_a"}, "destinations.one.credentials: Field required"),
        ("PUT", "/admin/v1/vaults/v", {"resolver": "static_file", "file": "/no/such.yaml"}, "vaults[0].file"),
        ("PUT", "/admin/v1/rate_limits/r", {"qpm": 0}, "rate_limits[0].qpm: Input should be greater than 0"),
        ("PUT", "/admin/v1/config/plugins/p", {"slot": "cache", "kind": "nope"}, "unsupported kind 'nope'"),
        ("PUT", "/admin/v1/config/plugins/p", {"kind": "stdout"}, "plugins.slot"),
        ("PUT", "/admin/v1/routes/r", ["not", "an", "object"], "the body must be a JSON object"),
        ("DELETE", "/admin/v1/destinations/one", None, "destinations.one: still referenced by route 'all'"),
    ],
)
def test_an_invalid_write_is_400_and_changes_nothing(
    gateway: GatewayThread, method: str, path: str, body: Any, problem: str
) -> None:
    before_state = gateway.gateway.runtime.state if gateway.gateway.runtime else None
    version = selectors.config_version()
    before = httpx.get(f"{gateway.admin_url}/admin/v1/config").json()
    answer = httpx.request(method, f"{gateway.admin_url}{path}", json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and error["type"] == "invalid_request_error"
    assert any(problem in item for item in error["problems"]), error["problems"]
    assert httpx.get(f"{gateway.admin_url}/admin/v1/config").json() == before
    assert gateway.gateway.runtime is not None and gateway.gateway.runtime.state is before_state
    assert selectors.config_version() == version


def test_plugins_name_their_slot(gateway: GatewayThread) -> None:
    url = f"{gateway.admin_url}/admin/v1/config/plugins/audit"
    written = httpx.put(url, json={"slot": "audit_sinks", "kind": "noop"})
    assert written.status_code == 200 and written.json() == {"slot": "audit_sinks", "name": "audit", "kind": "noop"}
    plugins = httpx.get(f"{gateway.admin_url}/admin/v1/health/plugins").json()["plugins"]
    assert {"slot": "audit_sinks", "name": "audit", "kind": "noop", "status": "configured"} in plugins
    assert httpx.delete(url).status_code == 204
    assert httpx.get(f"{gateway.admin_url}/admin/v1/health/plugins").json()["total"] == 0
    assert httpx.delete(url).status_code == 404


def test_concurrent_writes_are_serialized(gateway: GatewayThread) -> None:
    names, version = [f"r{index}" for index in range(8)], selectors.config_version()
    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(
            pool.map(
                lambda name: httpx.put(f"{gateway.admin_url}/admin/v1/routes/{name}", json=to("two", model=name)), names
            )
        )
    assert [answer.status_code for answer in answers] == [200] * len(names)
    assert selectors.config_version() == version + len(names)
    served = [route["name"] for route in httpx.get(f"{gateway.admin_url}/admin/v1/routes").json()["data"]]
    assert sorted(served) == sorted(["all", *names])


def test_writes_under_load_fail_no_request(gateway: GatewayThread) -> None:
    statuses: list[int] = []
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                statuses.append(client.post(f"{gateway.url}/v1/chat/completions", json=CHAT).status_code)

    clients = [threading.Thread(target=traffic) for _ in range(4)]
    for client in clients:
        client.start()
    try:
        for round_number in range(8):
            target = "two" if round_number % 2 else "one"
            routes = f"{gateway.admin_url}/admin/v1/routes"
            assert httpx.put(f"{routes}/all", json=to(target, model="m")).status_code == 200
            assert httpx.put(f"{routes}/extra", json=to(target, model="x")).status_code == 200
            assert httpx.delete(f"{routes}/extra").status_code == 204
    finally:
        stop.set()
        for client in clients:
            client.join()
    assert len(statuses) > 20 and set(statuses) == {200}


def test_a_request_in_flight_finishes_on_its_snapshot(gateway: GatewayThread, primary: FakeProvider) -> None:
    runtime = gateway.gateway.runtime
    assert runtime is not None
    old = runtime.state
    primary.reset("delay:1")
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(served_by, gateway)
        wait_until(lambda: runtime.in_flight.count(old), timeout=5, what="the request in flight on the old snapshot")
        assert runtime.in_flight.count(old) == 1
        assert httpx.put(f"{gateway.admin_url}/admin/v1/routes/all", json=to("two", model="m")).status_code == 200
        assert runtime.state is not old and served_by(gateway) == "Hello from secondary"
        assert slow.result(timeout=10) == "Hello from primary"
    assert runtime.in_flight.count(old) == 0
