"""Hostile text for the fuzz (tests/server/test_hostile_text.py) and `make soak`: adversarial and seeded random
strings, each spoken through one of the server's text routes, and the verdict on its answer.

The strings: long unbroken tokens over every character class ("1-2-"*75 and its kin, whose G2P or chunking grew
worse than linear), repeated punctuation, digits of every Unicode script (``unicodedata``: Nd, and No with a digit
value: Arabic-Indic, Devanagari, fullwidth, circled, superscript ...), control characters, RTL and combining marks,
emoji and ZWJ sequences, huge numbers; then random mixtures of all of these from a seeded generator, so a failure
reproduces from its seed.

The verdict (``Bounds.problem``): an answer is audio, or a refusal with a stable code (4xx, or 503 server_busy
with Retry-After); never another 5xx, a dropped connection or a hang; it comes within a time linear in the
text's length; its audio is bounded by the text's length. One /ping prober (``PingProbe``, a thread of its own so
the client's event loop does not colour it) measures SageMaker's 250 ms health check meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import sys
import threading
import time
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import httpx
from kokoro_client import cartesia, deepgram, elevenlabs, protocol
from kokoro_client.errors import ErrorCode
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

RATE: Final = 24_000  # every route is asked for 16-bit PCM at the model's rate, so audio seconds are bytes / 48000
BYTES_PER_S: Final = 2 * RATE
VOICE: Final = "af_heart"
CODES: Final = frozenset(code.value for code in ErrorCode)

# Every text route: (name, what it is).
ROUTES: Final = {
    "invocations": "POST /invocations",
    "openai": "POST /v1/audio/speech",
    "openai-sse": "POST /v1/audio/speech stream_format=sse",
    "captioned": "POST /dev/captioned_speech",
    "bidi": "WS /invocations-bidirectional-stream",
    "speak": "WS /v1/speak (Deepgram)",
    "elevenlabs": "WS /v1/text-to-speech/{voice}/multi-stream-input (ElevenLabs)",
    "cartesia": "WS /tts/websocket (Cartesia)",
}
SESSION_ROUTES: Final = ("bidi", "speak", "elevenlabs", "cartesia")


# --- the strings --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str  # how the string was made: enough to rebuild it ("token '1-2-' x75")
    text: str

    def shown(self, limit: int = 60) -> str:
        """The text, shortened for a failure message: escaped, its start and its length."""
        text = ascii(self.text)
        return text if len(text) <= limit else f"{text[:limit]}... ({len(self.text)} chars)"


# The token shapes whose G2P, chunking or text maps grew worse than linear (issue 28), and their kin.
HARD_TOKENS: Final = ("1-2-", "a_", "1/2/", "1%2%", "1_", "\x01$1M ", "… ", "a-", "1.2.", "1:2:", "$1,", "x1")
PUNCTUATION: Final = ("!", "?", ".", "…", "—", "-", ",", ";", "!?", "?!.", "()", "«»", '"', "'", "*", "#", "~")
CONTROLS: Final = "".join(map(chr, [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, *range(0x80, 0xA0)]))
RTL_AND_MARKS: Final = (
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u202d",
    "\u2066",
    "\u2069",
    "\u200f",
    "\u200e",
    "\u061c",
    "שלום עולם",
    "مرحبا بالعالم",
    "\u0301",  # combining acute
    "\u0336",
    "\u20dd",
    "\ufeff",
    "\u200b",
)
EMOJI: Final = (
    "👩‍👩‍👧‍👦",  # a ZWJ family
    "🏳️‍🌈",
    "👍🏽",
    "🇯🇵",
    "❤️",
    "\u200d",
    "\ufe0f",
    "🫠",
    "1️⃣",  # a keycap: a digit in disguise
)
LETTERS: Final = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
SENTENCE: Final = "The quick brown fox jumps over the lazy dog."


def unicode_digits() -> dict[str, str]:
    """Script → its digits zero to nine (or those it has): every Nd digit zero's run, and the No characters with a
    digit value (superscript, subscript, circled, parenthesized, "1.", dingbat digits ...), grouped by name."""
    scripts: dict[str, str] = {}
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        category = unicodedata.category(char)
        if category not in ("Nd", "No") or unicodedata.digit(char, None) is None:
            continue
        name = unicodedata.name(char, "")
        script = name.rsplit(" DIGIT", 1)[0] if " DIGIT" in name else name.split()[0]
        scripts[script] = scripts.get(script, "") + char
    return scripts


def fixed_cases() -> list[Case]:
    """The adversarial strings every run speaks: the issue's reproductions and the shapes next to them."""
    cases = [Case(f"token {token!r} x{300 // len(token)}", token * (300 // len(token))) for token in HARD_TOKENS]
    cases += [
        Case("'\\x01$1M ' cut to 1000", ("\x01$1M " * 200)[:1000]),
        Case("'… ' x500", "… " * 500),
        Case("'①' x120", "①" * 120),
        Case("'¹' x120", "¹" * 120),
        Case("'1' x120", "1" * 120),
        Case("'9' x100", "9" * 100),
        Case("40-digit negative in a sentence", f"It was -{'7' * 40} degrees, they said."),
        Case("'1' x60 + '.' + '1' x60", "1" * 60 + "." + "1" * 60),
        Case("'$' + 90 digits + 'M'", "$" + "9" * 90 + "M"),
        Case("'1,' x60", "1," * 60),
        Case("'!' x300", "!" * 300),
        Case("'.' x1000", "." * 1000),
        Case("controls", CONTROLS),
        Case("zalgo", "H" + "\u0301\u0336\u0489" * 100 + "ello."),
        Case("RTL override sentence", f"\u202e{SENTENCE}\u202c"),
        Case("ZWJ family x40", "👩‍👩‍👧‍👦" * 40),
        Case("lone surrogate", "Hello \ud800 there."),
        Case("'a' x300", "a" * 300),
    ]
    return cases


def issue_cases() -> list[Case]:
    """The issue's own reproductions, which every route must hold against."""
    return [Case("token '1-2-' x75", "1-2-" * 75), Case("'①' x120", "①" * 120)]


def burst_cases() -> list[Case]:
    """The issue's loop stalls at the text cap, for eight at once: the sentence chunker on "… ", text maps on
    "\\x01$1M "."""
    return [Case("'… ' x2500", "… " * 2500), Case("'\\x01$1M ' cut to 5000", ("\x01$1M " * 1000)[:5000])]


ASCII_TWIN: Final = Case("'1' x120", "1" * 120)  # refused number_too_long: its twins in other scripts must be too


def _random_piece(rng: random.Random, digits: dict[str, str]) -> str:
    kind = rng.randrange(9)
    if kind == 0:  # a hard token, repeated
        return rng.choice(HARD_TOKENS) * rng.randint(1, 40)
    if kind == 1:
        return rng.choice(PUNCTUATION) * rng.randint(1, 30)
    if kind == 2:  # a number in some script's digits
        script = digits[rng.choice(sorted(digits))]
        return "".join(rng.choice(script) for _ in range(rng.randint(1, 30)))
    if kind == 3:
        return "".join(rng.choice(CONTROLS) for _ in range(rng.randint(1, 10)))
    if kind == 4:
        return "".join(rng.choice(RTL_AND_MARKS) for _ in range(rng.randint(1, 6)))
    if kind == 5:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 6)))
    if kind == 6:  # an unbroken token over letters, digits and joiners
        alphabet = LETTERS + "0123456789_-/%$.,:'"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(5, 120)))
    if kind == 7:
        return rng.choice(("1e308", "-0", "NaN", "∞", "0x" + "f" * 20, "1" * rng.randint(20, 110), "½", "Ⅻ"))
    return " ".join(rng.sample(SENTENCE.split(), rng.randint(1, 5)))


