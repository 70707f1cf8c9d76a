"""`python -m bench.gateway.paired BASE_TREE [--requests N]`: this tree's gateway against another checkout's
(a git worktree of the code before a change), measured at the same moments.

One keep-alive connection to each of the direct provider, the other tree's gateway and this tree's, and the
load generator sends one request to each in turn (concurrency 1), so every target meets the same machine
at nearly the same instant: on a shared two-core machine whose speed drifts by tens of percent between runs,
this pairing resolves differences of a few hundredths of a millisecond that separate runs cannot. Both
gateways run on core 0 with the same config; the provider and this process share core 1. Reports the median
added latency (to the direct call) of chat completions and of a stream's first body byte, for each tree.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvloop
import yaml

from bench.gateway.__main__ import CHAT, GATEWAY_CORE, LOAD_CORE, STREAM, free_port, gateway_config, process, wait_http
from bench.gateway.loadgen import Client, build_request

WARMUP = 500
PROJECT = Path(__file__).resolve().parents[2]


async def _connect(port: int) -> Client:
    return (await asyncio.get_running_loop().create_connection(Client, "127.0.0.1", port))[1]


async def paired(ports: dict[str, int], body: bytes, requests: int, first_byte: bool) -> dict[str, float]:
    """Median milliseconds per target, the targets taking turns request by request."""
    clients = {name: await _connect(port) for name, port in ports.items()}
    wires = {name: build_request(port, "/v1/chat/completions", body) for name, port in ports.items()}
    samples: dict[str, list[float]] = {name: [] for name in ports}
    for index in range(WARMUP + requests):
        for name, client in clients.items():
            started = time.perf_counter()
            first, status = await client.send(wires[name])
            finished = first if first_byte else time.perf_counter()
            if status != 200:
                raise RuntimeError(f"{name} answered {status}")
            if index >= WARMUP:
                samples[name].append(finished - started)
    for client in clients.values():
        if client.transport is not None:
            client.transport.close()
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


@contextmanager
def gateway(tree: Path, directory: Path, provider_port: int) -> Iterator[int]:
    """A gateway of the checkout `tree` on core 0, in front of the provider; yields its port."""
    directory.mkdir()
    port = free_port()
    config = gateway_config(directory, provider_port, port)
    command = ["taskset", "-c", GATEWAY_CORE, sys.executable, "manage.py", "rungateway", "--config", str(config)]
    with process(command, {"BENCH_PROVIDER_KEY": "bench"}, cwd=tree):
        wait_http(f"http://{yaml.safe_load(config.read_text())['server']['admin_listen']}/readyz")
        yield port


def report(kind: str, medians: dict[str, float]) -> str:
    """One line: each gateway's added median, and this tree's minus the base's."""
    added = {name: value - medians["direct"] for name, value in medians.items() if name != "direct"}
    listed = ", ".join(f"{name} {value:+.3f}" for name, value in added.items())
    difference = added["this tree"] - added["base"]
    return f"{kind}: direct {medians['direct']:.3f} ms; added {listed}; this tree - base {difference:+.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="the other checkout (e.g. a git worktree of the code before)")
    parser.add_argument("--requests", type=int, default=4000, help="measured requests per target and kind")
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    provider_port = free_port()
    provider = [sys.executable, "-m", "bench.gateway.fake_provider", str(provider_port)]
    with tempfile.TemporaryDirectory() as scratch, process(["taskset", "-c", LOAD_CORE, *provider]):
        wait_http(f"http://127.0.0.1:{provider_port}/")
        with (
            gateway(args.base.resolve(), Path(scratch) / "base", provider_port) as base_port,
            gateway(PROJECT, Path(scratch) / "this", provider_port) as this_port,
        ):
            ports = {"direct": provider_port, "base": base_port, "this tree": this_port}
            for kind, body, first_byte in (("chat", CHAT, False), ("stream first byte", STREAM, True)):
                print(report(kind, uvloop.run(paired(ports, body, args.requests, first_byte))))


if __name__ == "__main__":
    main()
