"""The lean serving entry point, `python -m gatewayproxy --config FILE [--listen A] [--admin-listen A] |
--database [--workers N]`.

With `--config` it validates the file and serves it without loading Django, so each worker carries only the
gateway. With `--database` it sets Django up for the ORM (the config rows of `gatewayproxy.store`), reads and
validates the stored config before forking, and each worker reloads it off its event loop. `manage.py
rungateway` execs this after its own validation.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from gatewayproxy.app import Gateway, MakeGateway, run_workers
from gatewayproxy.config.loader import ConfigError, load_config_file
from gatewayproxy.pipeline.live import live_problems


def load_and_check(path: str, server: dict[str, str] | None = None) -> None:
    """Raise `ConfigError` unless the file passes structural, cross-reference and live validation."""
    problems = live_problems(load_config_file(path, server).config)
    if problems:
        raise ConfigError(problems)


def check_stored_config() -> None:
    """Raise `ConfigError` unless the stored config passes validation; leaves no database connection (or
    connection pool, with its threads) open, so forked workers never share one."""
    from django.db import connections

    from gatewayproxy.store.source import read_validated

    try:
        read_validated()
    finally:
        for connection in connections.all(initialized_only=True):
            connection.close()
            close_pool = getattr(connection, "close_pool", None)  # PostgreSQL with a pool configured
            if close_pool is not None:
                close_pool()


def add_listener_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that move a file config's listeners (`make run` on ports of the operator's choice)."""
    parser.add_argument("--listen", help="data plane HOST:PORT, instead of the config's server.listen")
    parser.add_argument("--admin-listen", help="admin plane HOST:PORT, instead of the config's server.admin_listen")


def listener_overrides(options: dict[str, Any]) -> dict[str, str]:
    """The `server` keys the flags of `add_listener_arguments` set."""
    return {key: options[key] for key in ("listen", "admin_listen") if options.get(key)}


def _file_gateways(path: str, server: dict[str, str]) -> MakeGateway:
    loaded = load_config_file(path, server)
    problems = live_problems(loaded.config)
    if problems:
        raise ConfigError(problems)
    return lambda reuse_port: Gateway(loaded, reuse_port=reuse_port)


def _database_gateways() -> MakeGateway:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
    import django

    django.setup()
    from gatewayproxy.store.source import DatabaseConfig

    check_stored_config()
    return lambda reuse_port: Gateway(database=DatabaseConfig(), reuse_port=reuse_port)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, validate, serve until SIGTERM; the exit status is the worst worker's."""
    parser = argparse.ArgumentParser(prog="python -m gatewayproxy", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="path of the gateway YAML config")
    source.add_argument("--database", action="store_true", help="serve the config stored in the database")
    parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the ports")
    add_listener_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    try:
        server = listener_overrides(vars(args))
        if args.database and server:
            parser.error("--listen and --admin-listen move a file config's listeners; a stored config names its own")
        make_gateway = _database_gateways() if args.database else _file_gateways(args.config, server)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    return run_workers(make_gateway, args.workers)
