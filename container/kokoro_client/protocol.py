"""The session protocol, v1: every message both ways, typed, with its encoding (docs/protocol.md is its prose).

Client → server: ``Synthesize``, ``Append`` and ``Flush`` (an utterance's text as it is written), ``Config``,
``Cancel``, ``Close``. Server → client: ``SynthesisStart``, ``Words``,
``SynthesisComplete``, ``Cancelled``, ``Error`` as JSON text frames, and the audio as binary frames. ``encode``
turns any of them into the JSON text that travels; ``parse_client_message`` (the server's side) and
``parse_server_frame`` (a client's side) turn the text back. A message arrives in a text or a binary frame
(SageMaker hands client payloads over as binary frames, UTF-8). Parsing never raises anything but ``TTSError``, so
a malformed message costs the client one error frame and never its session.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Final

from .audio import DEFAULT_FORMAT, SAMPLE_RATE
from .errors import ErrorCode, TTSError, quoted
from .json_messages import json_text

PROTOCOL_VERSION: Final = 1
WS_PATH: Final = "/invocations-bidirectional-stream"
"""The session's path on the server (SageMaker's bidirectional stream maps onto it)."""
INVOCATIONS_PATH: Final = "/invocations"
PING_PATH: Final = "/ping"

CLOSE_NORMAL: Final = 1000
"""After a ``close`` message, once everything queued is spoken."""
CLOSE_GOING_AWAY: Final = 1001
"""The server is shutting down (reason ``shutting_down: …``)."""
CLOSE_INTERNAL_ERROR: Final = 1011
"""The session failed unexpectedly (reason ``internal_error: …``), after an ``internal_error`` frame where one could be
sent; the failure is in the server's log."""
CLOSE_TRY_AGAIN_LATER: Final = 1013
"""The model is loading, or the server is at its session cap (reason ``server_busy: …``): retry later."""

MESSAGE_TYPES = ("synthesize", "append", "flush", "config", "cancel", "close")
FRAME_TYPES = ("synthesis_start", "words", "synthesis_complete", "cancelled", "error")
_UNSET: Any = object()


@dataclass(frozen=True)
class Synthesize:
    text: object
    id: str | None = None
    voice: object = None
    speed: object = None
    sample_rate: object = None
    literal: object = None  # true: markup is read as written; None: the session's default


@dataclass(frozen=True)
class Append:
    """Add ``text`` (an LLM's token, any fragment) to utterance ``id``, opening it if it is not open: the server cuts
    the text into pieces as sentence ends become certain (or, when a slow stream's sentence end is not in sight, at a
    clause or word end) and speaks each at once. ``voice``, ``speed``, ``sample_rate`` and ``literal`` belong to the
    append that opens the utterance."""

    text: object
    id: str | None = None
    voice: object = None
    speed: object = None
    sample_rate: object = None
    literal: object = None  # true: markup is read as written; None: the session's default


@dataclass(frozen=True)
class Flush:
    """End the open utterance (``id``: it must be the open one): its text is complete, what is buffered is spoken."""

    id: str | None = None


@dataclass(frozen=True)
class Config:
    voice: object = _UNSET
    speed: object = _UNSET
    format: object = _UNSET
    sample_rate: object = _UNSET
    word_timestamps: object = _UNSET
    literal: object = _UNSET


@dataclass(frozen=True)
class Cancel:
    """Drop utterance ``id`` (queued or in flight); no ``id``: every one."""

    id: str | None = None


@dataclass(frozen=True)
class Close:
    pass


Command = Synthesize | Append | Flush | Config | Cancel | Close


@dataclass(frozen=True)
class SynthesisStart:
    """Sent before an utterance's first audio: the binary frames that follow belong to ``id``."""

    id: str
    format: str
    sample_rate: int


@dataclass(frozen=True)
class WordTiming:
    """One word as spoken: when, in ms from the start of its utterance's audio, and where it is in the text the
    client sent (``text[char_start:char_end] == word``; a piece read as several words, "$1.2M", is one word)."""

    word: str
    start_ms: float
    end_ms: float
    char_start: int
    char_end: int


