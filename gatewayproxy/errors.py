"""The gateway's error codes (one enum) and the one place that renders them in each path protocol."""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    """Machine-readable failure codes of the gateway (interface.md plus decisions.md)."""

    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_PARAMETER = "unsupported_parameter"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    POLICY_GUARDRAIL_DENIED = "policy_guardrail_denied"
    GUARDRAIL_BLOCKED_INPUT = "guardrail_blocked_input"
    GUARDRAIL_BLOCKED_OUTPUT = "guardrail_blocked_output"
    NOT_FOUND = "not_found"
    NO_ROUTE = "no_route"
    PATH_NOT_ALLOWED = "path_not_allowed"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONFIG_READ_ONLY = "config_read_only"
    REQUEST_TIMEOUT = "request_timeout"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    HEADERS_TOO_LARGE = "headers_too_large"
    RATE_LIMITED = "rate_limited"
    BUDGET_EXCEEDED = "budget_exceeded"
    UNPRICED_MODEL = "unpriced_model"
    UPSTREAM_RATE_LIMITED = "upstream_rate_limited"
    NOT_IMPLEMENTED = "not_implemented"
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    OVERLOADED = "overloaded"
    INTERNAL_ERROR = "internal_error"
    USAGE_QUERY_UNAVAILABLE = "usage_query_unavailable"
    GUARDRAILS_UNAVAILABLE = "guardrails_unavailable"
    PRICING_UNAVAILABLE = "pricing_unavailable"
    WASM_PLUGINS_DISABLED = "wasm_plugins_disabled"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    UPSTREAM_AUTH_FAILED = "upstream_auth_failed"
    IDENTITY_UNAVAILABLE = "identity_unavailable"
    VAULT_UNAVAILABLE = "vault_unavailable"


STATUS_OF_CODE: dict[ErrorCode, int] = {
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.UNSUPPORTED_PARAMETER: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.POLICY_GUARDRAIL_DENIED: 403,
    ErrorCode.GUARDRAIL_BLOCKED_INPUT: 400,
    ErrorCode.GUARDRAIL_BLOCKED_OUTPUT: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.NO_ROUTE: 404,
    ErrorCode.PATH_NOT_ALLOWED: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.CONFIG_READ_ONLY: 409,
    ErrorCode.REQUEST_TIMEOUT: 408,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.HEADERS_TOO_LARGE: 431,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.BUDGET_EXCEEDED: 429,
    ErrorCode.UNPRICED_MODEL: 403,
    ErrorCode.UPSTREAM_RATE_LIMITED: 429,
    ErrorCode.NOT_IMPLEMENTED: 501,
    ErrorCode.UPSTREAM_ERROR: 502,
    ErrorCode.UPSTREAM_TIMEOUT: 504,
    ErrorCode.OVERLOADED: 503,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.USAGE_QUERY_UNAVAILABLE: 503,
    ErrorCode.GUARDRAILS_UNAVAILABLE: 503,
    ErrorCode.PRICING_UNAVAILABLE: 503,
    ErrorCode.WASM_PLUGINS_DISABLED: 503,
    ErrorCode.AUDIT_UNAVAILABLE: 503,
    ErrorCode.UPSTREAM_AUTH_FAILED: 502,
    ErrorCode.IDENTITY_UNAVAILABLE: 503,
    ErrorCode.VAULT_UNAVAILABLE: 502,
}

# Vendor A clients branch on `type`; these are the values its API uses for each status family.
_VENDOR_A_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
}
# Vendor B clients map `error.type` to exception classes; these are its names.
_VENDOR_B_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    431: "invalid_request_error",
    503: "overloaded_error",
    504: "timeout_error",
}
_JSONRPC_SERVER_ERROR = -32000


class Protocol(enum.Enum):
    """The wire protocol a path speaks, which decides the shape of its error bodies."""

    VENDOR_A = "vendor_a"
    VENDOR_B = "vendor_b"
    JSONRPC = "jsonrpc"


class GatewayError(Exception):
    """A failure the gateway answers itself, carrying its code, status and human message (`param`: the request
    field at fault, for `unsupported_parameter`)."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        status: int | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status if status is not None else STATUS_OF_CODE[code]
        self.headers = headers
        self.param = param


def error_type(protocol: Protocol, status: int) -> str:
    """The `type` field the clients of `protocol` expect for an HTTP status."""
    table = _VENDOR_B_TYPES if protocol is Protocol.VENDOR_B else _VENDOR_A_TYPES
    return table.get(status, "api_error" if protocol is Protocol.VENDOR_B or status < 500 else "server_error")


def error_body(
    protocol: Protocol,
    code: str,
    message: str,
    status: int,
    rpc_id: str | int | None = None,
    param: str | None = None,
) -> dict:
    """The error document for `code` in the envelope of `protocol` (decisions.md, Gateway); `rpc_id` is the
    JSON-RPC id of the request it answers, `param` the field a vendor-A `unsupported_parameter` names."""
    kind = error_type(protocol, status)
    if protocol is Protocol.VENDOR_B:
        return {"type": "error", "error": {"type": kind, "message": message, "code": code}}
    if protocol is Protocol.JSONRPC:
        return {
            "jsonrpc": "2.0",
            "id": rpc_id,
            "error": {"code": _JSONRPC_SERVER_ERROR, "message": message, "data": {"code": code}},
        }
    return {"error": {"message": message, "type": kind, "code": code, "param": param}}
