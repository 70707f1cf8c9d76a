"""`python -m bench.gateway [--litellm] [--write]`: the same load against the fake provider directly, through
this gateway (one worker pinned to core 0) and optionally through the LiteLLM proxy (pinned to core 0);
the fake provider and this load generator share core 1."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvloop
import yaml

from bench.gateway.loadgen import Results, run_load
from fakes.pki import make_pki

PROJECT = Path(__file__).resolve().parents[2]
LITELLM_VERSION = "1.103.7"
LITELLM_VENV = PROJECT / "var" / "bench" / "litellm-venv"
CHAT = json.dumps(
    {"model": "bench-model", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
).encode()
STREAM = json.dumps(
    {"model": "bench-model", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16, "stream": True}
).encode()
GATEWAY_CORE, LOAD_CORE = "0", "1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def process(
    command: list[str], env: dict[str, str] | None = None, cwd: Path = PROJECT
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (run in `cwd`), terminated on exit."""
    child = subprocess.Popen(
        command, cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def wait_http(url: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def peak_rss_mb(pid: int) -> float:
    """Peak resident set of a process and its children (VmHWM), in MB."""
    pids = [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    total = 0
    for each in pids:
        for line in Path(f"/proc/{each}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total / 1024


@dataclass
class Figures:
    """The measurements of one target."""

    name: str
    c1: Results
    c32: Results
    stream: Results
    rss_mb: float = 0.0


async def measure(
    name: str, port: int, path: str, *, requests: int, seconds: float, tls: ssl.SSLContext | None = None
) -> Figures:
    await run_load(port, path, CHAT, 8, requests=min(requests, 2000), tls=tls)
    c1 = await run_load(port, path, CHAT, 1, requests=requests, tls=tls)
    c32 = await run_load(port, path, CHAT, 32, seconds=seconds, tls=tls)
    await run_load(port, path, STREAM, 1, requests=min(requests, 200), tls=tls)
    stream = await run_load(port, path, STREAM, 1, requests=max(requests // 2, 100), tls=tls)
    return Figures(name, c1, c32, stream)


def gateway_config(
    directory: Path,
    provider_port: int,
    port: int,
    *,
    governed: bool = False,
    cached: bool = False,
    tls: Path | None = None,
) -> Path:
    """The gateway's config; `governed` adds every governance stage the issue names: a Redis rate limit with
    token and spend budgets (spend admission), a pii_regex guardrail and a stdout usage sink. `cached` adds a
    `memory_exact` response cache: the load repeats one body, so every request after the first is a hit (the
    streamed ones replayed from the same entry). `tls` (a PEM with the certificate and its key) makes the data
    plane HTTPS."""
    keys = directory / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [{"sha256": hashlib.sha256(b"bench").hexdigest(), "principal": "b"}]}))
    config: dict[str, Any] = {
        "server": {"listen": f"127.0.0.1:{port}", "admin_listen": f"127.0.0.1:{free_port()}"},
        "identity": {"validators": [{"name": "keys", "kind": "api_key", "keys_file": str(keys)}]},
        "vaults": [{"name": "bench", "resolver": "env", "env_var": "BENCH_PROVIDER_KEY"}],
        "destinations": {
            "fake": {
                "kind": "vendor_a_compatible",
                "base_url": f"http://127.0.0.1:{provider_port}/v1",
                "credentials": {"vault": "bench"},
            }
        },
        "routes": [
            {
                "name": "all",
                "match": {"model": "bench-*"},
                "strategy": {"mode": "fallback", "targets": [{"destination": "fake"}]},
            }
        ],
    }
    if governed:
        config["destinations"]["fake"]["pricing"] = {"input_per_1m": 1.0, "output_per_1m": 2.0}
        config["plugins"] = {
            "rate_limiter": {
                "name": "shared",
                "kind": "redis_window",
                "url": "redis://127.0.0.1:6379/0",
                "key_prefix": f"bench:{os.getpid()}:",
            },
            "guardrails": [{"name": "pii", "kind": "pii_regex"}],
            "usage_sinks": [{"name": "out", "kind": "stdout"}],
        }
        config["rate_limits"] = [{"name": "everyone", "qpm": 10**9, "tpm": 10**12, "budget_usd_per_month": 10**9}]
    if cached:
        config["plugins"] = {"cache": {"name": "answers", "kind": "memory_exact"}}
    if tls is not None:
        config["server"]["tls"] = {"cert": str(tls), "key": str(tls)}
    name = "governed" if governed else "cached" if cached else "https" if tls else "gateway"
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def litellm_python() -> Path:
    """The LiteLLM virtualenv's interpreter, installing it on first use."""
    python = LITELLM_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"litellm[proxy]=={LITELLM_VERSION}"], check=True
        )
    return python


def litellm_config(directory: Path, provider_port: int) -> Path:
    config = {
        "model_list": [
            {
                "model_name": "bench-model",
                "litellm_params": {
                    "model": "openai/bench-model",
                    "api_base": f"http://127.0.0.1:{provider_port}/v1",
                    "api_key": "bench",
                },
            }
        ],
        "litellm_settings": {"telemetry": False, "drop_params": True},
    }
    path = directory / "litellm.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_target(
    name: str,
    command: list[str],
    env: dict[str, str],
    port: int,
    ready_url: str,
    path: str,
    args: argparse.Namespace,
    tls: ssl.SSLContext | None = None,
) -> Figures:
    with process(["taskset", "-c", GATEWAY_CORE, *command], env) as child:
        wait_http(ready_url)
        figures = uvloop.run(measure(name, port, path, requests=args.requests, seconds=args.seconds, tls=tls))
        figures.rss_mb = peak_rss_mb(child.pid)
    return figures


