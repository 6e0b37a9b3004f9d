"""One request model: every front door hands its fields to one check each (engine/requests.py for text, voice and
speed; audio/encoding.py for format and sample rate), so a rule changed there holds on every route and session.
Read from the code (ast), as the import graph is."""

from __future__ import annotations

import ast
from collections import Counter

from kokoro_client.errors import ErrorCode
from kokoro_tts.engine.synthesis import TTSEngine

from tests.support.repo import REPO

SERVER = REPO / "container" / "kokoro_tts"


def _raises() -> Counter[tuple[str, str]]:
    """(error code, file) → how many ``raise ...(ErrorCode.X, ...)`` statements name it there."""
    found: Counter[tuple[str, str]] = Counter()
    for path in SERVER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            code = node.exc.args[0]
            if isinstance(code, ast.Attribute) and isinstance(code.value, ast.Name) and code.value.id == "ErrorCode":
                found[(code.attr, str(path.relative_to(SERVER)))] += 1
    return found


def _sites(code: ErrorCode) -> dict[str, int]:
    return {path: count for (name, path), count in _raises().items() if name == code.name}


def test_each_field_is_checked_in_one_place() -> None:
    assert _sites(ErrorCode.MISSING_TEXT) == {"engine/requests.py": 1}
    assert _sites(ErrorCode.INVALID_SPEED) == {"engine/requests.py": 1}
    assert _sites(ErrorCode.UNKNOWN_VOICE) == {"engine/voices.py": 1}
    assert _sites(ErrorCode.UNSUPPORTED_SAMPLE_RATE) == {"audio/encoding.py": 1}


def test_the_audio_format_is_checked_once_and_other_format_fields_apart() -> None:
    # audio/encoding.py: the audio format, every route's and session's; deepgram.py: Deepgram's encoding names, a
    # wire vocabulary mapped onto it; openai.py: OpenAI's stream_format (audio or SSE), not an audio format.
    assert _sites(ErrorCode.UNSUPPORTED_FORMAT) == {
        "audio/encoding.py": 1,
        "sessions/deepgram.py": 1,
        "routes/openai.py": 1,
    }


def test_the_engine_takes_a_checked_request_and_checks_nothing() -> None:
    assert sum(_raises().values()) > 20, "the scan finds the server's raises"
    assert not [code for (code, path) in _raises() if path == "engine/synthesis.py"]
    assert not hasattr(TTSEngine, "request")
