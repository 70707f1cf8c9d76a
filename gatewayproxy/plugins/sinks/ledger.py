"""What the usage ledger query needs without the database driver: the `postgres` sink's options, the
validated query and the ledger contract (the driver itself is imported only when a `postgres` sink is built)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from gatewayproxy.plugins.sinks.base import Sink, SinkOptions

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")
# Grouping keys other than `day` and `dim.<name>`: plain columns.
GROUP_COLUMNS = ("principal", "route", "destination", "provider", "model")


class PostgresOptions(SinkOptions):
    """`dsn` (or `url`): a libpq connection string or URL; `table`: the ledger table (optionally
    schema-qualified)."""

    dsn: str | None = None
    url: str | None = None
    table: str = "gateway_usage"
    connect_timeout_ms: int = Field(default=3000, ge=1000)
    query_timeout_ms: int = Field(default=5000, gt=0)

    @model_validator(mode="after")
    def _one_connection_string(self) -> PostgresOptions:
        if (self.dsn is None) == (self.url is None):
            raise ValueError("exactly one of `dsn` and `url` is required")
        if not TABLE_NAME.match(self.table):
            raise ValueError(f"table: {self.table!r} is not a plain (optionally schema-qualified) identifier")
        return self

    @property
    def conninfo(self) -> str:
        """The connection string."""
        return self.dsn or self.url or ""


@dataclass(frozen=True)
class LedgerQuery:
    """A validated `GET /admin/v1/spend/usage`: the time window, grouping keys and scope filters."""

    start: datetime | None
    end: datetime | None
    group_by: tuple[str, ...]
    dimensions: dict[str, str]
    timezone: str


class Ledger(Sink):
    """A sink whose records can be queried back: what `GET /admin/v1/spend/usage` reads."""

    options: PostgresOptions

    async def query(self, query: LedgerQuery) -> list[dict[str, Any]]:
        """Totals per group of the rows matching `query`."""
        raise NotImplementedError
