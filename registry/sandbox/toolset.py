"""The built-in agent toolset (`agent_toolset_20260401`) run in a session's sandbox.

`bash` runs in the sandbox's persistent shell; `read`, `write`, `edit`, `glob`, `grep` and
`web_fetch` run the toolbox script in that shell too, as the sandbox's own python3 (so paths resolve in
its view, and a fetch goes through its egress proxy and the environment's network policy; HTML becomes
markdown with `markdownify` here).
`web_search` asks the operator's SearXNG-compatible endpoint (`REGISTRY_WEB_SEARCH_URL`, a trusted
URL from settings, never reachable from inside) and is offered only when that is set.

Inputs follow the reference client's `BetaManagedAgentsAgentToolset20260401*Input` shapes and are
validated first: a malformed input, a timeout or a refused path is an `is_error` result the model
sees, never a crashed turn. A non-zero exit status of a command is an ordinary result.
"""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from django.conf import settings
from markdownify import markdownify

from registry.sandbox.interface import Sandbox
from registry.sandbox.spec import SANDBOX_HOME

TOOLBOX_SOURCE = (Path(__file__).with_name("toolbox.py")).read_text()
TOOLBOX_TIMEOUT_SECONDS = 60
PATH_PROPERTY = {"type": "string", "minLength": 1}
DEFINITIONS: dict[str, dict[str, Any]] = {
    "bash": {
        "description": (
            "Run a bash command in the session's sandbox (cwd /workspace; cwd and exported variables persist "
            "between calls; `restart: true` gives a fresh shell). Output is stdout and stderr interleaved."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "restart": {"type": "boolean"},
                "timeout_ms": {"type": "integer", "minimum": 1},
            },
            "additionalProperties": False,
        },
    },
    "read": {
        "description": "Read a text file; lines come as `<number>\\t<text>`. view_range is [first, last] (1-indexed).",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": PATH_PROPERTY,
                "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
            },
            "required": ["file_path"],
            "additionalProperties": False,
        },
    },
    "write": {
        "description": "Write a file (parent directories are created).",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": PATH_PROPERTY, "content": {"type": "string"}},
            "required": ["file_path", "content"],
            "additionalProperties": False,
        },
    },
    "edit": {
        "description": "Replace old_string with new_string in a file; old_string must occur once unless replace_all.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": PATH_PROPERTY,
                "old_string": {"type": "string", "minLength": 1},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            "required": ["file_path", "old_string", "new_string"],
            "additionalProperties": False,
        },
    },
    "glob": {
        "description": "Files matching a glob pattern (`**` spans directories), newest first, under path or "
        "/workspace.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string", "minLength": 1}, "path": PATH_PROPERTY},
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
    "grep": {
        "description": "Lines matching a regular expression, as `path:line:text`, under path or /workspace.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string", "minLength": 1}, "path": PATH_PROPERTY},
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
    "web_fetch": {
        "description": "Fetch a URL (GET) through the session's network policy; HTML comes back as markdown.",
        "input_schema": {
            "type": "object",
            "properties": {"url": {"type": "string", "pattern": "^https?://"}},
            "required": ["url"],
            "additionalProperties": False,
        },
    },
    "web_search": {
        "description": "Search the web; results come back as search_result blocks.",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
BUILTIN_TOOLS = tuple(DEFINITIONS)
DEFAULT_SEARCH_RESULTS = 5


def offered_tools() -> tuple[str, ...]:
    """The built-in tools this deployment can run (`web_search` needs REGISTRY_WEB_SEARCH_URL)."""
    return tuple(name for name in BUILTIN_TOOLS if name != "web_search" or settings.REGISTRY_WEB_SEARCH_URL)


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's result as session content blocks."""

    content: list[dict[str, Any]]
    is_error: bool

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolOutcome:
        return cls([{"type": "text", "text": text}], is_error)


def model_definition(name: str) -> dict[str, Any]:
    return {"name": name, **DEFINITIONS[name]}


def run_tool(sandbox: Sandbox, name: str, tool_input: Any) -> ToolOutcome:
    """Run one built-in tool call; every failure of the call is a result the model can read. A sandbox
    that cannot start raises `SandboxUnavailable` (the runtime reports it and ends the turn)."""
    try:
        jsonschema.validate(tool_input, DEFINITIONS[name]["input_schema"])
    except jsonschema.ValidationError as error:
        return ToolOutcome.text(f"Invalid input for {name}: {error.message}", is_error=True)
    if name == "bash":
        return _bash(sandbox, tool_input)
    if name == "web_search":
        return _search(tool_input)
    if name == "web_fetch":
        return _fetch(sandbox, tool_input)
    return _toolbox(sandbox, name, tool_input)


def _bash(sandbox: Sandbox, tool_input: dict[str, Any]) -> ToolOutcome:
    command = tool_input.get("command")
    if not command:
        if tool_input.get("restart"):
            sandbox.stop()
            return ToolOutcome.text("The shell was restarted.")
        return ToolOutcome.text("Invalid input for bash: give a command (or restart: true).", is_error=True)
    refused = sandbox.refusal(command)
    if refused:
        return ToolOutcome.text(refused, is_error=True)
    result = sandbox.run(command, timeout_ms=tool_input.get("timeout_ms"), restart=bool(tool_input.get("restart")))
    if result.timed_out:
        timeout = tool_input.get("timeout_ms") or sandbox.limits.command_timeout_ms
        note = f"\n\nThe command timed out after {timeout} ms; every process of the shell was stopped."
        return ToolOutcome.text(result.output + note, is_error=True)
    ended = "\n(the shell ended; the next call starts a fresh one)" if result.shell_ended else ""
    code = "unknown (killed)" if result.exit_code is None else result.exit_code
    return ToolOutcome.text(
        f"{result.output}{ended}\nexit code: {code}" if ended else f"{result.output}exit code: {code}"
    )


def _fetch(sandbox: Sandbox, tool_input: dict[str, Any]) -> ToolOutcome:
    """GET from inside the sandbox's shell (its network namespace: the bridge, the proxy, the policy)."""
    fetch_input = {
        "url": tool_input["url"],
        "max_bytes": settings.REGISTRY_WEB_FETCH_MAX_BYTES,
        "timeout": settings.REGISTRY_WEB_FETCH_TIMEOUT_MS / 1000,
    }
    answer = _in_shell(sandbox, "web_fetch", fetch_input, timeout_ms=settings.REGISTRY_WEB_FETCH_TIMEOUT_MS + 10_000)
    if answer.is_error:
        return answer
    page = json.loads(answer.content[0]["text"])
    body = markdownify(page["body"]) if "html" in page["content_type"] else page["body"]
    note = " (cut at REGISTRY_WEB_FETCH_MAX_BYTES)" if page["truncated"] else ""
    text = f"{tool_input['url']} answered HTTP {page['status']} ({page['content_type']}){note}:\n\n{body.strip()}"
    return ToolOutcome.text(truncate(text, sandbox.limits.output_limit))


def _in_shell(sandbox: Sandbox, tool: str, tool_input: dict[str, Any], *, timeout_ms: int) -> ToolOutcome:
    """Run a toolbox operation in the session's shell (no new sandbox process per call: a spawn costs a
    cgroup join and a bubblewrap start), the request on stdin, the answer through a file of the
    workspace read without following a link or waiting on a FIFO."""
    answer_name = f".toolbox-{secrets.token_hex(12)}.json"
    request = json.dumps({"tool": tool, "answer_file": f"{SANDBOX_HOME}/{answer_name}", "input": tool_input})
    command = f"/usr/bin/python3 -I -c {shlex.quote(TOOLBOX_SOURCE)} <<'__REQUEST__'\n{request}\n__REQUEST__"
    ran = sandbox.run(command, timeout_ms=timeout_ms)
    try:
        answer = json.loads(read_answer(sandbox, answer_name))
    except (OSError, ValueError):
        note = f" (timed out after {timeout_ms // 1000} s)" if ran.timed_out else ""
        return ToolOutcome.text(f"{tool} failed in the sandbox{note}: {truncate(ran.output, 2000)}", is_error=True)
    return ToolOutcome.text(answer["text"], is_error=bool(answer["is_error"]))


def read_answer(sandbox: Sandbox, name: str) -> str:
    """A file the sandbox wrote, read by the host without following a link or waiting on a FIFO (a regular
    file only, at most four times the fetch limit), then removed."""
    try:
        data = sandbox.read_file(name, limit=4 * settings.REGISTRY_WEB_FETCH_MAX_BYTES + 65536)
    finally:
        sandbox.remove_file(name)
    return data.decode("utf-8", "replace")


def _search(tool_input: dict[str, Any]) -> ToolOutcome:
    count = tool_input.get("max_results") or DEFAULT_SEARCH_RESULTS
    try:
        answer = httpx.get(
            settings.REGISTRY_WEB_SEARCH_URL, params={"q": tool_input["query"], "format": "json"}, timeout=30
        )
        answer.raise_for_status()
        results = answer.json().get("results") or []
    except (httpx.HTTPError, ValueError) as error:
        return ToolOutcome.text(f"The search failed: {type(error).__name__}", is_error=True)
    blocks = [
        {
            "type": "search_result",
            "source": str(item.get("url", "")),
            "title": str(item.get("title", "")),
            "content": [{"type": "text", "text": str(item.get("content") or "")}],
            "citations": {"enabled": False},
        }
        for item in results[:count]
    ]
    return ToolOutcome(blocks, False) if blocks else ToolOutcome.text("No results.")


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}\n\n[... {len(text) - limit} characters truncated ...]\n\n{text[-limit // 2 :]}"


def _toolbox(sandbox: Sandbox, name: str, tool_input: dict[str, Any]) -> ToolOutcome:
    outcome = _in_shell(sandbox, name, tool_input, timeout_ms=TOOLBOX_TIMEOUT_SECONDS * 1000)
    return ToolOutcome.text(
        truncate(outcome.content[0]["text"], sandbox.limits.output_limit), is_error=outcome.is_error
    )