def table(direct: Figures, others: list[Figures]) -> str:
    rows = [
        "| target | c=1 p50 ms | c=1 p99 ms | added p50 ms | added p99 ms | c=32 req/s | c=32 p99 ms "
        "| stream TTFB p50 ms | added TTFB p50 ms | peak RSS MB |",
        "|" + "---|" * 10,
    ]
    for figures in [direct, *others]:
        c1, c32, stream = figures.c1, figures.c32, figures.stream
        added = [c1.percentile(c1.latencies, q) - direct.c1.percentile(direct.c1.latencies, q) for q in (0.5, 0.99)]
        ttfb_added = stream.percentile(stream.first_bytes, 0.5) - direct.stream.percentile(
            direct.stream.first_bytes, 0.5
        )
        rows.append(
            f"| {figures.name} | {c1.percentile(c1.latencies, 0.5):.3f} | {c1.percentile(c1.latencies, 0.99):.3f}"
            f" | {added[0]:.3f} | {added[1]:.3f} | {c32.throughput:.0f} | "
            f"{c32.percentile(c32.latencies, 0.99):.2f} | {stream.percentile(stream.first_bytes, 0.5):.3f} | "
            f"{ttfb_added:.3f} | {figures.rss_mb:.0f} |"
        )
    errors = {
        figures.name: figures.c1.errors + figures.c32.errors + figures.stream.errors for figures in [direct, *others]
    }
    return "\n".join(rows) + f"\n\nnon-200 responses: {errors}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000, help="requests per concurrency-1 run")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each concurrency-32 run")
    parser.add_argument("--litellm", action="store_true", help=f"also measure LiteLLM {LITELLM_VERSION}")
    parser.add_argument("--write", action="store_true", help="write bench/gateway/RESULTS.md")
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    provider_port = free_port()
    with (
        tempfile.TemporaryDirectory() as scratch,
        process(["taskset", "-c", LOAD_CORE, sys.executable, "-m", "bench.gateway.fake_provider", str(provider_port)]),
    ):
        directory = Path(scratch)
        wait_http(f"http://127.0.0.1:{provider_port}/")
        direct = uvloop.run(
            measure(
                "fake provider (direct)",
                provider_port,
                "/v1/chat/completions",
                requests=args.requests,
                seconds=args.seconds,
            )
        )
        port = free_port()
        others = [
            run_target(
                "fake provider on core 0 (cross-core reference)",
                [sys.executable, "-m", "bench.gateway.fake_provider", str(port)],
                {},
                port,
                f"http://127.0.0.1:{port}/",
                "/v1/chat/completions",
                args,
            )
        ]
        pki = make_pki(directory)
        client_tls = ssl.create_default_context(cafile=str(pki.ca_file))
        for name, governed, cached, tls in (
            ("this gateway (1 worker)", False, False, False),
            ("this gateway + governance (1 worker)", True, False, False),
            ("this gateway, cache hits (1 worker)", False, True, False),
            ("this gateway over HTTPS, keep-alive (1 worker)", False, False, True),
        ):
            port = free_port()
            config = gateway_config(
                directory, provider_port, port, governed=governed, cached=cached, tls=pki.server_chain if tls else None
            )
            admin = yaml.safe_load(config.read_text())["server"]["admin_listen"]
            others.append(
                run_target(
                    name,
                    [sys.executable, "manage.py", "rungateway", "--config", str(config)],
                    {"BENCH_PROVIDER_KEY": "bench"},
                    port,
                    f"http://{admin}/readyz",
                    "/v1/chat/completions",
                    args,
                    client_tls if tls else None,
                )
            )
        if args.litellm:
            port = free_port()
            command = [
                str(litellm_python().parent / "litellm"),
                "--config",
                str(litellm_config(directory, provider_port)),
                "--port",
                str(port),
                "--num_workers",
                "1",
                "--telemetry",
                "False",
            ]
            env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
            others.append(
                run_target(
                    f"LiteLLM {LITELLM_VERSION} (1 worker)",
                    command,
                    env,
                    port,
                    f"http://127.0.0.1:{port}/health/liveliness",
                    "/v1/chat/completions",
                    args,
                )
            )
    report = table(direct, others)
    print(report)
    if args.write:
        (Path(__file__).parent / "RESULTS.md").write_text(report)


if __name__ == "__main__":
    main()
