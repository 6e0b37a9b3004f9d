"""One interface for every way of reaching the TTS server.

A ``TTSSession`` takes sentences and yields events: audio bytes and the server's control messages
(docs/protocol.md). Transports: ``local_ws`` (WebSocket to the container), ``sagemaker_bidi``
(InvokeEndpointWithBidirectionalStream over HTTP/2) and ``http_batch`` (one POST /invocations, or
invoke_endpoint_with_response_stream on SageMaker) for the batch baseline.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, Protocol

from .protocol import Config, ServerFrame, server_frame


@dataclass(frozen=True)
class AudioEvent:
    """Audio bytes of the utterance in flight, in the session's format."""

    data: bytes


@dataclass(frozen=True)
class ControlEvent:
    """A JSON control message from the server: synthesis_start, synthesis_complete, cancelled or error."""

    message: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return str(self.message.get("type", ""))

    @cached_property
    def frame(self) -> ServerFrame:
        """The message as a typed frame (``TTSError`` if it is not one of the protocol's)."""
        return server_frame(self.message)


TTSEvent = AudioEvent | ControlEvent


class TransportCode(StrEnum):
    """The stable code of a ``TTSTransportError``: what a client saw of the server, whichever transport it used.

    The agent ends a reply with these same codes (its ``error`` event), so they are wire text too.
    """

    TTS_UNAVAILABLE = "tts_unavailable"  # never connected, or the server is not ready
    # The server refused new work with server_busy: retry later, after retry_after_s when it said.
    TTS_BUSY = "tts_busy"
    TTS_SESSION_DROPPED = "tts_session_dropped"  # the connection or response stream was lost mid-reply
    TTS_ERROR = "tts_error"  # the server refused the request (tts_code is its own code)
    TTS_TIMEOUT = "tts_timeout"  # the server stopped answering in time


class TTSTransportError(Exception):
    """A transport failure with a stable code (``TransportCode``), so the pipeline can tell the caller what happened."""

    def __init__(
        self, code: TransportCode, message: str, tts_code: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.tts_code = tts_code
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class SessionOptions:
    voice: str | None = None
    speed: float | None = None
    format: str = "pcm"
    literal: bool = False  # markup (markdown, HTML) read as written rather than as a person reads it
    word_timestamps: bool = False  # the server says which words start in each audio frame (``Words`` frames)

    def config(self) -> Config:
        """The session's ``config`` message: the format, and whatever else differs from the server's defaults."""
        chosen = {
            "voice": self.voice,
            "speed": self.speed,
            "literal": self.literal or None,
            "word_timestamps": self.word_timestamps or None,
        }
        return Config(format=self.format, **{name: value for name, value in chosen.items() if value is not None})


class TTSSession(Protocol):
    async def send_text(self, text: str, utterance_id: str) -> None:
        """Queue one utterance (its whole text) on the open session."""
        ...

    async def append_text(self, text: str, utterance_id: str) -> None:
        """Add ``text`` (an LLM's token, say) to utterance ``utterance_id``, opening it if it is not open: the server
        decides where its pieces start and speaks each as soon as it is complete (``append``)."""
        ...

    async def flush(self, utterance_id: str) -> None:
        """End utterance ``utterance_id``'s text: the rest is spoken, then its ``synthesis_complete`` (``flush``)."""
        ...

    async def finish(self) -> None:
        """Ask the server to finish what is queued and end the session (``{"type":"close"}``)."""
        ...

    async def cancel(self) -> None:
        """Drop everything queued and stop the utterance in flight."""
        ...

    def events(self) -> AsyncIterator[TTSEvent]:
        """Audio and control events in arrival order; ends when the server ends the session."""
        ...

    async def aclose(self) -> None:
        """Tear the connection down now (the caller left, or an error)."""
        ...


class TTSTransport(Protocol):
    async def open_session(self, options: SessionOptions) -> TTSSession: ...


class BatchTTS(Protocol):
    def synthesize(self, text: str, options: SessionOptions) -> AsyncIterator[bytes]:
        """The audio of the whole text, streamed as it arrives."""
        ...


def classify_chunk(data: bytes, is_text: bool | None = None) -> TTSEvent:
    """Tell audio from control.

    Use the frame's own type when the transport gives one (WebSocket frame type, PayloadPart DataType). Without
    it, a chunk is control only if the WHOLE chunk decodes as a JSON object: raw PCM may well begin with 0x7b ("{").
    """
    if is_text is False:
        return AudioEvent(data)
    try:
        message = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        message = None
    if isinstance(message, dict):
        return ControlEvent(message)
    if is_text:
        raise ValueError("a text frame from the TTS server that is not a JSON object")
    return AudioEvent(data)
