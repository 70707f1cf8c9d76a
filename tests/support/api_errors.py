"""Assertions on the registry API's error envelope, shared by the registry and sandbox tests."""

from __future__ import annotations

from typing import Any


def assert_error(response: Any, status: int, error_type: str, mentions: str | None = None) -> dict[str, Any]:
    """The response is an error in the envelope, with a request id equal to its header."""
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["request_id"].startswith("req_")
    assert body["request_id"] == response["request-id"]
    if mentions is not None:
        assert mentions in body["error"]["message"], body["error"]["message"]
    return body


def assert_not_found(client: Any, *paths: str) -> None:
    """Every one of `paths` is a 404 `not_found_error` to `client` (another workspace's objects do not exist)."""
    for path in paths:
        assert_error(client.get(path), 404, "not_found_error")
