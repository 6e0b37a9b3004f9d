"""One error path for every HTTP route: a ``TTSError`` raised anywhere before the response starts becomes its JSON
refusal, counted once under the route's label; a client that left (``ClientGone``) gets nothing.

Starlette's exception handlers call these (``HANDLERS``), so a route only raises. Routes whose clients are
OpenAI's SDKs answer in OpenAI's error shape; the others in ours (docs/protocol.md).
"""

from __future__ import annotations

from kokoro_client.errors import TTSError
from starlette.requests import Request
from starlette.responses import Response

from kokoro_tts import metrics
from kokoro_tts.routes import openai
from kokoro_tts.routes.captioned import CAPTIONED_PATH
from kokoro_tts.routes.streaming import GONE, ClientGone, error_response

# Kokoro-FastAPI's captioned route takes OpenAI's body, so it answers in OpenAI's shape too.
_OPENAI_SHAPED = ("/v1/", CAPTIONED_PATH)


async def refused(request: Request, error: Exception) -> Response:
    assert isinstance(error, TTSError)  # registered for TTSError only
    path = request.url.path
    metrics.error(metrics.route_of(path), error.code)
    if path.startswith(_OPENAI_SHAPED):
        return openai.error_response(error)
    return error_response(error)


async def gone(request: Request, error: Exception) -> Response:
    return GONE


HANDLERS = {TTSError: refused, ClientGone: gone}
