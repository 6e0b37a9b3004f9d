"""No client input can start a log line: in the text format (``make serve``'s default) a
client's path, ids and strings are escaped; JSON lines stay one object per line. Real Hypercorn on loopback for
the access line; the formatter itself for ids bound from clients (a session id header, an utterance id)."""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import time
from collections.abc import Iterator

import pytest
from kokoro_client import logs
from support.inproc_server import RunningServer
from support.log_capture import captured_log

FORGED = "2026-12-02 07:00:00,000 CRITICAL kokoro_tts.server.app forged"
# What a client may send: a line break, a carriage return, an escape sequence, Unicode's line separator and a
# right-to-left override, each before a line that would pass for one of the server's.
HOSTILE = [f"x\n{FORGED}", f"x\r{FORGED}", f"x\x1b[2K\r{FORGED}", f"x\u2028{FORGED}", f"x\u202e{FORGED}"]
LINE_START = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


def _assert_no_forged_line(output: str) -> None:
    assert not re.search(r"[\r\x1b\x85\u2028\u2029\u202a-\u202e]", output), repr(output)
    for line in output.split("\n"):
        if line and not line.startswith(logs.TRACEBACK_INDENT):
            assert LINE_START.match(line), repr(line)
            assert not line.startswith(FORGED), repr(line)


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    """The root logger's lines, as `serve` writes them with LOG_FORMAT=text, while the test runs."""
    with captured_log("text") as stream:
        yield stream


def _raw_get(port: int, target: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
        return reply


def test_a_path_cannot_forge_an_access_line(server: RunningServer, text_log: io.StringIO) -> None:
    targets = ["/ping%0A" + FORGED.replace(" ", "%20"), "/ping%0D%1B[2K" + FORGED.replace(" ", "%20")]
    for target in targets:
        assert _raw_get(server.port, target).startswith(b"HTTP/1.1 404")
    deadline = time.monotonic() + 5  # the access line is written just after the response
    while text_log.getvalue().count("hypercorn.access") < len(targets) and time.monotonic() < deadline:
        time.sleep(0.05)
    output = text_log.getvalue()
    assert output.count("hypercorn.access") >= len(targets), output
    assert "/ping\\n2026" in output  # the path is there, escaped
    _assert_no_forged_line(output)


@pytest.mark.parametrize("hostile", HOSTILE, ids=["LF", "CR", "ESC", "U+2028", "RLO"])
def test_ids_and_messages_from_clients_cannot_forge_a_line(hostile: str) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.formatter("text"))
    handler.addFilter(logs.IdsFilter(lambda: {"session_id": hostile}))  # the agent's: a client's header
    log = logging.getLogger("kokoro_tts.test_log_injection")
    log.addHandler(handler)
    log.propagate = False
    try:
        logs.bind_ids(utterance_id=hostile)  # a client-chosen utterance id, as the session binds it
        log.warning("unknown voice %s", hostile)
        try:
            raise ValueError(hostile)
        except ValueError:
            log.exception("failed for %s", hostile)
    finally:
        log.removeHandler(handler)
        log.propagate = True
    output = stream.getvalue()
    assert output.count("\n") >= 2
    _assert_no_forged_line(output)
    assert "session_id=x" in output and "utterance_id=x" in output


@pytest.mark.parametrize("hostile", HOSTILE, ids=["LF", "CR", "ESC", "U+2028", "RLO"])
def test_json_lines_stay_one_ascii_object_each(hostile: str) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.formatter("json"))
    log = logging.getLogger("kokoro_tts.test_log_injection_json")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("unknown voice %s", hostile)
    finally:
        log.removeHandler(handler)
        log.propagate = True
    lines = stream.getvalue().splitlines()  # splitlines: every separator Python knows, U+2028 included
    assert len(lines) == 1 and lines[0].isascii()
    assert json.loads(lines[0])["message"] == f"unknown voice {hostile}"
