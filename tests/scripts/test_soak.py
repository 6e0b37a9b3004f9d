"""The short form of `make soak` (scripts/soak.py): the real `serve` process under churn, vanishing sessions and
bombs returns to its baseline, keeps /ping's p99 under 100 ms, and loses no accepted utterance; clients that flood
a session unread and reset leave no session slot taken.

Three phases are left to `make soak`, each already held by a test of the suite on the same code: the hostile text
(its two rounds took two of this test's four minutes; every string it sends is held to its bounds through every route
by tests/server/test_hostile_text.py), "Hello there." beside a "1-2-" * 75 request (23 s here;
tests/server/test_text_bounds.py times the same victim beside that token and two others), and the stuck sockets (30 s
here: four clients flooding until their sends stall; tests/server/test_stuck_sockets.py floods both session paths
with eight each and checks every slot comes back and both paths still answer). The server's body timeout is 2 s
here, so the bodies that never end are answered 408 in 2 s instead of 10."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from scripts import soak


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_short_soak_returns_to_baseline(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOKORO_BODY_TIMEOUT_S", "2")  # for the server the soak starts
    report = soak.soak(churn=1000, vanishing=6, staying=2, model_dir=model_dir, stuck=0, hostile=0, hard_token=False)
    print(asdict(report))
    assert report.churn_cycles >= 1000 and report.vanished_sessions == 6
    assert report.phases_s["bombs"] < 10  # the unfinished bodies were answered at the 2 s timeout, not at 10 s
    assert not report.stuck_clients and not report.hostile and not report.hard_token_answer
    assert soak.check(report) == []


def test_check_names_a_leaked_session_a_slow_victim_and_a_failed_hostile_answer() -> None:
    report = soak.Report(
        baseline={"fds": 10, "threads": 8, "rss_mb": 1000.0},
        after={"fds": 10, "threads": 8, "rss_mb": 1000.0},
        stuck_sessions_in_use={"before": 0.0, "after": 8.0},
        stuck_new_sessions={"bidi": "spoken", "deepgram": "closed 1013: server_busy: too many sessions"},
        victim_alone_s=0.3,
        victim_beside_ordinary_s=0.3,
        victim_beside_s=8.5,
        victim_ratio=28.3,
        hostile_failures=["openai: '①' x120: ... -> audio past 122.0 s for 120 characters"],
        phase_ping_max_ms={"hostile": 3100.0},
    )
    problems = " | ".join(soak.check(report))
    assert "sessions in use: 0 -> 8" in problems
    assert "deepgram" in problems and "1013" in problems
    assert "28.3x" in problems
    assert "1 hostile-text answers failed" in problems and "①" in problems
    assert "/ping max 3100.0 ms" in problems
