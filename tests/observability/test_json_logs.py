"""JSON log lines as the formatter writes them: one object per record, with the ids set around it."""

from __future__ import annotations

import json
import logging
import sys

from registry.core.observability import JsonFormatter, log_ids, trace_of

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def record(message: str, *args: object, exc_info: bool = False) -> logging.LogRecord:
    return logging.LogRecord(
        "registry.test", logging.WARNING, __file__, 1, message, args, sys.exc_info() if exc_info else None
    )


def test_a_line_carries_the_ids_set_around_it_and_only_those():
    formatter = JsonFormatter()
    with log_ids(session_id="sesn_1", request_id="req_1", trace_id=TRACE):
        inside = json.loads(formatter.format(record("turn of %s", "sesn_1")))
    outside = json.loads(formatter.format(record("idle")))

    assert (
        inside["message"] == "turn of sesn_1" and inside["level"] == "WARNING" and inside["logger"] == "registry.test"
    )
    assert (inside["session_id"], inside["request_id"], inside["trace_id"]) == ("sesn_1", "req_1", TRACE)
    assert inside["time"].endswith("+00:00")
    assert set(outside) == {"time", "level", "logger", "message"}


def test_a_traceback_stays_inside_its_one_line():
    try:
        raise ValueError("boom")
    except ValueError:
        line = JsonFormatter().format(record("failed", exc_info=True))
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exception"]


def test_trace_ids_come_from_well_formed_traceparent_headers_only():
    assert trace_of(f"00-{TRACE}-00f067aa0ba902b7-01") == TRACE
    assert trace_of("garbage") is None and trace_of(f"00-{TRACE.upper()}-00f067aa0ba902b7-01") is None