@dataclass(frozen=True)
class Words:
    """The words whose audio starts in the binary frame that follows (opt-in: config ``word_timestamps``)."""

    id: str
    words: tuple[WordTiming, ...]


@dataclass(frozen=True)
class SynthesisComplete:
    """Sent after an utterance's last audio; ``synth_ms`` is compute time, ``bytes`` the audio bytes sent for it."""

    id: str
    audio_ms: float
    synth_ms: float
    bytes: int | None = None


@dataclass(frozen=True)
class Cancelled:
    """An utterance a cancel dropped or stopped (no ``SynthesisComplete`` follows)."""

    id: str


@dataclass(frozen=True)
class Error:
    """A refusal with a stable ``code``; ``id`` names the utterance when the error is about one."""

    code: str
    message: str
    id: str | None = None
    retry_after: int | None = None  # server_busy: seconds to wait before trying again (HTTP's Retry-After)

    @classmethod
    def of(cls, error: TTSError, utterance_id: str | None = None) -> Error:
        return cls(error.code.value, error.message, utterance_id, error.retry_after_s)


ServerFrame = SynthesisStart | Words | SynthesisComplete | Cancelled | Error
Message = Command | ServerFrame

_TYPE_NAMES: dict[type, str] = {
    Synthesize: "synthesize",
    Append: "append",
    Flush: "flush",
    Config: "config",
    Cancel: "cancel",
    Close: "close",
    SynthesisStart: "synthesis_start",
    Words: "words",
    SynthesisComplete: "synthesis_complete",
    Cancelled: "cancelled",
    Error: "error",
}


def is_set(value: object) -> bool:
    return value is not _UNSET


def encode(message: Message) -> str:
    """The JSON text of a message or frame: ``type`` first; unset and ``None`` optional fields left out."""
    fields: dict[str, Any] = {"type": _TYPE_NAMES[type(message)]}
    for name, value in vars(message).items():
        if value is _UNSET or (value is None and not isinstance(message, Config)):
            continue
        fields[name] = value
    return json_text(fields, _as_dict)


def _as_dict(value: object) -> dict[str, Any]:
    if isinstance(value, WordTiming):
        return asdict(value)
    raise TypeError(f"{type(value).__name__} is not part of the protocol")