def random_cases(seed: int, count: int, max_chars: int = 400) -> list[Case]:
    """``count`` strings of up to ``max_chars`` characters, each a run of random pieces, from ``seed``."""
    rng = random.Random(seed)
    digits = unicode_digits()
    cases = []
    for index in range(count):
        pieces: list[str] = []
        while sum(map(len, pieces)) < rng.randint(1, max_chars):
            pieces.append(_random_piece(rng, digits))
            pieces.append(rng.choice(("", " ", " ", ", ", ". ", "\n")))
        cases.append(Case(f"random seed={seed} #{index}", "".join(pieces)[:max_chars]))
    return cases


def digit_cases(rng: random.Random, scripts: int, length: int = 120) -> list[Case]:
    """Numbers ``length`` digits long in ``scripts`` scripts other than ASCII (always fullwidth, Arabic-Indic,
    Devanagari, circled and superscript), each the twin of ``"1" * length``."""
    digits = unicode_digits()
    always = ["FULLWIDTH", "ARABIC-INDIC", "DEVANAGARI", "CIRCLED", "SUPERSCRIPT"]
    others = sorted(set(digits) - set(always) - {"DIGIT"})
    chosen = [*always, *rng.sample(others, max(0, min(len(others), scripts - len(always))))]
    cases = []
    for script in chosen:
        one = next((c for c in digits[script] if unicodedata.digit(c) == 1), digits[script][0])
        cases.append(Case(f"{script} digit {one!a} x{length}", one * length))
    return cases


