"""URL patterns of a standard resource family, generated once for every app.

`/v1/<family>` (GET list, POST create), `/v1/<family>/<id>` (GET, POST update, DELETE),
`/v1/<family>/<id>/archive` (POST). Path ids use the prefix converters of `registry.core.ids`.
"""

from __future__ import annotations

from typing import Any

from django.urls import URLPattern, path


def resource_urls(family: str, viewset: Any, id_kind: str, *, name: str) -> list[URLPattern]:
    collection = {
        method: action for method, action in (("get", "list"), ("post", "create")) if hasattr(viewset, action)
    }
    detail = {
        method: action
        for method, action in (("get", "retrieve"), ("post", "partial_update"), ("delete", "destroy"))
        if hasattr(viewset, action)
    }
    patterns = [
        path(f"{family}", viewset.as_view(collection), name=f"{name}-list"),
        path(f"{family}/<{id_kind}:id>", viewset.as_view(detail), name=f"{name}-detail"),
    ]
    if getattr(viewset, "archivable", False):
        patterns.append(
            path(f"{family}/<{id_kind}:id>/archive", viewset.as_view({"post": "archive"}), name=f"{name}-archive")
        )
    return patterns
