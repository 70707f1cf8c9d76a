"""The Kubernetes manifests: the base, the production overlay and the self-hosted-workers overlay (production
plus the optional environment workers) render (offline), every object passes the Kubernetes schemas
(kubernetes-validate, strict), and the deployment rules docs/deploy.md promises hold."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gatewayproxy.config.loader import validate_document
from tests.support.kustomize import (
    Manifest,
    identity,
    load_documents,
    pod_spec,
    render,
    restricted_pod_security_violations,
)

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
PRODUCTION = KUBERNETES / "overlays" / "production"
# The optional self-hosted environment worker: its own kustomization (its own namespace), rendered and
# validated through the overlay that adds it to production; the base and production leave it out.
WORKER_KUSTOMIZATION = KUBERNETES / "environment-worker"
SELF_HOSTED = KUBERNETES / "overlays" / "self-hosted-workers"
TARGETS = {"base": BASE, "production": PRODUCTION, "self-hosted-workers": SELF_HOSTED}
# The oldest Kubernetes these manifests are meant for, and a current one.
KUBERNETES_VERSIONS = ["1.30.0", "1.33.0"]
PROCESSES = {"registry", "runtime", "scheduler", "gateway"}
WORKER = "environment-worker"
NAMESPACE, WORKER_NAMESPACE = "agent-registry", "agent-registry-workers"
# The processes each target deploys.
TARGET_PROCESSES = {"base": PROCESSES, "production": PROCESSES, "self-hosted-workers": PROCESSES | {WORKER}}
PRIVATE_RANGES = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8"]
DATABASE_PORT, REDIS_PORT = 5432, 6379
# Health ports of `runsessions` / `runtriggers` (REGISTRY_HEALTH_PORT), as scripts/entrypoint.sh defaults them.
HEALTH_PORTS = {"runtime": 9100, "scheduler": 9101}


def rendered(target: str) -> list[Manifest]:
    return render(TARGETS[target])


def of_kind(manifests: list[Manifest], kind: str) -> dict[str, Manifest]:
    return {manifest["metadata"]["name"]: manifest for manifest in manifests if manifest["kind"] == kind}


def component(manifest: Manifest) -> str:
    labels: dict[str, str] = manifest["spec"]["template"]["metadata"]["labels"]
    return labels["app.kubernetes.io/component"]


def containers(manifest: Manifest) -> Iterator[Manifest]:
    spec = pod_spec(manifest)
    assert spec is not None
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def selects(selector: Manifest, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and `In` expressions) selects `labels`."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", "only In expressions are interpreted here"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def namespace_of(manifest: Manifest) -> str:
    namespace: str = manifest["metadata"]["namespace"]
    return namespace


def secret_examples() -> dict[str, Manifest]:
    """The example Secrets (never rendered): the base's and the environment worker's."""
    documents = [*load_documents(BASE / "secrets.example.yaml")]
    documents += load_documents(WORKER_KUSTOMIZATION / "secret.example.yaml")
    return {secret["metadata"]["name"]: secret for secret in documents}


@pytest.fixture(params=sorted(TARGETS))
def target(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def manifests(target: str) -> list[Manifest]:
    return rendered(target)


# -- rendering and schemas ---------------------------------------------------------------------------
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_offline_rendering_matches_kubectl_kustomize(target: str) -> None:
    assert shutil.which("kubectl"), "kubectl (with its kustomize) is needed to cross-check the offline rendering"
    output = subprocess.run(
        ["kubectl", "kustomize", str(TARGETS[target])], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    theirs = {identity(document): document for document in yaml.safe_load_all(output) if document}
    ours = {identity(document): document for document in rendered(target)}
    assert ours == theirs


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_passes_the_kubernetes_schemas(manifests: list[Manifest], version: str) -> None:
    assert manifests
    for manifest in manifests:
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            pytest.fail(f"{identity(manifest)} against {version}: {path}: {error.message}")


def test_the_example_secrets_pass_the_schemas_and_are_left_out_of_the_kustomization() -> None:
    secrets = secret_examples()
    assert set(secrets) == {"registry-secrets", "gateway-secrets", "environment-worker"}
    for secret in secrets.values():
        kubernetes_validate.validate(secret, KUBERNETES_VERSIONS[-1], strict=True)
    assert namespace_of(secrets["environment-worker"]) == WORKER_NAMESPACE
    for target in TARGETS:
        assert not [manifest for manifest in rendered(target) if manifest["kind"] == "Secret"], target


def test_names_are_unique(manifests: list[Manifest]) -> None:
    identities = [identity(manifest) for manifest in manifests]
    assert len(identities) == len(set(identities))


# -- workloads ---------------------------------------------------------------------------------------
def test_a_deployment_per_process_and_a_migration_job(target: str, manifests: list[Manifest]) -> None:
    deployments = of_kind(manifests, "Deployment")
    assert {component(deployment) for deployment in deployments.values()} == TARGET_PROCESSES[target]
    jobs = of_kind(manifests, "Job")
    (migrate,) = jobs["migrate"]["spec"]["template"]["spec"]["containers"]
    assert migrate["args"] == ["migrate"]
    (importer,) = jobs["gateway-config"]["spec"]["template"]["spec"]["containers"]
    assert importer["args"][0] == "gateway-config"


def test_every_container_has_requests_and_limits(manifests: list[Manifest]) -> None:
    for manifest in manifests:
        if pod_spec(manifest) is None:
            continue
        for container in containers(manifest):
            resources = container["resources"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources[bound]), (identity(manifest), container["name"], bound)


def test_every_deployment_is_probed_on_its_health_endpoints(manifests: list[Manifest]) -> None:
    for deployment in of_kind(manifests, "Deployment").values():
        (container,) = pod_spec(deployment)["containers"]  # type: ignore[index]
        process = component(deployment)
        if process == WORKER:
            # Named exception (environment-worker/worker.yaml, docs/deploy.md): the environment worker
            # serves no HTTP endpoint (it only polls the registry), so there is nothing to probe that its
            # own exit does not report; and no Service sends it traffic, so no readiness either.
            assert not {"livenessProbe", "readinessProbe", "startupProbe", "ports"} & set(container), process
            continue
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
            handler = container[probe]
            if "httpGet" in handler:
                assert handler["httpGet"]["path"] == path, (process, probe)
                port = handler["httpGet"]["port"]
                (declared,) = [p for p in container["ports"] if p["name"] == port]
                if process in HEALTH_PORTS:
                    assert declared["containerPort"] == HEALTH_PORTS[process]
                    environment = {item["name"]: item.get("value") for item in container["env"]}
                    assert environment["REGISTRY_HEALTH_PORT"] == str(HEALTH_PORTS[process])
            else:  # the gateway: an exec probe through scripts/healthcheck.py, with the admin token
                command = handler["exec"]["command"]
                assert command[:3] == ["python", "/app/scripts/healthcheck.py", process], probe
                assert ("--ready" in command) == (path == "/readyz"), probe


def test_registry_probes_send_a_host_that_allowed_hosts_lists(manifests: list[Manifest]) -> None:
    settings = of_kind(manifests, "ConfigMap")["registry-settings"]["data"]
    allowed = settings["ALLOWED_HOSTS"].split(",")
    (container,) = pod_spec(of_kind(manifests, "Deployment")["registry"])["containers"]  # type: ignore[index]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        (header,) = container[probe]["httpGet"]["httpHeaders"]
        assert header["name"] == "Host" and header["value"] in allowed
    assert "registry" in allowed  # the gateways fetch the JWKS at http://registry:8000


def test_pods_run_as_non_root_with_a_read_only_root_except_where_the_runtime_needs_root(
    manifests: list[Manifest],
) -> None:
    for manifest in manifests:
        spec = pod_spec(manifest)
        if spec is None:
            continue
        pod = spec["securityContext"]
        assert spec["automountServiceAccountToken"] is False, identity(manifest)
        for container in containers(manifest):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, (identity(manifest), container["name"])
            root_runtime = identity(manifest) == ("Deployment", "runtime") and container["name"] == "runtime"
            if root_runtime:
                # Documented exception (runtime.yaml, docs/deploy.md): setpriv/chown to each session's uid,
                # and bwrap's namespaces and /proc mount, need root and a privileged container.
                assert pod["runAsUser"] == 0 and pod["runAsNonRoot"] is False
                assert context["privileged"] is True
                continue
            non_root = context.get("runAsNonRoot", pod.get("runAsNonRoot"))
            user = context.get("runAsUser", pod.get("runAsUser"))
            assert non_root is True and user != 0, (identity(manifest), container["name"])
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            seccomp = context.get("seccompProfile", pod.get("seccompProfile"))
            assert seccomp == {"type": "RuntimeDefault"}, (identity(manifest), container["name"])


def test_no_volume_hides_the_static_files_collected_in_the_image(manifests: list[Manifest]) -> None:
    for manifest in manifests:
        if pod_spec(manifest) is None:
            continue
        for container in containers(manifest):
            for mount in container.get("volumeMounts", []):
                assert mount["mountPath"] not in ("/app", "/app/var", "/app/var/static"), identity(manifest)


def test_secrets_and_settings_come_from_objects_that_exist(manifests: list[Manifest]) -> None:
    config_maps = of_kind(manifests, "ConfigMap")
    secrets = secret_examples()
    for manifest in manifests:
        spec = pod_spec(manifest)
        if spec is None:
            continue
        for container in containers(manifest):
            sources = container.get("envFrom", [])
            if identity(manifest) == ("Deployment", WORKER):
                # Named exception: the environment worker holds no project secret (no database, no
                # SECRET_KEY), only its environment key, read from a Secret in its own namespace.
                assert not sources, identity(manifest)
                references = [
                    v["valueFrom"]["secretKeyRef"] for v in container["env"] if "secretKeyRef" in v.get("valueFrom", {})
                ]
                assert {reference["name"] for reference in references} == {WORKER}
                assert namespace_of(secrets[WORKER]) == namespace_of(manifest)
            else:
                assert {"secretRef": {"name": "registry-secrets"}} in sources, identity(manifest)
            for source in sources:
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets
                else:
                    assert source["configMapRef"]["name"] in config_maps
            for variable in container.get("env", []):
                reference = variable.get("valueFrom", {}).get("secretKeyRef")
                if reference:
                    assert reference["key"] in secrets[reference["name"]]["stringData"]
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                for item in volume["secret"]["items"]:
                    assert item["key"] in secrets[volume["secret"]["secretName"]]["stringData"]
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
    for key in ("SECRET_KEY", "VAULT_ENCRYPTION_KEYS", "DATABASE_URL", "REDIS_URL"):
        assert key in secrets["registry-secrets"]["stringData"]
        assert all(key not in config_map.get("data", {}) for config_map in config_maps.values())


def test_the_stored_gateway_config_is_a_valid_gateway_config(manifests: list[Manifest]) -> None:
    document = yaml.safe_load(of_kind(manifests, "ConfigMap")["gateway-config"]["data"]["gateway.yaml"])
    config = validate_document(document).config
    assert config.server.admin_token_file == "/run/secrets/gateway/admin-token"
    assert config.server.listen.endswith(":8080") and config.server.admin_listen.endswith(":9099")


# -- exposure ----------------------------------------------------------------------------------------
def test_ingress_exposes_the_registry_and_the_gateway_data_plane_only(manifests: list[Manifest]) -> None:
    services = of_kind(manifests, "Service")
    backends = set()
    for ingress in of_kind(manifests, "Ingress").values():
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                service = path["backend"]["service"]
                port_names = {port["name"] for port in services[service["name"]]["spec"]["ports"]}
                assert service["port"]["name"] in port_names
                backends.add((service["name"], service["port"]["name"]))
                if service["name"] == "registry":
                    assert not path["path"].startswith(("/internal", "/admin")), path
                    assert path["path"] != "/", "the registry's Ingress lists its public paths"
    assert backends == {("registry", "http"), ("gateway", "data")}
    admin = services["gateway-admin"]["spec"]
    assert admin.get("type", "ClusterIP") == "ClusterIP" and [p["port"] for p in admin["ports"]] == [9099]
    assert all(port["port"] != 9099 for port in services["gateway"]["spec"]["ports"])


def test_services_select_pods_of_a_deployment(manifests: list[Manifest]) -> None:
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in of_kind(manifests, "Deployment").values()]
    for name, service in of_kind(manifests, "Service").items():
        assert any(selects({"matchLabels": service["spec"]["selector"]}, labels) for labels in pod_labels), name


# -- availability and scaling ------------------------------------------------------------------------
def test_every_deployment_has_a_disruption_budget(manifests: list[Manifest]) -> None:
    budgets = of_kind(manifests, "PodDisruptionBudget").values()
    for name, deployment in of_kind(manifests, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert [b for b in budgets if selects(b["spec"]["selector"], labels)], name


def test_autoscalers_gateway_on_cpu_and_runtime_on_queue_depth(manifests: list[Manifest]) -> None:
    autoscalers = of_kind(manifests, "HorizontalPodAutoscaler")
    deployments = of_kind(manifests, "Deployment")
    (gateway_metric,) = autoscalers["gateway"]["spec"]["metrics"]
    assert gateway_metric["type"] == "Resource" and gateway_metric["resource"]["name"] == "cpu"
    # Runtime workers: the sessions they run (per pod) and the backlog no worker holds (one series).
    load, backlog = autoscalers["runtime"]["spec"]["metrics"]
    assert load["type"] == "Pods" and load["pods"]["metric"]["name"] == "registry_runtime_leases_held"
    assert backlog["type"] == "External"
    assert backlog["external"]["metric"]["name"] == "registry_runtime_queue_depth"
    assert backlog["external"]["target"]["type"] == "AverageValue"
    for name, autoscaler in autoscalers.items():
        assert autoscaler["spec"]["scaleTargetRef"]["name"] in deployments
        # Named exception: one idle environment worker is enough (test_the_environment_worker_autoscales...).
        assert autoscaler["spec"]["minReplicas"] >= (1 if name == WORKER else 2), name


def test_production_runs_two_schedulers_and_more_of_everything() -> None:
    base = {name: d["spec"]["replicas"] for name, d in of_kind(rendered("base"), "Deployment").items()}
    production = {name: d["spec"]["replicas"] for name, d in of_kind(rendered("production"), "Deployment").items()}
    assert base == {"registry": 2, "runtime": 2, "scheduler": 1, "gateway": 2}
    assert production["scheduler"] == 2
    assert all(production[name] >= base[name] for name in base)
    images = {
        container["image"]
        for manifest in rendered("production")
        if pod_spec(manifest) is not None
        for container in containers(manifest)
    }
    assert len(images) == 1 and images.pop().endswith(":1.0.0")
    # The self-hosted-workers overlay restates the image for the workers: it must be production's release.
    everywhere = {
        container["image"]
        for target in ("production", "self-hosted-workers")
        for manifest in rendered(target)
        if pod_spec(manifest) is not None
        for container in containers(manifest)
    }
    assert len(everywhere) == 1


# -- network policies --------------------------------------------------------------------------------
def policies_for(
    manifests: list[Manifest], labels: dict[str, str], direction: str, namespace: str = NAMESPACE
) -> list[Manifest]:
    """The policies of `direction` that select pods with `labels` in `namespace` (a policy selects in its own)."""
    policy_type = direction.capitalize()
    return [
        policy
        for policy in of_kind(manifests, "NetworkPolicy").values()
        if namespace_of(policy) == namespace
        and policy_type in policy["spec"]["policyTypes"]
        and selects(policy["spec"]["podSelector"], labels)
    ]


def reaches(peer: dict[str, Any], network: ipaddress.IPv4Network) -> bool:
    """Whether an egress peer admits any address of `network`."""
    block = peer.get("ipBlock")
    if block is None:
        return False  # pod and namespace selectors never name an address outside the cluster
    allowed = ipaddress.ip_network(block["cidr"])
    if not allowed.overlaps(network):
        return False
    return not any(network.subnet_of(ipaddress.ip_network(cidr)) for cidr in block.get("except", []))  # type: ignore[arg-type]


def database_networks(manifests: list[Manifest]) -> dict[int, ipaddress.IPv4Network]:
    (policy,) = [p for p in of_kind(manifests, "NetworkPolicy").values() if p["metadata"]["name"] == "database-clients"]
    networks = {}
    for rule in policy["spec"]["egress"]:
        ((peer,), (port,)) = rule["to"], rule["ports"]
        networks[port["port"]] = ipaddress.IPv4Network(peer["ipBlock"]["cidr"])
    assert set(networks) == {DATABASE_PORT, REDIS_PORT}
    return networks


def test_everything_is_denied_unless_a_policy_allows_it(manifests: list[Manifest]) -> None:
    deny = of_kind(manifests, "NetworkPolicy")["default-deny"]["spec"]
    assert deny["podSelector"] == {} and set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny and "egress" not in deny
    # In every namespace of the rendering (the environment workers' too), and every pod is in one of them.
    namespaces = set(of_kind(manifests, "Namespace"))
    for namespace in namespaces:
        denials = [
            policy["spec"]
            for policy in of_kind(manifests, "NetworkPolicy").values()
            if namespace_of(policy) == namespace
            and policy["spec"]["podSelector"] == {}
            and set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
            and not {"ingress", "egress"} & set(policy["spec"])
        ]
        assert denials, namespace
    assert {namespace_of(manifest) for manifest in manifests if manifest["kind"] != "Namespace"} <= namespaces


def test_the_runtime_pod_reaches_the_database_only_on_its_port_and_sandboxes_not_at_all(
    manifests: list[Manifest],
) -> None:
    runtime = of_kind(manifests, "Deployment")["runtime"]
    labels = runtime["spec"]["template"]["metadata"]["labels"]
    for port, network in database_networks(manifests).items():
        assert network.is_private  # so the egress proxy's ban on private addresses covers it
        for policy in policies_for(manifests, labels, "egress"):
            for rule in policy["spec"].get("egress", []):
                if any(reaches(peer, network) for peer in rule.get("to", [{"ipBlock": {"cidr": "0.0.0.0/0"}}])):
                    ports = [(p.get("protocol", "TCP"), p.get("port")) for p in rule.get("ports", [])]
                    assert ports == [("TCP", port)], (policy["metadata"]["name"], rule)
    # Sandboxes leave only through the worker's egress proxy, which refuses private addresses unless
    # REGISTRY_SANDBOX_EGRESS_ALLOW lifts them: it must stay empty.
    (container,) = pod_spec(runtime)["containers"]  # type: ignore[index]
    environment = {item["name"]: item.get("value", "") for item in container["env"]}
    assert environment["REGISTRY_SANDBOX_EGRESS_ALLOW"] == ""
    settings = of_kind(manifests, "ConfigMap")["registry-settings"]["data"]
    assert "REGISTRY_SANDBOX_EGRESS_ALLOW" not in settings


def test_only_the_processes_that_use_the_database_reach_it(manifests: list[Manifest]) -> None:
    networks = database_networks(manifests)
    pod_labels = {"ingress-like": ({"app.kubernetes.io/component": "something-else"}, NAMESPACE)}
    for manifest in manifests:
        if pod_spec(manifest) is not None:
            labels = manifest["spec"]["template"]["metadata"]["labels"]
            pod_labels[manifest["metadata"]["name"]] = (labels, namespace_of(manifest))
    for name, (labels, namespace) in pod_labels.items():
        reachable = any(
            reaches(peer, network)
            for policy in policies_for(manifests, labels, "egress", namespace)
            for rule in policy["spec"].get("egress", [])
            for peer in rule.get("to", [])
            for network in networks.values()
        )
        # The environment worker uses no database: its pod (where the agent's commands run) never reaches it.
        assert reachable == (name not in ("ingress-like", WORKER)), name


def test_the_gateway_admin_plane_admits_no_ingress_controller(manifests: list[Manifest]) -> None:
    gateway = of_kind(manifests, "Deployment")["gateway"]["spec"]["template"]["metadata"]["labels"]
    for policy in policies_for(manifests, gateway, "ingress"):
        for rule in policy["spec"].get("ingress", []):
            if any(port["port"] == 9099 for port in rule["ports"]):
                for peer in rule["from"]:
                    namespace = peer.get("namespaceSelector", {}).get("matchLabels", {})
                    assert namespace.get("kubernetes.io/metadata.name") != "ingress-nginx"
                    assert "ipBlock" not in peer


# -- the optional self-hosted environment workers ----------------------------------------------------
def worker_objects() -> tuple[list[Manifest], Manifest, Manifest]:
    """The self-hosted-workers rendering, the worker Deployment and its only container."""
    manifests = rendered("self-hosted-workers")
    deployment = of_kind(manifests, "Deployment")[WORKER]
    (container,) = pod_spec(deployment)["containers"]  # type: ignore[index]
    return manifests, deployment, container


def worker_environment(container: Manifest) -> dict[str, str | None]:
    return {item["name"]: item.get("value") for item in container["env"]}


def test_the_default_renderings_leave_the_environment_workers_out() -> None:
    for target in ("base", "production"):
        manifests = rendered(target)
        assert WORKER not in of_kind(manifests, "Deployment"), target
        assert {namespace_of(m) for m in manifests if m["kind"] != "Namespace"} == {NAMESPACE}, target
        assert "registry-from-environment-workers" not in of_kind(manifests, "NetworkPolicy"), target
    # The overlay is production plus the workers' own kustomization, nothing changed in between.
    production = {identity(manifest): manifest for manifest in rendered("production")}
    workers = {identity(manifest): manifest for manifest in render(WORKER_KUSTOMIZATION)}
    combined = {identity(manifest): manifest for manifest in rendered("self-hosted-workers")}
    assert set(combined) == set(production) | set(workers) and not set(production) & set(workers)
    for key, manifest in production.items():
        assert combined[key] == manifest, key


def test_the_worker_namespace_admits_only_restricted_pods() -> None:
    manifests, deployment, _ = worker_objects()
    namespaces = of_kind(manifests, "Namespace")
    labels = namespaces[WORKER_NAMESPACE]["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted", mode
    # The registry's namespace holds the privileged runtime: the workers must not live there.
    assert namespaces[NAMESPACE]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace_of(deployment) == WORKER_NAMESPACE
    in_worker_namespace = [m for m in manifests if m["kind"] != "Namespace" and namespace_of(m) == WORKER_NAMESPACE]
    assert {identity(m) for m in in_worker_namespace if pod_spec(m) is not None} == {("Deployment", WORKER)}


def test_the_worker_pod_meets_the_restricted_pod_security_level() -> None:
    manifests, deployment, container = worker_objects()
    spec = pod_spec(deployment)
    assert spec is not None
    assert restricted_pod_security_violations(spec) == []
    # The checker bites: the privileged runtime (the registry namespace's documented exception) fails it.
    runtime = pod_spec(of_kind(manifests, "Deployment")["runtime"])
    assert runtime is not None and restricted_pod_security_violations(runtime)
    # Stated explicitly, beyond what `restricted` demands: the image's uid, a read-only root, no token.
    pod, context = spec["securityContext"], container["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001 and pod["runAsGroup"] == 10001
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert "initContainers" not in spec  # nothing waits for migrations: it never touches the database
    assert container["args"] == [WORKER]
    # Writable: emptyDirs (size-capped) for the workdir, memory stores (absolute /mnt/memory/... paths), /tmp.
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = {mount["mountPath"]: volumes[mount["name"]] for mount in container["volumeMounts"]}
    assert set(mounts) == {"/workspace", "/mnt/memory", "/tmp"}
    assert all(set(volume) == {"name", "emptyDir"} and volume["emptyDir"]["sizeLimit"] for volume in mounts.values())
    assert worker_environment(container)["WORKER_WORKDIR"] == "/workspace"
    assert worker_environment(container)["HOME"] == "/tmp"  # the image's home (/app) is read-only
    # An optional sandboxing RuntimeClass is offered in a comment, not set (it must exist on the cluster).
    assert "runtimeClassName" not in spec
    assert "# runtimeClassName: gvisor" in (WORKER_KUSTOMIZATION / "worker.yaml").read_text()
    # Time for the teardown SIGTERM starts: kill the commands, flush memory stores (30 s), stop the item.
    assert spec["terminationGracePeriodSeconds"] >= 60


def test_the_worker_holds_only_its_environment_key_and_reaches_the_registry_by_a_name_it_accepts() -> None:
    manifests, _, container = worker_objects()
    environment = worker_environment(container)
    (key,) = [item for item in container["env"] if item["name"] == "ANTHROPIC_ENVIRONMENT_KEY"]
    assert key["valueFrom"]["secretKeyRef"] == {"name": WORKER, "key": "ANTHROPIC_ENVIRONMENT_KEY"}
    assert "ANTHROPIC_ENVIRONMENT_KEY" in secret_examples()[WORKER]["stringData"]
    assert str(environment["ANTHROPIC_ENVIRONMENT_ID"]).startswith("env_")
    # The registry's Service in its own namespace, by a Host that ALLOWED_HOSTS lists (Django checks it).
    url = str(environment["ANTHROPIC_BASE_URL"])
    host, port = url.removeprefix("http://").split(":")
    assert host == f"registry.{NAMESPACE}.svc"
    service = of_kind(manifests, "Service")["registry"]
    assert namespace_of(service) == NAMESPACE and int(port) in {p["port"] for p in service["spec"]["ports"]}
    for target in TARGETS:  # the name is accepted wherever the workers may be added
        allowed = of_kind(rendered(target), "ConfigMap")["registry-settings"]["data"]["ALLOWED_HOSTS"].split(",")
        assert host in allowed, target


def test_the_worker_reaches_the_registry_and_dns_only_and_the_registry_admits_it() -> None:
    manifests, deployment, _ = worker_objects()
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    # Nothing comes in (it serves nothing): policies select it for ingress, none admits a peer.
    ingress = policies_for(manifests, labels, "ingress", WORKER_NAMESPACE)
    assert ingress and all(not policy["spec"].get("ingress") for policy in ingress)
    allowed = set()
    for policy in policies_for(manifests, labels, "egress", WORKER_NAMESPACE):
        for rule in policy["spec"].get("egress", []):
            (peer,) = rule["to"]
            assert "ipBlock" not in peer, "no address outside the cluster by default (internet-egress.yaml)"
            namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            pods = tuple(sorted(peer["podSelector"]["matchLabels"].items()))
            ports = tuple(sorted((p["protocol"], p["port"]) for p in rule["ports"]))
            allowed.add((namespace, pods, ports))
    assert allowed == {
        (NAMESPACE, (("app.kubernetes.io/component", "registry"),), (("TCP", 8000),)),
        ("kube-system", (("k8s-app", "kube-dns"),), (("TCP", 53), ("UDP", 53))),
    }
    # The registry's side: one added policy admits exactly the workers' pods from their namespace, on 8000.
    registry = of_kind(manifests, "Deployment")["registry"]["spec"]["template"]["metadata"]["labels"]
    admitting = [
        (policy["metadata"]["name"], rule)
        for policy in policies_for(manifests, registry, "ingress")
        for rule in policy["spec"].get("ingress", [])
        if any(
            peer.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
            == WORKER_NAMESPACE
            for peer in rule["from"]
        )
    ]
    assert len(admitting) == 1
    name, rule = admitting[0]
    assert name == "registry-from-environment-workers"
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": WORKER_NAMESPACE}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/component": WORKER}},
        }
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_the_optional_internet_egress_is_valid_unlisted_and_keeps_private_ranges_closed() -> None:
    (policy,) = load_documents(WORKER_KUSTOMIZATION / "internet-egress.yaml")
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(policy, version, strict=True)
    assert namespace_of(policy) == WORKER_NAMESPACE
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/component": WORKER}}
    kustomization = yaml.safe_load((WORKER_KUSTOMIZATION / "kustomization.yaml").read_text())
    assert "internet-egress.yaml" not in kustomization["resources"]
    assert policy["metadata"]["name"] not in of_kind(rendered("self-hosted-workers"), "NetworkPolicy")
    (rule,) = policy["spec"]["egress"]
    (peer,) = rule["to"]
    assert reaches(peer, ipaddress.IPv4Network("1.1.1.1/32"))
    manifests = rendered("self-hosted-workers")
    closed = [ipaddress.IPv4Network(cidr) for cidr in PRIVATE_RANGES] + list(database_networks(manifests).values())
    closed.append(ipaddress.IPv4Network("169.254.169.254/32"))  # cloud metadata
    for network in closed:
        assert not reaches(peer, network), network


def test_the_environment_worker_autoscales_one_pod_per_live_work_item() -> None:
    manifests, deployment, container = worker_objects()
    autoscaler = of_kind(manifests, "HorizontalPodAutoscaler")[WORKER]
    assert namespace_of(autoscaler) == namespace_of(deployment)
    spec = autoscaler["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": WORKER}
    assert spec["minReplicas"] == 1 and spec["maxReplicas"] >= 10
    (metric,) = spec["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == "registry_work_items_live"
    # The series of this Deployment's environment only.
    selector = metric["external"]["metric"]["selector"]
    assert selector == {"matchLabels": {"environment_id": worker_environment(container)["ANTHROPIC_ENVIRONMENT_ID"]}}
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    # Scale in slowly (the pod removed may be serving an item), out at once.
    down, up = spec["behavior"]["scaleDown"], spec["behavior"]["scaleUp"]
    assert down["stabilizationWindowSeconds"] >= 300
    assert all(policy["type"] == "Pods" and policy["value"] == 1 for policy in down["policies"])
    assert up["stabilizationWindowSeconds"] == 0
    # Drains: one worker at a time.
    (budget,) = [
        b
        for b in of_kind(manifests, "PodDisruptionBudget").values()
        if selects(b["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    ]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": budget["spec"]["selector"]}
    assert namespace_of(budget) == WORKER_NAMESPACE
