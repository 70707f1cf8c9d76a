"""`python -m bench.webhooks.producer SESSION RATE SECONDS OFFSET`: one producer process of the webhook benchmark
(settings.base, DATABASE_URL from the environment). Once Django is up it prints `ready` and reads a wall-clock
start time from stdin; from then it writes, at RATE events per second (0: as fast as it can) for SECONDS,
transactions that append a `SessionEvent` to SESSION's log and `outbox.emit` the two webhook events of that status
change (the benchmark's `TRANSITIONS` in turn, from OFFSET). Prints `events elapsed`.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    session_id, rate, seconds, offset = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
    import django

    django.setup()
    from django.db import transaction

    from bench.webhooks.__main__ import TRANSITIONS
    from registry.sessions.models import Session, SessionEvent
    from registry.webhooks import outbox

    workspace_id = Session.objects.get(pk=session_id).workspace_id
    seq = (
        SessionEvent.objects.filter(session_id=session_id).order_by("-seq").values_list("seq", flat=True).first() or 0
    ) + 1
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    time.sleep(max(0.0, start - time.time()))
    started = time.monotonic()
    count = 0
    while (now := time.monotonic()) - started < seconds:
        if rate:
            due = started + count / rate
            if due > now:
                time.sleep(due - now)
        transition = TRANSITIONS[(offset + count // 2) % len(TRANSITIONS)]
        with transaction.atomic():
            SessionEvent.objects.create(session_id=session_id, seq=seq, type=transition[0], body={"bench": True})
            for event_type in transition:
                outbox.emit(event_type, workspace_id=workspace_id, object_id=session_id)
        seq += 1
        count += len(transition)
    print(count, time.monotonic() - started, flush=True)


if __name__ == "__main__":
    main()
