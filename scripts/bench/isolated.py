"""isolated_tts: time to first audio for the 267-character reply, the TTS server alone (no LLM).

(a) the whole reply as one message on the WS session (the server chunks it into sentences itself),
(b) its first sentence alone on the WS session (what a sentence-streaming agent sends first),
(c) the whole reply over POST /invocations (the same server-side chunked streaming, over HTTP),
(d) the naive baseline: one synthesis call on the whole reply, no chunking: G2P of the whole text, then the
    backend once on all of its phonemes (in this process, so not even the wire is counted against it),
(e) the first sentence alone on a server with windowed vocoding switched off (KOKORO_WINDOWED=0), when the run
    has one: its first audio is the sentence's whole engine time, and (b) over that engine time is the share of
    a sentence its first window costs.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable

from .client import SHORT, Sample, drain, pct, post_first_audio, ws_once
from .inproc import InProcess
from .report import Row, Section
from .texts import FIRST_SENTENCE, REPLY, SEED_FIRST_SENTENCE_GAIN_PCT, SEED_FIRST_SENTENCE_MS, SEED_WHOLE_MS

# Plain names for the four ways of asking (the JSON keeps the keys a-d).
VARIANTS = {
    "a": "whole reply, WS",
    "b": "first sentence only, WS",
    "c": "whole reply, POST stream",
    "d": "one call on the whole text",
    "e": "first sentence only, WS, windowing off",
}
NAIVE_HOW = "our backend called once on the whole text's phonemes, one batch, in-process"


async def run_isolated(url: str, inproc: InProcess, trials: int, whole_url: str | None = None) -> Section:
    await ws_once(url, SHORT)  # the first session of a process pays for imports and connection setup
    samples: dict[str, list[Sample]] = {key: [] for key in VARIANTS}
    # The whole reply is heard from its first byte on: hang up there, then wait for the worker to be free (drain),
    # rather than for 15 s of audio nobody measures. The first sentence alone is one chunk: it plays to its end.
    variants: dict[str, tuple[Callable[[], Awaitable[Sample]], bool]] = {
        "a": (lambda: ws_once(url, REPLY, first_audio_only=True), True),
        "b": (lambda: ws_once(url, FIRST_SENTENCE), False),
        "c": (lambda: post_first_audio(url, REPLY), True),
    }
    if whole_url is not None:
        await ws_once(whole_url, SHORT)
        variants["e"] = (lambda: ws_once(whole_url, FIRST_SENTENCE), False)
    # Round-robin, not variant after variant: a burst of load from elsewhere then hits every variant alike.
    for _ in range(trials):
        for key, (measure, hung_up) in variants.items():
            samples[key].append(await measure())
            if hung_up:
                await drain(url)
        ms, audio_s = inproc.naive_whole(REPLY)
        samples["d"].append(Sample(ms, ms, audio_s))
    return summarize(samples, trials, naive_how=NAIVE_HOW)


def _stats(key: str, values: list[Sample]) -> Row:
    ttfa = [s.ttfa_ms for s in values]
    return {
        "variant": VARIANTS[key],
        "trials": len(values),
        "ttfa_mean_ms": statistics.fmean(ttfa),
        "ttfa_p50_ms": pct(ttfa, 0.5),
        "ttfa_p95_ms": pct(ttfa, 0.95),
        "ttfa_min_ms": min(ttfa),
        "ttfa_max_ms": max(ttfa),
    }


def _less_or_more(gain: float) -> str:
    return f"{abs(gain):.1f}% {'less' if gain >= 0 else 'more'}"


def gain_pct(before: float, after: float) -> float:
    """How much less time ``after`` takes, in % of ``before`` (the seed's 329.3 → 156.7 ms is 52.4%)."""
    return 100 * (before - after) / before


def summarize(samples: dict[str, list[Sample]], trials: int, *, naive_how: str | None) -> Section:
    rows = {key: _stats(key, values) for key, values in samples.items() if values}
    p50 = {key: float(row["ttfa_p50_ms"]) for key, row in rows.items()}
    mean = {key: float(row["ttfa_mean_ms"]) for key, row in rows.items()}
    # The fastest trial is the one least disturbed by whatever else the machine runs: a steadier comparison.
    best = {key: float(row["ttfa_min_ms"]) for key, row in rows.items()}
    comparisons: dict[str, float] = {
        "b_vs_a_gain_pct_p50": gain_pct(p50["a"], p50["b"]),
        "b_vs_a_gain_pct_mean": gain_pct(mean["a"], mean["b"]),
        "b_vs_a_gain_pct_min": gain_pct(best["a"], best["b"]),
        "seed_b_vs_a_gain_pct": SEED_FIRST_SENTENCE_GAIN_PCT,
    }
    headline = (
        f"time to first audio (p50) for the 267-character reply: the whole reply in one WS message {p50['a']:.0f} ms, "
        f"its first sentence alone {p50['b']:.0f} ms: sending only the first sentence means "
        f"{_less_or_more(comparisons['b_vs_a_gain_pct_p50'])} wait "
        f"({_less_or_more(comparisons['b_vs_a_gain_pct_min'])} between the fastest trials; "
        f"the prototype's wait was {SEED_FIRST_SENTENCE_GAIN_PCT}% less that way, "
        f"{SEED_WHOLE_MS} → {SEED_FIRST_SENTENCE_MS} ms, as its server did not split the text itself)"
    )
    if "c" in p50:
        headline += f"; the whole reply as a POST stream {p50['c']:.0f} ms"
    if "d" in p50:
        for key in ("a", "c"):
            if key in p50:
                comparisons[f"{key}_vs_d_gain_pct_p50"] = gain_pct(p50["d"], p50[key])
                comparisons[f"{key}_vs_d_speedup_p50"] = p50["d"] / p50[key]
        nan = float("nan")
        headline += (
            f"; without chunking ({naive_how}) {p50['d']:.0f} ms, so the server's sentence-by-sentence streaming "
            f"speaks {comparisons['a_vs_d_speedup_p50']:.1f}× sooner over WS, "
            f"{comparisons.get('c_vs_d_speedup_p50', nan):.1f}× over POST "
            f"({comparisons['a_vs_d_gain_pct_p50']:.1f}% / "
            f"{comparisons.get('c_vs_d_gain_pct_p50', nan):.1f}% less wait)"
        )
    if "e" in p50:
        # The sentence's whole engine time, as the server without windows reports it (synthesis_complete).
        whole_engine = pct([s.synth_ms for s in samples["e"] if s.synth_ms is not None], 0.5)
        comparisons["first_window_over_whole_engine_p50"] = p50["b"] / whole_engine
        comparisons["first_sentence_windowed_over_off_p50"] = p50["b"] / p50["e"]
        headline += (
            f"; windowed vocoding: the first sentence's first audio {p50['b']:.0f} ms is "
            f"{comparisons['first_window_over_whole_engine_p50']:.2f}× its whole engine time ({whole_engine:.0f} ms; "
            f"first audio with windowing off {p50['e']:.0f} ms)"
        )
    table_rows = list(rows.values())
    comparison_rows: list[Row] = [
        {
            "comparison": "first sentence alone vs whole reply (WS)",
            "gain_p50_pct": comparisons["b_vs_a_gain_pct_p50"],
            "gain_mean_pct": comparisons["b_vs_a_gain_pct_mean"],
            "gain_min_pct": comparisons["b_vs_a_gain_pct_min"],
            "prototype_pct": SEED_FIRST_SENTENCE_GAIN_PCT,
        }
    ]
    for key in ("a", "c"):
        if f"{key}_vs_d_gain_pct_p50" in comparisons:
            comparison_rows.append(
                {
                    "comparison": f"sentence-by-sentence streaming ({'WS' if key == 'a' else 'POST'}) vs one call",
                    "gain_p50_pct": comparisons[f"{key}_vs_d_gain_pct_p50"],
                    "gain_mean_pct": gain_pct(mean["d"], mean[key]),
                    "gain_min_pct": gain_pct(best["d"], best[key]),
                    "prototype_pct": None,
                }
            )
    return Section(
        headline,
        {
            "text_chars": len(REPLY),
            "trials": trials,
            "naive_baseline": naive_how,
            "variants": {key: rows[key] for key in rows},
            "ttfa_samples_ms": {key: [s.ttfa_ms for s in values] for key, values in samples.items()},
            "synth_samples_ms": {
                key: [s.synth_ms for s in values] for key, values in samples.items() if key in ("b", "e")
            },
            "comparisons": comparisons,
            "seed": {"whole_ms": SEED_WHOLE_MS, "first_sentence_ms": SEED_FIRST_SENTENCE_MS},
        },
        [
            ("Time to first audio per variant (ms)", table_rows),
            (
                "Less wait for the first audio, in % (p50, mean, fastest trials; the prototype's for reference)",
                comparison_rows,
            ),
        ],
    )
