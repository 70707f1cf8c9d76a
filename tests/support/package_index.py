"""A PyPI "simple" index for tests: minimal pure-Python wheels, and the paths pip asked for."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.sites import loopback_sites


def wheel(name: str, value: str) -> bytes:
    """A minimal pure-Python wheel whose module `name` has `VALUE = value`."""
    files = {
        f"{name}/__init__.py": f"VALUE = {value!r}\n".encode(),
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{name}-1.0.dist-info/RECORD", record + f"{name}-1.0.dist-info/RECORD,,\n")
    return buffer.getvalue()


@dataclass
class Index:
    """A PyPI "simple" index on the host's loopback: the wheels it offers and the paths asked for."""

    url: str = ""
    wheels: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    stop: Callable[[], None] = lambda: None  # stops the server `served_index` started

    def add(self, name: str, value: str) -> None:
        self.wheels[name] = wheel(name, value)

    def route(self, path: str) -> tuple[bytes, str]:
        self.requests.append(path)
        if path.startswith("/files/"):
            return self.wheels[path.split("/")[2]], "application/octet-stream"
        name = path.strip("/").split("/")[-1]
        links = ""
        if name in self.wheels:
            digest = hashlib.sha256(self.wheels[name]).hexdigest()
            filename = f"{name}-1.0-py3-none-any.whl"
            links = f'<a href="/files/{name}/{filename}#sha256={digest}">{filename}</a>'
        return f"<!DOCTYPE html><html><body>{links}</body></html>".encode(), "text/html"

    def downloads(self, name: str) -> int:
        return sum(path.startswith(f"/files/{name}/") for path in self.requests)

    def worker_env(self) -> dict[str, str]:
        """What a runtime worker needs to build from this index: it as the pip mirror, loopback let through."""
        return {"REGISTRY_SANDBOX_EGRESS_ALLOW": "127.0.0.1", "PIP_INDEX_URL": self.url + "/simple/"}


def served_index(**packages: str) -> Index:
    """An index offering these packages (name=value, see `wheel`), served on loopback until its `stop`."""
    index = Index()
    for name, value in packages.items():
        index.add(name, value)
    sites = loopback_sites()
    index.url = next(sites)(index.route)
    index.stop = sites.close
    return index
