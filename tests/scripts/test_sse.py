"""The SSE consumer (httpx-sse under scripts/sse.py): events come out whole and in order however the transport cuts
the bytes."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from bedrock_agentcore.runtime import BedrockAgentCoreApp
from hypothesis import given, settings
from hypothesis import strategies as st

from scripts.sse import iter_sse, iter_sse_json

_APP = BedrockAgentCoreApp()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
events_strategy = st.lists(
    st.dictionaries(st.text(max_size=8), json_values, max_size=4).map(lambda d: {"type": "x", **d}),
    min_size=1,
    max_size=6,
)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """Split ``data`` at the given offsets (any byte, mid-character included)."""
    offsets = sorted({p % (len(data) + 1) for p in points})
    bounds = [0, *offsets, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


async def _stream(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def events_of(chunks: list[bytes]) -> list[tuple[str, str, int | None, str]]:
    async def collect() -> list[tuple[str, str, int | None, str]]:
        return [(e.event, e.id, e.retry, e.data) async for e in iter_sse(_stream(chunks))]

    return asyncio.run(collect())


def decode_all(chunks: list[bytes]) -> list[Any]:
    return [json.loads(data) for _, _, _, data in events_of(chunks)]


@settings(max_examples=300, deadline=None)
@given(events=events_strategy, points=st.lists(st.integers(min_value=0), max_size=40))
def test_agentcore_sse_decodes_to_the_same_events_at_any_chunk_boundaries(
    events: list[dict[str, Any]], points: list[int]
) -> None:
    # The bytes exactly as the AgentCore SDK writes them for each yielded event.
    wire = b"".join(_APP._convert_to_sse(event) for event in events)
    assert decode_all(cut(wire, points)) == events


@settings(max_examples=300, deadline=None)
@given(
    events=events_strategy,
    points=st.lists(st.integers(min_value=0), max_size=40),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    bom=st.booleans(),
)
def test_any_line_ending_comments_multiline_data_and_a_bom(
    events: list[dict[str, Any]], points: list[int], newline: str, bom: bool
) -> None:
    parts = []
    for n, event in enumerate(events):
        # Pretty-printed JSON spreads over several data: lines, which the decoder joins with "\n".
        lines = json.dumps(event, indent=1, ensure_ascii=False).split("\n")
        body = [": keep-alive", f"id: {n}", "event: update", *(f"data: {line}" for line in lines)]
        parts.append(newline.join(body) + newline + newline)
    wire = ("\ufeff" if bom else "") + "".join(parts)
    assert decode_all(cut(wire.encode("utf-8"), points)) == events


def test_cr_then_lf_in_the_next_chunk_is_one_line_ending() -> None:
    assert decode_all([b'data: {"a": 1}\r', b"\n", b"\r\n"]) == [{"a": 1}]


def test_fields_and_the_unterminated_last_event() -> None:
    wire = b"event: e\nid: 7\nretry: 100\ndata:x\ndata\n\ndata: dropped"
    # An event without its blank line is not dispatched (WHATWG).
    assert events_of([wire]) == [("e", "7", 100, "x\n")]


def test_a_bom_split_across_chunks_is_not_part_of_the_first_field() -> None:
    assert decode_all([b"\xef\xbb", b'\xbfdata: {"a": 1}\n\n']) == [{"a": 1}]


async def test_iter_sse_json_over_an_async_byte_stream() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for piece in (b'data: {"type":"a"}\n', b"\ndata: not json\n\n", b'data: {"ty', b'pe":"b"}\n\n'):
            yield piece

    assert [e async for e in iter_sse_json(chunks())] == [
        {"type": "a"},
        {"type": "invalid", "data": "not json"},
        {"type": "b"},
    ]
