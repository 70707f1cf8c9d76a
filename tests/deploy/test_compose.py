"""deploy/compose.yaml: valid against the Compose specification's schema (vendored, see README in this
folder), and its services, dependencies, health checks, configs and secrets refer to things that exist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gatewayproxy.config.loader import validate_document

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
SCHEMA = Path(__file__).with_name("compose-spec.json")
PROCESSES = {"registry", "runtime", "scheduler", "gateway", "migrate", "gateway-config", "environment-worker"}
# The optional self-hosted environment worker (a Compose profile, so a plain `up` leaves it out).
WORKER = "environment-worker"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


def test_the_file_passes_the_compose_specification_schema(compose: dict[str, Any]) -> None:
    # The schema says draft-07 (its `$schema` lacks the trailing `#` jsonschema looks for).
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(compose)


def test_replicas_as_the_deployment_promises(compose: dict[str, Any]) -> None:
    services = compose["services"]
    # Profiles: only the environment worker has one, so `docker compose up` starts all the rest and not it.
    assert {name for name, service in services.items() if "profiles" in service} == {WORKER}
    assert services[WORKER]["profiles"] == ["self-hosted"]
    replicas = {name: service.get("deploy", {}).get("replicas", 1) for name, service in services.items()}
    assert replicas["registry"] == 2 and replicas["runtime"] == 2 and replicas["gateway"] == 2
    assert replicas["scheduler"] == 1
    assert {"postgres", "redis", "migrate", "gateway-config", "lb"} <= set(services)


def test_dependencies_name_services_that_can_satisfy_their_condition(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            target = services[dependency]
            if condition["condition"] == "service_healthy":
                assert not target.get("healthcheck", {}).get("disable"), (name, dependency)
                assert target["healthcheck"]["test"], (name, dependency)
            elif condition["condition"] == "service_completed_successfully":
                assert target.get("restart") == "no", (name, dependency)
            else:
                pytest.fail(f"{name} -> {dependency}: unexpected condition {condition}")


def test_start_order_migrations_first(compose: dict[str, Any]) -> None:
    services = compose["services"]

    def upstream(name: str) -> set[str]:
        direct = set(services[name].get("depends_on", {}))
        return direct.union(*(upstream(dependency) for dependency in direct)) if direct else set()

    for name in ("registry", "runtime", "scheduler", "gateway", "gateway-config"):
        assert "migrate" in upstream(name), name
    assert {"gateway-config", "registry", "redis"} <= upstream("gateway")
    assert {"registry", "gateway"} <= upstream("lb")


def test_project_services_run_an_entrypoint_process_and_check_their_own_health(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if "build" not in service:
            continue
        process = service["command"][0]
        assert process in PROCESSES, name
        check = service["healthcheck"]
        if check.get("disable"):
            # One-shots, and the environment worker: it serves no HTTP endpoint (it only polls the
            # registry), so the image's healthcheck.py has nothing to ask; `restart` covers its exit.
            assert process in ("migrate", "gateway-config", WORKER)
            continue
        assert check["test"][:4] == ["CMD", "python", "/app/scripts/healthcheck.py", process]


def test_configs_and_secrets_exist(compose: dict[str, Any]) -> None:
    for name, config in compose["configs"].items():
        assert (DEPLOY / config["file"]).is_file(), name
    for name, service in compose["services"].items():
        for config in service.get("configs", []):
            assert config["source"] in compose["configs"], name
        for secret in service.get("secrets", []):
            assert secret["source"] in compose["secrets"], name
    # The secret files are the operator's: never in the repository.
    ignored = (DEPLOY / ".gitignore").read_text().split()
    assert "secrets/" in ignored and ".env" in ignored
    for secret in compose["secrets"].values():
        assert secret["file"].startswith("./secrets/")


def test_every_required_variable_is_in_the_example_environment() -> None:
    text = COMPOSE.read_text()
    example = {
        line.split("=", 1)[0]
        for line in (DEPLOY / "compose.env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    required = {part.split(":?")[0] for part in text.split("${")[1:] if ":?" in part.split("}")[0]}
    assert required and required <= example


def test_the_runtime_gets_what_its_sandboxes_need_and_nothing_lifts_the_private_address_ban(
    compose: dict[str, Any],
) -> None:
    runtime = compose["services"]["runtime"]
    assert runtime["user"] == "0:0"
    assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= set(runtime["security_opt"])
    assert {"SETUID", "SETGID", "CHOWN"} <= set(runtime["cap_add"]) and runtime["cap_drop"] == ["ALL"]
    assert "/app/var/sandboxes" in runtime["volumes"]
    for name, service in compose["services"].items():
        assert "REGISTRY_SANDBOX_EGRESS_ALLOW" not in service.get("environment", {}), name
    for name in ("registry", "scheduler", "gateway", "migrate", "gateway-config"):
        service = compose["services"][name]
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        assert "user" not in service, name  # the image's non-root user


def test_the_environment_worker_runs_unprivileged_with_a_read_only_root(compose: dict[str, Any]) -> None:
    worker = compose["services"][WORKER]
    assert worker["command"] == [WORKER] and worker["build"]["dockerfile"] == "Dockerfile"
    assert worker["image"] == compose["services"]["registry"]["image"]  # the same image
    assert worker["user"] == "10001:10001"  # the image's uid, stated: never root
    assert worker["read_only"] is True
    assert worker["cap_drop"] == ["ALL"] and "cap_add" not in worker
    assert worker["security_opt"] == ["no-new-privileges:true"]
    for key in ("privileged", "pid", "ipc", "network_mode", "devices", "userns_mode", "sysctls"):
        assert key not in worker, key
    # Writable: the workdir, memory stores at their absolute /mnt/memory/... paths, and /tmp. Nothing
    # from the host and no project volume (uploads): the sessions' files reach it through the API only.
    mounts = {entry.split(":")[0]: entry.split(":", 1)[1].split(",") for entry in worker["tmpfs"]}
    assert set(mounts) == {"/workspace", "/mnt/memory", "/tmp"}
    for options in mounts.values():
        assert {"nosuid", "nodev"} <= set(options) and any(o.startswith("size=") for o in options)
    assert "volumes" not in worker
    environment = worker["environment"]
    assert environment["WORKER_WORKDIR"] == "/workspace"
    assert environment["ANTHROPIC_BASE_URL"] == "http://registry:8000"
    assert "registry" in compose["services"]["registry"]["environment"]["ALLOWED_HOSTS"].split(",")
    # No project secret: only its own environment's id and key (from .env), nothing Django reads.
    for key in ("SECRET_KEY", "VAULT_ENCRYPTION_KEYS", "DATABASE_URL", "REDIS_URL", "GATEWAY_ADMIN_TOKEN_FILE"):
        assert key not in environment, key
    assert environment["ANTHROPIC_ENVIRONMENT_ID"] == "${ANTHROPIC_ENVIRONMENT_ID:-}"
    assert environment["ANTHROPIC_ENVIRONMENT_KEY"] == "${ANTHROPIC_ENVIRONMENT_KEY:-}"
    assert "secrets" not in worker and "configs" not in worker
    example = (DEPLOY / "compose.env.example").read_text().splitlines()
    assert {"ANTHROPIC_ENVIRONMENT_ID=", "ANTHROPIC_ENVIRONMENT_KEY="} <= set(example)  # placeholders, empty
    # Its only network is internal and shared with the registry alone: no database, no Redis, no gateway.
    assert worker["networks"] == ["workers"]
    assert compose["networks"]["workers"]["internal"] is True
    others = {name for name, service in compose["services"].items() if "workers" in service.get("networks", [])}
    assert others == {"registry", WORKER}
    assert worker["depends_on"] == {"registry": {"condition": "service_healthy"}}
    assert worker["restart"] == "unless-stopped"


def test_the_gateway_config_imported_is_valid() -> None:
    config = validate_document(yaml.safe_load((DEPLOY / "compose" / "gateway.yaml").read_text())).config
    assert config.server.admin_token_file == "/run/secrets/gateway/admin-token"


def test_the_load_balancer_never_proxies_the_admin_plane_or_internal_endpoints() -> None:
    text = (DEPLOY / "compose" / "nginx.conf").read_text()
    assert "9099" not in text
    assert "location /internal/ { return 404; }" in text
