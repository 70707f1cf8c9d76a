"""The built-in agent toolset (`agent_toolset_20260401`) run in a session's sandbox.

`bash` runs in the sandbox's persistent shell; `read`, `write`, `edit`, `glob` and `grep` run the
toolbox script inside the sandbox. Inputs follow the reference client's
`BetaManagedAgentsAgentToolset20260401*Input` shapes and are validated first: a malformed input, a
timeout or a refused path is an `is_error` result the model sees, never a crashed turn. A non-zero
exit status of a command is an ordinary result. `web_fetch` and `web_search` are not offered: the
sandbox has no network yet (see README).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from registry.sandbox.backend import BwrapSandbox, SandboxUnavailable

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
}
BUILTIN_TOOLS = tuple(DEFINITIONS)


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


def run_tool(sandbox: BwrapSandbox, name: str, tool_input: Any) -> ToolOutcome:
    """Run one built-in tool call; every failure is a result the model can read."""
    try:
        jsonschema.validate(tool_input, DEFINITIONS[name]["input_schema"])
    except jsonschema.ValidationError as error:
        return ToolOutcome.text(f"Invalid input for {name}: {error.message}", is_error=True)
    try:
        if name == "bash":
            return _bash(sandbox, tool_input)
        return _toolbox(sandbox, name, tool_input)
    except SandboxUnavailable as error:
        return ToolOutcome.text(str(error), is_error=True)


def _bash(sandbox: BwrapSandbox, tool_input: dict[str, Any]) -> ToolOutcome:
    command = tool_input.get("command")
    if not command:
        if tool_input.get("restart"):
            sandbox.stop()
            return ToolOutcome.text("The shell was restarted.")
        return ToolOutcome.text("Invalid input for bash: give a command (or restart: true).", is_error=True)
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


def _toolbox(sandbox: BwrapSandbox, name: str, tool_input: dict[str, Any]) -> ToolOutcome:
    process = sandbox.spawn("/usr/bin/python3", "-I", "-c", TOOLBOX_SOURCE)
    request = json.dumps({"tool": name, "input": tool_input}).encode()
    try:
        output, _ = process.communicate(request, timeout=TOOLBOX_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return ToolOutcome.text(f"{name} timed out after {TOOLBOX_TIMEOUT_SECONDS} s.", is_error=True)
    try:
        answer = json.loads(output)
    except ValueError:
        text = output.decode(errors="replace")[-2000:]
        return ToolOutcome.text(f"{name} failed in the sandbox: {text}", is_error=True)
    limit = sandbox.limits.output_limit
    text = answer["text"]
    if len(text) > limit:
        text = f"{text[: limit // 2]}\n\n[... {len(text) - limit} characters truncated ...]\n\n{text[-limit // 2 :]}"
    return ToolOutcome.text(text, is_error=bool(answer["is_error"]))
