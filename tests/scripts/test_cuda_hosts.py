"""The GPU image's CUDA must run on the driver of the SageMaker inference AMI the endpoint asks for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.deploy.cuda_hosts import SAGEMAKER_INFERENCE_AMIS, host_of, runs

REPO = Path(__file__).resolve().parents[2]
TORCH_LOCK = REPO / "container" / "requirements-torch.lock"
ENDPOINT_VARIABLES = REPO / "terraform" / "modules" / "sagemaker_endpoint" / "variables.tf"


def locked(lock: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text(), re.M))


def configured_ami() -> str:
    text = ENDPOINT_VARIABLES.read_text()
    block = re.search(r'variable\s+"inference_ami_version"\s*\{(.*?)\n\}', text, re.S)
    assert block, f"{ENDPOINT_VARIABLES} declares no inference_ami_version"
    default = re.search(r'default\s*=\s*"([^"]+)"', block.group(1))
    assert default, "inference_ami_version has no default"
    return default.group(1)


def cuda_runtime(pins: dict[str, str]) -> str:
    """The CUDA runtime the torch wheel links: nvidia-cuda-runtime-cuXX (CUDA 12) or nvidia-cuda-runtime (13+)."""
    for name, version in pins.items():
        if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name):
            return version
    raise AssertionError("the torch lock holds no nvidia-cuda-runtime")


def test_the_gpu_lock_is_torch_2_10_on_cuda_12() -> None:
    pins = locked(TORCH_LOCK)
    assert pins["torch"] == "2.10.0"  # the newest PyPI torch on CUDA 12; >= 2.10 for PYSEC-2026-2286
    assert cuda_runtime(pins).startswith("12."), cuda_runtime(pins)
    nvidia = {n: v for n, v in pins.items() if n.startswith("nvidia-")}
    assert nvidia and all(n.endswith("-cu12") for n in nvidia), sorted(nvidia)
    assert not any(n.startswith("cuda-toolkit") or n.endswith("-cu13") for n in pins)


def test_the_configured_ami_runs_the_locked_cuda_runtime() -> None:
    ami = configured_ami()
    runtime = cuda_runtime(locked(TORCH_LOCK))
    host = host_of(ami)
    assert runs(ami, runtime), (
        f"{TORCH_LOCK.name} pins CUDA runtime {runtime}, but {ami} runs NVIDIA driver {host.driver} "
        f"(CUDA {host.max_cuda_major}.x at most): pick a torch built on CUDA {host.max_cuda_major}"
    )


@pytest.mark.parametrize(
    ("ami", "runtime", "expected"),
    [
        ("al2-ami-sagemaker-inference-gpu-3-1", "12.8.90", True),  # minor version compatibility
        ("al2-ami-sagemaker-inference-gpu-2-1", "12.8.90", True),
        ("al2-ami-sagemaker-inference-gpu-3-1", "13.2.86", False),  # CUDA 13 needs driver >= 580
        (None, "12.8.90", False),  # no AMI version on ml.g5: driver 470
        (None, "11.8.89", True),
    ],
)
def test_the_table_says_which_runtime_runs_where(ami: str | None, runtime: str, expected: bool) -> None:
    assert runs(ami, runtime) is expected


def test_an_unknown_ami_version_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="unknown InferenceAmiVersion"):
        host_of("al2-ami-sagemaker-inference-gpu-9")
    assert {h.max_cuda_major for h in SAGEMAKER_INFERENCE_AMIS.values()} == {12}


def test_the_dev_lock_carries_the_gpu_image_torch_stack() -> None:
    """make test and make gpu-check run the very torch, kokoro and CUDA runtimes the GPU image installs."""
    dev, image = locked(REPO / "requirements.lock"), locked(TORCH_LOCK)
    stack = [n for n in image if n in ("torch", "kokoro", "triton") or n.startswith("nvidia-")]
    assert {n: dev.get(n) for n in stack} == {n: image[n] for n in stack}
