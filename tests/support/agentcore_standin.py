"""A local stand-in of Bedrock AgentCore's InvokeAgentRuntime, in front of the real agent app.

It speaks the operation's wire format as botocore's service model for bedrock-agentcore describes it
(rest-json, ``POST /runtimes/{agentRuntimeArn}/invocations[?qualifier=…]``, the ARN percent-encoded as one path
segment, the payload as the raw body, the session id in ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id``, SigV4
for the service ``bedrock-agentcore``), and answers the way the service does: the runtime container's response
streamed through as the output's ``response`` blob, its ``Content-Type`` (``text/event-stream``) and the session
id in headers; errors as rest-json (``x-amzn-ErrorType`` and ``{"message": …}``). AgentCore forwards the payload
to the container's ``POST /invocations`` with the session id header: so does this.

Tests point boto3 at it with ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
MIN_SESSION_ID = 33  # the model's runtimeSessionId: min length 33


@dataclass
class Invocation:
    arn: str
    session_id: str
    qualifier: str | None
    payload: bytes
    content_type: str | None
    accept: str | None


@dataclass
class AgentCoreStandin:
    """One runtime (``runtime_arn``) whose container is the agent app at ``agent_url``."""

    agent_url: str
    runtime_arn: str
    invocations: list[Invocation] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # StopRuntimeSession's session ids

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/runtimes/{arn:path}/invocations", self._invoke, methods=["POST"]),
                Route("/runtimes/{arn:path}/stopruntimesession", self._stop, methods=["POST"]),
            ]
        )

    async def _stop(self, request: Request) -> Response:
        """StopRuntimeSession (botocore: POST /runtimes/{agentRuntimeArn}/stopruntimesession, the session id in
        the same header as InvokeAgentRuntime's): an unknown session is ResourceNotFoundException."""
        session_id = request.headers.get(SESSION_HEADER, "")
        if request.path_params["arn"] != self.runtime_arn or session_id not in {i.session_id for i in self.invocations}:
            return _error(404, "ResourceNotFoundException", f"No runtime session {session_id}")
        self.stopped.append(session_id)
        return Response(status_code=200, headers={SESSION_HEADER: session_id})  # the output is headers only

    async def _invoke(self, request: Request) -> Response:
        authorization = request.headers.get("authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 ") or "/bedrock-agentcore/aws4_request" not in authorization:
            return _error(403, "AccessDeniedException", "the request is not signed with SigV4 for bedrock-agentcore")
        arn = request.path_params["arn"]
        if arn != self.runtime_arn:
            return _error(404, "ResourceNotFoundException", f"No agent runtime found with ARN {arn}")
        session_id = request.headers.get(SESSION_HEADER) or str(uuid.uuid4())
        if len(session_id) < MIN_SESSION_ID:
            return _error(400, "ValidationException", f"runtimeSessionId must be at least {MIN_SESSION_ID} characters")
        payload = await request.body()
        self.invocations.append(
            Invocation(
                arn,
                session_id,
                request.query_params.get("qualifier"),
                payload,
                request.headers.get("content-type"),
                request.headers.get("accept"),
            )
        )
        client = httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=5.0))
        upstream = client.build_request(
            "POST",
            f"{self.agent_url}/invocations",
            content=payload,
            headers={
                "Content-Type": request.headers.get("content-type", "application/json"),
                "Accept": request.headers.get("accept", "*/*"),
                SESSION_HEADER: session_id,
            },
        )
        try:
            answer = await client.send(upstream, stream=True)
        except httpx.TransportError as e:
            await client.aclose()
            return _error(424, "RuntimeClientError", f"the runtime container did not answer: {e}")

        async def body() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_raw():
                yield chunk

        async def close() -> None:
            await answer.aclose()
            await client.aclose()

        headers = {SESSION_HEADER: session_id, "x-amzn-RequestId": str(uuid.uuid4())}
        return StreamingResponse(
            body(),
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type", "application/octet-stream"),
            headers=headers,
            background=BackgroundTask(close),
        )


def _error(status: int, error_type: str, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status, headers={"x-amzn-ErrorType": error_type})


@contextlib.contextmanager
def running(app: Any, port: int) -> Iterator[str]:
    """An ASGI app on uvicorn on 127.0.0.1:``port``, in a thread; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"the app on port {port} did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@dataclass
class HealthStandin:
    """SageMaker's InvokeEndpoint (``POST /endpoints/{EndpointName}/invocations``) for the health attribute only:
    the container contract the endpoint's image implements (CustomAttributes "health" arrives as
    ``X-Amzn-SageMaker-Custom-Attributes``; the answer is the server's health JSON)."""

    endpoint_name: str
    answer: dict[str, Any]
    calls: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/endpoints/{name}/invocations", self._invoke, methods=["POST"])])

    async def _invoke(self, request: Request) -> Response:
        self.calls.append(dict(request.headers))
        if request.path_params["name"] != self.endpoint_name:
            return _error(400, "ValidationException", f"Endpoint {request.path_params['name']} not found.")
        if request.headers.get("x-amzn-sagemaker-custom-attributes") != "health":
            return _error(424, "ModelError", "this stand-in answers only the health attribute")
        return JSONResponse(self.answer, headers={"x-Amzn-Invoked-Production-Variant": "AllTraffic"})


@contextlib.contextmanager
def deployed_agent(
    settings: Any, model: Any, model_name: str, runtime_arn: str
) -> Iterator[tuple[str, AgentCoreStandin]]:
    """The real agent app (``settings``: its TTS; ``model`` answering as ``model_name``, e.g. "bedrock:<id>")
    behind the InvokeAgentRuntime stand-in for ``runtime_arn``; yields (the stand-in's URL, the stand-in)."""
    from voice_agent.app import create_app
    from voice_agent.models import BuiltModel

    from scripts.servers import free_port

    agent = create_app(settings, model_factory=lambda _id: BuiltModel(model, model_name))
    with running(agent, free_port()) as agent_url:
        standin = AgentCoreStandin(agent_url, runtime_arn)
        with running(standin.app(), free_port()) as url:
            yield url, standin
