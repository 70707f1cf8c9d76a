"""`web_fetch` (inside the sandbox, through its proxy and policy; HTML as markdown) and `web_search`
(the operator's SearXNG-compatible endpoint), against servers on loopback."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from registry.sandbox.backend import SandboxSpec
from registry.sandbox.egress import NetworkPolicy
from registry.sandbox.toolset import offered_tools, run_tool

PAGE = b"<html><body><h1>Release notes</h1><p>Version <b>2</b> is out.</p>" + b"<p>filler</p>" * 200 + b"</body></html>"


def answer(path: str) -> tuple[bytes, str]:
    if path.startswith("/search"):
        query = parse_qs(urlsplit(path).query)
        results = [
            {"url": f"https://example.com/{index}", "title": f"{query['q'][0]} {index}", "content": "snippet"}
            for index in range(8)
        ]
        return json.dumps({"results": results}).encode(), "application/json"
    return PAGE, "text/html; charset=utf-8"


@pytest.fixture
def site(loopback_site) -> str:
    return loopback_site(answer)


def test_web_fetch_goes_through_the_policy_and_returns_markdown(backend, site, settings):
    settings.REGISTRY_SANDBOX_EGRESS_ALLOW = "127.0.0.1"
    box = backend.ensure(SandboxSpec(session_id="sesn_fetch", workspace_id="wsp"))
    page = run_tool(box, "web_fetch", {"url": f"{site}/notes"})
    text = page.content[0]["text"]
    assert not page.is_error and "Release notes\n=" in text and "Version **2** is out." in text
    limited = backend.ensure(
        SandboxSpec(session_id="sesn_fetch_limited", workspace_id="wsp", network=NetworkPolicy("limited", ("x.org",)))
    )
    refused = run_tool(limited, "web_fetch", {"url": f"{site}/notes"})
    assert refused.is_error and "403" in refused.content[0]["text"]
    settings.REGISTRY_WEB_FETCH_MAX_BYTES = 100
    assert "cut at REGISTRY_WEB_FETCH_MAX_BYTES" in run_tool(box, "web_fetch", {"url": f"{site}/x"}).content[0]["text"]
    assert run_tool(box, "web_fetch", {"url": "file:///etc/passwd"}).is_error


def test_web_search_returns_search_result_blocks_and_is_offered_only_when_configured(backend, site, settings):
    settings.REGISTRY_WEB_SEARCH_URL = ""
    assert "web_search" not in offered_tools()
    settings.REGISTRY_WEB_SEARCH_URL = f"{site}/search"
    assert "web_search" in offered_tools()
    box = backend.ensure(SandboxSpec(session_id="sesn_search", workspace_id="wsp"))
    found = run_tool(box, "web_search", {"query": "bubblewrap", "max_results": 3})
    assert not found.is_error and len(found.content) == 3
    assert found.content[0] == {
        "type": "search_result",
        "source": "https://example.com/0",
        "title": "bubblewrap 0",
        "content": [{"type": "text", "text": "snippet"}],
        "citations": {"enabled": False},
    }
