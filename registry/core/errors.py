"""Error types of the registry, the exceptions that carry them, and the one renderer of the envelope.

Every non-2xx body is `{"type": "error", "error": {"type", "message"}, "request_id"}`.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response
from rest_framework.views import set_rollback

logger = logging.getLogger(__name__)


class ErrorType(enum.StrEnum):
    INVALID_REQUEST = "invalid_request_error"
    AUTHENTICATION = "authentication_error"
    PERMISSION = "permission_error"
    NOT_FOUND = "not_found_error"
    CONFLICT = "conflict_error"
    MEMORY_PRECONDITION_FAILED = "memory_precondition_failed_error"
    REQUEST_TOO_LARGE = "request_too_large"
    RATE_LIMIT = "rate_limit_error"
    API = "api_error"
    OVERLOADED = "overloaded_error"


STATUS_OF_TYPE = {
    ErrorType.INVALID_REQUEST: 400,
    ErrorType.AUTHENTICATION: 401,
    ErrorType.PERMISSION: 403,
    ErrorType.NOT_FOUND: 404,
    ErrorType.CONFLICT: 409,
    ErrorType.MEMORY_PRECONDITION_FAILED: 409,
    ErrorType.REQUEST_TOO_LARGE: 413,
    ErrorType.RATE_LIMIT: 429,
    ErrorType.API: 500,
    ErrorType.OVERLOADED: 529,
}


class ApiError(drf_exceptions.APIException):
    """An error with a registry error type; the status follows from the type unless given."""

    def __init__(self, error_type: ErrorType, message: str, status: int | None = None) -> None:
        super().__init__(detail=message)
        self.error_type = error_type
        self.status_code = status or STATUS_OF_TYPE[error_type]
        self.message = message


def invalid_request(message: str) -> ApiError:
    return ApiError(ErrorType.INVALID_REQUEST, message)


def not_found(message: str = "Not found.") -> ApiError:
    return ApiError(ErrorType.NOT_FOUND, message)


def conflict(message: str) -> ApiError:
    return ApiError(ErrorType.CONFLICT, message)


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}


def request_id_of(request: HttpRequest | Any) -> str:
    return str(getattr(request, "request_id", "") or getattr(getattr(request, "_request", None), "request_id", ""))


def json_error(request: HttpRequest, error_type: ErrorType, message: str, status: int | None = None) -> JsonResponse:
    """An error response outside DRF (middleware, Django's 404/500 handlers)."""
    return JsonResponse(
        error_body(error_type, message, request_id_of(request)), status=status or STATUS_OF_TYPE[error_type]
    )


def flatten_validation_detail(detail: Any, path: str = "") -> list[str]:
    """Turn DRF's nested validation detail into `field.sub: message` lines."""
    if isinstance(detail, dict):
        lines: list[str] = []
        for key, value in detail.items():
            name = path if key == "non_field_errors" else (f"{path}.{key}" if path else str(key))
            lines.extend(flatten_validation_detail(value, name))
        return lines
    if isinstance(detail, list):
        if detail and all(not isinstance(item, (dict, list)) for item in detail):
            return [f"{path}: {item}" if path else str(item) for item in detail]
        lines = []
        for index, item in enumerate(detail):
            lines.extend(flatten_validation_detail(item, f"{path}[{index}]" if path else f"[{index}]"))
        return lines
    return [f"{path}: {detail}" if path else str(detail)]


def classify(exc: Exception) -> tuple[ErrorType, int, str] | None:
    """Map a known exception to (type, status, message); None for an unexpected one."""
    if isinstance(exc, ApiError):
        return exc.error_type, exc.status_code, exc.message
    if isinstance(exc, drf_exceptions.ValidationError):
        return ErrorType.INVALID_REQUEST, 400, "; ".join(flatten_validation_detail(exc.detail))
    if isinstance(exc, drf_exceptions.ParseError):
        return ErrorType.INVALID_REQUEST, 400, f"Malformed request body: {exc.detail}"
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return ErrorType.INVALID_REQUEST, 415, str(exc.detail)
    if isinstance(exc, (drf_exceptions.NotAuthenticated, drf_exceptions.AuthenticationFailed)):
        return ErrorType.AUTHENTICATION, 401, str(exc.detail)
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return ErrorType.PERMISSION, 403, str(exc.detail)
    if isinstance(exc, PermissionDenied):
        return ErrorType.PERMISSION, 403, "You do not have permission to perform this action."
    if isinstance(exc, (drf_exceptions.NotFound, Http404)):
        return ErrorType.NOT_FOUND, 404, "Not found."
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return ErrorType.INVALID_REQUEST, 405, str(exc.detail)
    if isinstance(exc, drf_exceptions.NotAcceptable):
        return ErrorType.INVALID_REQUEST, 406, str(exc.detail)
    if isinstance(exc, drf_exceptions.Throttled):
        return ErrorType.RATE_LIMIT, 429, str(exc.detail)
    if isinstance(exc, RequestDataTooBig):
        return ErrorType.REQUEST_TOO_LARGE, 413, "Request body is too large."
    return None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's exception handler: every error, expected or not, in the envelope."""
    request = context.get("request")
    known = classify(exc)
    if known is None:
        logger.exception("unhandled error", extra={"request_id": request_id_of(request)})
        error_type, status, message = ErrorType.API, 500, "Internal server error."
    else:
        error_type, status, message = known
    response = Response(error_body(error_type, message, request_id_of(request)), status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    # Undo the request's writes if a view-level atomic block is open (services are atomic themselves).
    set_rollback()
    return response