# --- the verdict ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """What any answer must meet, linear in the text's characters: its first audio or its refusal within
    ``first_s(text)``; the rest at no worse than ``rtf`` seconds per second of audio (a hang, not a speed, test);
    at most ``audio_s(text)`` of audio. ``read_s``: the audio read before the client leaves (the server must then
    stop), which keeps a run's cost bounded however much a text says."""

    first_base_s: float
    first_per_char_s: float
    rtf: float
    audio_base_s: float = 2.0
    audio_per_char_s: float = 1.0  # "9" * 100, read in full, is 0.7-0.9 s of audio per character
    read_s: float = 3.0

    @classmethod
    def from_reference(cls, first_s: float, rtf: float, read_s: float = 3.0) -> Bounds:
        """Generous bounds from a normal sentence's first-audio time and real-time factor measured alone on this
        machine in the same run: the base is ten of its first audio (plus 2 s), each character may add 2 ms (a
        linear text step takes microseconds), the rest may take four times its real-time factor."""
        return cls(2.0 + 10 * first_s, 0.002, max(1.0, 4 * rtf), read_s=read_s)

    def first_s(self, text: str) -> float:
        return self.first_base_s + self.first_per_char_s * len(text)

    def audio_s(self, text: str) -> float:
        return self.audio_base_s + self.audio_per_char_s * len(text)


@dataclass
class Outcome:
    route: str
    case: Case
    first_s: float | None = None  # when the first audio or the refusal came
    elapsed_s: float = 0.0
    audio_s: float = 0.0
    complete: bool = False  # the whole answer was read (else the client left after ``read_s`` of audio)
    http_status: int | None = None
    codes: list[str] = field(default_factory=list)  # refusals: the error's (or Warnings') stable codes
    problem: str | None = None  # None: the answer met the bounds

    @property
    def refused(self) -> bool:
        return bool(self.codes) and self.audio_s == 0

    def line(self) -> str:
        verdict = self.problem or "ok"
        first = "-" if self.first_s is None else f"{self.first_s:.1f}"
        return (
            f"{self.route}: {self.case.name}: {self.case.shown()} -> {verdict} (status {self.http_status}, "
            f"codes {self.codes}, first answer {first} s, {self.audio_s:.1f} s audio in {self.elapsed_s:.1f} s)"
        )


class _Enough(Exception):
    """Reading stops: the audio passed its bound, or the ``read_s`` this run reads (the client leaves)."""


class _Answer:
    """What has come back so far: when it started, how much audio."""

    def __init__(self, started: float, audio_limit_s: float, read_s: float) -> None:
        self.started = started
        self.first_s: float | None = None
        self.bytes = 0
        self.limit_s = audio_limit_s
        self.read_s = read_s

    def began(self) -> None:
        if self.first_s is None:
            self.first_s = time.perf_counter() - self.started

    def add(self, data: bytes) -> None:
        self.began()
        self.bytes += len(data)
        if self.seconds > self.limit_s or self.seconds >= self.read_s:
            raise _Enough

    @property
    def seconds(self) -> float:
        return self.bytes / BYTES_PER_S


