"""Hostile text costs linear time in every text step, and what the text becomes is what the caps count.

Each linearity check times a step on an input of n and of 8n characters in the same run (best of a few tries
taken in turns, in this thread's CPU time with the GC off: support/timing.py) and asserts the ratio stays far
from the 64 a quadratic step shows.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from kokoro_client.chunker import split_sentences
from kokoro_tts.engine.word_timing import TextCursor
from kokoro_tts.text.chunks import split_utterance
from kokoro_tts.text.normalize import TextMap, normalize
from kokoro_tts.text.phonemes import clean_text_mapped
from support.idle import wait_idle
from support.inproc_server import RunningServer
from support.timing import best_cpu_times

# Quadratic steps show 64; linear ones 8 (or less, with fixed costs). 20 leaves room for a noisy neighbour: on a
# shared 2-core machine CI saw a linear step's CPU time on the larger input come out 2.3x too long.
MAX_RATIO = 20.0


@pytest.fixture(autouse=True)
def idle_process(server: RunningServer) -> None:
    """Each test starts with the in-process server idle: synthesis that an earlier test left it shares this
    machine's cores and caches with the step being timed (CPU time grew up to 2x on the larger input)."""
    asyncio.run(wait_idle(server.engine))


def _growth(step: Callable[[str], object], unit: str, n: int) -> float:
    """Time of ``step`` on ``unit`` repeated to 8n characters over its time on n characters."""
    small, large = ((unit * (size // len(unit) + 1))[:size] for size in (n, 8 * n))
    step(small)  # warm caches (compiled patterns, lazy tables) outside the timing
    small_s, large_s = best_cpu_times(lambda: step(small), lambda: step(large), tries=7)
    return large_s / max(small_s, 1e-6)


HOSTILE_UNITS = ["… ", ". ", "! ", "\n", "\n\n ", "a. ", "etc. ", "St. ", "Dr. X", "e.g. ", "1,000", "a-", "x"]


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_the_sentence_chunker_is_linear(unit: str) -> None:
    assert _growth(split_sentences, unit, 2000) < MAX_RATIO


@pytest.mark.parametrize("unit", ["… ", ". ", ", ", " - "])
def test_the_eager_chunker_is_linear(unit: str) -> None:
    assert _growth(lambda text: split_sentences(text, eager=True), unit, 2000) < MAX_RATIO


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_the_servers_chunks_are_linear(unit: str) -> None:
    assert _growth(split_utterance, unit, 2000) < MAX_RATIO


def _prepared(text: str) -> tuple[str, TextMap]:
    """What the server does to a request's text before G2P: clean, normalize, compose the two maps."""
    cleaned, cleaned_map = clean_text_mapped(text)
    spoken, spoken_map = normalize(cleaned, "a")
    return spoken, cleaned_map.then(spoken_map)


@pytest.mark.parametrize(
    "unit",
    ["\x01$1M ", "$1M ", "St. ", "etc. ", "e.g. ", "3:30 pm ", "1,000", "a@b.com ", "x.com/a ", "5 kg ", "é\u0301 "],
)
def test_cleaning_normalizing_and_their_map_are_linear(unit: str) -> None:
    assert _growth(_prepared, unit, 1250) < MAX_RATIO


def test_locating_words_in_a_long_text_is_linear() -> None:
    """Word timing finds each word through the map: a bisect, not a scan of every segment per word."""

    def locate_all(text: str) -> None:
        spoken, source = _prepared(text)
        cursor = TextCursor(spoken, source)
        for word in spoken.split():
            cursor.locate(word)

    assert _growth(locate_all, "\x01$1M ", 1250) < MAX_RATIO


# --- through the real server ------------------------------------------------------------------------------------


def _speech(server: RunningServer, text: str) -> httpx.Response:
    body = {"model": "kokoro", "input": text, "voice": "af_heart", "response_format": "pcm"}
    return httpx.post(f"{server.base_url}/v1/audio/speech", json=body, timeout=120)


def _latency(server: RunningServer, text: str) -> float:
    started = time.perf_counter()
    response = _speech(server, text)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def _hold_stream(server: RunningServer, text: str, started: threading.Event, done: threading.Event) -> None:
    """Sends ``text`` and reads its audio slowly until ``done``: a stream that keeps its share of the workers."""
    body = {"model": "kokoro", "input": text, "voice": "af_heart", "response_format": "pcm"}
    started.set()
    with httpx.Client(timeout=120) as client, client.stream("POST", f"{server.base_url}/v1/audio/speech", json=body):
        done.wait(120)


def _beside(server: RunningServer, victim: str, other: str) -> float:
    """The victim's latency while a stream of ``other`` is in, its G2P under way."""
    asyncio.run(wait_idle(server.engine))  # the last trial's stream is over
    started, done = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_stream, args=(server, other, started, done))
    holder.start()
    started.wait()
    time.sleep(0.1)  # the other request is in, its G2P under way
    try:
        return _latency(server, victim)
    finally:
        done.set()
        holder.join(60)


# Spoken like the hard tokens (150 words and more), but ordinary words: what any concurrent stream costs a victim.
ORDINARY = "one two " * 75


@pytest.mark.parametrize("token", ["1-2-" * 75, "a_" * 150, "1%2%" * 75])
def test_a_hard_token_does_not_stall_a_concurrent_request(server: RunningServer, token: str) -> None:
    """A 300-character token with no spaces held the one English G2P for 8 s: "Hello there." waited behind it.

    Beside any stream the victim shares two cores (2-3x its time alone), so it is compared, in turns, with the
    victim beside an ordinary stream of as many words: a stall behind the token's G2P shows as 10x and more."""
    victim = "Hello there."
    _latency(server, victim)
    beside_ordinary, beside_token = [], []
    for _ in range(3):
        beside_ordinary.append(_beside(server, victim, ORDINARY))
        beside_token.append(_beside(server, victim, token))
    assert statistics.median(beside_token) <= 2 * statistics.median(beside_ordinary), (beside_ordinary, beside_token)


@pytest.mark.parametrize(
    "text",
    [
        "\u2460" * 120,  # circled digit one: read as 120 ones
        "\u00b9" * 120,  # superscript one
        "\uff11" * 120,  # fullwidth
        "\u2473" * 60,  # circled twenty: 120 digits
        "1" + ",000" * 40,  # thousands separators: one number of 121 digits
    ],
)
def test_the_digit_cap_counts_the_number_as_read(server: RunningServer, text: str) -> None:
    assert _speech(server, "1" * 120).json()["error"]["code"] == "number_too_long"
    response = _speech(server, text)
    assert (response.status_code, response.json()["error"]["code"]) == (400, "number_too_long"), response.text


def test_the_event_loop_does_only_the_cheap_part_of_a_request(server: RunningServer) -> None:
    """What ``RequestRules.speech`` does runs on the event loop: the checks (C loops), never the cleaning, normalizing
    and span maps, which ``TTSEngine.stream`` runs in a thread (``SpeechRequest.prepare``). In CPU time."""
    engine = server.engine
    for text in [("\x01$1M " * 1000)[:5000], ("3:30 pm, St. " * 500)[:5000], ("\u00e9\u0301 " * 2500)[:5000]]:
        engine.rules.speech(text, None, None).prepare()  # tables and caches filled
        on_loop, in_thread = best_cpu_times(
            lambda: engine.rules.speech(text, None, None),  # noqa: B023 -- called at once
            lambda: engine.rules.speech(text, None, None).prepare(),  # noqa: B023
        )
        assert on_loop < in_thread / 5, (text[:10], on_loop, in_thread)


def test_punctuation_alone_costs_no_g2p() -> None:
    assert split_utterance("\u2026 " * 2500, english=True) == []
    assert split_utterance("Well \u2026 " * 5, english=True) != []
    assert split_utterance("100 %", english=True) == ["100 %"]
