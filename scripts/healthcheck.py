"""Container health probe: ask this container's process its `/healthz` (or, with `--ready`, `/readyz`).

Used by the image's HEALTHCHECK, by Compose and by the gateway's Kubernetes exec probes (the gateway's
admin plane wants its bearer token, which an httpGet probe cannot read from a Secret). Standard library
only, so it starts fast. Exit 0 on a 2xx answer, 1 otherwise.

    python scripts/healthcheck.py [registry|runtime|scheduler|gateway|migrate] [--ready]

Without a process name it finds the one this container runs among /proc/*/cmdline.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

# The process markers found on a command line, in the order they are looked for.
MARKERS = {
    "runsessions": "runtime",
    "runtriggers": "scheduler",
    "gatewayproxy": "gateway",
    "rungateway": "gateway",
    "daphne": "registry",
}
DEFAULT_ADMIN_TOKEN_FILE = "/run/secrets/gateway/admin-token"


def running_process() -> str | None:
    """The process this container runs, read from the command lines of its processes."""
    for entry in sorted(Path("/proc").iterdir(), key=lambda path: path.name):
        if not entry.name.isdigit():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "healthcheck.py" in command_line:
            continue
        for marker, process in MARKERS.items():
            if marker in command_line:
                return process
    return None


def probe(process: str, ready: bool) -> tuple[str, dict[str, str]]:
    """The URL and headers of the process's health (or readiness) endpoint on loopback."""
    path = "/readyz" if ready else "/healthz"
    if process == "registry":
        # Django checks Host against ALLOWED_HOSTS; `localhost` is in every deployment's list.
        return f"http://127.0.0.1:{os.environ.get('PORT', '8000')}{path}", {"Host": "localhost"}
    if process in ("runtime", "scheduler"):
        port = os.environ.get("REGISTRY_HEALTH_PORT") or ("9100" if process == "runtime" else "9101")
        return f"http://127.0.0.1:{port}{path}", {}
    if process == "gateway":
        port = os.environ.get("GATEWAY_ADMIN_PORT", "9099")
        headers = {}
        token_file = Path(os.environ.get("GATEWAY_ADMIN_TOKEN_FILE", DEFAULT_ADMIN_TOKEN_FILE))
        if token_file.is_file():
            headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
        return f"http://127.0.0.1:{port}{path}", headers
    raise ValueError(f"no health endpoint for {process!r}")


def main(arguments: list[str]) -> int:
    ready = "--ready" in arguments
    names = [argument for argument in arguments if not argument.startswith("--")]
    process = names[0] if names else running_process()
    if process is None:
        print("healthcheck: no known process runs in this container", file=sys.stderr)
        return 1
    if process == "migrate":  # a one-shot: healthy while it runs, its exit status says the rest
        return 0
    try:
        url, headers = probe(process, ready)
    except ValueError as error:
        print(f"healthcheck: {error}", file=sys.stderr)
        return 1
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    try:
        with opener.open(request, timeout=float(os.environ.get("HEALTHCHECK_TIMEOUT", "4"))) as response:
            return 0 if 200 <= response.status < 300 else 1
    except (urllib.error.URLError, OSError) as error:
        print(f"healthcheck: {process} {url}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
