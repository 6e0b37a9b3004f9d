"""Text in fragments (text/fragments.py): what the server speaks of a text does not depend on where it was cut.

The same replies, cut at every position (two fragments) and at many random places (sub-word tokens, spaces and
punctuation alone), must come out as the same pieces, each the client's own text at its own offset, and the pieces'
spoken text (cleaned and normalized as the engine does: numbers, money, times, dates, URLs, abbreviations) must be
the whole text's spoken text."""

from __future__ import annotations

import random

import pytest
from kokoro_tts.text import markup
from kokoro_tts.text.fragments import FragmentBuffer, TextPiece
from kokoro_tts.text.normalize import normalize
from kokoro_tts.text.phonemes import clean_text_mapped

REPLIES = [
    "Sure! It costs $42.50 per month, or $1.2M for the lifetime plan. Call 555-1234 before 3:30 pm.",
    "Dr. Smith will see you on Jan 5, 2025 at 9:05 AM. Bring e.g. your ID, i.e. a passport. Thanks!",
    "The meeting moved to 2025-01-05. See https://www.example.com/docs/setup for details. Speed: 60 km/h.",
    "Pi is 3.14159, not 3.2. Version v1.2.3 ships Mon. The U.S. Army and St. Louis agree. That's it.",
    "We measured 25°C and 1,234,567 visitors, about 10% more. Prices start at .50 cents, vs. $0.99 last year.",
    'Wait... what? "Stop!" he said. Ok.\n\n1. Open the app.\n2. Tap Settings — then Save. Done, etc. Bye.',
    "Write to help@example.com or meet me at No. 5 Main St. at 7:00 pm. Then we go.",
]


def _spoken(text: str) -> str:
    """The text as the engine speaks it (SpeechRequest's cleaning, then normalization), spaces collapsed."""
    cleaned, _ = clean_text_mapped(text)
    return " ".join(normalize(cleaned, "a")[0].split())


def _cut(text: str, cuts: list[int]) -> list[TextPiece]:
    buffer = FragmentBuffer()
    pieces: list[TextPiece] = []
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        pieces += buffer.append(text[start:end])
    return pieces + buffer.end()


def _llm_tokens(text: str, rng: random.Random) -> list[int]:
    """Cut positions as an LLM's tokenizer makes them: sub-word pieces of 1 to 4 characters, and every space and
    punctuation mark a token of its own."""
    cuts, i = [], 0
    while i < len(text):
        i += 1 if not text[i].isalnum() else rng.randint(1, 4)
        while i < len(text) and text[i - 1].isalnum() and text[i].isalnum() and rng.random() < 0.5:
            i += 1
        cuts.append(min(i, len(text)))
    return sorted(set(cuts) - {len(text)})


@pytest.mark.parametrize("text", REPLIES)
def test_pieces_do_not_depend_on_the_cuts(text: str) -> None:
    whole = _cut(text, [])
    assert len(whole) > 1
    for piece in whole:
        assert text[piece.start : piece.start + len(piece.text)] == piece.text
    # The pieces speak what the whole text speaks: no number, price, time or abbreviation read differently.
    assert " ".join(_spoken(piece.text) for piece in whole) == _spoken(text)
    for cut in range(1, len(text)):
        assert _cut(text, [cut]) == whole, f"cut at {cut}: {text[:cut]!r} | {text[cut:]!r}"
    rng = random.Random(36)
    for _ in range(50):
        assert _cut(text, _llm_tokens(text, rng)) == whole


def test_a_piece_goes_out_as_soon_as_its_sentence_end_is_decided() -> None:
    buffer = FragmentBuffer()
    assert buffer.append("It costs $4") == []
    assert buffer.append("2.") == []  # "$42." may go on: "$42.50"
    assert buffer.append("50 today.") == []  # the next word decides: "today. and" would not end the sentence
    assert buffer.append(" Then") == [TextPiece("It costs $42.50 today.", 0)]
    assert buffer.pending_chars == len(" Then")
    assert buffer.end() == [TextPiece("Then", 23)]
    assert buffer.pending_chars == 0
    # After ``end`` the buffer takes a new utterance, offsets from 0.
    assert buffer.append("  Hi. Yes") == [TextPiece("Hi.", 2)]


MARKDOWN_REPLY = (
    "See [the setup guide. It is short](https://example.com/setup.html) first. Then press <b>Save. Now</b> and "
    "wait &mdash; it takes a minute. Done."
)


def test_a_piece_never_ends_inside_markup_that_is_still_open() -> None:
    """A sentence end inside a link's text is not a cut (nor one inside a tag or before an entity's ';'): the
    construct is read whole (markup.py's held_from), so the pieces say what the whole reply says, however the
    tokens fell."""
    whole = _cut(MARKDOWN_REPLY, [])
    assert [piece.text for piece in whole] == [
        "See [the setup guide. It is short](https://example.com/setup.html) first.",
        "Then press <b>Save.",  # a whole tag reads the same on either side of a cut
        "Now</b> and wait &mdash; it takes a minute.",
        "Done.",
    ]
    said = " ".join(" ".join(markup.spoken(piece.text)[0].split()) for piece in whole)
    assert said == " ".join(markup.spoken(MARKDOWN_REPLY)[0].split())
    rng = random.Random(37)
    for _ in range(50):
        assert _cut(MARKDOWN_REPLY, _llm_tokens(MARKDOWN_REPLY, rng)) == whole
