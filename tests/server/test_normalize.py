"""Text normalization before G2P (normalize.py): every rule, table-driven; what misaki already reads, checked so a
misaki upgrade that loses it shows up; the span map back to the client's text; and one listening test: Whisper
hears "$42.50" spoken by the real model as forty-two dollars and fifty cents."""

from __future__ import annotations

import re

import pytest
from kokoro_tts.text.normalize import TextMap, longest_number, normalize
from kokoro_tts.text.phonemes import Phonemizer, clean_text_mapped
from support.timing import best_cpu_time

# input → what normalize() makes of it (US English unless the case says "b:").
REWRITTEN = [
    # money with a magnitude (misaki: "one dollar and two cents M")
    ("It raised $1.2M today.", "It raised 1.2 million dollars today."),
    ("£3bn", "3 billion pounds"),
    ("€250k", "250 thousand euros"),
    ("$5 billion", "5 billion dollars"),
    # times (misaki reads the colon as a pause: "three: thirty")
    ("Meet at 3:30 pm.", "Meet at three thirty PM."),
    ("Meet at 3:30 p.m. Then", "Meet at three thirty PM. Then"),
    ("15:45", "fifteen forty-five"),
    ("9:05 AM", "nine oh five AM"),
    ("12:00", "twelve o'clock"),
    ("18:00", "eighteen hundred"),
    ("7:00 pm", "seven PM"),
    ("10:15:30", "ten fifteen and thirty seconds"),
    # dates
    ("Jan 5, 2025", "January fifth, 2025"),
    ("On 2025-01-05 we", "On January fifth, 2025 we"),
    ("Sept. 3", "September third"),
    ("on May 5th, 2024.", "on May fifth, 2024."),
    ("5 January 2025", "the fifth of January, 2025"),
    ("01/05/2025", "January fifth, 2025"),
    ("b:01/05/2025", "the first of May, 2025"),
    ("b:2025-01-05", "the fifth of January, 2025"),
    # units after a number (misaki spells "km/h" and "kg" letter by letter)
    ("60 km/h", "60 kilometers per hour"),
    ("5 kg", "5 kilograms"),
    ("1 kg", "1 kilogram"),
    ("2.5km", "2.5 kilometers"),
    ("25°C", "25 degrees Celsius"),
    ("-4 °F", "-4 degrees Fahrenheit"),
    ("16 GB of RAM at 3.2 GHz", "16 gigabytes of RAM at 3.2 gigahertz"),
    ("30 mph", "30 miles per hour"),
    ("200 ms", "200 milliseconds"),
    # URLs and e-mail addresses
    ("Go to https://www.example.com/docs/api now.", "Go to W W W dot example dot com slash docs slash api now."),
    ("See example.com.", "See example dot com."),
    ("Mail bob.smith@example.com please", "Mail bob dot smith at example dot com please"),
    ("docs.python.org/3/library", "docs dot python dot org slash 3 slash library"),
    # abbreviations
    ("Dr. Smith lives on Main St. He", "Dr. Smith lives on Main Street. He"),
    ("St. Louis", "Saint Louis"),
    ("e.g. this", "for example this"),
    ("apples, e.g.", "apples, for example."),
    ("that is, i.e. one", "that is, that is one"),
    ("apples, etc. The rest", "apples, et cetera. The rest"),
    ("Prof. Jones", "Professor Jones"),
    ("Martin Luther King Jr. spoke", "Martin Luther King Junior spoke"),
    ("No. 5", "number 5"),
    ("approx. 20", "approximately 20"),
    # telephone numbers (misaki: "five hundred fifty-five twelve thirty-four")
    ("call 555-1234", "call 5 5 5, 1 2 3 4"),
    ("(206) 555-1234", "2 0 6, 5 5 5, 1 2 3 4"),
]

# Left alone: misaki reads these, or they are not what a rule is for.
UNCHANGED = [
    "$42.50",
    "the 21st",
    "the 1990s",
    "10%",
    "Version 1.2.3",
    "ratio 3:1",
    "25:99",
    "13:30 pm",
    "2025-13-45",
    "Dr. Smith",
    "Main Street",
    "5 in a row",
    "1,234,567",
]