async def speak(base_url: str, route: str, case: Case, bounds: Bounds, client: httpx.AsyncClient) -> Outcome:
    """Send ``case`` through ``route`` and judge the answer."""
    outcome = Outcome(route, case)
    started = time.perf_counter()
    answer = _Answer(started, bounds.audio_s(case.text), bounds.read_s)
    first_limit = bounds.first_s(case.text)
    if route in SESSION_ROUTES:
        task = asyncio.ensure_future(_session(base_url, route, case.text, answer, outcome))
    else:
        task = asyncio.ensure_future(_http(base_url, route, case.text, answer, outcome, client))
    try:
        async with asyncio.timeout(first_limit) as timeout:
            while not task.done():  # once the answer starts, the rest is bounded by its audio
                await asyncio.wait([task], timeout=0.05)
                if answer.first_s is not None:
                    rest = first_limit + bounds.rtf * max(answer.seconds, answer.read_s) + 10.0
                    timeout.reschedule(asyncio.get_running_loop().time() + rest - (time.perf_counter() - started))
            await task
        outcome.complete = True
    except TimeoutError:
        if answer.first_s is None:
            outcome.problem = f"no answer within {first_limit:.1f} s"
        else:
            outcome.problem = f"answer stalled after {answer.seconds:.1f} s of audio"
    except _Enough:
        if answer.seconds > answer.limit_s:
            outcome.problem = f"audio past {answer.limit_s:.1f} s for {len(case.text)} characters"
    except (httpx.HTTPError, OSError, ConnectionClosed) as error:
        outcome.problem = f"connection failed: {type(error).__name__}: {str(error)[:80]}"
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # not the route's wire format
        outcome.problem = f"malformed answer: {type(error).__name__}: {str(error)[:80]}"
    finally:
        task.cancel()  # the client leaves: the server must stop this synthesis
        await asyncio.gather(task, return_exceptions=True)
    outcome.first_s = answer.first_s
    outcome.elapsed_s = time.perf_counter() - started
    outcome.audio_s = answer.seconds
    if outcome.problem is None:
        outcome.problem = _refusal_problem(outcome)
    return outcome


def _refusal_problem(outcome: Outcome) -> str | None:
    unknown = [code for code in outcome.codes if code not in CODES]
    if unknown:
        return f"refused without a stable code: {unknown}"
    if outcome.http_status is not None and outcome.http_status >= 500 and outcome.codes != [ErrorCode.SERVER_BUSY]:
        return f"answered {outcome.http_status} {outcome.codes}"
    if ErrorCode.INTERNAL_ERROR in outcome.codes:
        return "internal_error"
    if outcome.complete and not outcome.codes and outcome.audio_s == 0:
        return "neither audio nor a refusal"
    return None


_HTTP_BODIES: Final = {
    "invocations": ("/invocations", lambda text: {"text": text, "voice": VOICE, "format": "pcm"}),
    "openai": ("/v1/audio/speech", lambda text: {"input": text, "voice": VOICE, "response_format": "pcm"}),
    "openai-sse": (
        "/v1/audio/speech",
        lambda text: {"input": text, "voice": VOICE, "response_format": "pcm", "stream_format": "sse"},
    ),
    "captioned": ("/dev/captioned_speech", lambda text: {"input": text, "voice": VOICE, "response_format": "pcm"}),
}


async def _http(
    base_url: str, route: str, text: str, answer: _Answer, outcome: Outcome, client: httpx.AsyncClient
) -> None:
    path, body = _HTTP_BODIES[route]
    # ensure_ascii: a lone surrogate travels as JSON's \ud800 escape, as any JSON client may send it.
    content = json.dumps(body(text), ensure_ascii=True).encode()
    headers = {"content-type": "application/json"}
    async with client.stream("POST", f"{base_url}{path}", content=content, headers=headers) as response:
        answer.began()  # every route synthesizes the first chunk before its response starts
        outcome.http_status = response.status_code
        if response.status_code != 200:
            payload = json.loads(await response.aread() or b"{}")
            error = payload.get("error") if isinstance(payload, dict) else None
            outcome.codes.append(str(error.get("code")) if isinstance(error, dict) else f"HTTP {response.status_code}")
            if response.status_code == 503 and "retry-after" not in response.headers:
                outcome.codes.append("503 without Retry-After")
            return
        if route in ("invocations", "openai"):
            async for data in response.aiter_bytes():
                answer.add(data)
            return
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            if route == "openai-sse":
                event = json.loads(line.removeprefix("data: "))
                if event["type"] == "speech.audio.delta":
                    answer.add(base64.b64decode(event["audio"]))
                elif event["type"] == "error":  # after the response started: the stream's last event
                    outcome.codes.append(str(event["error"].get("code")))
            else:
                answer.add(base64.b64decode(json.loads(line)["audio"]))


