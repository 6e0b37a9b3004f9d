"""Text in fragments (text/fragments.py): what the server speaks of a text does not depend on where it was cut.

The same replies, cut at every position (two fragments) and at many random places (sub-word tokens, spaces and
punctuation alone), must come out as the same pieces, each the client's own text at its own offset, and the pieces'
spoken text (cleaned and normalized as the engine does: numbers, money, times, dates, URLs, abbreviations) must be
the whole text's spoken text."""

from __future__ import annotations

import itertools
import random

import pytest
from kokoro_tts.text import markup
from kokoro_tts.text.fragments import EarlyCut, FragmentBuffer, TextPiece
from kokoro_tts.text.normalize import normalize
from kokoro_tts.text.phonemes import clean_text_mapped
from voice_agent.scripted_model import DEFAULT_REPLY, tokenize

from scripts.bench.first_piece import ManualClock, cut_as_streamed
from scripts.bench.texts import FIRST_PIECE_REPLY, LONG_FIRST

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


# --- speaking before the sentence ends (EarlyCut): a clock the test moves, tokens at a given rate -----------------

LONG_REPLY = FIRST_PIECE_REPLY


def _timed(text: str, cuts: list[int], tokens_per_s: float, early: EarlyCut | None) -> list[tuple[float, TextPiece]]:
    """The pieces of ``text`` sent as the tokens ``cuts`` makes at ``tokens_per_s``, each with when it was cut."""
    fragments = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return cut_as_streamed(fragments, tokens_per_s, early)


def _token_cuts(text: str) -> list[int]:
    return list(itertools.accumulate(len(token) for token in tokenize(text)))[:-1]


def test_the_long_first_sentence_is_35_tokens() -> None:
    assert len(tokenize(LONG_FIRST)) == 35


def test_a_slow_stream_speaks_a_clause_at_the_deadline_then_grows_to_sentences() -> None:
    timed = _timed(LONG_REPLY, _token_cuts(LONG_REPLY), 6.0, EarlyCut(0.6))
    first_at, first = timed[0]
    assert first_at == pytest.approx(0.6)  # not the 5.8 s the whole sentence takes to arrive
    assert first.text == "Thanks for waiting"
    texts = [piece.text for _, piece in timed]
    assert texts[1] == "while I looked through your account history,"  # the clause, not the words so far
    assert texts[-2:] == ["It should reach your card within five business days.", "Is there anything else?"]
    assert [LONG_REPLY[p.start : p.start + len(p.text)] for _, p in timed] == texts
    assert " ".join(texts) == LONG_REPLY


def test_a_fast_stream_is_cut_at_sentence_ends_only() -> None:
    for reply in (DEFAULT_REPLY, LONG_REPLY):
        sentences = _timed(reply, _token_cuts(reply), 60.0, None)
        assert _timed(reply, _token_cuts(reply), 60.0, EarlyCut(0.6)) == sentences


def test_a_stalled_stream_is_spoken_at_the_deadline_and_never_in_pieces_too_short() -> None:
    clock = ManualClock()
    buffer = FragmentBuffer(EarlyCut(0.6), clock)
    assert buffer.append("Let me") == [] and buffer.due == pytest.approx(0.6)
    clock.now = 0.7
    assert buffer.cut() == []  # two words: too few to say alone
    assert buffer.append(" check") == []  # "check" may still grow ("checking")
    assert buffer.append(" that") == [TextPiece("Let me check", 0)]
    clock.now = 5.0  # the first piece's audio has played: later pieces are cut at clause ends only
    assert buffer.append(" order for") == []
    assert buffer.append(" you, then") == [TextPiece("that order for you,", 13)]


def test_an_early_cut_never_ends_on_a_word_that_leans_on_the_next() -> None:
    clock = ManualClock()
    buffer = FragmentBuffer(EarlyCut(0.6), clock)
    assert buffer.append("He reads the ") == []
    clock.now = 0.7
    assert buffer.cut() == []  # not "He reads the" / "news", nor "He reads": too short
    assert buffer.append("news on ") == [TextPiece("He reads the news", 0)]
    buffer = FragmentBuffer(EarlyCut(0.6), clock := ManualClock())
    assert buffer.append("We checked and, ") == []
    clock.now = 0.7
    assert buffer.cut() == [TextPiece("We checked and,", 0)]  # a clause end is a clause end, whatever the word


@pytest.mark.parametrize("text", REPLIES)
def test_an_early_cut_is_never_inside_a_word_a_number_or_markup(text: str) -> None:
    """Whatever the cadence, every piece is whole words of the text, and no cut falls between a number and the
    word that may go on with it; markup still open stays whole."""
    rng = random.Random(38)
    for _ in range(20):
        cuts = _llm_tokens(text, rng)
        timed = _timed(text, cuts, rng.choice([2.0, 6.0, 15.0]), EarlyCut(rng.choice([0.2, 0.6])))
        pieces = [piece for _, piece in timed]
        assert " ".join(piece.text for piece in pieces) == " ".join(text.split())
        for before, after in itertools.pairwise(pieces):
            assert text[after.start - 1].isspace(), f"cut inside a word: {before.text!r} | {after.text!r}"
            assert not (before.text[-1].isdigit() and after.text[0].isdigit()), (before.text, after.text)
    for _ in range(20):
        timed = _timed(MARKDOWN_REPLY, _llm_tokens(MARKDOWN_REPLY, rng), 2.0, EarlyCut(0.2))
        said = " ".join(" ".join(markup.spoken(piece.text)[0].split()) for _, piece in timed)
        assert said == " ".join(markup.spoken(MARKDOWN_REPLY)[0].split())
