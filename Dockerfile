# syntax=docker/dockerfile:1
# One image for every process of the project; its first argument picks the process
# (scripts/entrypoint.sh): registry (default), runtime, scheduler, gateway, migrate, gateway-config,
# environment-worker (the optional self-hosted environment worker).
# Build: docker build -t agent-registry .   Run: docker run agent-registry registry
# docs/deploy.md shows it under Compose and Kubernetes.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- stage 1: wheels for every runtime requirement (no compiler needed: all have binary wheels or
# are pure Python; a package without one is built here, never in the runtime image)
FROM ${PYTHON_IMAGE} AS wheels
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /build
COPY requirements.txt .
RUN pip wheel --wheel-dir /build/wheels -r requirements.txt

# --- stage 2: the runtime image
FROM ${PYTHON_IMAGE} AS runtime

# The session runtime's sandbox tooling: bubblewrap (sandboxes), git (repository clones),
# util-linux (mount and loop devices for each session's disk image; essential in Debian, listed for
# clarity), e2fsprogs (mkfs.ext4 for those images), tini as PID 1 (reaps what sandboxes and git leave
# behind), CA certificates for upstreams.
# Versions follow the base image's Debian release; pinning them would break on every point release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap git util-linux e2fsprogs tini ca-certificates \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=settings.production \
    REGISTRY_DATA_DIR=/app/var \
    REGISTRY_SANDBOX_ROOT=/app/var/sandboxes

# Installed from the wheels stage only (--no-index): the runtime image never reaches a package index.
RUN --mount=type=bind,from=wheels,source=/build,target=/build \
    python -m venv /opt/venv \
    && pip install --no-cache-dir --no-index --find-links=/build/wheels -r /build/requirements.txt

# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it and volumes can be prepared for it.
RUN groupadd --system --gid 10001 registry \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin registry

WORKDIR /app
COPY --chown=0:0 . .
# Static files (the Django admin's) are collected into /app/var/static at build: the settings import
# needs a SECRET_KEY, and this build-only one is used for nothing else. Uploads and sandboxes are the
# only places written at run time; every directory above the sandbox root stays traversable by other
# uids (o+x), which the sandboxes' per-session uids need.
RUN SECRET_KEY=build-only-collectstatic-key-not-used-at-run-time-0123456789 \
        python manage.py collectstatic --noinput --verbosity 0 \
    && python -m compileall -q registry gatewayproxy settings \
    && mkdir -p /app/var/uploads /app/var/sandboxes \
    && chown -R 10001:10001 /app/var/uploads /app/var/sandboxes \
    && chmod 0755 /app /app/var \
    && chmod 0711 /app/var/sandboxes

USER 10001:10001
# registry (daphne), gateway data plane, gateway admin plane, runtime and scheduler health ports
EXPOSE 8000 8080 9099 9100 9101

# Finds the process this container runs and asks its own health endpoint (scripts/healthcheck.py).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/app/scripts/healthcheck.py"]

ENTRYPOINT ["/usr/bin/tini", "--", "/app/scripts/entrypoint.sh"]
CMD ["registry"]
