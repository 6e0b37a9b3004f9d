"""docs/protocol.md is the prose of kokoro_client.protocol: every message, frame, field and error code in the
module appears in the doc, and every code the doc lists exists in the module."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from kokoro_client import protocol
from kokoro_client.audio import FORMAT_NAMES, MAX_SPEED, MIN_SPEED, SAMPLE_RATE
from kokoro_client.errors import ErrorCode

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
MESSAGES = (protocol.Synthesize, protocol.Append, protocol.Flush, protocol.Config, protocol.Cancel, protocol.Close)
FRAMES = (protocol.SynthesisStart, protocol.Words, protocol.SynthesisComplete, protocol.Cancelled, protocol.Error)


def _doc_line(type_name: str) -> str:
    lines = [line for line in DOC.splitlines() if f'"type":"{type_name}"' in line]
    assert lines, f"docs/protocol.md does not describe {type_name!r}"
    return lines[0]


def test_every_message_and_frame_and_field_is_documented() -> None:
    for cls in (*MESSAGES, *FRAMES):
        name = protocol.encode(cls(**_example_fields(cls)))[len('{"type": "') :].split('"')[0]
        line = _doc_line(name)
        for field in dataclasses.fields(cls):
            assert f'"{field.name}"' in line, f"{name}: field {field.name!r} is not in its docs/protocol.md line"
    assert set(protocol.MESSAGE_TYPES) | set(protocol.FRAME_TYPES) == {
        protocol.encode(cls(**_example_fields(cls))).split('"')[3] for cls in (*MESSAGES, *FRAMES)
    }


def test_error_codes_match_the_doc_table() -> None:
    table = DOC[DOC.index("### Error codes") :]
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.MULTILINE))
    assert documented == {code.value for code in ErrorCode}


def test_constants_are_the_doc_s() -> None:
    assert f"`WS {protocol.WS_PATH}`" in DOC
    assert f"(v{protocol.PROTOCOL_VERSION})" in DOC
    assert f"{SAMPLE_RATE // 1000} kHz" in DOC
    assert f"`speed`: {MIN_SPEED} to {MAX_SPEED}" in DOC
    for name in FORMAT_NAMES:
        assert f"| `{name}`" in DOC
    closes = (
        protocol.CLOSE_NORMAL,
        protocol.CLOSE_GOING_AWAY,
        protocol.CLOSE_INTERNAL_ERROR,
        protocol.CLOSE_TRY_AGAIN_LATER,
    )
    for code in closes:
        assert str(code) in DOC


def _example_fields(cls: type) -> dict[str, object]:
    return {f.name: "x" for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
