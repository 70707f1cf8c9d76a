"""A minimal kustomize: renders the deploy/kubernetes kustomizations offline, without the kustomize binary.

It implements only the fields those kustomizations use (`resources`, `namespace`, `labels` pairs on
metadata, `images`, `patches` with strategic-merge patch files) and refuses any other field, so a new
field in a kustomization fails the tests instead of being ignored. Where `kubectl kustomize` exists,
the tests compare this rendering with it.
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
