"""Run the seed chunker and ours on the table of cases (cases.py); print a markdown table.

    .venv/bin/python -m scripts.chunkers

Each text is fed per token (a word with its leading space, punctuation apart), as an LLM streams it.
"""

from __future__ import annotations

import time

from kokoro_client.chunker import IncrementalSentenceChunker

from .cases import CASES, Chunker, per_token, run_chunker
from .seed import SeedSentenceChunker


def cell(chunks: list[str]) -> str:
    shown = " ‖ ".join(chunks).replace("\n", "⏎")
    return shown.replace("|", "\\|")


def per_char_ms(chunker: Chunker, text: str) -> float:
    start = time.perf_counter()
    run_chunker(chunker, text)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    print("| case | expected | seed | ours |")
    print("|---|---|---|---|")
    seed_ok = ours_ok = 0
    for case in CASES:
        seed = run_chunker(SeedSentenceChunker(), per_token(case.text)) == case.expected
        ours = run_chunker(IncrementalSentenceChunker(), per_token(case.text)) == case.expected
        seed_ok += seed
        ours_ok += ours
        print(f"| {case.id} | {cell(case.expected)} | {'✓' if seed else '✗'} | {'✓' if ours else '✗'} |")
    total = len(CASES)
    print(f"| **total** | {total} cases | **{seed_ok}/{total}** | **{ours_ok}/{total}** |")

    reply = (" ".join(case.text for case in CASES) * 10)[:5000]
    seed_ms = per_char_ms(SeedSentenceChunker(), reply)
    ours_ms = per_char_ms(IncrementalSentenceChunker(), reply)
    print(f"\n5,000-character reply fed per character: seed {seed_ms:.1f} ms, ours {ours_ms:.1f} ms")


if __name__ == "__main__":
    main()
