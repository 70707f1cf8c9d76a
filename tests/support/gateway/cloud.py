"""Fake cloud providers on 127.0.0.1 for the cloud adapter tests: vendor D's runtime (conversation API JSON and
binary event streams, invoke, embedding models, the one-text ones counting their calls at once) that recomputes
every SigV4 signature with botocore's signer and the secret it knows for the access key, an STS endpoint answering
AssumeRoleWithWebIdentity, and vendor E (generate-content JSON and SSE, partner rawPredict, predict) behind a token
endpoint that checks service-account JWT assertions and refresh tokens."""

from __future__ import annotations

import json
import re
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import jwt
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from fakes.http_server import LoopbackHttpServer, QuietHandler

TOOL_INPUT = {"city": "Paris"}
# google-auth signs service-account assertions for Google's token endpoint, whatever `token_uri` says.
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
SLOW_TEXT_SECONDS = 0.3
CONNECTION_BACKLOG = 64
AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(\w+)/\d+/([\w-]+)/(\w+)/aws4_request, SignedHeaders=(\S+), Signature=(\w+)"
)


@dataclass
class Seen:
    """One request as a fake saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes


def event_message(headers: dict[str, str], payload: dict) -> bytes:
    """One message of the vendor's binary event-stream framing (string headers, CRC32 prelude and message)."""
    encoded = b"".join(
        bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
        for name, value in headers.items()
    )
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 16 + len(encoded) + len(body), len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + body
    return message + struct.pack(">I", zlib.crc32(message))


def converse_event(kind: str, payload: dict) -> bytes:
    """A ConverseStream event."""
    return event_message({":event-type": kind, ":content-type": "application/json", ":message-type": "event"}, payload)


class FakeServer(LoopbackHttpServer):
    """A threaded HTTP/1.1 server whose subclass answers `respond(seen)` with (status, headers, body or chunks);
    serving once `start()` is called."""

    def __init__(self) -> None:
        super().__init__(FakeHandler)
        self.seen: list[Seen] = []

    def respond(self, seen: Seen) -> tuple[int, dict[str, str], bytes | list[bytes]]:
        raise NotImplementedError


