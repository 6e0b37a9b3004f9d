"""The API key the vendor-compatible routes require when the operator sets one (``KOKORO_API_KEY``).

Those routes' clients (the OpenAI, ElevenLabs, Cartesia and Deepgram SDKs and Pipecat's services) always send a key,
each its own way: ``Authorization: Bearer`` (OpenAI) or ``Token`` (Deepgram), ``xi-api-key`` (ElevenLabs),
``X-API-Key`` (Cartesia), or the query's ``api_key`` / ``xi_api_key`` where a browser cannot set headers. Unset, a key
is accepted and ignored. Set, a request to those routes without the key is refused before anything else runs: HTTP
with 401 ``unauthorized``, a WebSocket handshake with 403. The comparison takes the same time whatever the key sent.
The SageMaker contract's own routes (``/ping``, ``/invocations``, the session path) are left to SageMaker's IAM.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl

from kokoro_client.errors import ErrorCode, TTSError
from starlette.types import ASGIApp, Receive, Scope, Send

from kokoro_tts import metrics
from kokoro_tts.routes.streaming import error_response

# Where the vendor-compatible routes live: OpenAI's (/v1/audio, /v1/models), ElevenLabs' (/v1/text-to-speech),
# Deepgram's (/v1/speak), Cartesia's (/tts).
GUARDED_PREFIXES = ("/v1/", "/tts/")
_HEADERS = (b"xi-api-key", b"x-api-key")
_QUERY = ("api_key", "xi_api_key")


def presented(scope: Scope) -> str | None:
    """The key a request sent, in whichever of the vendors' places it is."""
    for name, value in scope.get("headers", []):
        if name in _HEADERS:
            return value.decode("latin-1")
        if name == b"authorization":
            scheme, _, credential = value.decode("latin-1").partition(" ")
            return credential.strip() if scheme.lower() in ("bearer", "token") else value.decode("latin-1")
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    return next((query[name] for name in _QUERY if name in query), None)


class ApiKeys:
    """Pure ASGI: lets a guarded request through only with ``key`` (every request when ``key`` is empty)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self._key = app, _digest(key) if key else b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._key and scope["type"] in ("http", "websocket") and scope["path"].startswith(GUARDED_PREFIXES):
            if not hmac.compare_digest(_digest(presented(scope) or ""), self._key):
                metrics.error(metrics.route_of(scope["path"]), ErrorCode.UNAUTHORIZED)
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})  # 403
                    return
                error = TTSError(ErrorCode.UNAUTHORIZED, "This server requires an API key; send the one it was given.")
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _digest(key: str) -> bytes:
    """Keys compared as digests: equal lengths, so the comparison's time says nothing of the key's length either."""
    return hashlib.sha256(key.encode()).digest()
