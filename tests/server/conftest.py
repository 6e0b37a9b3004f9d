"""Fixtures of the server room beyond the shared ones (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kokoro_tts.weights.layout import WeightLayout

from scripts.weights.derive import derive_torch


@pytest.fixture(scope="session")
def torch_layout(model_dir: Path) -> WeightLayout:
    """The weight layout with the torch weights derived from the ONNX export, as `make weights` leaves it."""
    derive_torch(model_dir)  # a no-op when the manifest lists the file
    return WeightLayout(model_dir)
