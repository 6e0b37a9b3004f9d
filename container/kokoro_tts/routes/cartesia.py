"""POST /tts/bytes: Cartesia's bytes route (its SDK's ``tts.generate``): the whole transcript, answered with its
audio as it is made, in a raw, WAV or MP3 container (kokoro_client.cartesia; docs/cartesia.md)."""

from __future__ import annotations

from kokoro_client.cartesia import parse_bytes_request
from starlette.requests import Request
from starlette.responses import Response

from kokoro_tts.audio.encoding import audio_format, output_rate
from kokoro_tts.engine.utterances import Pieces, Utterance
from kokoro_tts.routes.streaming import SpeechResponse, audio_only, engine_of, json_body, read_body


async def tts_bytes(request: Request) -> Response:
    engine = engine_of(request)
    body = parse_bytes_request(json_body(await read_body(request, engine)))
    rules = engine.rules
    speech = rules.speech(body.transcript, rules.voice(body.voice).spec, rules.speed(body.speed))
    fmt = audio_format(body.format)
    rate = output_rate(fmt, body.sample_rate)
    utterance = Utterance.in_format("http", Pieces.whole(speech), fmt, rate)
    return SpeechResponse(engine, utterance, audio_only, fmt.content_type(rate))