async def _session(base_url: str, route: str, text: str, answer: _Answer, outcome: Outcome) -> None:
    ws_base = base_url.replace("http://", "ws://", 1)
    if route == "bidi":
        async with connect(f"{ws_base}/invocations-bidirectional-stream", max_size=None) as ws:
            await ws.send(protocol.encode(protocol.Synthesize(text, id="hostile", voice=VOICE)))
            await _read_answer(ws, answer, outcome, _bidi_heard, "the utterance ended")
    elif route == "speak":
        url = f"{ws_base}/v1/speak?model={VOICE}&encoding=linear16&sample_rate={RATE}"
        async with connect(url, max_size=None) as ws:
            await ws.send(deepgram.encode(deepgram.Speak(text)))
            await ws.send(deepgram.encode(deepgram.Flush()))
            await _read_answer(ws, answer, outcome, _deepgram_heard, "Flushed")
    elif route == "elevenlabs":
        url = f"{ws_base}/v1/text-to-speech/{VOICE}/multi-stream-input?output_format=pcm_{RATE}"
        async with connect(url, max_size=None) as ws:
            for message in (
                elevenlabs.SendText(text, "hostile"),
                elevenlabs.SendText(None, "hostile", flush=True),
                elevenlabs.CloseContext("hostile"),
            ):
                await ws.send(elevenlabs.encode_client(message))
            await _read_answer(ws, answer, outcome, _elevenlabs_heard, "its final message")
    else:
        async with connect(f"{ws_base}/tts/websocket", max_size=None) as ws:
            request = cartesia.Generate(text, "hostile", False, VOICE, "pcm", RATE, False, None)
            await ws.send(cartesia.encode_client(request))
            await _read_answer(ws, answer, outcome, _cartesia_heard, "done")


class _Heard(NamedTuple):
    """What one text frame of an answer says: whether the answer has begun, the error code it names, whether the
    utterance is over, and the audio it carries (the vendors' sockets send it in JSON)."""

    began: bool
    code: str | None
    ends: bool
    audio: bytes = b""


def _bidi_heard(message: str) -> _Heard:
    frame = protocol.parse_server_frame(message)
    if isinstance(frame, protocol.Error):
        return _Heard(True, frame.code, frame.id in ("hostile", None))
    return _Heard(isinstance(frame, protocol.SynthesisStart), None, isinstance(frame, protocol.SynthesisComplete))


def _deepgram_heard(message: str) -> _Heard:
    frame = deepgram.parse_server_message(message)
    if isinstance(frame, deepgram.WarningMessage | deepgram.ErrorMessage):
        return _Heard(True, frame.code, False)
    flushed = isinstance(frame, deepgram.Flushed)
    return _Heard(flushed, None, flushed)


def _elevenlabs_heard(message: str) -> _Heard:
    match elevenlabs.parse_server_message(message):
        case elevenlabs.AudioOutput(audio=audio):
            return _Heard(True, None, False, audio)
        case elevenlabs.ErrorOutput(error=code):
            return _Heard(True, code, False)
        case _:
            return _Heard(True, None, True)  # its final message


def _cartesia_heard(message: str) -> _Heard:
    match cartesia.parse_server_message(message):
        case cartesia.Chunk(audio=audio):
            return _Heard(True, None, False, audio)
        case cartesia.ErrorMessage(code=code):
            return _Heard(True, code, False)
        case cartesia.Done():
            return _Heard(True, None, True)
        case _:
            return _Heard(False, None, False)


async def _read_answer(
    ws: ClientConnection, answer: _Answer, outcome: Outcome, heard: Callable[[str], _Heard], end: str
) -> None:
    async for message in ws:
        if isinstance(message, bytes):
            answer.add(message)
            continue
        said = heard(message)
        if said.began:
            answer.began()
        if said.audio:
            answer.add(said.audio)
        if said.code is not None:
            outcome.codes.append(said.code)
        if said.ends:
            return
    outcome.problem = f"the session closed before {end}"


# --- /ping, measured meanwhile ----------------------------------------------------------------------------------


