"""A skill bundle as uploaded: one top-level directory, `SKILL.md` at its root, YAML front matter
giving `name` (a kebab-case slug) and `description`. Every rule answers 400 naming the problem."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from registry.core.errors import invalid_request
from registry.core.uploads import UploadedPart

MANIFEST = "SKILL.md"
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
NAME_MAX = 64
DESCRIPTION_MAX = 1024
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class BundleFile:
    """An uploaded part and its path below the bundle's top-level directory."""

    path: str
    part: UploadedPart


@dataclass(frozen=True)
class Bundle:
    """A validated bundle: its manifest's name and description, and its files."""

    name: str
    description: str
    files: tuple[BundleFile, ...]


def _segments(path: str) -> list[str]:
    segments = path.split("/")
    if len(segments) < 2 or any(segment in ("", ".", "..") for segment in segments):
        raise invalid_request(
            f"files: {path!r} must be a relative path inside the bundle's one top-level directory"
            f" (like 'my-skill/{MANIFEST}')."
        )
    return segments


def _front_matter(manifest: UploadedPart) -> dict[str, Any]:
    manifest.seek(0)
    try:
        text = manifest.read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise invalid_request(f"{MANIFEST}: must be UTF-8 text.") from error
    match = FRONT_MATTER.match(text.lstrip("\ufeff"))
    if match is None:
        raise invalid_request(f"{MANIFEST}: YAML front matter between '---' lines is missing at the top.")
    try:
        matter = yaml.safe_load(match.group(1))
    except yaml.YAMLError as error:
        raise invalid_request(f"{MANIFEST}: the front matter is not valid YAML ({error}).") from error
    if not isinstance(matter, dict):
        raise invalid_request(f"{MANIFEST}: the front matter must be a YAML mapping.")
    return matter


def _manifest_field(matter: dict[str, Any], field: str, limit: int) -> str:
    value = matter.get(field)
    if not isinstance(value, str) or not value.strip():
        raise invalid_request(f"{MANIFEST}: the front matter needs a non-empty `{field}`.")
    if len(value) > limit:
        raise invalid_request(f"{MANIFEST}: `{field}` must be at most {limit} characters.")
    return value.strip()


def parse_bundle(parts: Sequence[UploadedPart]) -> Bundle:
    """Validate the uploaded parts as one bundle."""
    if not parts:
        raise invalid_request("files: at least one file is required.")
    by_path: dict[str, dict[str, UploadedPart]] = {}
    for part in parts:
        directory, *rest = _segments(part.client_path)
        by_path.setdefault(directory, {})
        relative = "/".join(rest)
        if relative in by_path[directory]:
            raise invalid_request(f"files: {part.client_path!r} is sent twice.")
        by_path[directory][relative] = part
    if len(by_path) != 1:
        raise invalid_request(f"files: all files must be in one top-level directory; got {sorted(by_path)}.")
    [(directory, files)] = by_path.items()
    if MANIFEST not in files:
        raise invalid_request(f"files: {MANIFEST} is missing at the root of {directory}/.")
    matter = _front_matter(files[MANIFEST])
    name = _manifest_field(matter, "name", NAME_MAX)
    if not NAME_PATTERN.match(name):
        raise invalid_request(f"{MANIFEST}: `name` must be lowercase letters, digits and hyphens (got {name!r}).")
    return Bundle(
        name=name,
        description=_manifest_field(matter, "description", DESCRIPTION_MAX),
        files=tuple(BundleFile(path=path, part=part) for path, part in sorted(files.items())),
    )
