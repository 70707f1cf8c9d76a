"""OpenAPI pieces shared by the registry's list endpoints."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

LIST_PARAMETERS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="Page size, 1 to 100 (default 20)."),
    OpenApiParameter("page", OpenApiTypes.STR, description="Opaque cursor from a previous page."),
    OpenApiParameter("order", OpenApiTypes.STR, enum=["asc", "desc"], description="Sort by creation time."),
    OpenApiParameter("include_archived", OpenApiTypes.BOOL, description="Include archived items."),
]
