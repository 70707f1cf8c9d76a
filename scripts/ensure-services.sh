#!/usr/bin/env bash
# Make sure the PostgreSQL and Redis the test suite uses (127.0.0.1:5432 and :6379) are up:
# start them where they are installed but stopped, else fail with a clear message.
set -u

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null || (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG || (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; }

if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "PostgreSQL is down; starting it"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
    for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  fi
  pg_up || { echo "ERROR: PostgreSQL is not reachable at 127.0.0.1:5432 (user postgres, trust auth) and could not be started." >&2; exit 1; }
fi

if ! redis_up; then
  if command -v redis-server >/dev/null; then
    echo "Redis is down; starting it"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
    for _ in $(seq 1 30); do redis_up && break; sleep 1; done
  fi
  redis_up || { echo "ERROR: Redis is not reachable at 127.0.0.1:6379 and could not be started." >&2; exit 1; }
fi
echo "PostgreSQL and Redis are up"
