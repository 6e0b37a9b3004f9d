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
from starlette.responses import JSONResponse, Response

from .audio import AudioFormat, audio_format, make_encoder
from .engine import AudioChunk
from .http_api import (
    GONE,
    OPENAI_VOICES,
    ClientGone,
    _first_chunk,
    _json_body,
    _read_body,
    _SynthesisResponse,
    engine_of,
    error_response,
)

CAPTIONED_PATH = "/dev/captioned_speech"


async def captioned_speech(request: Request) -> Response:
    try:
        engine = engine_of(request)
        fields = _json_body(await _read_body(request, engine))
        voice = fields.get("voice")
        if isinstance(voice, str):
            voice = OPENAI_VOICES.get(voice, voice)
        speech = engine.request(fields.get("input"), voice, fields.get("speed"))
        fmt = audio_format(fields.get("response_format", "mp3"))
        stream = fields.get("stream", True)
        if not isinstance(stream, bool):
            raise TTSError(ErrorCode.INVALID_MESSAGE, "'stream' must be true or false.")
        engine.http_streams.acquire()
        handed_over = False  # to the streaming response, which releases the slot when it ends
        try:
            chunks = engine.stream(speech)
            with engine.waiting.hold():
                first = await _first_chunk(request, chunks)
            if first is None:
                raise TTSError(ErrorCode.NOTHING_TO_SPEAK, "The text has nothing that can be spoken in this voice.")
            if stream:
                lines = (json.dumps(piece, ensure_ascii=False) + "\n" async for piece in _pieces(first, chunks, fmt))
                response = _SynthesisResponse(
                    engine, chunks, lines, media_type="application/x-ndjson", headers={"Cache-Control": "no-store"}
                )
                handed_over = True
                return response
            pieces = [piece async for piece in _pieces(first, chunks, fmt)]
        finally:
            if not handed_over:
                engine.http_streams.release()
        audio = b"".join(base64.b64decode(piece["audio"]) for piece in pieces)
        words = [word for piece in pieces for word in piece["timestamps"]]
        return JSONResponse(_piece(audio, fmt, words), headers={"Cache-Control": "no-store"})
    except TTSError as error:
        return error_response(error)
    except ClientGone:
        return GONE


async def _pieces(
    first: AudioChunk, rest: AsyncGenerator[AudioChunk], fmt: AudioFormat
) -> AsyncIterator[dict[str, Any]]:
    """One object per chunk with audio bytes; words of a chunk the encoder kept back wait for the next bytes."""
    encoder = make_encoder(fmt)
    words: list[dict[str, Any]] = []

    async def chunks() -> AsyncIterator[AudioChunk]:
        yield first
        async with aclosing(rest):
            async for chunk in rest:
                yield chunk

    async for chunk in chunks():
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
