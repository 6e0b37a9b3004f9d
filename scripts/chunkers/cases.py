"""The chunker's table of cases: what a stream of LLM text must become, sentence by sentence.

Shared by tests/client/test_chunker.py (ours must pass every case) and ``python -m scripts.chunkers`` (seed vs ours).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple, Protocol


class Chunker(Protocol):
    def feed(self, fragment: str) -> list[str]: ...
    def flush(self) -> str | None: ...


class Case(NamedTuple):
    id: str
    text: str
    expected: list[str]


CASES: list[Case] = [
    Case("plain", "Hello there. How are you? I am fine!", ["Hello there.", "How are you?", "I am fine!"]),
    Case("no_terminator", "just some words with no end", ["just some words with no end"]),
    Case("semicolon_is_not_an_end", "Go left; then go right. Stop.", ["Go left; then go right.", "Stop."]),
    Case(
        "bang_question_runs",
        "Really?! That is wild. Yes!? No!!",
        ["Really?!", "That is wild.", "Yes!?", "No!!"],
    ),
    Case("title_dr", "Dr. Smith is here. He is nice.", ["Dr. Smith is here.", "He is nice."]),
    Case("titles_mr_mrs", "Mr. and Mrs. Jones arrived. They sat.", ["Mr. and Mrs. Jones arrived.", "They sat."]),
    Case("titles_ms_prof", "Ms. Li met Prof. Lee. They talked.", ["Ms. Li met Prof. Lee.", "They talked."]),
    Case("title_mt", "Mt. Fuji is tall. Climb it.", ["Mt. Fuji is tall.", "Climb it."]),
    Case("saint_st", "We went to St. Louis. It was hot.", ["We went to St. Louis.", "It was hot."]),
    Case(
        "street_st",
        "Turn at Elm St. near the park. Then stop.",
        ["Turn at Elm St. near the park.", "Then stop."],
    ),
    Case("jr_sr", "Sammy Davis Jr. sang well. Then he left.", ["Sammy Davis Jr. sang well.", "Then he left."]),
    Case("time_pm", "We met at 3 p.m. yesterday. It rained.", ["We met at 3 p.m. yesterday.", "It rained."]),
    Case("time_am_then_capital", "Wake at 6 a.m. Then run.", ["Wake at 6 a.m.", "Then run."]),
    Case(
        "initials_us",
        "He joined the U.S. Army in 1990. Then he left.",
        ["He joined the U.S. Army in 1990.", "Then he left."],
    ),
    Case(
        "initials_tolkien",
        "J. R. R. Tolkien wrote it. It is long.",
        ["J. R. R. Tolkien wrote it.", "It is long."],
    ),
    Case(
        "etc_lowercase",
        "Apples, pears, etc. are fruit. Eat them.",
        ["Apples, pears, etc. are fruit.", "Eat them."],
    ),
    Case(
        "etc_ends_sentence",
        "Buy apples, pears, etc. The rest can wait.",
        ["Buy apples, pears, etc.", "The rest can wait."],
    ),
    Case(
        "eg_ie",
        "Pick one, e.g. Python. Or i.e. Rust, the fast one.",
        ["Pick one, e.g. Python.", "Or i.e. Rust, the fast one."],
    ),
    Case("vs", "It was Ali vs. Frazier. Ali won.", ["It was Ali vs. Frazier.", "Ali won."]),
    Case("number_no", "Room No. 5 is free. Book it.", ["Room No. 5 is free.", "Book it."]),
    Case("no_as_answer", "No. That is wrong.", ["No.", "That is wrong."]),
    Case("month", "It opens Jan. 5 this year. Come early.", ["It opens Jan. 5 this year.", "Come early."]),
    Case(
        "company",
        "Apple Inc. makes phones. I like Apple Inc. It is big.",
        ["Apple Inc. makes phones.", "I like Apple Inc.", "It is big."],
    ),
    Case("decimal", "Pi is 3.14 or so. Tau is 6.28.", ["Pi is 3.14 or so.", "Tau is 6.28."]),
    Case(
        "version",
        "Use v1.2.3 with Python 3.12 now. It works.",
        ["Use v1.2.3 with Python 3.12 now.", "It works."],
    ),
    Case("price", "It costs $4.99 today. Buy it.", ["It costs $4.99 today.", "Buy it."]),
    Case("url", "See example.com/a.b for more. Thanks.", ["See example.com/a.b for more.", "Thanks."]),
    Case(
        "url_at_end",
        "Go to https://example.com/a.b. Then log in.",
        ["Go to https://example.com/a.b.", "Then log in."],
    ),
    Case("email", "Write to a.b@c.d today. Thanks.", ["Write to a.b@c.d today.", "Thanks."]),
    Case("closing_quote", 'He said "Hi." Then he left.', ['He said "Hi."', "Then he left."]),
    Case("closing_curly_quote", "She said “Stop.” Nobody moved.", ["She said “Stop.”", "Nobody moved."]),
    Case("closing_bracket", "(This is an aside.) Back to it.", ["(This is an aside.)", "Back to it."]),
    Case("quote_then_lowercase", '"Stop!" he said. We stopped.', ['"Stop!" he said.', "We stopped."]),
    Case("opening_quote_next", 'I agree. "Great," she said.', ["I agree.", '"Great," she said.']),
    Case("ellipsis_lowercase", "Wait... what? No!", ["Wait... what?", "No!"]),
    Case("ellipsis_capital", "Wait... What happened? Tell me.", ["Wait...", "What happened?", "Tell me."]),
    Case("ellipsis_unicode", "Hmm… Let me think.", ["Hmm…", "Let me think."]),
    Case("newline", "Line one\nLine two", ["Line one", "Line two"]),
    Case(
        "paragraphs",
        "First part\n\nSecond part. Still second.",
        ["First part", "Second part.", "Still second."],
    ),
    Case("list_dash_star", "Buy:\n- Milk\n- Eggs\n* Bread", ["Buy:", "- Milk", "- Eggs", "* Bread"]),
    Case(
        "list_numbered",
        "Steps:\n1. Open the app.\n2. Sign in.\n",
        ["Steps:", "1. Open the app.", "2. Sign in."],
    ),
    Case("list_marker_alone", "1.\nOpen the app.", ["1. Open the app."]),
    Case("list_inline", "Two steps. 1. Open it. 2. Close it.", ["Two steps.", "1. Open it.", "2. Close it."]),
    Case("chinese", "你好。我很好！谢谢？", ["你好。", "我很好！", "谢谢？"]),
    Case(
        "japanese",
        "こんにちは。元気ですか？はい、元気です。",
        ["こんにちは。", "元気ですか？", "はい、元気です。"],
    ),
    Case("fullwidth_period", "これはペンです．それは本です．", ["これはペンです．", "それは本です．"]),
    Case("cjk_quote_continues", "“你好。”他说。好的。", ["“你好。”他说。", "好的。"]),
    Case("cjk_closing_bracket", "「はい。」「いいえ。」", ["「はい。」", "「いいえ。」"]),
    Case("cjk_ascii_marks", "你好!我是小明。", ["你好!", "我是小明。"]),
]


def run_chunker(chunker: Chunker, pieces: Iterable[str]) -> list[str]:
    out: list[str] = []
    for piece in pieces:
        out += chunker.feed(piece)
    rest = chunker.flush()
    return [*out, rest] if rest is not None else out


def per_token(text: str) -> list[str]:
    """Cut like an LLM tokenizer roughly does: a word with its leading space, punctuation apart."""
    return re.findall(r"\s*\w+|\s*\W", text) or [text]
