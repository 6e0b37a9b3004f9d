"""The demo page (voice_agent/web) in real headless Chromium (Debian's package) through Playwright, against the real
agent app, the real TTS server and model, and the scripted LLM: each mode and both side by side play what they
receive back to back, the timeline and first-audio figures render, and Stop cancels on the server.

    .venv/bin/pytest -m browser tests/agent/test_web_page.py

Screenshots go to pytest's tmp dir and out/web/; set WEB_PAGE_SCREENSHOT=docs/img/web-demo.png to refresh the one
in the docs (both modes side by side).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright
from starlette.testclient import TestClient
from support.agent_fixtures import TEST_REPLY, AgentServer, agent_settings, make_model
from support.eventually import eventually_here
from support.inproc_server import RunningServer
from voice_agent.app import create_app
from voice_agent.scripted_model import DEFAULT_REPLY, ScriptedModel
from voice_agent.web import ASSETS, HERE, is_loopback

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "out" / "web"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
]
VIEWPORT = {"width": 1280, "height": 720}  # full-page screenshots grow to fit the content
RUN_TIMEOUT_MS = 60_000


def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        pytest.fail("Chromium is missing: install Debian's package (apt-get install -y chromium); never skipped")
    return path


@pytest.mark.browser
def test_chromium_is_installed() -> None:
    """A test of its own, so a missing browser is a plain failure with the fix in its message."""
    assert os.access(chromium_path(), os.X_OK)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def model() -> ScriptedModel:
    # The tests' four-sentence reply, a little faster than their usual cadence (the LLM takes ~4 s): bidi's first
    # audio still comes long before batch's, which waits for all of it.
    return make_model(tokens_per_s=4.0)


@pytest.fixture(scope="module")
def agent(server: RunningServer, model: ScriptedModel) -> Iterator[AgentServer]:
    with AgentServer(agent_settings(server.base_url, web_page=True), model).running() as running:
        # Pay the cold paths (the G2P's lexicons, the agent's worker loop) off the clock.
        httpx.post(f"{server.base_url}/invocations", json={"text": "Hello there! Warming up."}, timeout=60)
        yield running


@pytest.fixture
def page(browser: Browser, agent: AgentServer) -> Iterator[Page]:
    """The page, loaded; fails the test on any script error, console error, or request leaving the app."""
    context = browser.new_context(viewport=VIEWPORT)
    opened = context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console: {message.text}")

    def on_request(request: Request) -> None:
        if not request.url.startswith(agent.url + "/") and not request.url.startswith("data:"):
            problems.append(f"request outside the app: {request.url}")

    opened.on("console", on_console)
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on("request", on_request)
    opened.goto(agent.url + "/")
    opened.wait_for_function("() => window.voiceDemo && window.voiceDemo.state === 'idle'")
    yield opened
    context.close()
    assert not problems, problems


def speak(page: Page, mode: str) -> None:
    page.check(f"input[name=mode][value={mode}]")
    page.click("#speak")
    page.wait_for_function("() => voiceDemo.state === 'running'")


def wait_done(page: Page) -> dict[str, Any]:
    page.wait_for_function("() => voiceDemo.state !== 'running'", timeout=RUN_TIMEOUT_MS)
    demo: dict[str, Any] = page.evaluate(
        "() => ({state: voiceDemo.state, scheduled: voiceDemo.scheduled, firstAudioMs: voiceDemo.firstAudioMs,"
        " runs: Object.fromEntries(Object.entries(voiceDemo.runs).map(([m, r]) =>"
        " [m, {status: r.status, error: r.error, metrics: r.metrics, texts: r.texts.length}]))})"
    )
    assert demo["state"] == "done", demo["runs"]
    return demo


def assert_back_to_back(scheduled: list[dict[str, Any]], mode: str) -> None:
    """In seq order; each chunk starts exactly where the previous one ends, unless the audio had run dry (an
    underrun: it was scheduled after the previous chunk had finished playing)."""
    chunks = [c for c in scheduled if c["mode"] == mode]
    assert len(chunks) >= 2, f"{mode}: {len(chunks)} chunks scheduled"
    assert [c["seq"] for c in chunks] == list(range(len(chunks))), f"{mode}: chunks out of order"
    assert not chunks[0]["underrun"]
    for prev, cur in pairwise(chunks):
        prev_end = prev["startTime"] + prev["duration"]
        if cur["underrun"]:
            assert cur["scheduledAt"] >= prev_end, f"{mode} seq {cur['seq']}: an underrun while audio was playing"
            assert cur["startTime"] > prev_end
        else:
            assert abs(cur["startTime"] - prev_end) < 0.001, f"{mode} seq {cur['seq']}: a gap or an overlap"
            assert cur["scheduledAt"] < prev_end


def assert_rendered(page: Page, mode: str, runs: dict[str, Any]) -> int:
    """The column's first-audio figure is a number, and its timeline holds each kind of mark; returns the ms."""
    column = page.locator(f"#col-{mode}")
    assert column.is_visible()
    figure = column.locator(".first-audio .value").inner_text()
    assert figure.endswith(" ms") and figure[:-3].isdigit(), figure
    chart = column.locator(".timeline svg")
    assert chart.locator(".tick-text").count() == runs[mode]["texts"] > 0
    assert chart.locator(".mark-sentence").count() >= 1
    assert chart.locator(".tick-audio").count() >= 2
    assert chart.locator(".bar-played").count() >= 2
    assert chart.locator(".marker.first-audio").count() == 1
    assert column.locator(".log tbody tr").count() > 0
    return int(figure[:-3])


def screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.png"
    page.screenshot(path=path, full_page=True)
    shutil.copy(path, OUT / path.name)
    return path


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bidi", "batch"])
def test_one_mode_plays_its_chunks_back_to_back(page: Page, tmp_path: Path, mode: str) -> None:
    speak(page, mode)
    demo = wait_done(page)
    assert set(demo["runs"]) == {mode} and page.locator(f"#col-{'batch' if mode == 'bidi' else 'bidi'}").is_hidden()
    assert_back_to_back(demo["scheduled"], mode)
    audio_s = sum(c["duration"] for c in demo["scheduled"])
    assert audio_s * 1000 == pytest.approx(demo["runs"][mode]["metrics"]["audio_ms"], abs=50)
    assert assert_rendered(page, mode, demo["runs"]) == demo["firstAudioMs"][mode] > 0
    screenshot(page, tmp_path, f"web-{mode}")


@pytest.mark.browser
@pytest.mark.slow
def test_both_modes_side_by_side(
    page: Page, model: ScriptedModel, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = os.environ.get("WEB_PAGE_SCREENSHOT")
    if target:  # the picture in the docs shows what `make agent` serves: the scripted model's own reply and cadence
        saved = dict(model.get_config())
        model.update_config(reply=DEFAULT_REPLY, ttft_s=0.6, tokens_per_s=15.0, jitter=0.3)
        request.addfinalizer(lambda: model.update_config(**saved))
    speak(page, "both")
    demo = wait_done(page)
    for mode in ("bidi", "batch"):
        assert_back_to_back(demo["scheduled"], mode)
        assert_rendered(page, mode, demo["runs"])
    first = demo["firstAudioMs"]
    assert first["bidi"] < first["batch"], first
    left, right = (page.locator(f"#col-{m}").bounding_box() for m in ("bidi", "batch"))
    assert left and right and left["x"] + left["width"] <= right["x"] and abs(left["y"] - right["y"]) < 1
    assert "sooner with bidi" in page.locator("#verdict").inner_text()
    page.wait_for_function("() => !voiceDemo.playing", timeout=RUN_TIMEOUT_MS)  # the playhead gone
    path = screenshot(page, tmp_path, "web-both")
    if target:
        shutil.copy(path, REPO / target)


@pytest.mark.browser
@pytest.mark.slow
def test_stop_cuts_the_audio_and_cancels_on_the_server(
    page: Page, model: ScriptedModel, tts_sessions: dict[str, int], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # A long reply, so that however slow the first synthesis is here, the LLM is still writing at the Stop.
    model.update_config(reply=" ".join([TEST_REPLY, *["This sentence only makes the reply longer."] * 12]))
    request.addfinalizer(lambda: model.update_config(reply=TEST_REPLY))
    streams_before = len(model.streams)
    speak(page, "bidi")
    # Stop mid-sentence while the LLM is still writing and audio is scheduled ahead, so both cuts are observable.
    page.wait_for_function(
        "() => voiceDemo.scheduled.length && voiceDemo.audioTime() > voiceDemo.scheduled[0].startTime + 0.3"
        " && voiceDemo.remainingS() > 0.3",
        timeout=RUN_TIMEOUT_MS,
    )
    page.click("#stop")
    cut = page.evaluate(
        """async () => {
            const end = Math.max(...voiceDemo.scheduled.map((c) => c.startTime + c.duration));
            while (voiceDemo.sounding() > 0) await new Promise((resolve) => setTimeout(resolve, 5));
            return {now: voiceDemo.audioTime(), end, state: voiceDemo.state, scheduled: voiceDemo.scheduled.length};
        }"""
    )
    assert cut["state"] == "stopped"
    assert cut["now"] < cut["end"] - 0.1, "the audio played on after Stop"

    # The server side: the page's fetch was aborted, so the app's hang-up watch stopped the LLM and the session.
    assert len(model.streams) == streams_before + 1
    record = model.streams[-1]
    eventually_here(lambda: record.closed, "the LLM stream to stop")
    assert record.cancelled and not record.completed
    eventually_here(lambda: tts_sessions["ended"] == tts_sessions["started"] == 1, "the TTS session to end")
    page.wait_for_timeout(500)  # nothing more arrives after the stop
    assert page.evaluate("() => voiceDemo.scheduled.length") == cut["scheduled"]
    column = page.locator("#col-bidi")
    assert column.get_attribute("data-status") == "stopped"
    assert column.locator(".marker.stop").count() == 1 and column.locator(".bar-cut").count() >= 1
    screenshot(page, tmp_path, "web-stopped")


@pytest.mark.browser
@pytest.mark.slow
def test_a_conversation_with_a_barge_in_keeps_what_was_heard(
    page: Page, model: ScriptedModel, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Three turns in one mode: the first interrupted by a new prompt after a second of its audio, the second run to
    its end, the third stopped. The agent sees the first reply cut to what the page played (the page's report),
    and the transcript shows the heard words and the struck-through rest."""
    long_reply = " ".join([TEST_REPLY, *["This sentence only makes the reply longer."] * 6])
    model.update_config(reply=long_reply, echo_context=True, tokens_per_s=20.0)
    request.addfinalizer(lambda: model.update_config(reply=TEST_REPLY, echo_context=False, tokens_per_s=4.0))
    page.fill("#prompt", "Where is my order?")
    speak(page, "bidi")
    page.wait_for_function(
        "() => voiceDemo.scheduled.length && voiceDemo.audioTime() > voiceDemo.scheduled[0].startTime + 1.0",
        timeout=RUN_TIMEOUT_MS,
    )
    page.fill("#prompt", "And when will it arrive?")
    page.click("#speak")  # the barge-in: a new prompt while the first reply plays
    demo = wait_done(page)
    assert demo["runs"]["bidi"]["status"] == "done"
    reports = page.evaluate("() => voiceDemo.reports")
    assert len(reports) == 1 and reports[0]["mode"] == "bidi" and 1000 <= reports[0]["played_ms"] < 10_000
    turns = page.evaluate("() => voiceDemo.transcript")
    first, second = turns
    assert first["state"] == "interrupted" and first["spoken"] and first["remaining"]
    assert first["text"].startswith(first["spoken"])  # the page got more text than it played; the agent may have more
    assert second["state"] == "done" and second["text"].startswith("Earlier you said: Where is my order?.")
    # The agent's LLM was given the first reply as heard, not as written.
    assert model.streams[-1].context == [
        ("user", "Where is my order?"),
        ("assistant", first["spoken"]),
        ("user", "And when will it arrive?"),
    ]
    page.wait_for_function("() => !voiceDemo.playing", timeout=RUN_TIMEOUT_MS)

    page.fill("#prompt", "Thanks, that is all.")
    speak(page, "bidi")
    page.wait_for_function(
        "() => voiceDemo.scheduled.length && voiceDemo.audioTime() > voiceDemo.scheduled[0].startTime + 0.5",
        timeout=RUN_TIMEOUT_MS,
    )
    page.click("#stop")
    page.wait_for_function("() => voiceDemo.transcript[2].spoken !== null", timeout=RUN_TIMEOUT_MS)
    third = page.evaluate("() => voiceDemo.transcript[2]")
    assert third["state"] == "interrupted" and third["spoken"] and third["remaining"]
    items = page.locator("#transcript li")
    assert items.count() == 3
    assert items.nth(0).locator(".cut").inner_text() == first["remaining"]
    assert items.nth(1).locator(".cut").count() == 0
    assert items.nth(2).locator(".heard").inner_text() == third["spoken"]
    screenshot(page, tmp_path, "web-conversation")


@pytest.mark.browser
def test_sse_parser_and_pcm_decoder_take_any_cut(page: Page) -> None:
    """The page's own parsers, fed a stream cut at every position (CRLF split in two, odd byte counts)."""
    result = page.evaluate(
        r"""() => {
            const {SSEParser, PCMDecoder} = voiceDemo.lib;
            const events = [{type: 'a', text: 'x\ny'}, {type: 'b', n: 1}, {type: 'c', s: 'ü€'}];
            const wire = ': comment\r\n\r\n' + events.map((e, i) =>
                ['data: ' + JSON.stringify(e), i === 1 ? '\r\n\r\n' : i === 2 ? '\r\r' : '\n\n'].join('')).join('');
            const bad = [];
            for (let cut = 0; cut <= wire.length; cut++) {
                const parser = new SSEParser();
                const got = [...parser.feed(wire.slice(0, cut)), ...parser.feed(wire.slice(cut)), ...parser.end()];
                if (JSON.stringify(got.map(JSON.parse)) !== JSON.stringify(events)) bad.push(cut);
            }
            const single = new SSEParser();  // one character at a time
            const each = [...wire].flatMap((c) => single.feed(c)).concat(single.end());
            if (JSON.stringify(each.map(JSON.parse)) !== JSON.stringify(events)) bad.push('each');
            const samples = Int16Array.from([0, 1, -1, 32767, -32768, 1234, -4321]);
            const bytes = new Uint8Array(samples.buffer);
            const badPcm = [];
            for (let cut = 0; cut <= bytes.length; cut++) {
                const decoder = new PCMDecoder();
                const out = [...decoder.decode(bytes.slice(0, cut)), ...decoder.decode(bytes.slice(cut))];
                if (out.join() !== [...samples].map((s) => s / 32768).join()) badPcm.push(cut);
            }
            return {bad, badPcm, cuts: wire.length};
        }"""
    )
    assert result["bad"] == [] and result["badPcm"] == [], result


def test_page_is_served_only_when_enabled() -> None:
    on = TestClient(create_app(agent_settings("http://127.0.0.1:9", web_page=True)))
    off = TestClient(create_app(agent_settings("http://127.0.0.1:9", web_page=None)))  # unset: `serve` decides

    page = on.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert on.get("/web/").text == page.text
    assert on.get("/web/app.js").headers["content-type"].startswith("text/javascript")
    assert on.get("/web/__init__.py").status_code == 404
    assert off.get("/").status_code == 404
    assert off.get("/web/app.js").status_code == 404


def test_the_page_refers_to_nothing_outside_the_app() -> None:
    # (The browser tests also fail on any request that leaves the app; this catches a reference they miss.)
    for name in ASSETS:
        text = (HERE / name).read_text().replace("http://www.w3.org/2000/svg", "")  # a namespace, never fetched
        assert not re.search(r"https?:|(src|href)=[\"']//|url\(|@import", text), name


@pytest.mark.parametrize(
    ("host", "local"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False)],
)
def test_serve_shows_the_page_by_default_on_loopback_only(host: str, local: bool) -> None:
    assert is_loopback(host) is local
