"""Triggers: cron schedules that start one session per fire (`SESSION_PER_EVENT`); `runtriggers` fires them.

Status is `active`, `paused`, `error` (the last fire failed, `error` says why; the schedule goes on
and the next successful fire makes it `active` again) or `archived`. `next_fire_at` is set while the
status is `active` or `error` (the statuses the scheduler fires) and null otherwise; the API computes
it on create and on every change of `source.schedule` or `source.timezone`, the scheduler advances it.

Actions (`POST /v1/triggers/{id}/<action>`; on an archived trigger all but `stop` and `archive` are 409):

- `pause`: status `paused`, `next_fire_at` null.
- `unpause`: from `paused` or `error`, status `active` and `next_fire_at` the first tick after now
  (ticks missed while paused are not fired); on an active trigger, nothing changes.
- `start`: fire once now, outside the schedule. `next_fire_at` unchanged; `last_fired_at` now on
  success, and the status follows the fire's outcome as in the scheduler, except that a paused
  trigger stays paused.
- `stop`: archive (and so terminate) every session the trigger started that is not terminated;
  `status` and `next_fire_at` unchanged.
- `restart`: `stop`, then `start`.
- `archive`: status `archived`, `archived_at` set, `next_fire_at` null; final (an update is still
  accepted, but never schedules it again).

`replicas` is stored and echoed; each fire starts exactly one session.
"""
