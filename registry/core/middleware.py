"""Request ids on every response, the body-size limit answered before any view runs, and array
query parameters. Each middleware works sync and async, so ASGI requests switch threads once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from registry.core.errors import ErrorType, json_error
from registry.core.ids import new_id


class DualModeMiddleware:
    """Base: `before` may answer early; `after` may change the response. Runs sync or async alike."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self.__acall__(request)
        early = self.before(request)
        return self.after(request, early if early is not None else self.get_response(request))

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        early = self.before(request)
        return self.after(request, early if early is not None else await self.get_response(request))

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return response


class RequestIdMiddleware(DualModeMiddleware):
    """Give each request a `req_...` id and echo it in the `request-id` response header."""

    def before(self, request: HttpRequest) -> None:
        request.request_id = new_id("req")  # type: ignore[attr-defined]

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        response["request-id"] = request.request_id  # type: ignore[attr-defined]
        return response


class BodySizeLimitMiddleware(DualModeMiddleware):
    """Answer 413 when the declared body is larger than REGISTRY_MAX_BODY_BYTES."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if not declared.isdigit():
            return json_error(request, ErrorType.INVALID_REQUEST, "Content-Length is not a number.")
        limit = self.limit_for(request)
        if int(declared) > limit:
            return json_error(request, ErrorType.REQUEST_TOO_LARGE, f"Request body exceeds the limit of {limit} bytes.")
        return None

    @staticmethod
    def limit_for(request: HttpRequest) -> int:
        """Uploads (multipart) have their own, larger limit; everything else the JSON limit."""
        if request.content_type == "multipart/form-data":
            return int(getattr(settings, "REGISTRY_MAX_UPLOAD_BYTES", settings.REGISTRY_MAX_BODY_BYTES))
        return int(settings.REGISTRY_MAX_BODY_BYTES)


class ArrayQueryParamsMiddleware(DualModeMiddleware):
    """Accept both `name=a&name=b` and `name[]=a` by folding `name[]` into `name`."""

    def before(self, request: HttpRequest) -> None:
        if any(key.endswith("[]") for key in request.GET):
            normalized = request.GET.copy()
            for key in [key for key in normalized if key.endswith("[]")]:
                for value in normalized.pop(key):
                    normalized.appendlist(key[:-2], value)
            request.GET = normalized  # type: ignore[assignment]
