"""Hostile text through every text route: long unbroken tokens over every character class, repeated
punctuation, digits of every Unicode script, control characters, RTL and combining marks, emoji, huge numbers,
and seeded random mixtures of them (scripts/hostile_text.py makes them and judges each answer).

Each answer is audio or a refusal with a stable code (never another 5xx, nor a hang), starts within a bound
linear in the text's length (calibrated against a normal sentence spoken alone in the same run), has audio
bounded by the text, and /ping answers within SageMaker's 250 ms meanwhile. Seeded: a failure names its route
and input, and the same seed makes the same strings again.
"""

from __future__ import annotations

import random
import unicodedata

import pytest
from support.idle import wait_idle
from support.inproc_server import RunningServer
from support.timing import freeze_heap

from scripts.hostile_text import (
    ASCII_TWIN,
    ROUTES,
    Bounds,
    Case,
    Flight,
    Outcome,
    PingProbe,
    burst_cases,
    calibrate,
    digit_cases,
    during,
    fixed_cases,
    issue_cases,
    random_cases,
    rotate,
    speak_all,
    unicode_digits,
)

SEED = 28
PING_LIMIT_MS = 250.0  # SageMaker replaces an instance whose /ping misses this
ROUTE_NAMES = list(ROUTES)


def shown(outcome: Outcome) -> None:
    print(outcome.line())  # with -s, the run as it goes: which input on which route, and how it was answered


def failures(outcomes: list[Outcome]) -> list[str]:
    return [outcome.line() for outcome in outcomes if outcome.problem]


def slow_pings(probe: PingProbe, flights: list[Flight]) -> list[str]:
    return [
        f"/ping took {latency:.0f} ms while in flight: {during(flights, sent, latency)[:4]}"
        for sent, latency in probe.slow(PING_LIMIT_MS)
    ]


async def run(server: RunningServer, jobs: list[tuple[str, Case]], bounds: Bounds, concurrency: int = 1) -> None:
    flights: list[Flight] = []
    freeze_heap()
    with PingProbe(server.base_url) as probe:
        retry = 120.0 if concurrency == 1 else 0.0  # eight at once: server_busy is an answer
        settled: list[float] = []

        async def settle() -> None:  # one at a time: each case starts with the server idle
            settled.append(await wait_idle(server.engine, 120))

        one_by_one = settle if concurrency == 1 else None
        outcomes = await speak_all(server.base_url, jobs, bounds, flights, concurrency, shown, retry, one_by_one)
    if settled:
        print(f"idle before each case after {max(settled):.1f} s at most (the work a client left behind)")
    problems = failures(outcomes) + slow_pings(probe, flights)
    assert not problems, f"{len(problems)} of {len(outcomes)} answers or pings failed (seed {SEED}):\n" + "\n".join(
        problems[:20]
    )
    assert probe.samples and not probe.failures, f"/ping failed {probe.failures} times"


@pytest.fixture(scope="module")
async def bounds(server: RunningServer) -> Bounds:
    await wait_idle(server.engine, 120)
    measured = await calibrate(server.base_url)
    print(f"bounds: {measured}")
    return measured


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_adversarial_strings_through_every_route(server: RunningServer, bounds: Bounds) -> None:
    jobs = rotate(issue_cases(), ROUTE_NAMES, per_item=len(ROUTE_NAMES)) + rotate(fixed_cases(), ROUTE_NAMES, 1)
    await run(server, jobs, bounds)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_seeded_random_strings_through_every_route(server: RunningServer, bounds: Bounds) -> None:
    jobs = rotate(random_cases(SEED, 18, max_chars=300), ROUTE_NAMES, per_item=1)
    await run(server, jobs, bounds)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_digits_of_every_script_are_capped_like_ascii_digits(server: RunningServer, bounds: Bounds) -> None:
    """ "1" * 120 is refused (number_too_long): the same number in any other script's digits must be refused too,
    not read as 97 s of audio."""
    twins = [(route, ASCII_TWIN) for route in ROUTE_NAMES]
    scripts = digit_cases(random.Random(SEED), scripts=8)
    flights: list[Flight] = []
    with PingProbe(server.base_url) as probe:
        jobs = twins + rotate(scripts, ROUTE_NAMES, 1)
        outcomes = await speak_all(server.base_url, jobs, bounds, flights, progress=shown)
    assert all(o.refused for o in outcomes[: len(twins)]), failures(outcomes[: len(twins)])
    spoken = [f"{o.line()}: spoken where '1' x120 is refused" for o in outcomes[len(twins) :] if not o.refused]
    problems = failures(outcomes) + spoken + slow_pings(probe, flights)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_ping_holds_during_eight_concurrent_quadratic_looking_requests(
    server: RunningServer, bounds: Bounds
) -> None:
    """The issue's loop stalls: 5,000 characters of "… " (the sentence chunker) and of "\\x01$1M " (text maps),
    eight at once over every route; each answered (or refused server_busy) and /ping under 250 ms throughout."""
    jobs = rotate(burst_cases() * 4, ROUTE_NAMES, per_item=1)
    # Eight at once: each waits behind the others' first chunks, so each gets eight times the bound alone.
    burst = Bounds(bounds.first_base_s * 8, bounds.first_per_char_s * 8, bounds.rtf * 8, read_s=bounds.read_s)
    await run(server, jobs, burst, concurrency=8)


@pytest.mark.timeout(300)
async def test_a_lone_surrogate_through_every_route(server: RunningServer, bounds: Bounds) -> None:
    """JSON can escape a lone surrogate ("\\ud800") that UTF-8 cannot carry: each route's client sends it escaped
    (the Deepgram, ElevenLabs and Cartesia encoders raised before), and each route answers, ElevenLabs' socket with
    the surrogate among its alignment's characters, escaped again (test_word_timestamps.py: the HTTP routes)."""
    case = Case("lone surrogate in a word", "Hel\ud800lo there.")
    await run(server, [(route, case) for route in ROUTE_NAMES], bounds)


def test_the_strings_repeat_from_their_seed_and_cover_every_class() -> None:
    assert random_cases(SEED, 18) == random_cases(SEED, 18) != random_cases(SEED + 1, 18)
    text = "".join(case.text for case in fixed_cases() + random_cases(SEED, 18, max_chars=300))
    categories = {unicodedata.category(char) for char in text}
    # letters, digits (ASCII and others), other numbers, punctuation, symbols, controls, format (RTL, ZWJ),
    # combining marks, spaces, and a lone surrogate
    assert {"Lu", "Ll", "Nd", "No", "Po", "Pd", "Sc", "So", "Cc", "Cf", "Mn", "Zs", "Cs"} <= categories
    scripts = {case.name.split(" digit")[0] for case in digit_cases(random.Random(SEED), scripts=8)}
    assert {"FULLWIDTH", "ARABIC-INDIC", "DEVANAGARI", "CIRCLED", "SUPERSCRIPT"} <= scripts and len(scripts) == 8
    assert len(unicode_digits()) > 60  # every script's digits, from the Unicode database
