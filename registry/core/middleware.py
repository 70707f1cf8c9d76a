"""Request ids on every response, and the body-size limit answered before any view runs."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from registry.core.errors import ErrorType, json_error
from registry.core.ids import new_id


class RequestIdMiddleware:
    """Give each request a `req_...` id and echo it in the `request-id` response header."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.request_id = new_id("req")  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["request-id"] = request.request_id  # type: ignore[attr-defined]
        return response


class BodySizeLimitMiddleware:
    """Answer 413 when the declared body is larger than REGISTRY_MAX_BODY_BYTES."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        declared = request.META.get("CONTENT_LENGTH") or "0"
        limit = self.limit_for(request)
        if not declared.isdigit():
            return json_error(request, ErrorType.INVALID_REQUEST, "Content-Length is not a number.")
        if int(declared) > limit:
            return json_error(request, ErrorType.REQUEST_TOO_LARGE, f"Request body exceeds the limit of {limit} bytes.")
        return self.get_response(request)

    @staticmethod
    def limit_for(request: HttpRequest) -> int:
        """Uploads (multipart) have their own, larger limit; everything else the JSON limit."""
        if request.content_type == "multipart/form-data":
            return int(getattr(settings, "REGISTRY_MAX_UPLOAD_BYTES", settings.REGISTRY_MAX_BODY_BYTES))
        return int(settings.REGISTRY_MAX_BODY_BYTES)


class ArrayQueryParamsMiddleware:
    """Accept both `name=a&name=b` and `name[]=a` by folding `name[]` into `name`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if any(key.endswith("[]") for key in request.GET):
            normalized = request.GET.copy()
            for key in [key for key in normalized if key.endswith("[]")]:
                for value in normalized.pop(key):
                    normalized.appendlist(key[:-2], value)
            request.GET = normalized  # type: ignore[assignment]
        return self.get_response(request)
