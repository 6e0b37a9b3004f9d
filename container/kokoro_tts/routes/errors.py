"""One error path for every HTTP route: a ``TTSError`` raised anywhere before the response starts becomes its JSON
refusal, counted once under the route's label; a client that left (``ClientGone``) gets nothing.

Starlette's exception handlers call these (``HANDLERS``), so a route only raises. Routes whose clients are
OpenAI's SDKs answer in OpenAI's error shape, ElevenLabs' routes in ElevenLabs'; the others in ours
(docs/protocol.md).
"""

from __future__ import annotations

import asyncio

from kokoro_client.elevenlabs import error_detail
from kokoro_client.errors import ErrorCode, TTSError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kokoro_tts import metrics
from kokoro_tts.routes import openai
from kokoro_tts.routes.captioned import CAPTIONED_PATH
from kokoro_tts.routes.streaming import GONE, ClientGone, error_response, retry_after

_ELEVENLABS_SHAPED = "/v1/text-to-speech/"
# Kokoro-FastAPI's captioned route takes OpenAI's body, so it answers in OpenAI's shape too.
_OPENAI_SHAPED = ("/v1/", CAPTIONED_PATH)
# While the model loads, "retry later" answered at once invites a client that retries without a pause (or a flood)
# to spin the event loop through the warm-up, whose throughput measurement sizes the stream slots for the life of
# the process: each not_ready answer is held this long, which paces such a client at no cost (issue 41: 16
# pipelined connections took 38 % off the measurement on 2 cores), and is far inside any client's timeout.
NOT_READY_HOLD_S = 1.0


async def refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, TTSError)  # registered for TTSError only
    path = request.url.path
    metrics.error(metrics.route_of(path), error.code)
    if error.code == ErrorCode.NOT_READY:
        await asyncio.sleep(NOT_READY_HOLD_S)
    if path.startswith(_ELEVENLABS_SHAPED):
        return JSONResponse(error_detail(error), status_code=error.http_status, headers=retry_after(error))
    if path.startswith(_OPENAI_SHAPED):
        return openai.error_response(error)
    return error_response(error)


async def gone(request: Request, error: Exception) -> Response:
    return GONE


HANDLERS = {TTSError: refused, ClientGone: gone}
