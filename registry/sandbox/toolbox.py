"""The file tools (read, write, edit, glob, grep) and web_fetch, run *inside* a session's sandbox by
its own python3.

Not imported by the registry: its source is handed to `python3 -I` in the session's shell, a JSON
request on stdin, a JSON answer `{"text", "is_error"}` in the request's `answer_file`. Running
inside means every path resolves in the sandbox's own view (`..`, symlinks and absolute paths cannot
reach the host), and what is read-only there (the system, mounted files) stays so. Standard library
only.
"""

import json
import os
import re
import sys
from pathlib import Path

HOME = "/workspace"
MAX_GLOB_RESULTS = 1000
MAX_GREP_MATCHES = 500
MAX_GREP_LINE = 500
BINARY_PROBE = 8192


def resolve(path):
    return Path(path) if os.path.isabs(path) else Path(HOME) / path


def is_binary(path):
    with open(path, "rb") as handle:
        return b"\0" in handle.read(BINARY_PROBE)


def read(request):
    path = resolve(request["file_path"])
    if is_binary(path):
        return f"{path} is a binary file; read it with bash (for example `xxd` or `base64`).", True
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    start, end = 1, len(lines)
    if request.get("view_range"):
        start = max(1, int(request["view_range"][0]))
        if len(request["view_range"]) > 1 and int(request["view_range"][1]) > 0:
            end = min(end, int(request["view_range"][1]))
    return "\n".join(f"{number}\t{lines[number - 1]}" for number in range(start, end + 1)), False


def write(request):
    path = resolve(request["file_path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(request["content"], encoding="utf-8")
    return f"Wrote {len(request['content'])} characters to {path}.", False


def edit(request):
    path = resolve(request["file_path"])
    text = path.read_text(encoding="utf-8")
    count = text.count(request["old_string"])
    if count == 0 or (count > 1 and not request.get("replace_all")):
        if count == 0:
            return f"old_string was not found in {path}.", True
        return (
            f"old_string occurs {count} times in {path}; give more context to make it unique, or set replace_all.",
            True,
        )
    replaced = text.replace(request["old_string"], request["new_string"], -1 if request.get("replace_all") else 1)
    path.write_text(replaced, encoding="utf-8")
    return f"Replaced {count if request.get('replace_all') else 1} occurrence(s) in {path}.", False


def glob(request):
    base = resolve(request.get("path") or HOME)
    found = [item for item in base.glob(request["pattern"]) if item.is_file()]
    found.sort(key=lambda item: item.stat().st_mtime, reverse=True)
    shown = [str(item) for item in found[:MAX_GLOB_RESULTS]]
    if len(found) > MAX_GLOB_RESULTS:
        shown.append(f"[... {len(found) - MAX_GLOB_RESULTS} more files not shown ...]")
    return "\n".join(shown) or "No files match.", False


def grep(request):
    expression = re.compile(request["pattern"])
    base = resolve(request.get("path") or HOME)
    files = [base] if base.is_file() else sorted(item for item in base.rglob("*") if item.is_file())
    matches = []
    for item in files:
        if is_binary(item):
            continue
        with open(item, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if expression.search(line):
                    matches.append(f"{item}:{number}:{line.rstrip()[:MAX_GREP_LINE]}")
                    if len(matches) >= MAX_GREP_MATCHES:
                        matches.append(f"[... stopped at {MAX_GREP_MATCHES} matches ...]")
                        return "\n".join(matches), False
    return "\n".join(matches) or "No matches.", False


def fetch(request):
    """GET through the sandbox's proxy (the environment's policy applies); the body, capped, as JSON."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(request["url"], timeout=request["timeout"]) as answer:
            body = answer.read(request["max_bytes"] + 1)
            status, content_type = answer.status, answer.headers.get("content-type", "")
            charset = answer.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as error:
        reason = error.read(2000).decode("utf-8", "replace").strip()
        return f"GET {request['url']} answered HTTP {error.code}: {reason}", True
    except (urllib.error.URLError, TimeoutError) as error:
        return f"GET {request['url']} failed: {error}", True
    truncated = len(body) > request["max_bytes"]
    text = body[: request["max_bytes"]].decode(charset, "replace")
    return json.dumps({"status": status, "content_type": content_type, "body": text, "truncated": truncated}), False


OPERATIONS = {"read": read, "write": write, "edit": edit, "glob": glob, "grep": grep, "web_fetch": fetch}


def main():
    """The request from stdin (run in the session's shell); the answer to its `answer_file`."""
    request = json.loads(sys.stdin.read())
    try:
        text, is_error = OPERATIONS[request["tool"]](request["input"])
    except (OSError, UnicodeDecodeError, re.error, ValueError) as error:
        text, is_error = f"{type(error).__name__}: {error}", True
    with open(request["answer_file"], "x", encoding="utf-8") as handle:
        handle.write(json.dumps({"text": text, "is_error": is_error}))


if __name__ == "__main__":
    main()
