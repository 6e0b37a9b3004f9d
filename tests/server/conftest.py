"""Fixtures of the server room beyond the shared ones (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from kokoro_tts.engine import runs
from kokoro_tts.weights.layout import WeightLayout

from scripts.weights.derive import derive_torch


@pytest.fixture(scope="session")
def torch_layout(model_dir: Path) -> WeightLayout:
    """The weight layout with the torch weights derived from the ONNX export, as `make weights` leaves it."""
    derive_torch(model_dir)  # a no-op when the manifest lists the file
    return WeightLayout(model_dir)


@pytest.fixture
def frame_per_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions send each vocoder window as one binary frame, not cut into half seconds, for tests that count the
    engine's windows by the frames they hear."""
    monkeypatch.setattr(runs, "SESSION", replace(runs.SESSION, frame_samples=None))