class PingProbe:
    """GET /ping every ``interval_s`` from a thread of its own, each answer's latency and when it was sent: the
    slowest, and which cases were in flight then (``during``)."""

    def __init__(self, base_url: str, interval_s: float = 0.05) -> None:
        self._url = f"{base_url}/ping"
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ping-probe", daemon=True)
        self.samples: list[tuple[float, float]] = []  # (sent at, perf_counter; latency in ms)
        self.failures = 0

    def __enter__(self) -> PingProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(timeout=5, trust_env=False) as client:
            while not self._stop.is_set():
                sent = time.perf_counter()
                try:
                    ok = client.get(self._url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                latency_ms = 1000 * (time.perf_counter() - sent)
                if ok:
                    self.samples.append((sent, latency_ms))
                else:
                    self.failures += 1
                self._stop.wait(self._interval_s)

    @property
    def max_ms(self) -> float:
        return max((latency for _, latency in self.samples), default=0.0)

    def percentile_ms(self, fraction: float) -> float:
        latencies = sorted(latency for _, latency in self.samples)
        return latencies[min(len(latencies) - 1, int(len(latencies) * fraction))] if latencies else 0.0

    def slow(self, limit_ms: float) -> list[tuple[float, float]]:
        return [(sent, latency) for sent, latency in self.samples if latency >= limit_ms]


@dataclass
class Flight:
    """When a case was in flight on a route (perf_counter), to name the cases a slow /ping overlapped."""

    route: str
    case: Case
    start: float
    end: float = float("inf")


def during(flights: Sequence[Flight], sent: float, latency_ms: float) -> list[str]:
    end = sent + latency_ms / 1000
    return sorted({f"{f.route}: {f.case.name}" for f in flights if f.start <= end and f.end >= sent})


async def speak_all(
    base_url: str,
    jobs: Sequence[tuple[str, Case]],
    bounds: Bounds,
    flights: list[Flight],
    concurrency: int = 1,
    progress: Callable[[Outcome], None] | None = None,
    retry_busy_s: float = 120.0,
    settle: Callable[[], Awaitable[object]] | None = None,
) -> list[Outcome]:
    """Each (route, case) spoken and judged, ``concurrency`` at a time, in order; ``progress`` sees each outcome.
    ``settle``: awaited before each case, so that its verdict is not on the work the previous one left behind.
    A server_busy refusal is retried each second for up to ``retry_busy_s``, as the server asks: the work a client
    left behind may still fill the queue for a while, and the verdict wanted is on the text, not on admission."""
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)

    async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10), limits=limits, trust_env=False) as client:

        async def one(route: str, case: Case) -> Outcome:
            async with gate:
                if settle is not None:
                    await settle()
                flight = Flight(route, case, time.perf_counter())
                flights.append(flight)
                retry_until = time.perf_counter() + retry_busy_s
                try:
                    while True:
                        outcome = await speak(base_url, route, case, bounds, client)
                        if outcome.codes != [ErrorCode.SERVER_BUSY] or time.perf_counter() > retry_until:
                            break
                        await asyncio.sleep(1.0)
                finally:
                    flight.end = time.perf_counter()
                if progress is not None:
                    progress(outcome)
                return outcome

        return list(await asyncio.gather(*(one(route, case) for route, case in jobs)))


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Counts for a report: answers by kind, refusals by code, the slowest and the longest audio per character."""
    refused: dict[str, int] = {}
    for outcome in outcomes:
        for code in outcome.codes:
            refused[code] = refused.get(code, 0) + 1
    slowest = max(outcomes, key=lambda o: o.elapsed_s / max(1, len(o.case.text)), default=None)
    return {
        "requests": len(outcomes),
        "failed": sum(o.problem is not None for o in outcomes),
        "with_audio": sum(o.audio_s > 0 for o in outcomes),
        "refused_by_code": dict(sorted(refused.items())),
        "max_elapsed_s": round(max((o.elapsed_s for o in outcomes), default=0.0), 2),
        "max_audio_s_per_char": round(max((o.audio_s / max(1, len(o.case.text)) for o in outcomes), default=0.0), 3),
        "slowest_per_char": slowest.line() if slowest else None,
    }


async def calibrate(base_url: str, runs: int = 3) -> Bounds:
    """Bounds from a normal sentence spoken alone ``runs`` times on this machine now (the median run)."""
    loose = Bounds(first_base_s=300.0, first_per_char_s=0.0, rtf=100.0, audio_base_s=60.0, read_s=60.0)
    outcomes = await speak_all(base_url, [("invocations", Case("reference", SENTENCE))] * runs, loose, [])
    failed = [o.line() for o in outcomes if o.problem or o.first_s is None or not o.audio_s]
    if failed:
        raise RuntimeError(f"the reference sentence failed: {failed}")
    median = sorted(outcomes, key=lambda o: o.elapsed_s)[runs // 2]
    return Bounds.from_reference(median.first_s or 0.0, median.elapsed_s / median.audio_s)


def rotate[T](items: Sequence[T], routes: Sequence[str], per_item: int, offset: int = 0) -> list[tuple[str, T]]:
    """Each item through ``per_item`` routes, the routes taken in turn, so every route sees every kind of item."""
    return [
        (routes[(offset + index * per_item + k) % len(routes)], item)
        for index, item in enumerate(items)
        for k in range(per_item)
    ]
