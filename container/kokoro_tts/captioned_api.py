"""POST /dev/captioned_speech: speech with word timestamps, in the shape Kokoro-FastAPI's clients read.

The body is the OpenAI speech request (``input``, ``voice``, ``speed``, ``response_format``, default mp3) plus
``stream`` (default true). Streaming, the answer is newline-delimited JSON, one object per piece of audio as it is
made: ``{"audio": base64, "audio_format": media type, "timestamps": [...]}``, the timestamps being the words
whose audio starts in that piece; joined, the pieces' audio is one file of the format. With ``"stream": false``
one such object holds the whole audio and every word. Each timestamp is ``{"word", "start_time", "end_time"}``
in seconds from the start (Kokoro-FastAPI's fields) plus ``start_ms``, ``end_ms``, ``char_start`` and
``char_end``, where ``word`` is ``input[char_start:char_end]`` (word_timing.py). Words are timed for English
voices; other languages' pieces carry an empty list.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.protocol import WordTiming
from starlette.requests import Request
from starlette.responses import Response

from . import metrics
from .audio import AudioFormat, audio_format, make_encoder
from .engine import AudioChunk
from .http_api import GONE, ClientGone, engine_of, first_then, json_body, read_body, stream_speech
from .openai_api import error_response, voice_spec

CAPTIONED_PATH = "/dev/captioned_speech"


async def captioned_speech(request: Request) -> Response:
    try:
        engine = engine_of(request)
        fields = json_body(await read_body(request, engine))
        speech = engine.request(fields.get("input"), voice_spec(fields.get("voice")), fields.get("speed"))
        fmt = audio_format(fields.get("response_format", "mp3"))
        stream = fields.get("stream", True)
        if not isinstance(stream, bool):
            raise TTSError(ErrorCode.INVALID_MESSAGE, "'stream' must be true or false.")

        def render(first: AudioChunk, rest: AsyncGenerator[AudioChunk]) -> AsyncIterator[bytes]:
            pieces = _pieces(first, rest, fmt)
            return _lines(pieces) if stream else _whole(pieces, fmt)

        media_type = "application/x-ndjson" if stream else "application/json"
        return await stream_speech(request, engine, speech, render, media_type)
    except TTSError as error:
        metrics.error("captioned", error.code)
        return error_response(error)
    except ClientGone:
        return GONE


async def _lines(pieces: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for piece in pieces:
        yield (json.dumps(piece, ensure_ascii=False) + "\n").encode()


async def _whole(pieces: AsyncIterator[dict[str, Any]], fmt: AudioFormat) -> AsyncIterator[bytes]:
    """``"stream": false``: one object with the whole audio and every word, sent when the last piece is made."""
    audio, words = bytearray(), []
    async for piece in pieces:
        audio += base64.b64decode(piece["audio"])
        words += piece["timestamps"]
    yield json.dumps(_piece(bytes(audio), fmt, words), ensure_ascii=False).encode()


async def _pieces(
    first: AudioChunk, rest: AsyncGenerator[AudioChunk], fmt: AudioFormat
) -> AsyncIterator[dict[str, Any]]:
    """One object per chunk with audio bytes; words of a chunk the encoder kept back wait for the next bytes."""
    encoder = make_encoder(fmt)
    words: list[dict[str, Any]] = []

    async with aclosing(first_then(first, rest)) as chunks:
        async for chunk in chunks:
            words += [_timestamp(word) for word in chunk.words]
            if data := encoder.encode(chunk.pcm):
                yield _piece(data, fmt, words)
                words = []
    if (data := encoder.finish()) or words:
        yield _piece(data, fmt, words)


def _piece(audio: bytes, fmt: AudioFormat, words: list[dict[str, Any]]) -> dict[str, Any]:
    return {"audio": base64.b64encode(audio).decode("ascii"), "audio_format": fmt.media_type, "timestamps": words}


def _timestamp(word: WordTiming) -> dict[str, Any]:
    return {
        "word": word.word,
        "start_time": round(word.start_ms / 1000.0, 4),
        "end_time": round(word.end_ms / 1000.0, 4),
        "start_ms": word.start_ms,
        "end_ms": word.end_ms,
        "char_start": word.char_start,
        "char_end": word.char_end,
    }
