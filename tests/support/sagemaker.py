"""The SageMaker stand-in (scripts/sagemaker_standin) as fixtures: its certificates, the real SDK transport through
it, and a scripted container behind it. Shared by tests/client/test_sagemaker_bidi.py and the deploy's smoke and
end-to-end tests (tests/scripts/test_deploy_smoke.py, test_deploy_end_to_end.py).
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kokoro_client.sagemaker_bidi import SageMakerBidiSession, SageMakerBidiTransport
from kokoro_client.session import ControlEvent
from smithy_aws_core.identity import AWSCredentialsIdentity, StaticCredentialsResolver
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed

from scripts.sagemaker_standin import StandIn, serving, write_self_signed

SENTENCES = ["The weather is nice today.", "Please call me back.", "She opened the door."]
CREDENTIALS = StaticCredentialsResolver(
    AWSCredentialsIdentity(access_key_id="AKIDSTANDIN", secret_access_key="not-a-secret")
)


@dataclass(frozen=True)
class Certs:
    certfile: Path
    keyfile: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certfile))


@pytest.fixture(scope="module")
def standin_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(*write_self_signed(tmp_path_factory.mktemp("standin-tls")))


@pytest.fixture
def certs(standin_certs: Certs, monkeypatch: pytest.MonkeyPatch) -> Certs:
    """The stand-in's certificate, trusted by the CRT client during the test.

    AWSCRTHTTPClient takes no TLS options. awscrt's TLS (s2n on AWS-LC) starts its trust store from libcrypto's
    default locations, which honour ``SSL_CERT_FILE``, then adds the system bundle; it reads them whenever a TLS
    context is made, i.e. for each session's client (docs/sagemaker-standin.md).
    """
    monkeypatch.setenv("SSL_CERT_FILE", str(standin_certs.certfile))
    return standin_certs


@asynccontextmanager
async def sagemaker(tts_url: str, certs: Certs) -> AsyncIterator[tuple[SageMakerBidiTransport, StandIn]]:
    """The stand-in in front of ``tts_url`` (HTTPS, HTTP/2), and a transport pointed at it."""
    app = StandIn(tts_url, endpoint_name="kokoro-tts")
    async with serving(app, certfile=certs.certfile, keyfile=certs.keyfile) as running:
        transport = SageMakerBidiTransport(
            "kokoro-tts",
            "us-east-1",
            # By name, as the real endpoint is (the certificate names localhost and 127.0.0.1).
            endpoint_uri=running.endpoint_uri.replace("//127.0.0.1:", "//localhost:"),
            credentials=CREDENTIALS,
        )
        try:
            yield transport, app
        finally:
            await transport.aclose()


@dataclass
class ScriptedContainer:
    """A container stand-in whose replies a test scripts: it records every frame it receives."""

    reply: Callable[[ServerConnection, bytes | str], Awaitable[None]]
    received: list[bytes | str] = field(default_factory=list)

    async def handler(self, ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):  # the stand-in going away is not this container's failure
            async for frame in ws:
                self.received.append(frame)
                await self.reply(ws, frame)


@asynccontextmanager
async def scripted(container: ScriptedContainer) -> AsyncIterator[str]:
    async with ws_serve(container.handler, "127.0.0.1", 0) as server:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def json_messages[M](stream: SageMakerBidiSession, parse: Callable[[str], M], last: type) -> list[M]:
    """A vendor socket's messages through the stand-in (every one a JSON text frame), parsed, up to the first
    ``last``."""
    messages: list[M] = []
    async for event in stream.events():
        assert isinstance(event, ControlEvent), event
        messages.append(parse(json.dumps(event.message)))
        if isinstance(messages[-1], last):
            break
    return messages