# What misaki's own G2P reads right: the input, and the words it says (compared as sounds, stress marks aside).
MISAKI_READS = [
    ("$42.50", "forty-two dollars and fifty cents"),
    ("$1", "one dollar"),
    ("£3.50", "three pounds and fifty pence"),
    ("€10", "ten euros"),
    ("$1,234.56", "one thousand two hundred thirty-four dollars and fifty-six cents"),
    ("1,234,567", "one million two hundred thirty-four thousand five hundred sixty-seven"),
    ("I have 42 cats", "I have forty-two cats"),
    ("-5", "minus five"),
    ("It is 3.14", "It is three point one four"),
    ("the 21st", "the twenty-first"),
    ("the 2nd", "the second"),
    ("in 1999", "in nineteen ninety-nine"),
    ("10%", "ten percent"),
    ("Dr. Smith", "Doctor Smith"),
    ("Mr. Smith", "Mister Smith"),
    ("cats vs. dogs", "cats versus dogs"),
    # and what it reads of this module's output
    ("It raised $1.2M", "It raised one point two million dollars"),
    ("25°C", "twenty-five degrees Celsius"),
    ("Meet at 3:30 pm", "Meet at three thirty p m"),
]


@pytest.mark.parametrize(("text", "expected"), REWRITTEN, ids=[t for t, _ in REWRITTEN])
def test_rewritten(text: str, expected: str) -> None:
    lang = "a"
    if text.startswith("b:"):
        lang, text = "b", text[2:]
    assert normalize(text, lang)[0] == expected


@pytest.mark.parametrize("text", UNCHANGED)
def test_unchanged(text: str) -> None:
    assert normalize(text, "a")[0] == text


@pytest.mark.parametrize("lang", ["e", "f", "h", "i", "p", "z"])
def test_other_languages_pass_through(lang: str) -> None:
    """espeak-ng (es, fr, hi, it, pt-br) and misaki's Mandarin front end read numbers, dates and money themselves."""
    text = "Am 5.1.2025 um 15:45 kostet es $1.2M, e.g. 60 km/h."
    spoken, spans = normalize(text, lang)
    assert spoken == text
    assert spans.source_span(0, len(text)) == (0, len(text))


@pytest.fixture(scope="module")
def english() -> Phonemizer:
    return Phonemizer({})


def _sounds(phonemes: str) -> str:
    return re.sub(r"[ˈˌ\s-]", "", phonemes)


@pytest.mark.parametrize(("text", "words"), MISAKI_READS, ids=[t for t, _ in MISAKI_READS])
def test_what_misaki_reads(english: Phonemizer, text: str, words: str) -> None:
    spoken = normalize(text, "a")[0]
    assert _sounds(english.phonemes(spoken, "a")) == _sounds(english.phonemes(words, "a"))


def test_rewrites_map_back_to_the_whole_original_piece() -> None:
    text = "Pay $1.2M by 2025-01-05, e.g. at 3:30 pm."
    spoken, spans = normalize(text, "a")
    assert spoken == "Pay 1.2 million dollars by January fifth, 2025, for example at three thirty PM."

    def source_of(word: str) -> str:
        start = spoken.index(word)
        return text[slice(*spans.source_span(start, start + len(word)))]

    assert source_of("Pay") == "Pay"
    assert source_of("million") == "$1.2M"
    assert source_of("fifth") == "2025-01-05"
    assert source_of("example") == "e.g."
    assert source_of("thirty") == "3:30 pm"
    assert source_of("at") == "at"  # the first "at": text outside a rewrite maps character by character
    assert source_of("Pay 1.2 million") == "Pay $1.2M"


def test_spans_through_cleaning_and_normalizing() -> None:
    """The engine's map composes both steps: emoji and control characters dropped, combining marks composed."""
    text = "  Caf\u0065\u0301 \U0001f600 opens at 9:05 am\x00 "
    cleaned, cleaned_map = clean_text_mapped(text)
    spoken, spoken_map = normalize(cleaned, "a")
    spans = cleaned_map.then(spoken_map)
    assert spoken == "Café   opens at nine oh five AM"
    start = spoken.index("Café")
    assert text[slice(*spans.source_span(start, start + 4))] == "Cafe\u0301"
    start = spoken.index("nine")
    assert text[slice(*spans.source_span(start, start + 4))] == "9:05 am"
    start = spoken.index("opens")
    assert text[slice(*spans.source_span(start, start + 5))] == "opens"


def test_span_map_is_monotonic_and_in_bounds() -> None:
    text = "Dr. Lee paid $3bn on Jan 5, 2025 at 15:45 (see www.example.com, 60 km/h, call 555-1234), etc. Done."
    spoken, spans = normalize(text, "a")
    previous = (0, 0)
    for match in re.finditer(r"\S+", spoken):
        start, end = spans.source_span(match.start(), match.end())
        assert 0 <= start < end <= len(text)
        assert start >= previous[0] and end >= previous[1]
        previous = (start, end)
    assert TextMap.identity(0).source_span(0, 0) == (0, 0)


