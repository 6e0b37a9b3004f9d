"""What a caller may send: POST /invocations {"prompt", "mode"?, "voice"?, "speed"?, "format"?, "model_id"?,
"session_id"?, "played_ms"?}; a report of what was heard alone is {"session_id", "played_ms"}.

``BodyGuard`` (pure ASGI, before the SDK) reads at most ``MAX_BODY_BYTES`` and answers a body that is not JSON;
``parse_request`` turns the JSON into a ``VoiceRequest`` or a ``RequestError`` with a stable code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kokoro_client.audio import FORMAT_NAMES, MAX_SPEED, MIN_SPEED
from kokoro_client.errors import quoted
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .conversations import SESSION_ID
from .events import ErrorCode
from .metrics import request_error
from .settings import AgentSettings

MODES = ("bidi", "batch")
# A prompt is at most max_prompt_chars (8,000 by default): a body of 1 MiB is generous, and is all that is read.
MAX_BODY_BYTES = 1024 * 1024


class RequestError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class VoiceRequest:
    prompt: str | None  # None: the request only reports what was heard (played_ms)
    mode: str = "bidi"
    voice: str | None = None
    speed: float | None = None
    format: str = "pcm"
    model_id: str | None = None
    session_id: str | None = None  # AgentCore's runtime session, else the caller's own: the conversation's key
    played_ms: float | None = None  # how much of the session's last reply the caller played before interrupting


def _optional_str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is not None and not isinstance(value, str):
        raise RequestError(ErrorCode.INVALID_REQUEST, f"'{key}' must be a string")
    return value or None


def parse_request(payload: object, settings: AgentSettings, runtime_session_id: str | None = None) -> VoiceRequest:
    """Check the request; the TTS server checks the voice itself (it knows which packs it has). AgentCore's session
    id (its header) names the conversation; a body's ``session_id`` does where there is none (locally)."""
    if not isinstance(payload, dict):
        raise RequestError(ErrorCode.INVALID_REQUEST, "the request body must be a JSON object")
    session_id = runtime_session_id or _optional_str(payload, "session_id")
    if session_id is not None and not SESSION_ID.fullmatch(session_id):
        message = "'session_id' must be 1 to 256 letters, digits, '_' or '-', starting with a letter or digit"
        raise RequestError(ErrorCode.INVALID_SESSION_ID, message)
    played_ms = payload.get("played_ms")
    if played_ms is not None:
        if isinstance(played_ms, bool) or not isinstance(played_ms, int | float) or not 0 <= played_ms < 1e9:
            raise RequestError(ErrorCode.INVALID_REQUEST, "'played_ms' must be a number of milliseconds, 0 or more")
        if session_id is None:
            raise RequestError(ErrorCode.INVALID_REQUEST, "'played_ms' reports on a session's reply: send 'session_id'")
    prompt = payload.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise RequestError(ErrorCode.INVALID_REQUEST, "'prompt' must be a string")
    if "prompt" not in payload and played_ms is not None:
        return VoiceRequest(None, session_id=session_id, played_ms=float(played_ms))
    if not prompt or not prompt.strip():
        raise RequestError(ErrorCode.EMPTY_PROMPT, "'prompt' is missing or blank")
    if len(prompt) > settings.max_prompt_chars:
        raise RequestError(ErrorCode.PROMPT_TOO_LONG, f"'prompt' is over {settings.max_prompt_chars} characters")
    mode = payload.get("mode", "bidi")
    if mode not in MODES:
        raise RequestError(ErrorCode.UNKNOWN_MODE, f"'mode' must be one of {', '.join(MODES)}, not {quoted(mode)}")
    speed = payload.get("speed", settings.speed)
    if speed is not None and (
        isinstance(speed, bool) or not isinstance(speed, int | float) or not MIN_SPEED <= speed <= MAX_SPEED
    ):
        raise RequestError(ErrorCode.INVALID_SPEED, f"'speed' must be a number from {MIN_SPEED} to {MAX_SPEED}")
    fmt = payload.get("format", "pcm")
    if fmt not in FORMAT_NAMES:
        raise RequestError(ErrorCode.INVALID_REQUEST, f"'format' must be one of {', '.join(FORMAT_NAMES)}")
    return VoiceRequest(
        prompt=prompt.strip(),
        mode=mode,
        voice=_optional_str(payload, "voice") or settings.voice,
        speed=None if speed is None else float(speed),
        format=fmt,
        model_id=_optional_str(payload, "model_id"),
        session_id=session_id,
        played_ms=None if played_ms is None else float(played_ms),
    )


class BodyGuard:
    """Pure ASGI, before the SDK: POST /invocations bodies are read up to ``MAX_BODY_BYTES`` (413 past it, without
    reading the rest) and must be JSON (400 invalid_json), each answered ``{"error": {"code", "message"}}``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != "/invocations" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        more = True
        declared = dict(scope.get("headers", [])).get(b"content-length", b"0")
        too_large = declared.isdigit() and int(declared) > MAX_BODY_BYTES
        while more and not too_large:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            too_large = len(body) > MAX_BODY_BYTES
        if too_large:
            too_long = f"the body is over {MAX_BODY_BYTES} bytes"
            await _error(scope, receive, send, 413, ErrorCode.BODY_TOO_LARGE, too_long)
            return
        try:
            json.loads(body)
        except (ValueError, RecursionError):
            await _error(scope, receive, send, 400, ErrorCode.INVALID_JSON, "the body is not JSON")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _error(scope: Scope, receive: Receive, send: Send, status: int, code: ErrorCode, message: str) -> None:
    request_error(code)
    response = JSONResponse({"error": {"code": code.value, "message": message}}, status_code=status)
    response.headers["connection"] = "close"  # the rest of an unread body is never read
    await response(scope, receive, send)
