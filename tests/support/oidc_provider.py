"""A real OIDC provider for tests, built on Authlib and served over HTTP on a loopback port.

It issues RFC 9068 JWT access tokens by the client-credentials grant (the subject is the client id),
and serves discovery, JWKS and a userinfo endpoint that validates the token (401 + WWW-Authenticate).
"""

from __future__ import annotations

import json
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import requests
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import AuthorizationServer, ClientMixin, OAuth2Request, ResourceProtector
from authlib.oauth2.rfc6749.grants import ClientCredentialsGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator, JWTBearerTokenValidator
from authlib.oidc.core import UserInfo
from joserfc.jwk import KeySet, RSAKey

# The client id the registry is registered under at the provider (the `oidc` fixture registers it).
REGISTRY_CLIENT_ID = "agent-registry"

SCOPE = "openid"
AUDIENCE = "agent-registry"
DEFAULT_TOKEN_LIFETIME = 3600

HttpAnswer = tuple[int, Any, list[tuple[str, str]]]


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    """A confidential client whose id is the token subject; `token_lifetime` may be negative (expired)."""

    client_id: str
    client_secret: str
    token_lifetime: int = DEFAULT_TOKEN_LIFETIME
    client_metadata: dict[str, Any] = field(default_factory=dict)

    def get_client_id(self) -> str:
        return self.client_id

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "client_credentials"

    def get_allowed_scope(self, scope: str | None) -> str:
        return SCOPE


class ProviderRequest(OAuth2Request):  # type: ignore[misc]
    """An Authlib request built from what the HTTP handler read: method, URL, headers, form body."""

    def __init__(self, method: str, uri: str, headers: Any, form: dict[str, str]) -> None:
        super().__init__(method=method, uri=uri, headers=headers)
        self.payload = BasicOAuth2Payload(form)
        self._form = form

    @property
    def args(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.uri).query))

    @property
    def form(self) -> dict[str, str]:
        return self._form


class TokenGenerator(JWTBearerTokenGenerator):  # type: ignore[misc]
    """Signs access tokens with the provider's private key, for the registry's audience."""

    def __init__(self, issuer: str, keys: KeySet) -> None:
        super().__init__(issuer=issuer, expires_generator=lambda client, grant_type: client.token_lifetime)
        self.keys = keys

    def get_jwks(self) -> KeySet:
        return self.keys

    def get_audiences(self, client: Client, user: Any, scope: str) -> str:
        return AUDIENCE


class TokenValidator(JWTBearerTokenValidator):  # type: ignore[misc]
    """Checks signature, issuer, audience and expiry of a presented access token."""

    def __init__(self, issuer: str, keys: KeySet) -> None:
        super().__init__(issuer=issuer, resource_server=AUDIENCE, realm="oidc-test")
        self.keys = keys

    def get_jwks(self) -> KeySet:
        return self.keys


class Provider(AuthorizationServer):  # type: ignore[misc]
    """The authorization server: an in-memory client table and the endpoints' logic, without sockets."""

    def __init__(self, issuer: str) -> None:
        super().__init__(scopes_supported=[SCOPE])
        self.issuer = issuer
        key = RSAKey.generate_key(2048, parameters={"alg": "RS256", "use": "sig"}, auto_kid=True)
        self.private_keys = KeySet([key])
        self.public_keys = KeySet.import_key_set(self.private_keys.as_dict(private=False))
        self.clients: dict[str, Client] = {}
        self.register_grant(ClientCredentialsGrant)
        self.register_token_generator("default", TokenGenerator(issuer, self.private_keys))
        self.resource_protector = ResourceProtector()
        self.resource_protector.register_token_validator(TokenValidator(issuer, self.public_keys))

    # -- hooks Authlib asks a server to supply ---------------------------------------------
    def query_client(self, client_id: str) -> Client | None:
        return self.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        """JWT access tokens are self-contained: nothing to store."""

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        """No one listens to Authlib's signals here."""

    def create_oauth2_request(self, request: ProviderRequest) -> ProviderRequest:
        return request

    def handle_response(self, status: int, body: Any, headers: list[tuple[str, str]]) -> HttpAnswer:
        return status, body, list(headers)

    # -- endpoints -------------------------------------------------------------------------
    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "authorization_endpoint": f"{self.issuer}/authorize",
            "grant_types_supported": ["client_credentials"],
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": [SCOPE],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        }

    def userinfo(self, request: ProviderRequest) -> HttpAnswer:
        """The token's claims about its subject, or the library's 401 with WWW-Authenticate."""
        try:
            token = self.resource_protector.validate_request([SCOPE], request)
        except OAuth2Error as error:
            return self.handle_error_response(request, error)  # type: ignore[no-any-return]
        return 200, dict(UserInfo(sub=token["sub"])), [("Content-Type", "application/json")]


class ProviderHandler(BaseHTTPRequestHandler):
    """Routes HTTP requests to the Provider; every answer is JSON."""

    server: ProviderHttpServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def route(self, method: str) -> None:
        provider = self.server.provider
        path = urlsplit(self.path).path
        request = ProviderRequest(method, provider.issuer + self.path, self.headers, self.read_form())
        if path == "/.well-known/openid-configuration" and method == "GET":
            answer: HttpAnswer = (200, provider.discovery(), [])
        elif path == "/jwks" and method == "GET":
            answer = (200, provider.public_keys.as_dict(private=False), [])
        elif path == "/token" and method == "POST":
            answer = provider.create_token_response(request)
        elif path == "/userinfo":
            answer = provider.userinfo(request)
        else:
            answer = (404, {"error": "not_found"}, [])
        self.send_answer(*answer)

    def read_form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        return dict(parse_qsl(self.rfile.read(length).decode())) if length else {}

    def send_answer(self, status: int, body: Any, headers: list[tuple[str, str]]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers:
            if name.lower() != "content-type":
                self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on answers, not on access logs."""


class ProviderHttpServer(ThreadingHTTPServer):
    """The listening socket; it knows its Provider."""

    daemon_threads = True
    provider: Provider


class RunningProvider:
    """A Provider listening on 127.0.0.1 at a free port, in a background thread, plus test helpers."""

    def __init__(self) -> None:
        self.http = ProviderHttpServer(("127.0.0.1", 0), ProviderHandler)
        host, port = self.http.server_address[:2]
        self.issuer = f"http://{host!s}:{port}"
        self.http.provider = Provider(self.issuer)
        self.thread = threading.Thread(target=self.http.serve_forever, name="oidc-provider", daemon=True)
        self.thread.start()

    @property
    def provider(self) -> Provider:
        return self.http.provider

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=5)

    def discovery(self) -> dict[str, Any]:
        """The discovery document, fetched over HTTP like a relying party would."""
        response = requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=5)
        response.raise_for_status()
        document: dict[str, Any] = response.json()
        return document

    def register_client(self, subject: str, token_lifetime: int = DEFAULT_TOKEN_LIFETIME) -> Client:
        client = Client(client_id=subject, client_secret=secrets.token_urlsafe(24), token_lifetime=token_lifetime)
        self.provider.clients[subject] = client
        return client

    def issue_token(self, subject: str, token_lifetime: int = DEFAULT_TOKEN_LIFETIME) -> str:
        """An access token for `subject`, obtained at the token endpoint by the client-credentials grant."""
        client = self.register_client(subject, token_lifetime)
        response = requests.post(
            self.discovery()["token_endpoint"],
            data={"grant_type": "client_credentials", "scope": SCOPE},
            auth=(client.client_id, client.client_secret),
            timeout=5,
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token
