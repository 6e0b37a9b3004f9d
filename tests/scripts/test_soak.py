"""The short form of `make soak` (scripts/soak.py): the real `serve` process under churn, vanishing sessions and
bombs returns to its baseline, keeps /ping's p99 under 100 ms, and loses no accepted utterance."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from scripts import soak


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_short_soak_returns_to_baseline(model_dir: Path) -> None:
    report = soak.soak(churn=1000, vanishing=6, staying=2, model_dir=model_dir)
    print(asdict(report))
    assert report.churn_cycles >= 1000 and report.vanished_sessions == 6
    assert soak.check(report) == []
