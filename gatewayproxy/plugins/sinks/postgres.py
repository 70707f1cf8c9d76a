"""The `postgres` usage sink: a relational ledger, one row per request id (`INSERT ... ON CONFLICT DO
NOTHING`, so a replayed batch changes nothing), created when missing; and the grouped ledger query."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from gatewayproxy.plugins.sinks.base import Record, SinkError
from gatewayproxy.plugins.sinks.ledger import Ledger, LedgerQuery, PostgresOptions

TOKEN_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "text PRIMARY KEY"),
    ("ts", "timestamptz NOT NULL"),
    ("kind", "text"),
    ("principal", "text"),
    ("scope", "jsonb NOT NULL DEFAULT '{}'"),
    ("route", "text"),
    ("destination", "text"),
    ("provider", "text"),
    ("model", "text"),
    *((column, "bigint NOT NULL DEFAULT 0") for column in TOKEN_COLUMNS),
    ("cost_usd", "double precision"),
    ("status", "integer"),
    ("latency_ms", "double precision"),
    ("streamed", "boolean"),
    ("tags", "jsonb NOT NULL DEFAULT '{}'"),
)
JSON_COLUMNS = frozenset({"scope", "tags"})


def _group_expression(key: str, timezone: str) -> sql.Composable:
    if key == "day":
        return sql.SQL("to_char(ts AT TIME ZONE {}, 'YYYY-MM-DD')").format(sql.Literal(timezone))
    if key.startswith("dim."):
        return sql.SQL("scope ->> {}").format(sql.Literal(key.removeprefix("dim.")))
    return sql.Identifier(key)


class PostgresSink(Ledger):
    """Keeps one connection (reopened after a failure) and writes each batch in one transaction."""

    def __init__(self, options: PostgresOptions) -> None:
        self.options = options
        self.table = sql.Identifier(*options.table.split("."))
        self._connection: psycopg.AsyncConnection[Any] | None = None

    async def write(self, batch: list[Record]) -> None:
        columns = [name for name, _ in COLUMNS]
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (request_id) DO NOTHING").format(
            self.table,
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        )
        rows = [[_column_value(name, record.get(name)) for name in columns] for record in batch]
        try:
            connection = await self._connect()
            async with connection.transaction(), connection.cursor() as cursor:
                await cursor.executemany(insert, rows)
        except psycopg.Error as error:
            await self.close()
            raise SinkError(f"postgres: {type(error).__name__}: {error}") from None
        except BaseException:
            await self.close()  # a cancelled write leaves the connection in an unknown state
            raise

    async def query(self, query: LedgerQuery) -> list[dict[str, Any]]:
        """Totals per group of the ledger rows matching `query` (a fresh connection, bounded by
        `query_timeout_ms`)."""
        keys = [_group_expression(key, query.timezone) for key in query.group_by]
        totals = [
            sql.SQL("count(*)"),
            *(sql.SQL("coalesce(sum({}), 0)").format(sql.Identifier(column)) for column in TOKEN_COLUMNS),
            sql.SQL("coalesce(sum(cost_usd), 0)"),
            sql.SQL("count(*) FILTER (WHERE cost_usd IS NULL)"),
        ]
        conditions: list[sql.Composable] = [sql.SQL("TRUE")]
        parameters: list[Any] = []
        for operator, bound in ((">=", query.start), ("<", query.end)):
            if bound is not None:
                conditions.append(sql.SQL(f"ts {operator} %s"))
                parameters.append(bound)
        for dimension, value in sorted(query.dimensions.items()):
            conditions.append(sql.SQL("scope ->> {} = %s").format(sql.Literal(dimension)))
            parameters.append(value)
        positions = sql.SQL(", ").join(sql.Literal(index + 1) for index in range(len(keys)))
        statement = sql.SQL("SELECT {} FROM {} WHERE {}").format(
            sql.SQL(", ").join([*keys, *totals]), self.table, sql.SQL(" AND ").join(conditions)
        )
        if keys:
            statement = sql.SQL("{} GROUP BY {} ORDER BY {}").format(statement, positions, positions)
        try:
            async with await psycopg.AsyncConnection.connect(
                self.options.conninfo, connect_timeout=self.options.connect_timeout_ms // 1000
            ) as connection:
                timeout = sql.SQL("SET statement_timeout = {}").format(sql.Literal(self.options.query_timeout_ms))
                await connection.execute(timeout)
                rows = await (await connection.execute(statement, parameters)).fetchall()
        except psycopg.errors.UndefinedTable:
            return []  # nothing was written yet
        except psycopg.Error as error:
            raise SinkError(f"postgres: {type(error).__name__}") from None
        return [_group(query.group_by, row) for row in rows]

    async def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        if self._connection is None or self._connection.closed:
            connection = await psycopg.AsyncConnection.connect(
                self.options.conninfo, autocommit=True, connect_timeout=self.options.connect_timeout_ms // 1000
            )
            columns = sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(definition)) for name, definition in COLUMNS
            )
            await connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self.table, columns))
            await connection.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (ts)").format(
                    sql.Identifier(f"{self.options.table.split('.')[-1]}_ts"), self.table
                )
            )
            self._connection = connection
        return self._connection


def _column_value(column: str, value: Any) -> Any:
    if column in JSON_COLUMNS:
        return Jsonb(value or {})
    if column == "ts":
        return datetime.fromisoformat(value)
    return value


def _group(group_by: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    keys, totals = row[: len(group_by)], row[len(group_by) :]
    tokens = dict(zip(TOKEN_COLUMNS, (int(total) for total in totals[1:6]), strict=True))
    return {
        "key": dict(zip(group_by, keys, strict=True)),
        "requests": totals[0],
        **tokens,
        "cost_usd": float(totals[6]),
        "unpriced_requests": totals[7],
    }
