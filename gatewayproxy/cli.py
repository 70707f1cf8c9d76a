"""The lean serving entry point, `python -m gatewayproxy --config FILE [--workers N]`: validates the config
and serves it without loading Django, so each worker carries only the gateway (manage.py rungateway execs
this after its own validation)."""

from __future__ import annotations

import argparse
import logging
import sys

from gatewayproxy.config.live import live_problems
from gatewayproxy.config.loader import ConfigError, load_config_file
from gatewayproxy.server.lifecycle import run_workers


def load_and_check(path: str) -> None:
    """Raise `ConfigError` unless the file passes structural, cross-reference and live validation."""
    problems = live_problems(load_config_file(path).config)
    if problems:
        raise ConfigError(problems)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, validate, serve until SIGTERM; the exit status is the worst worker's."""
    parser = argparse.ArgumentParser(prog="python -m gatewayproxy", description=__doc__)
    parser.add_argument("--config", required=True, help="path of the gateway YAML config")
    parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the ports")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    try:
        loaded = load_config_file(args.config)
        problems = live_problems(loaded.config)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    if problems:
        print(ConfigError(problems), file=sys.stderr)
        return 2
    return run_workers(loaded, args.workers)
