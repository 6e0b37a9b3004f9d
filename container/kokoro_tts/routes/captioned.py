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
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from kokoro_client.errors import ErrorCode, TTSError
from kokoro_client.protocol import WordTiming
from starlette.requests import Request
from starlette.responses import Response

from kokoro_tts.engine.synthesis import AudioChunk
from kokoro_tts.routes.openai import SpeechBody, speech_body
from kokoro_tts.routes.streaming import engine_of, first_then, json_body, read_body, stream_speech

CAPTIONED_PATH = "/dev/captioned_speech"


async def captioned_speech(request: Request) -> Response:
    engine = engine_of(request)
    fields = json_body(await read_body(request, engine))
    body = speech_body(engine, fields)
    stream = fields.get("stream", True)
    if not isinstance(stream, bool | None):
        raise TTSError(ErrorCode.INVALID_MESSAGE, "'stream' must be true or false.")
    stream = stream is not False

    def render(first: AudioChunk, rest: AsyncGenerator[AudioChunk]) -> AsyncIterator[bytes]:
        pieces = _pieces(first, rest, body)
        return _lines(pieces) if stream else _whole(pieces, body)

    media_type = "application/x-ndjson" if stream else "application/json"
    headers = {"X-Sample-Rate": str(body.sample_rate)}
    return await stream_speech(request, engine, body.speech, render, media_type, headers)


async def _lines(pieces: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for piece in pieces:
        yield (json.dumps(piece, ensure_ascii=False) + "\n").encode()


async def _whole(pieces: AsyncIterator[dict[str, Any]], body: SpeechBody) -> AsyncIterator[bytes]:
    """``"stream": false``: one object with the whole audio and every word, sent when the last piece is made."""
    audio, words = bytearray(), []
    async for piece in pieces:
        audio += base64.b64decode(piece["audio"])
        words += piece["timestamps"]
    yield json.dumps(_piece(bytes(audio), body, words), ensure_ascii=False).encode()


async def _pieces(
    first: AudioChunk, rest: AsyncGenerator[AudioChunk], body: SpeechBody
) -> AsyncIterator[dict[str, Any]]:
    """One object per chunk with audio bytes; words of a chunk the encoder kept back wait for the next bytes."""
    encoder = body.output()
    words: list[dict[str, Any]] = []

    async with aclosing(first_then(first, rest)) as chunks:
        async for chunk in chunks:
            words += [_timestamp(word, body.tempo) for word in chunk.words]
            if data := await encoder.encode(chunk.pcm):
                yield _piece(data, body, words)
                words = []
    if (data := await encoder.finish()) or words:
        yield _piece(data, body, words)


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
