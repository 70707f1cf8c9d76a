"""A minimal kustomize: renders the deploy/kubernetes kustomizations offline, without the kustomize binary.

It implements only the fields those kustomizations use (`resources`, `namespace`, `labels` pairs on
metadata, `images`, `patches` with strategic-merge patch files) and refuses any other field, so a new
field in a kustomization fails the tests instead of being ignored. Where `kubectl kustomize` exists,
the tests compare this rendering with it. `restricted_pod_security_violations` checks a rendered pod
spec against the `restricted` Pod Security Standard.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "patches"}
CLUSTER_SCOPED_KINDS = {"Namespace", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass"}
# Strategic-merge keys of the lists these manifests patch; any other list is replaced whole.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}

Manifest = dict[str, Any]


class KustomizeError(Exception):
    """A kustomization this renderer cannot render faithfully."""


def load_documents(path: Path) -> list[Manifest]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def identity(manifest: Manifest) -> tuple[str, str]:
    return manifest["kind"], manifest["metadata"]["name"]


def render(directory: Path) -> list[Manifest]:
    """The objects `kustomize build directory` would print (in file order, not kustomize's)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{directory}: fields this renderer does not implement: {sorted(unknown)}")
    manifests: list[Manifest] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        manifests.extend(render(path) if path.is_dir() else load_documents(path))
    for patch in kustomization.get("patches", []):
        if set(patch) != {"path"}:
            raise KustomizeError(f"{directory}: only `patches: [{{path: ...}}]` is implemented, not {patch}")
        for document in load_documents(directory / patch["path"]):
            target = [manifest for manifest in manifests if identity(manifest) == identity(document)]
            if len(target) != 1:
                raise KustomizeError(f"{patch['path']}: patches {identity(document)}, found {len(target)}")
            merged = strategic_merge(target[0], document)
            target[0].clear()
            target[0].update(merged)
    for manifest in manifests:
        if "namespace" in kustomization and manifest["kind"] not in CLUSTER_SCOPED_KINDS:
            manifest["metadata"]["namespace"] = kustomization["namespace"]
        for label_set in kustomization.get("labels", []):
            if set(label_set) != {"pairs"}:
                raise KustomizeError(f"{directory}: only `labels: [{{pairs: ...}}]` is implemented")
            manifest["metadata"].setdefault("labels", {}).update(label_set["pairs"])
        for image in kustomization.get("images", []):
            set_image(manifest, image)
    return manifests


def strategic_merge(base: Any, patch: Any, key: str | None = None) -> Any:
    """`patch` merged into `base` the way kubectl's strategic merge does for the fields used here."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for name, value in patch.items():
            merged[name] = strategic_merge(base[name], value, name) if name in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        # As kustomize orders them: the patch's items first (merged into their namesakes), then the rest.
        merge_key = MERGE_KEYS[key]
        originals = {item.get(merge_key): item for item in base}
        merged_list = [
            strategic_merge(originals[item.get(merge_key)], item) if item.get(merge_key) in originals else item
            for item in copy.deepcopy(patch)
        ]
        patched = {item.get(merge_key) for item in patch}
        return merged_list + [copy.deepcopy(item) for item in base if item.get(merge_key) not in patched]
    return copy.deepcopy(patch)


def pod_spec(manifest: Manifest) -> Manifest | None:
    if manifest["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
        spec: Manifest = manifest["spec"]["template"]["spec"]
        return spec
    return None


def set_image(manifest: Manifest, image: dict[str, str]) -> None:
    """kustomize's `images` transformer: a container whose image is `name` (with or without a tag)."""
    spec = pod_spec(manifest)
    if spec is None:
        return
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        name = container["image"].split(":")[0]
        if name == image["name"]:
            container["image"] = f"{image.get('newName', name)}:{image['newTag']}"


# The volume types the `restricted` Pod Security Standard admits (kubernetes.io/docs/concepts/security/
# pod-security-standards/, "Volume Types").
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_pod_security_violations(spec: Manifest) -> list[str]:
    """What in a pod spec the `restricted` Pod Security Standard (baseline included) refuses; empty if nothing.

    The checks the admission controller makes for that level, on the fields these manifests can hold: host
    namespaces, ports and paths, privileged containers, capabilities (all dropped; NET_BIND_SERVICE alone may
    be added), privilege escalation, non-root users, a RuntimeDefault or Localhost seccomp profile, /proc
    masking, sysctls, AppArmor and SELinux options. A namespace labelled `enforce: restricted` admits a pod
    only when this list is empty.
    """
    violations = []
    pod = spec.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            violations.append(f"{field} is set")
    if pod.get("sysctls"):
        violations.append("pod sysctls are set")
    if pod.get("runAsUser") == 0:
        violations.append("the pod runs as uid 0")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            violations.append(f"volume {volume['name']} is of type {sorted(kinds)}")
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        name = container["name"]
        context = container.get("securityContext", {})
        if context.get("privileged"):
            violations.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            violations.append(f"{name}: allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            violations.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            violations.append(f"{name}: adds capabilities {capabilities['add']}")
        if context.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            violations.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser") == 0:
            violations.append(f"{name}: runs as uid 0")
        seccomp = context.get("seccompProfile", pod.get("seccompProfile", {}))
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            violations.append(f"{name}: seccomp profile {seccomp or 'unset'}")
        if context.get("procMount", "Default") != "Default":
            violations.append(f"{name}: procMount {context['procMount']}")
        apparmor = context.get("appArmorProfile", pod.get("appArmorProfile", {}))
        if apparmor.get("type") == "Unconfined":
            violations.append(f"{name}: AppArmor unconfined")
        selinux = context.get("seLinuxOptions", pod.get("seLinuxOptions", {}))
        if selinux.get("type") not in (None, "", "container_t", "container_init_t", "container_kvm_t"):
            violations.append(f"{name}: SELinux type {selinux['type']}")
        if selinux.get("user") or selinux.get("role"):
            violations.append(f"{name}: SELinux user or role set")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            violations.append(f"{name}: hostPort")
    return violations
