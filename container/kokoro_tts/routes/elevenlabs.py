"""POST /v1/text-to-speech/{voice_id}, ``/stream``, ``/with-timestamps`` and ``/stream/with-timestamps``: ElevenLabs'
speech routes (its SDK's ``text_to_speech.convert`` and ``stream``, LiveKit's and Pipecat's HTTP services).

The body is ElevenLabs' (``text``; ``voice_settings.speed``; ``model_id`` and the rest accepted and ignored), the
voice the path's, the format the query's ``output_format`` (kokoro_client.elevenlabs; default ``mp3_44100_128``).
Every route streams (the run's audio leaves as it is made); the timed ones answer with the characters of ``text``
and their times in seconds from the start of the audio (``alignment``, the same in ``normalized_alignment``), built
from the word timestamps (engine/character_timing.py): ``/with-timestamps`` one JSON object with the whole audio,
``/stream/with-timestamps`` one JSON object per line, each with its audio and the characters timed since the last.
Errors are in ElevenLabs' shape (``{"detail": {"status", "message"}}``, routes/errors.py).
"""

from __future__ import annotations

import base64
from typing import Any

from kokoro_client.elevenlabs import DEFAULT_OUTPUT_FORMAT, output_format
from kokoro_client.json_messages import json_text
from starlette.requests import Request
from starlette.responses import Response

from kokoro_tts.audio.encoding import audio_format, output_rate
from kokoro_tts.engine.character_timing import CharacterTimes, TimedChar
from kokoro_tts.engine.events import Audio, Completed, Ending, Event, Words
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.routes.streaming import SpeechResponse, audio_only, engine_of, json_body, read_body

PATH = "/v1/text-to-speech/{voice_id}"
PATHS = (PATH, f"{PATH}/stream", f"{PATH}/with-timestamps", f"{PATH}/stream/with-timestamps")


async def text_to_speech(request: Request) -> Response:
    engine = engine_of(request)
    voice = engine.rules.voice(request.path_params["voice_id"])
    fields = json_body(await read_body(request, engine))
    settings = fields.get("voice_settings")
    speed = settings.get("speed") if isinstance(settings, dict) else None
    name, rate = output_format(request.query_params.get("output_format", DEFAULT_OUTPUT_FORMAT))
    fmt = audio_format(name)
    rate = output_rate(fmt, rate)
    speech = engine.rules.speech(fields.get("text"), voice.spec, engine.rules.speed(speed))
    timed = request.url.path.endswith("/with-timestamps")
    utterance = Utterance.in_format("http", Pieces.whole(speech), fmt, rate, word_timestamps=timed)
    if not timed:
        return SpeechResponse(engine, utterance, audio_only, fmt.content_type(rate))
    lines = request.url.path.endswith("/stream/with-timestamps")
    render = _Timed(speech.sent, lines=lines).render
    return SpeechResponse(engine, utterance, render, "application/x-ndjson" if lines else "application/json")


class _Timed:
    """The audio with its characters' times: a line per piece of audio (``lines``), or one object at the end."""

    def __init__(self, text: str, *, lines: bool) -> None:
        self._times, self._lines = CharacterTimes(), lines
        self._times.received(text)
        self._audio, self._chars = bytearray(), list[TimedChar]()

    def render(self, event: Event | Ending) -> bytes:
        match event:
            case Words(words=words):
                self._chars += self._times.words(words)
            case Audio(data=data) if self._lines:
                return self._line(data)
            case Audio(data=data):
                self._audio += data
            case Completed(audio_ms=audio_ms):
                self._chars += self._times.rest(audio_ms)
                if self._lines:
                    return self._line(b"") if self._chars else b""
                return json_text(_piece(bytes(self._audio), self._chars)).encode()
        return b""

    def _line(self, data: bytes) -> bytes:
        piece, self._chars = _piece(data, self._chars), []
        return (json_text(piece) + "\n").encode()


def _piece(audio: bytes, chars: list[TimedChar]) -> dict[str, Any]:
    alignment = {
        "characters": [c.char for c in chars],
        "character_start_times_seconds": [round(c.start_ms / 1000, 3) for c in chars],
        "character_end_times_seconds": [round(c.end_ms / 1000, 3) for c in chars],
    }
    return {
        "audio_base64": base64.b64encode(audio).decode("ascii"),
        "alignment": alignment,
        "normalized_alignment": alignment,
    }
