"""Markup read as a person reads it (text/markup.py): every construct, table-driven; the map back to the client's
text; the same reading whether a reply comes whole or cut into lines and LLM-like tokens; where a text still being
written ends inside a construct; linear time on hostile markup. Then the real server: a markdown reply and an HTML
reply, spoken by the real model, are heard by Whisper with all their words and none of their markup, their word
timestamps point into the text as sent, and ``literal`` reads the markup as written on every front door."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable

import httpx
import numpy as np
import pytest
from kokoro_client.chunker import split_sentences
from kokoro_tts.text.markup import held_from, spoken
from support.inproc_server import RunningServer
from support.timing import best_cpu_times
from support.ws_client import Transcript, completes, receive_until
from voice_agent.scripted_model import tokenize
from websockets.asyncio.client import connect

from scripts.speech import words

# markup → what is read (before cleaning and normalization).
READ = [
    ("## Summary", "Summary."),
    ("# Title ##", "Title ."),
    ("Wait *ten* seconds, then **go**.", "Wait ten seconds, then go."),
    ("An _odd_ and ***loud*** and ~~old~~ word", "An odd and loud and old word"),
    ("- apples\n- pears:\n* plums\n+ figs.", "apples.\npears:\nplums.\nfigs."),
    ("- [x] done\n- [ ] todo", "done.\ntodo."),
    ("1. Preheat the oven\n2) Bake", "1. Preheat the oven.\n2) Bake."),
    ("See [the docs](https://example.com/a_(b)) now.", "See the docs now."),
    ("![a cat](cat.png) and [one][ref].", "a cat and one."),
    ("[ref]: https://example.com\nText", "\nText"),
    ("Go to <https://example.com/a>!", "Go to https://example.com/a!"),
    ("Use `make test` here.", "Use make test here."),
    ("```python\nprint(x)\n```\nDone.", "\nprint(x)\n\nDone."),
    ("Above\n---\n***\nBelow", "Above\n\n\nBelow"),
    ("> Quoted *words*\n>> deeper", "Quoted words.\ndeeper."),
    ("| Name | Age |\n|---|:---:|\n| Ann | ten |", "  Name ,  Age . \n\n  Ann ,  ten . "),
    ("<b>Note:</b> salt &amp; pepper&nbsp;now.", "Note: salt & pepper now."),
    ("<p>One</p><p>Two<br/>three</p>", " One.  Two three. "),
    ("<ul><li>Coat</li><li>Hat</li></ul>", "  Coat.  Hat.  "),
    ('<a href="https://x.com">the site</a><!-- hidden --> &lt;3 &#8212; &#x2014;', "the site <3 — —"),
    ("\\*not emphasis\\* and \\# not a heading", "*not emphasis* and # not a heading"),
    ("Intro ## Heading run into a line", "Intro  Heading run into a line"),
]

# Left as written: what markup characters mean in prose.
UNCHANGED = [
    "Hello there, friend. How are you?",
    "snake_case_name and a_b_c stay",
    "2 * 3 is 6 and 5*3 is 15",
    "C# and F# and issue #12",
    "a < b and c > d",
    "Tom & Jerry; AT&T",
    "[1] and [sic]",
    "Wait... what?! (really)",
    "x ~ 5 and ~5 km",
]


@pytest.mark.parametrize(("text", "expected"), READ)
def test_markup_is_read_as_a_person_reads_it(text: str, expected: str) -> None:
    assert spoken(text)[0] == expected


@pytest.mark.parametrize("text", UNCHANGED)
def test_prose_is_left_as_written(text: str) -> None:
    assert spoken(text)[0] == text


@pytest.mark.parametrize("text", [text for text, _ in READ])
def test_every_word_read_maps_back_to_the_same_word_as_sent(text: str) -> None:
    read, source = spoken(text)
    for word in re.finditer(r"[^\W_]+", read):
        start, end = source.source_span(word.start(), word.end())
        assert text[start:end] == word.group(), (word.group(), text[start:end])


# A reply as hosted models write it, whatever the system prompt asked for.
MARKDOWN_REPLY = """## Your plan for today
Here is what **I would do**, step by *step*:
- Wait *ten* seconds, then call [the front desk](https://example.com/desk).
- Press the `reset` button on the ***left*** side.

| Room | Floor |
|------|-------|
| Blue | second |
---
> Bring a coat & an umbrella."""
MARKDOWN_WORDS = (
    "Your plan for today. Here is what I would do, step by step: Wait ten seconds, then call the front desk. "
    "Press the reset button on the left side. Room, Floor. Blue, second. Bring a coat and an umbrella."
)
HTML_REPLY = (
    "<p><b>Note:</b> the lobby &amp; the garden are open&nbsp;until <em>nine</em>.</p>"
    "<ul><li>Bring a coat</li><li>Sign in at the <a href='https://example.com'>front desk</a></li></ul>"
)
HTML_WORDS = "Note: the lobby and the garden are open until nine. Bring a coat. Sign in at the front desk."
# What a listener hears when markup is read character by character.
MARKUP_HEARD = {"hash", "asterisk", "asterisks", "star", "slash", "amp", "ampersand", "backtick", "underscore", "bar"}


def test_a_reply_reads_the_same_whole_as_in_lines_and_in_tokens() -> None:
    """The agent sends a reply line by line (bidi) or whole (batch), and an LLM writes it in sub-word tokens with
    markdown split across them: each way the same words are read, and a text still being written holds back no
    more than its unfinished construct."""
    whole = words(spoken(MARKDOWN_REPLY)[0])
    assert whole == words(MARKDOWN_WORDS.replace(" and ", " & "))
    lines = [w for sentence in split_sentences(MARKDOWN_REPLY) for w in words(spoken(sentence)[0])]
    assert lines == whole
    written = ""
    for token in tokenize(MARKDOWN_REPLY):
        written += token
        held = held_from(written)
        assert 0 <= held <= len(written)
        assert len(written) - held <= 45, (written[held:], token)  # the longest construct here: the link


HELD = [
    ("Wait *te", "Wait *te"),  # the "*" is decided: followed by a letter, it is silent
    ("Wait *", "Wait "),
    ("see [the do", "see "),
    ("see [the docs](https://exa", "see "),
    ("see ![a c", "see "),
    ("a <b", "a "),
    ("x <!-- hid", "x "),
    ("salt &am", "salt "),
    ("salt & pepper", "salt & pepper"),
    ("done.\n## Su", "done.\n## Su"),
    ("done.\n##", "done.\n"),
    ("done.\n1", "done.\n"),
    ("done.\n```pyt", "done.\n"),
    ("a < b", "a < b"),
    ("[x](y) done", "[x](y) done"),
]


@pytest.mark.parametrize(("text", "decided"), HELD)
def test_held_from_is_where_an_unfinished_construct_starts(text: str, decided: str) -> None:
    assert text[: held_from(text)] == decided


def test_markup_reading_is_linear_in_the_text() -> None:
    def reading(text: str) -> Callable[[], object]:
        return lambda: (spoken(text), held_from(text))

    prose = reading(((MARKDOWN_REPLY + "\n" + HTML_REPLY + "\n") * 10)[:5000])
    hostile = ["[" * 5000, "[a](" * 1250, "<a " * 1666, "<!--" * 1250, "&" * 5000, "&amp" * 1250, "*" * 5000,
               "a* " * 1666, "|" * 5000, "\n" * 5000, "#\n" * 2500, "-" * 4999 + "x", "| -" * 1666 + "x",
               "\\" * 5000, "[a](b(" * 833, "**[<&_`#|\n" * 500]  # fmt: skip
    for text in hostile:
        # Timed in turns with the prose, so that a slow spell of a shared machine falls on both (CI once saw
        # "|" x5000 at 10.7x the prose timed apart; in turns it is about 6x, linear in its length).
        prose_s, hostile_s = best_cpu_times(prose, reading(text), tries=5)
        assert hostile_s <= 10 * prose_s, (text[:12], hostile_s / prose_s)


# --- the real server ----------------------------------------------------------------------------------------------


async def _captioned(server: RunningServer, text: str, **fields: object) -> tuple[np.ndarray, list[dict[str, object]]]:
    body = {"input": text, "voice": "af_heart", "response_format": "pcm", "stream": False, **fields}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
        response = await client.post("/dev/captioned_speech", json=body)
    assert response.status_code == 200, response.text
    document = response.json()
    return np.frombuffer(base64.b64decode(document["audio"]), dtype="<i2"), document["timestamps"]


@pytest.mark.slow
async def test_markdown_and_html_replies_are_heard_without_their_markup(server: RunningServer) -> None:
    from support.listener import WhisperListener, word_errors

    listener = WhisperListener.shared()
    pcm, stamps = await _captioned(server, MARKDOWN_REPLY)
    # The timestamps point into the text as sent, markup and all.
    assert [t["word"] for t in stamps] == re.findall(r"[^\W_]+", MARKDOWN_WORDS.replace(" and ", " & "))
    assert all(MARKDOWN_REPLY[t["char_start"] : t["char_end"]] == t["word"] for t in stamps)  # type: ignore[misc]
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:  # SageMaker's route
        html = await client.post("/invocations", json={"text": HTML_REPLY, "format": "pcm"})
    assert html.status_code == 200, html.text
    for reference, audio in ((MARKDOWN_WORDS, pcm), (HTML_WORDS, np.frombuffer(html.content, dtype="<i2"))):
        heard = listener.transcribe(audio)
        errors, count = word_errors(reference, heard)
        assert errors <= count // 10, (errors, heard)
        assert not MARKUP_HEARD & set(words(heard)), heard


async def test_literal_reads_the_markup_as_written_on_every_front_door(server: RunningServer) -> None:
    """``literal``: on the OpenAI body, a session's synthesize and config, Deepgram's query; the markup is spoken
    (longer audio), and a value that is not a boolean is refused with invalid_message."""
    text = "## Steps: *now* <b>go</b> &amp; __stop__"
    read, _ = await _captioned(server, text)
    literal, _ = await _captioned(server, text, literal=True)
    assert literal.size > read.size + 0.4 * 24000, (literal.size, read.size)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
        bad = await client.post("/v1/audio/speech", json={"input": text, "literal": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_message"

    async with connect(server.ws_url) as ws:
        transcript = Transcript()
        await ws.send(json.dumps({"type": "synthesize", "id": "read", "text": text}))
        await ws.send(json.dumps({"type": "synthesize", "id": "literal", "text": text, "literal": True}))
        await ws.send(json.dumps({"type": "config", "literal": 1}))
        await ws.send(json.dumps({"type": "config", "literal": True}))
        await ws.send(json.dumps({"type": "synthesize", "id": "default", "text": text}))
        await receive_until(ws, transcript, completes(3))
    assert [e["code"] for e in transcript.json_frames("error")] == ["invalid_message"]
    audio = {key: len(u.audio) for key, u in transcript.utterances().items()}
    assert audio["literal"] == audio["default"] > audio["read"] + 0.4 * 48000, audio

    sizes = {}
    for query in ("", "&literal=true"):
        async with connect(f"ws://127.0.0.1:{server.port}/v1/speak?encoding=linear16{query}") as ws:
            await ws.send(json.dumps({"type": "Speak", "text": text}))
            await ws.send(json.dumps({"type": "Flush"}))
            size = 0
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    size += len(message)
                elif json.loads(message)["type"] == "Flushed":
                    break
            sizes[query] = size
    assert sizes["&literal=true"] > sizes[""] + 0.4 * 48000, sizes


def test_digits_written_as_character_references_count_against_the_digit_cap(server: RunningServer) -> None:
    """``&#49;`` is read as "1": a 101-digit number written so is refused as one written in digits is."""
    response = httpx.post(f"{server.base_url}/invocations", json={"text": "&#49;" * 101}, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["code"] == "number_too_long", response.text
