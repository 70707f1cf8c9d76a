"""Request ids on every response, a trace span per request, the body-size limit answered before any view
runs, and array query parameters. Each middleware works sync and async, so ASGI requests switch threads once."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from opentelemetry.trace import Span

from registry.core import tracing
from registry.core.error_pages import error_response
from registry.core.errors import ErrorType
from registry.core.ids import new_id


class DualModeMiddleware:
    """Base: `before` may answer early; `after` may change the response; `around` wraps the request in a
    context. Runs sync or async alike."""

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
        with self.around(request):
            early = self.before(request)
            return self.after(request, early if early is not None else self.get_response(request))

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        with self.around(request):
            early = self.before(request)
            return self.after(request, early if early is not None else await self.get_response(request))

    def around(self, request: HttpRequest) -> AbstractContextManager[object]:
        """A context the whole request runs in (none by default)."""
        return contextlib.nullcontext()

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


class TracingMiddleware(DualModeMiddleware):
    """A server span per request (`POST /v1/sessions/{id}/events`), continuing the caller's W3C `traceparent`
    or starting a trace, and current while the view runs, so the user events it appends carry it (see
    `tracing.TRACEPARENT_FIELD`). Probes and scrapes are not traced."""

    UNTRACED = frozenset({"/healthz", "/readyz", "/metrics"})

    @contextlib.contextmanager
    def around(self, request: HttpRequest) -> Iterator[object]:
        if request.path in self.UNTRACED:
            yield None
            return
        with self.span(request) as span:
            request.trace_span = span  # type: ignore[attr-defined]
            yield span

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        span = getattr(request, "trace_span", None)
        if span is not None:
            finish_span(span, request, response)
        return response

    @staticmethod
    def span(request: HttpRequest) -> AbstractContextManager[Span]:
        attributes = {
            "http.request.method": request.method or "",
            "url.path": request.path,
            "registry.request_id": getattr(request, "request_id", ""),
        }
        return tracing.continuing(
            request.headers.get("traceparent"),
            request.method or "HTTP",
            service=tracing.API_SERVICE,
            kind=tracing.SERVER,
            attributes=attributes,
        )


ROUTE_PARAMETER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


def route_template(route: str) -> str:
    """A Django route (`v1/sessions/<sesn_id:id>/events`) as the span names it (`/v1/sessions/{id}/events`)."""
    return "/" + ROUTE_PARAMETER.sub(r"{\1}", route)


def finish_span(span: Span, request: HttpRequest, response: HttpResponse) -> None:
    """Name the span by its route (known once the URL resolved) and record the status."""
    if not span.is_recording():
        return
    match = request.resolver_match
    if match is not None and match.route:
        route = route_template(match.route)
        span.update_name(f"{request.method} {route}")
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", response.status_code)
    if response.status_code >= 500:
        span.set_status(tracing.ERROR)


class BodySizeLimitMiddleware(DualModeMiddleware):
    """Answer 413 when the declared body is larger than REGISTRY_MAX_BODY_BYTES (in the envelope, or under the
    admin as its error page)."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        declared = request.META.get("CONTENT_LENGTH") or "0"
        if not declared.isdigit():
            return error_response(request, ErrorType.INVALID_REQUEST, "Content-Length is not a number.")
        limit = self.limit_for(request)
        if int(declared) > limit:
            return error_response(
                request, ErrorType.REQUEST_TOO_LARGE, f"Request body exceeds the limit of {limit} bytes."
            )
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
        if not request.META.get("QUERY_STRING"):
            return  # most requests: nothing to fold, and `request.GET` is not parsed for nothing
        if any(key.endswith("[]") for key in request.GET):
            normalized = request.GET.copy()
            for key in [key for key in normalized if key.endswith("[]")]:
                for value in normalized.pop(key):
                    normalized.appendlist(key[:-2], value)
            request.GET = normalized  # type: ignore[assignment]
