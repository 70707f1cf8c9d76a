#!/bin/sh
# The image's entry point: the first argument names the process, the rest go to its command.
#   registry        daphne serving settings.asgi on $PORT (8000)
#   runtime         manage.py runsessions (health, readiness and metrics on $REGISTRY_HEALTH_PORT, 9100)
#   scheduler       manage.py runtriggers (health, readiness and metrics on $REGISTRY_HEALTH_PORT, 9101)
#   gateway         manage.py rungateway --database (listeners from the stored `server` section)
#   migrate         manage.py migrate --noinput (a one-shot: Compose service, Kubernetes Job)
#   gateway-config  manage.py gateway import FILE, only while no gateway config is stored
#                   (GATEWAY_CONFIG_OVERWRITE=1 replaces a stored one)
#   environment-worker  scripts/environment_worker.py: the optional self-hosted environment worker
#                   (no Django, no database; configured by ANTHROPIC_* and WORKER_* variables)
#   manage          any other manage.py command;  anything else runs as given (sh, python ...)
set -eu

cd /app
process="${1:-registry}"
if [ "$#" -gt 0 ]; then shift; fi

case "$process" in
  registry)
    exec daphne --bind 0.0.0.0 --port "${PORT:-8000}" --proxy-headers settings.asgi:application "$@"
    ;;
  runtime)
    REGISTRY_HEALTH_PORT="${REGISTRY_HEALTH_PORT:-9100}"
    export REGISTRY_HEALTH_PORT
    exec python manage.py runsessions "$@"
    ;;
  scheduler)
    REGISTRY_HEALTH_PORT="${REGISTRY_HEALTH_PORT:-9101}"
    export REGISTRY_HEALTH_PORT
    exec python manage.py runtriggers "$@"
    ;;
  gateway)
    exec python manage.py rungateway --database "$@"
    ;;
  migrate)
    exec python manage.py migrate --noinput "$@"
    ;;
  gateway-config)
    file="${1:?gateway-config needs the path of a gateway YAML config}"
    # A failure to read the version (no database, no migrations) stops here, under `set -e`.
    output="$(python manage.py shell -c 'from gatewayproxy.store.selectors import config_version; print(config_version())')"
    stored="$(printf '%s\n' "$output" | tail -n 1)"
    if [ "$stored" != "0" ] && [ "${GATEWAY_CONFIG_OVERWRITE:-0}" != "1" ]; then
      echo "gateway config version $stored is stored already; not importing $file (GATEWAY_CONFIG_OVERWRITE=1 does)"
      exit 0
    fi
    exec python manage.py gateway import "$file"
    ;;
  environment-worker)
    exec python scripts/environment_worker.py "$@"
    ;;
  manage)
    exec python manage.py "$@"
    ;;
  *)
    exec "$process" "$@"
    ;;
esac
