"""Error answers outside DRF (Django's 400/403/404/500 handlers, middleware): the API's JSON envelope, except
under the admin, where staff get an HTML page in the admin's look that names the request id and nothing else."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.loader import select_template
from django.urls import NoReverseMatch, reverse

from registry.core.errors import STATUS_OF_TYPE, ErrorType, json_error, request_id_of

# What each page says; a status without a template of its own (admin/<status>.html) shows its message on
# admin/error_page.html.
TITLES = {
    400: "Bad request",
    403: "Permission denied",
    404: "Page not found",
    413: "Request too large",
    500: "Server error",
}


def under_admin(request: HttpRequest) -> bool:
    """Whether the request's path is one of the admin site's."""
    try:
        prefix = reverse("admin:index")
    except NoReverseMatch:  # a URLconf without the admin
        return False
    return request.path.startswith(prefix)


def page_context(request: HttpRequest, status: int) -> dict[str, Any]:
    """The admin's frame around the page: its full context (header, user tools, sidebar) once the request's
    user is known; a bare header for a server error, which reads nothing that may be what failed (the
    database, the session), and for an answer given before authentication ran (a body over the limit)."""
    if status >= 500 or not hasattr(request, "user"):
        return {"site_header": admin.site.site_header, "site_title": admin.site.site_title, "site_url": None}
    return admin.site.each_context(request)


def admin_error_page(request: HttpRequest, status: int, message: str = "") -> HttpResponse:
    """The HTML page of an error under the admin: its title, `message` where the page has no text of its own,
    and the request id to quote; never a traceback or an exception's text."""
    title = TITLES.get(status, "Error")
    template = select_template([f"admin/{status}.html", "admin/error_page.html"])
    context = {
        **page_context(request, status),
        "title": title,
        "status": status,
        "message": message,
        "request_id": request_id_of(request),
    }
    return HttpResponse(template.render(context, request), status=status)


def error_response(
    request: HttpRequest, error_type: ErrorType, message: str, status: int | None = None
) -> HttpResponse:
    """An error answered outside DRF: the admin's HTML page under the admin, the JSON envelope anywhere else."""
    if under_admin(request):
        return admin_error_page(request, status or STATUS_OF_TYPE[error_type], message)
    return json_error(request, error_type, message, status)
