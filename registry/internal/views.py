"""Internal endpoints: the guardrail bundle, guardrail-state write-back, usage ingestion; the public JWKS."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from registry.core.errors import ApiError, ErrorType, invalid_request
from registry.core.renderers import FastJSONRenderer
from registry.internal import selectors, services
from registry.internal.authentication import IsService, ServiceTokenAuthentication
from registry.sessions import selectors as session_selectors
from registry.sessions.models import Session

JOSE = "application/jose"


class InternalView(APIView):
    """Base: the service token, nothing else."""

    authentication_classes = [ServiceTokenAuthentication]
    permission_classes = [IsService]

    @staticmethod
    def session(workspace_id: str | None, session_id: str | None) -> Session:
        if not workspace_id or not session_id:
            raise invalid_request("workspace and session are both required.")
        return session_selectors.session_in_workspace(workspace_id=workspace_id, session_id=session_id)


class JoseRenderer(BaseRenderer):
    """Lets `Accept: application/jose` through content negotiation; the view answers the token itself."""

    media_type = JOSE
    format = "jose"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return data if isinstance(data, bytes) else str(data).encode()


class EffectiveGuardrailsView(InternalView):
    """`GET /internal/v1/guardrails/effective?workspace=...&session=...` (`signed=true` or Accept: application/jose)."""

    renderer_classes = [FastJSONRenderer, JoseRenderer]

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Any:
        session = self.session(request.query_params.get("workspace"), request.query_params.get("session"))
        bundle = selectors.guardrail_bundle(session)
        if request.query_params.get("signed") == "true" or JOSE in request.META.get("HTTP_ACCEPT", ""):
            token = selectors.signed(bundle)
            if token is None:
                raise ApiError(ErrorType.INVALID_REQUEST, "No bundle signing key is configured.", status=406)
            return HttpResponse(token, content_type=JOSE)
        return Response(bundle)


class GuardrailStateView(InternalView):
    """`POST /internal/v1/workspaces/{workspace}/sessions/{session}/guardrail-state`."""

    @extend_schema(exclude=True)
    def post(self, request: Request, workspace: str, session: str) -> Response:
        if not isinstance(request.data, dict):
            raise invalid_request("The body must be a JSON object of state entries.")
        state = services.guardrail_state_merge(session=self.session(workspace, session), update=dict(request.data))
        return Response({"session_id": session, "state": state.state})


class UsageIngestView(InternalView):
    """`POST /internal/v1/usage`: `{"records": [...]}` or one record; idempotent on `request_id`."""

    @extend_schema(exclude=True)
    def post(self, request: Request) -> Response:
        body = request.data
        records = body.get("records") if isinstance(body, dict) and "records" in body else [body]
        if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
            raise invalid_request("records: must be a list of usage record objects.")
        accepted, duplicates = services.usage_ingest(records=records)
        return Response({"accepted": accepted, "duplicates": duplicates})


class JwksView(APIView):
    """`/.well-known/jwks.json`: the public keys of the runtime's model-call tokens (public, unauthenticated)."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    renderer_classes = [FastJSONRenderer]

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        return Response(selectors.jwks_document(), headers={"cache-control": "max-age=60"})