class FakeHandler(QuietHandler):
    """Records each POST on its `FakeServer` and relays the answer (chunked when it is a list of chunks)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        fake: FakeServer = self.owner
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode()
        seen = Seen("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw)
        fake.seen.append(seen)
        status, headers, answer = fake.respond(seen)
        if not isinstance(answer, list):
            self.reply(status, answer, headers)
            return
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in answer:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _json(status: int, document: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return status, {"content-type": "application/json", **(headers or {})}, json.dumps(document).encode()


class FakeAws(FakeServer):
    """Vendor D's runtime and STS on one origin. `secrets` maps access key ids to secret keys (STS adds the keys it
    issues); a request whose signature does not match is refused with 403 as the vendor would."""

    def __init__(self, secrets: dict[str, str]) -> None:
        super().__init__()
        self.secrets = dict(secrets)
        self.signed: list[dict[str, str]] = []  # per verified request: access key, region, session token
        self.sts_calls: list[dict[str, list[str]]] = []
        self.most_embeddings_at_once = 0
        self._embeddings_in_flight = 0
        self._lock = threading.Lock()
        # Room for every connection of a fan-out at once (the server's default backlog of 5 would hold them back).
        self.server.socket.listen(CONNECTION_BACKLOG)

    def respond(self, seen: Seen) -> tuple[int, dict[str, str], bytes | list[bytes]]:
        if seen.path == "/":
            return self._sts(seen)
        problem = self._verify(seen)
        if problem:
            return _json(403, {"message": problem}, {"x-amzn-errortype": "AccessDeniedException"})
        model, action = seen.path.split("/")[2], seen.path.split("/")[3]
        body = seen.body or {}
        if action == "converse":
            if body.get("inferenceConfig", {}).get("maxTokens") == 1:
                return _json(400, {"message": "maxTokens is too small"}, {"x-amzn-errortype": "ValidationException"})
            return _json(200, self._converse(body))
        if action == "converse-stream":
            return 200, {"content-type": "application/vnd.amazon.eventstream"}, self._converse_stream(body)
        if action == "invoke" and "inputText" in body:
            return self._titan(body)
        if action == "invoke" and "texts" in body:
            return _json(
                200, {"id": "e1", "texts": body["texts"], "embeddings": {"float": [[0.25] * 3 for _ in body["texts"]]}}
            )
        if action == "invoke":
            message = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": "Hello from invoke"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 9, "output_tokens": 3},
            }
            return _json(200, message)
        return _json(404, {"message": f"no such path {seen.path}"})

    def _titan(self, body: dict) -> tuple[int, dict[str, str], bytes]:
        """A one-text embedding: refused for an empty text, as the vendor does; each component the text's word
        count, so vectors tell their texts apart; a text starting `slow` answers after SLOW_TEXT_SECONDS. Counts the
        embedding calls in flight at once (`most_embeddings_at_once`)."""
        words = body["inputText"].split()
        if not words:
            return _json(400, {"message": "inputText must not be empty"}, {"x-amzn-errortype": "ValidationException"})
        with self._lock:
            self._embeddings_in_flight += 1
            self.most_embeddings_at_once = max(self.most_embeddings_at_once, self._embeddings_in_flight)
        try:
            if words[0] == "slow":
                time.sleep(SLOW_TEXT_SECONDS)
        finally:
            with self._lock:
                self._embeddings_in_flight -= 1
        vector = [float(len(words))] * int(body.get("dimensions") or 4)
        return _json(200, {"embedding": vector, "inputTextTokenCount": len(words)})

    def _verify(self, seen: Seen) -> str | None:
        found = AUTHORIZATION.fullmatch(seen.headers.get("authorization", ""))
        if found is None:
            return "missing or malformed authorization"
        access_key, region, service, signed, signature = found.groups()
        secret = self.secrets.get(access_key)
        if secret is None:
            return f"unknown access key {access_key}"
        request = AWSRequest(
            method="POST",
            url=f"{self.url}{seen.path}",
            data=seen.raw,
            headers={name: seen.headers[name] for name in signed.split(";")},
        )
        request.context["timestamp"] = seen.headers["x-amz-date"]
        token = seen.headers.get("x-amz-security-token")
        auth = SigV4Auth(Credentials(access_key, secret, token), service, region)
        expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
        if signature != expected:
            return "The request signature we calculated does not match the signature you provided"
        self.signed.append({"access_key": access_key, "region": region, "service": service, "token": token or ""})
        return None

    def _sts(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        form = parse_qs(seen.raw.decode())
        self.sts_calls.append(form)
        if form.get("Action") != ["AssumeRoleWithWebIdentity"] or form.get("WebIdentityToken") != [
            "web-identity-token"
        ]:
            return (
                403,
                {"content-type": "text/xml"},
                b"<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>",
            )
        number = len(self.sts_calls)
        access_key, secret, token = f"ASIASTS{number}", f"sts-secret-{number}", f"sts-session-{number}"
        self.secrets[access_key] = secret
        expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        xml = f"""<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>gateway</SubjectFromWebIdentityToken>
    <AssumedRoleUser><Arn>{form["RoleArn"][0]}/gw</Arn><AssumedRoleId>AROA:gw</AssumedRoleId></AssumedRoleUser>
    <Credentials><AccessKeyId>{access_key}</AccessKeyId><SecretAccessKey>{secret}</SecretAccessKey>
      <SessionToken>{token}</SessionToken><Expiration>{expires}</Expiration></Credentials>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"""
        return 200, {"content-type": "text/xml"}, xml.encode()

    @staticmethod
    def _tool(body: dict) -> str | None:
        tools = (body.get("toolConfig") or {}).get("tools") or []
        return tools[0]["toolSpec"]["name"] if tools else None

    def _converse(self, body: dict) -> dict:
        tool = self._tool(body)
        if tool:
            content: list[dict] = [{"toolUse": {"toolUseId": "tooluse_1", "name": tool, "input": TOOL_INPUT}}]
            stop = "tool_use"
        else:
            content, stop = [{"text": "Hello from converse"}], "end_turn"
        usage = {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17, "cacheReadInputTokens": 2}
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop,
            "usage": usage,
            "metrics": {"latencyMs": 5},
        }

    def _converse_stream(self, body: dict) -> list[bytes]:
        frames = [converse_event("messageStart", {"role": "assistant"})]
        tool = self._tool(body)
        if tool:
            frames.append(
                converse_event(
                    "contentBlockStart",
                    {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": tool}}},
                )
            )
            arguments = json.dumps(TOOL_INPUT)
            frames += [
                converse_event(
                    "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": arguments[i : i + 6]}}}
                )
                for i in range(0, len(arguments), 6)
            ]
            stop = "tool_use"
        else:
            frames += [
                converse_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": word}})
                for word in ("Hello ", "from ", "converse")
            ]
            stop = "end_turn"
        frames.append(converse_event("contentBlockStop", {"contentBlockIndex": 0}))
        frames.append(converse_event("messageStop", {"stopReason": stop}))
        frames.append(
            converse_event(
                "metadata",
                {"usage": {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}, "metrics": {"latencyMs": 5}},
            )
        )
        return frames


class FakeGoogle(FakeServer):
    """Vendor E and its token endpoint (`/token`) on one origin. Service-account assertions are checked against
    `public_keys` (client email -> PEM); the model paths want a token this fake issued."""

    def __init__(self, public_keys: dict[str, bytes], refresh_tokens: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.public_keys = public_keys
        self.refresh_tokens = refresh_tokens
        self.issued: list[str] = []
        self.grants: list[dict[str, Any]] = []

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def respond(self, seen: Seen) -> tuple[int, dict[str, str], bytes | list[bytes]]:
        if seen.path == "/token":
            return self._token(seen)
        if seen.headers.get("authorization", "").removeprefix("Bearer ") not in self.issued:
            return _json(401, {"error": {"code": 401, "message": "invalid credentials", "status": "UNAUTHENTICATED"}})
        body, path = seen.body or {}, seen.path
        if path.endswith(":generateContent"):
            if body.get("generationConfig", {}).get("maxOutputTokens") == 1:
                return _json(
                    400,
                    {"error": {"code": 400, "message": "maxOutputTokens is too small", "status": "INVALID_ARGUMENT"}},
                )
            return _json(200, self._answer(body))
        if path.endswith(":streamGenerateContent?alt=sse"):
            return 200, {"content-type": "text/event-stream"}, self._stream(body)
        if path.endswith(":predict"):
            predictions = [
                {
                    "embeddings": {
                        "values": [0.125] * 3,
                        "statistics": {"token_count": len(instance["content"].split()), "truncated": False},
                    }
                }
                for instance in body["instances"]
            ]
            return _json(200, {"predictions": predictions})
        if path.endswith(":rawPredict"):
            message = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude",
                "content": [{"type": "text", "text": "Hello from the partner"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 9, "output_tokens": 4},
            }
            return _json(200, message)
        return _json(404, {"error": {"code": 404, "message": f"no such path {path}", "status": "NOT_FOUND"}})

    def _token(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        form = {key: values[0] for key, values in parse_qs(seen.raw.decode()).items()}
        self.grants.append(form)
        if form.get("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            unverified = jwt.decode(form["assertion"], options={"verify_signature": False})
            key = self.public_keys.get(unverified.get("iss", ""))
            if key is None:
                return _json(400, {"error": "invalid_grant"})
            try:
                claims = jwt.decode(form["assertion"], key, algorithms=["RS256"], audience=GOOGLE_TOKEN_AUDIENCE)
            except jwt.PyJWTError as error:
                return _json(400, {"error": "invalid_grant", "error_description": str(error)})
            if "cloud-platform" not in claims.get("scope", ""):
                return _json(400, {"error": "invalid_scope"})
        elif form.get("grant_type") == "refresh_token":
            if form.get("refresh_token") not in self.refresh_tokens:
                return _json(400, {"error": "invalid_grant"})
        else:
            return _json(400, {"error": "unsupported_grant_type"})
        token = f"ya29.fake-{len(self.issued) + 1}"
        self.issued.append(token)
        return _json(200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"})

    @staticmethod
    def _tool(body: dict) -> str | None:
        tools = body.get("tools") or []
        return tools[0]["functionDeclarations"][0]["name"] if tools else None

    def _answer(self, body: dict) -> dict:
        count = int(body.get("generationConfig", {}).get("candidateCount") or 1)
        tool = self._tool(body)
        candidates = []
        for index in range(count):
            if tool:
                parts: list[dict] = [{"functionCall": {"name": tool, "args": TOOL_INPUT}}]
            else:
                parts = [{"text": f"Hello from gemini {index}"}]
            candidates.append({"index": index, "content": {"role": "model", "parts": parts}, "finishReason": "STOP"})
        usage = {
            "promptTokenCount": 10,
            "candidatesTokenCount": 4 * count,
            "totalTokenCount": 10 + 4 * count,
            "thoughtsTokenCount": 2,
        }
        return {
            "candidates": candidates,
            "usageMetadata": usage,
            "modelVersion": "gemini-2.5-flash-001",
            "responseId": "resp-1",
        }

    def _stream(self, body: dict) -> list[bytes]:
        def frame(document: dict) -> bytes:
            return f"data: {json.dumps(document)}\r\n\r\n".encode()

        tool = self._tool(body)
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 14}
        if tool:
            call = {"functionCall": {"name": tool, "args": TOOL_INPUT}}
            return [
                frame(
                    {
                        "candidates": [
                            {"index": 0, "content": {"role": "model", "parts": [call]}, "finishReason": "STOP"}
                        ],
                        "usageMetadata": usage,
                    }
                )
            ]
        words = ["Hello ", "from ", "gemini"]
        frames = [
            frame(
                {
                    "candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": word}]}}],
                    "usageMetadata": {"promptTokenCount": 10},
                }
            )
            for word in words[:-1]
        ]
        last = {"index": 0, "content": {"role": "model", "parts": [{"text": words[-1]}]}, "finishReason": "STOP"}
        frames.append(frame({"candidates": [last], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash-001"}))
        return frames
