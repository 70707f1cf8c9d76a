"""Keyset pagination: every row exactly once in order, both directions, bad cursors rejected."""

from __future__ import annotations

import pytest

from tests.support.api_errors import assert_error


def make_agents(api, count):
    return [api.post("/v1/agents", {"name": f"a{i}", "model": "m"}, format="json").json()["id"] for i in range(count)]


def walk(api, path, **params):
    seen: list[str] = []
    page = None
    while True:
        query = {**params, **({"page": page} if page else {})}
        body = api.get(path, query).json()
        seen.extend(item["id"] for item in body["data"])
        page = body["next_page"]
        if page is None:
            return seen


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_walks_every_row_once_in_order(api, order):
    created = make_agents(api, 45)
    seen = walk(api, "/v1/agents", limit=20, order=order)
    assert seen == (created if order == "asc" else created[::-1])


def test_default_is_newest_first_twenty(api):
    created = make_agents(api, 25)
    body = api.get("/v1/agents").json()
    assert [item["id"] for item in body["data"]] == created[::-1][:20]
    assert body["next_page"]


def test_last_page_has_no_next(api):
    make_agents(api, 3)
    assert api.get("/v1/agents", {"limit": 3}).json()["next_page"] is None


@pytest.mark.parametrize("limit", ["0", "101", "abc", "-1"])
def test_limit_out_of_bounds_is_400(api, limit):
    assert_error(api.get("/v1/agents", {"limit": limit}), 400, "invalid_request_error", "limit")


@pytest.mark.parametrize("page", ["garbage!", "eyJ4IjoxfQ", "WyJuZXh0IiwgWzFdXQ"])
def test_bad_cursor_is_400(api, page):
    assert_error(api.get("/v1/agents", {"page": page}), 400, "invalid_request_error", "page")


def test_bad_order_is_400(api):
    assert_error(api.get("/v1/agents", {"order": "sideways"}), 400, "invalid_request_error", "order")


def test_archived_hidden_unless_asked(api):
    kept, archived = make_agents(api, 2)
    api.post(f"/v1/agents/{archived}/archive")
    assert [a["id"] for a in api.get("/v1/agents").json()["data"]] == [kept]
    assert {a["id"] for a in api.get("/v1/agents", {"include_archived": "true"}).json()["data"]} == {kept, archived}
    assert_error(api.get("/v1/agents", {"include_archived": "maybe"}), 400, "invalid_request_error")


def test_created_at_filters(api):
    first, second = make_agents(api, 2)
    second_created = api.get(f"/v1/agents/{second}").json()["created_at"]
    assert [a["id"] for a in api.get("/v1/agents", {"created_at_gte": second_created}).json()["data"]] == [second]
    assert first in [a["id"] for a in api.get("/v1/agents", {"created_at_lte": second_created}).json()["data"]]
    assert_error(api.get("/v1/agents", {"created_at_gte": "yesterday"}), 400, "invalid_request_error")


def test_created_at_filters_read_the_reference_clients_bracketed_names(api):
    """The reference client sends `created_at[gte]`; it once went unread, so every agent came back."""
    first, second = make_agents(api, 2)
    second_created = api.get(f"/v1/agents/{second}").json()["created_at"]
    assert [a["id"] for a in api.get("/v1/agents", {"created_at[gte]": second_created}).json()["data"]] == [second]
    listed = [s["id"] for s in api.get("/v1/sessions", {"created_at[gt]": second_created}).json()["data"]]
    assert listed == []
    first_created = api.get(f"/v1/agents/{first}").json()["created_at"]
    assert second not in [a["id"] for a in api.get("/v1/agents", {"created_at[lte]": first_created}).json()["data"]]
    assert_error(api.get("/v1/agents", {"created_at[gte]": "yesterday"}), 400, "invalid_request_error")


def test_created_at_filters_take_any_offset_python_reads_to_utc(api):
    """PostgreSQL refuses offsets past ±15:59 that ISO 8601 and Python allow (a fuzzer's find: a 500)."""
    [agent] = make_agents(api, 1)
    created = api.get(f"/v1/agents/{agent}").json()["created_at"]
    assert [a["id"] for a in api.get("/v1/agents", {"created_at_gte": created}).json()["data"]] == [agent]
    far_offset = {"created_at_gte": "3252-02-17T02:49:16+20:23", "created_at_lte": "0016-01-01T00:00:01Z"}
    answer = api.get("/v1/agents", far_offset)
    assert answer.status_code == 200 and answer.json()["data"] == []
    sessions = api.get("/v1/sessions", {"created_at_gte": "2000-01-01T00:00:00-23:59"})
    assert sessions.status_code == 200 and sessions.json()["data"] == []
    assert_error(api.get("/v1/agents", {"created_at_lte": "0001-01-01T00:00:00+01:00"}), 400, "invalid_request_error")
