"""The agent app's request body: JSON or a coded 400, and never more than MAX_BODY_BYTES read (real uvicorn)."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from support.agent_fixtures import AgentServer, agent_settings, make_model
from voice_agent.request import MAX_BODY_BYTES


@pytest.fixture(scope="module")
def agent() -> Iterator[AgentServer]:
    # No TTS server is needed: every request here is refused before the pipeline starts.
    with AgentServer(agent_settings("http://127.0.0.1:9"), make_model()).running() as running:
        yield running


@pytest.mark.parametrize("body", [b"not json", b'{"prompt": "hi"', b"\xff\xfe"], ids=["text", "truncated", "binary"])
def test_a_body_that_is_not_json_is_400_invalid_json(agent: AgentServer, body: bytes) -> None:
    response = httpx.post(f"{agent.url}/invocations", content=body, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_huge_body_is_413_before_it_is_read(agent: AgentServer, chunked: bool) -> None:
    """A declared 100 MB body is refused on its header alone; a chunked one as soon as it passes the limit.

    The client sends no more than the server needs to decide (nothing, or piece by piece until it answers), then
    reads: bytes the server never reads would make its kernel reset the connection, and a reset can discard the
    answer.
    """
    port = int(agent.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {100 * 1024 * 1024}"
        sock.sendall(f"POST /invocations HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode())
        sock.settimeout(10)
        started = time.monotonic()
        if chunked:  # piece by piece, each read by the server before the next, until it answers
            piece = b"x" * 65536
            for _ in range(4 * MAX_BODY_BYTES // len(piece)):
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                if select.select([sock], [], [], 0.2)[0]:
                    break
        answer = b""
        while data := sock.recv(65536):  # the server closes after its answer
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"body_too_large"' in answer
    assert time.monotonic() - started < 10