def parse_server_frame(raw: str | bytes) -> ServerFrame:
    """A server's JSON text frame as a typed frame; ``TTSError(invalid_message)`` if it is not one."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise TTSError(ErrorCode.INVALID_MESSAGE, f"not a JSON frame from the TTS server: {raw[:200]!r}") from None
    if not isinstance(value, dict):
        raise TTSError(ErrorCode.INVALID_MESSAGE, f"a frame from the TTS server must be an object: {raw[:200]!r}")
    return server_frame(value)


def server_frame(value: dict[str, Any]) -> ServerFrame:
    """A decoded JSON frame from the server as a typed frame; ``TTSError`` if it is not one."""
    kind = value.get("type")
    try:
        match kind:
            # Lenient on the numbers a reader can do without: a missing one reads as unknown (0, None).
            case "synthesis_start":
                rate = int(value.get("sample_rate", SAMPLE_RATE))
                return SynthesisStart(str(value["id"]), str(value.get("format", DEFAULT_FORMAT)), rate)
            case "words":
                return Words(str(value["id"]), tuple(_word_timing(w) for w in value["words"]))
            case "synthesis_complete":
                size = value.get("bytes")
                return SynthesisComplete(
                    str(value["id"]),
                    float(value.get("audio_ms") or 0.0),
                    float(value.get("synth_ms") or 0.0),
                    None if size is None else int(size),
                )
            case "cancelled":
                return Cancelled(str(value["id"]))
            case "error":
                utterance_id, retry_after = value.get("id"), value.get("retry_after")
                return Error(
                    str(value["code"]),
                    str(value.get("message", "")),
                    None if utterance_id is None else str(utterance_id),
                    None if retry_after is None else int(retry_after),
                )
    except (KeyError, TypeError, ValueError) as exc:
        raise TTSError(ErrorCode.INVALID_MESSAGE, f"a {kind} frame without a valid {exc}: {value!r:.200}") from None
    raise TTSError(ErrorCode.UNKNOWN_TYPE, f"unknown frame type {kind!r} from the TTS server")


def _word_timing(value: dict[str, Any]) -> WordTiming:
    return WordTiming(
        str(value["word"]),
        float(value["start_ms"]),
        float(value["end_ms"]),
        int(value["char_start"]),
        int(value["char_end"]),
    )


def parse_client_message(raw: str | bytes, max_bytes: int) -> Command:
    if len(raw) > max_bytes:
        raise TTSError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The message has {len(raw)} bytes; the limit is {max_bytes}. Send long text as several utterances.",
        )
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TTSError(
                ErrorCode.INVALID_UTF8,
                f"A binary message must be UTF-8 text; byte {exc.start} is not valid UTF-8.",
            ) from None
    if not raw.lstrip().startswith("{"):
        return Synthesize(text=raw)
    return _command(_json_object(raw))


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except RecursionError:
        raise TTSError(ErrorCode.INVALID_JSON, "The message is nested too deeply to be a protocol message.") from None
    except ValueError as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "invalid JSON"
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise TTSError(
            ErrorCode.INVALID_JSON, f"The message starts with '{{' but is not valid JSON: {reason}{where}."
        ) from None
    if not isinstance(value, dict):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "A JSON message must be an object.")
    return value


def _command(message: dict[str, Any]) -> Command:
    kind = message.get("type", _UNSET)
    if kind is _UNSET:
        if "text" in message:
            kind = "synthesize"
        else:
            raise TTSError(
                ErrorCode.INVALID_MESSAGE,
                f"The message has no 'type'; use one of: {', '.join(MESSAGE_TYPES)}.",
            )
    if kind not in MESSAGE_TYPES:
        raise TTSError(
            ErrorCode.UNKNOWN_TYPE,
            f"Unknown message type {quoted(kind)}; use one of: {', '.join(MESSAGE_TYPES)}.",
        )
    if kind in ("synthesize", "append"):  # the same fields: a whole text, or a fragment of one
        if "text" not in message:
            article = "An" if kind == "append" else "A"
            raise TTSError(ErrorCode.MISSING_TEXT, f"{article} {kind} message needs 'text'.")
        utterance = Synthesize if kind == "synthesize" else Append
        return utterance(
            text=message["text"],
            id=_utterance_id(message.get("id")),
            voice=message.get("voice"),
            speed=message.get("speed"),
            sample_rate=message.get("sample_rate"),
            literal=message.get("literal"),
        )
    if kind == "flush":
        return Flush(id=_utterance_id(message.get("id")))
    if kind == "config":
        return Config(
            voice=message.get("voice", _UNSET),
            speed=message.get("speed", _UNSET),
            format=message.get("format", _UNSET),
            sample_rate=message.get("sample_rate", _UNSET),
            word_timestamps=message.get("word_timestamps", _UNSET),
            literal=message.get("literal", _UNSET),
        )
    if kind == "cancel":
        return Cancel(id=_utterance_id(message.get("id")))
    return Close()


MAX_ID_CHARS = 128


def _utterance_id(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TTSError(ErrorCode.INVALID_ID, "'id' must be a string of at most 128 characters, or an integer.")
    if isinstance(value, int):
        if not -(10**MAX_ID_CHARS) < value < 10**MAX_ID_CHARS:
            raise TTSError(ErrorCode.INVALID_ID, f"An integer 'id' may have at most {MAX_ID_CHARS} digits.")
        return str(value)
    if len(value) > MAX_ID_CHARS:
        raise TTSError(ErrorCode.INVALID_ID, f"'id' may have at most {MAX_ID_CHARS} characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800"): it could never be sent back
        raise TTSError(ErrorCode.INVALID_ID, "'id' must be valid Unicode text (it holds a lone surrogate).") from None
    return value
