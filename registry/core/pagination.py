"""Keyset cursor pagination: `{"data": [...], "next_page": <opaque>|null}` (plus `prev_page` where asked).

The cursor encodes the ordering key of the edge row and a direction; a page never scans an offset.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import Model, Q, QuerySet
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.errors import invalid_request

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def encode_cursor(direction: str, values: Sequence[Any]) -> str:
    plain = [value.isoformat() if isinstance(value, datetime) else value for value in values]
    raw = json.dumps([direction, plain], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, keys: Sequence[str], model: type[Model]) -> tuple[str, list[Any]]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        direction, values = json.loads(raw)
        if direction not in ("next", "prev") or len(values) != len(keys):
            raise ValueError(cursor)
        parsed = [
            datetime.fromisoformat(value)
            if model._meta.get_field(key).get_internal_type() == "DateTimeField"
            else value
            for key, value in zip(keys, values, strict=True)
        ]
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise invalid_request("page: not a valid page cursor.") from error
    return direction, parsed


def parse_limit(raw: str | None, *, default: int = DEFAULT_LIMIT, maximum: int = MAX_LIMIT) -> int:
    """`limit`: an integer from 1 to `maximum`; `default` when omitted."""
    if raw in (None, ""):
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise invalid_request(f"limit: must be an integer from 1 to {maximum}.")
    return int(raw)


def parse_order(raw: str | None, default: str) -> str:
    order = raw or default
    if order not in ("asc", "desc"):
        raise invalid_request("order: must be 'asc' or 'desc'.")
    return order


def after_condition(keys: Sequence[str], values: Sequence[Any], descending: bool) -> Q:
    """Rows strictly after `values` in the (keys...) ordering: a lexicographic tuple comparison."""
    operator = "lt" if descending else "gt"
    condition = Q()
    for index, key in enumerate(keys):
        clause = Q(**{f"{key}__{operator}": values[index]})
        for equal_key, equal_value in zip(keys[:index], values[:index], strict=True):
            clause &= Q(**{equal_key: equal_value})
        condition |= clause
    return condition


class KeysetPagination:
    """Paginate a queryset on `keys` (unique together), in `order`, with opaque cursors."""

    def __init__(
        self,
        keys: Sequence[str] = ("created_at", "id"),
        default_order: str = "desc",
        with_prev_page: bool = False,
        max_limit: int = MAX_LIMIT,
    ) -> None:
        self.keys = tuple(keys)
        self.default_order = default_order
        self.with_prev_page = with_prev_page
        self.max_limit = max_limit

    def paginate(self, queryset: QuerySet[Any], request: Request) -> tuple[list[Any], dict[str, str | None]]:
        params = request.query_params
        limit = parse_limit(params.get("limit"), maximum=self.max_limit)
        descending = parse_order(params.get("order"), self.default_order) == "desc"
        direction, cursor_values = "next", None
        if params.get("page"):
            direction, cursor_values = decode_cursor(params["page"], self.keys, queryset.model)
        # A "prev" page walks backwards from its cursor, then is put back in the requested order.
        walk_descending = descending != (direction == "prev")
        if cursor_values is not None:
            queryset = queryset.filter(after_condition(self.keys, cursor_values, walk_descending))
        ordering = [f"-{key}" if walk_descending else key for key in self.keys]
        rows = list(queryset.order_by(*ordering)[: limit + 1])
        more = len(rows) > limit
        rows = rows[:limit]
        if direction == "prev":
            rows.reverse()
        has_next = more if direction == "next" else cursor_values is not None
        has_prev = (cursor_values is not None) if direction == "next" else more
        links = {"next_page": self._cursor("next", rows[-1]) if rows and has_next else None}
        if self.with_prev_page:
            links["prev_page"] = self._cursor("prev", rows[0]) if rows and has_prev else None
        return rows, links

    def _cursor(self, direction: str, row: Any) -> str:
        return encode_cursor(direction, [getattr(row, key) for key in self.keys])

    @staticmethod
    def response(data: list[Any], links: dict[str, str | None]) -> Response:
        return Response({"data": data, **links})


def encode_cursor_token(key: str) -> str:
    """An opaque cursor for lists ordered by a single string key computed in Python."""
    return base64.urlsafe_b64encode(json.dumps(["after", key]).encode()).decode().rstrip("=")


def decode_cursor_token(cursor: str) -> str:
    try:
        direction, key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if direction != "after" or not isinstance(key, str):
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as error:
        raise invalid_request("page: not a valid page cursor.") from error
    return key
