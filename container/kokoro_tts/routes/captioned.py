"""POST /dev/captioned_speech: speech with word timestamps, in the shape Kokoro-FastAPI's clients read.

The body is the OpenAI speech request, read by /v1/audio/speech's own parser (``openai_api.speech_body``: ``model``,
``input``, ``voice``, ``speed`` 0.25–4.0, ``response_format`` default mp3, ``sample_rate``) plus ``stream`` (default
true). Streaming, the answer is newline-delimited JSON, one object per piece of audio as it is made:
``{"audio": base64, "audio_format": media type at its rate, "timestamps": [...]}``, the timestamps being the words
whose audio starts in that piece; joined, the pieces' audio is one file of the format. With ``"stream": false``
one such object holds the whole audio and every word. Each timestamp is ``{"word", "start_time", "end_time"}``
in seconds from the start of the audio as sent, stretched or not (Kokoro-FastAPI's fields) plus ``start_ms``,
``end_ms``, ``char_start`` and ``char_end``, where ``word`` is ``input[char_start:char_end]`` (word_timing.py).
Words are timed for English voices; other languages' pieces carry an empty list.
"""

from __future__ import annotations

import base64
from typing import Any

from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.json_messages import json_text
from kokoro_client.protocol import WordTiming
from starlette.requests import Request
from starlette.responses import Response

from kokoro_tts.engine.events import Audio, Completed, Ending, Event, Words
from kokoro_tts.routes.openai import SpeechBody, speech_body
from kokoro_tts.routes.streaming import SpeechResponse, engine_of, json_body, read_body

CAPTIONED_PATH = "/dev/captioned_speech"


async def captioned_speech(request: Request) -> Response:
    engine = engine_of(request)
    fields = json_body(await read_body(request, engine))
    body = speech_body(engine, fields)
    stream = fields.get("stream", True)
    if not isinstance(stream, bool | None):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "'stream' must be true or false.")
    stream = stream is not False
    utterance = body.utterance(body.output(), word_timestamps=True)
    media_type = "application/x-ndjson" if stream else "application/json"
    render = _Captions(body, stream=stream).render
    return SpeechResponse(engine, utterance, render, media_type, {"X-Sample-Rate": str(body.sample_rate)})


class _Captions:
    """Streaming, one line per piece of audio with bytes (the words of a piece the encoder kept back wait for the next
    bytes); with ``"stream": false``, one object with the whole audio and every word, once the last piece is made."""

    def __init__(self, body: SpeechBody, *, stream: bool) -> None:
        self._body, self._stream = body, stream
        self._audio, self._words = bytearray(), list[dict[str, Any]]()

    def render(self, event: Event | Ending) -> bytes:
        match event:
            case Words(words=words):
                self._words += [_timestamp(word, self._body.tempo) for word in words]
            case Audio(data=data) if self._stream:
                return self._line(data)
            case Audio(data=data):
                self._audio += data
            case Completed() if self._stream:
                return self._line(b"") if self._words else b""
            case Completed():
                return json_text(_piece(bytes(self._audio), self._body, self._words)).encode()
        return b""

    def _line(self, data: bytes) -> bytes:
        piece, self._words = _piece(data, self._body, self._words), []
        return (json_text(piece) + "\n").encode()


def _piece(audio: bytes, body: SpeechBody, words: list[dict[str, Any]]) -> dict[str, Any]:
    return {"audio": base64.b64encode(audio).decode("ascii"), "audio_format": body.content_type, "timestamps": words}


def _timestamp(word: WordTiming, tempo: float) -> dict[str, Any]:
    """``word``'s times in the audio as sent: the model's, stretched by ``tempo`` (speeds below 0.5 or over 2)."""
    start_ms, end_ms = round(word.start_ms / tempo, 1), round(word.end_ms / tempo, 1)
    return {
        "word": word.word,
        "start_time": round(start_ms / 1000.0, 4),
        "end_time": round(end_ms / 1000.0, 4),
        "start_ms": start_ms,
        "end_ms": end_ms,
        "char_start": word.char_start,
        "char_end": word.char_end,
    }