def test_engine_normalizes_english_only(server) -> None:  # type: ignore[no-untyped-def]
    engine = server.engine
    assert engine.rules.speech("It costs $1.2M.", "af_heart", None).text == "It costs 1.2 million dollars."
    assert engine.rules.speech("Cuesta $1.2M.", "ef_dora", None).text == "Cuesta $1.2M."


@pytest.mark.slow
def test_listener_hears_dollars_and_cents(server) -> None:  # type: ignore[no-untyped-def]
    """Whisper writes amounts as digits ("$42.50"): its transcript is read back into words by num2words before
    comparing, so "$42.50" and "forty-two dollars and fifty cents" both count, and "42.5" or "$4,250" do not."""
    from kokoro_tts.engine.synthesis import TTSEngine
    from num2words import num2words
    from support.listener import WhisperListener, words

    engine: TTSEngine = server.engine
    request = engine.rules.speech("The total is $42.50.", "af_heart", None)
    pcm = engine._synthesize_chunk(request.text, request)
    heard = WhisperListener.shared().transcribe(pcm)

    def spoken(match: re.Match[str]) -> str:
        return str(num2words(float(match.group(1).replace(",", "")), to="currency", currency="USD"))

    heard_words = [w for w in words(re.sub(r"\$([\d,]+\.\d\d)\b", spoken, heard)) if w != "and"]
    assert heard_words[-5:] == ["forty", "two", "dollars", "fifty", "cents"], heard


def test_no_input_makes_the_rules_backtrack() -> None:
    """Normalization runs on the event loop for up to 5,000 characters: runs of letters and separators cost as much
    as prose (a ratio, measured side by side; before domain labels were bounded, "a-a-a-…" cost 30 times more)."""

    def cost(text: str) -> float:
        return best_cpu_time(lambda: normalize(text, "a"), tries=3)

    prose = cost(("Meet Dr. Lee at 3:30 pm on Jan 5, 2025 for $42.50 at example.com. " * 80)[:5000])
    for text in ("a-" * 2500, "a." * 2500, "a.a-" * 1250, "1:" * 2500, "a_" * 2500, "a-" * 2400 + "@x", "5 " * 2500):
        assert cost(text) <= 10 * prose, text[:8]


@pytest.mark.parametrize(
    "number", ["1" * 31, "4" * 40, "9" * 100, "-" + "4" * 40, "1" + ",000" * 11, "12" + ",345" * 20]
)
def test_numbers_past_misakis_scale_words_are_read_not_spelled(english: Phonemizer, number: str) -> None:
    """misaki knows scale words up to "octillion" (30 digits) and spells the rest letter by letter."""
    spoken, spans = normalize(f"We owe {number} dollars.", "a")
    assert spoken.startswith("We owe ") and spoken.endswith(" dollars.") and not any(ch.isdigit() for ch in spoken)
    assert spoken.startswith("We owe minus ") == number.startswith("-")
    assert spans.source_span(7, len(spoken) - 9) == (7, 7 + len(number))  # every word maps to the whole number
    phonemes = english.phonemes(spoken, "a")
    assert "ˌɛnˌOˌɛn" not in phonemes and "ˌɛlˌɛlˌIˌOˈɛn" not in phonemes  # "N-O-N-", "-L-L-I-O-N"


@pytest.mark.parametrize("number", ["1" * 30, "1,234,567", "3." + "1" * 40, "1" * 31 + ".5", "v" + "1" * 31])
def test_numbers_misaki_reads_are_left_to_it(number: str) -> None:
    assert normalize(number, "a")[0] == number


@pytest.mark.parametrize(
    ("text", "digits"),
    [
        ("1" * 120, 120),
        ("\u2460" * 120, 120),  # circled digit one
        ("\u00b9" * 120, 120),  # superscript one
        ("\uff11" * 120, 120),  # fullwidth one
        ("\u0661" * 120, 120),  # Arabic-Indic one
        ("\U0001d7cf" * 120, 120),  # mathematical bold one
        ("\u2473" * 60, 120),  # circled twenty: two digits each
        ("1" + ",000" * 40, 121),  # thousands separators are dropped when it is read
        ("It costs 12 dollars, or 1,234 cents.", 4),
        ("x\u00b2 + y\u00b3", 1),
        ("\u4e00\u4e8c\u4e09", 0),  # CJK numerals are words, read by the Mandarin front end
    ],
)
def test_longest_number_counts_digits_as_read(text: str, digits: int) -> None:
    assert longest_number(text) == digits
