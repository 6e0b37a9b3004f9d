"""What an endpoint instance type implies: the image it runs (torch on CUDA or onnx on CPU) and its host image."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

# The GPU values of inference_ami_version the AWS provider 5.100 accepts (terraform/modules/sagemaker_endpoint):
# SageMaker also lists al2023-ami-sagemaker-inference-gpu-4-1, which that provider rejects at validate.
GPU_AMI_VERSIONS = (
    "al2-ami-sagemaker-inference-gpu-2",
    "al2-ami-sagemaker-inference-gpu-2-1",
    "al2-ami-sagemaker-inference-gpu-3-1",
)


# Graviton families (c7g, m6gd, c6gn, r8g, ...): arm64 hosts, which the linux/amd64 TTS image cannot run on.
GRAVITON = re.compile(r"^ml\.[a-z]+[0-9]+g[a-z]*\.")


@cache
def provider_instance_types() -> frozenset[str]:
    listed = Path(__file__).with_name("provider_instance_types.txt").read_text().splitlines()
    return frozenset(line.strip() for line in listed if line.strip() and not line.startswith("#"))


def instance_type_problem(instance_type: str) -> str | None:
    """Why the deployment cannot run on ``instance_type``, in make's variable name; None when it can."""
    if not instance_type.startswith("ml."):
        return f"INSTANCE_TYPE={instance_type!r} is not a SageMaker instance type (ml.…)"
    if GRAVITON.match(instance_type):
        return f"INSTANCE_TYPE={instance_type} is a Graviton (arm64) type: the TTS image is built for linux/amd64"
    if instance_type not in provider_instance_types():
        return f"INSTANCE_TYPE={instance_type} is not an endpoint instance type the AWS provider 5.100 accepts"
    return None


def is_gpu_instance(instance_type: str) -> bool:
    """ml.g*/ml.p* carry NVIDIA GPUs; everything else the endpoint runs on is a CPU instance."""
    family = instance_type.removeprefix("ml.").split(".", 1)[0]
    return family[:1] in ("g", "p") and family[1:2].isdigit()


# The NVIDIA GPU of each GPU family the provider accepts (AWS's instance type pages): `make gpu-check`'s stream slots
# count for a type only when they were measured on its GPU; an H200's would overload an A10G.
GPU_OF_FAMILY = {
    "g4dn": "T4",
    "g5": "A10G",
    "g6": "L4",
    "g6e": "L40S",
    "p2": "K80",
    "p3": "V100",
    "p4d": "A100",
    "p4de": "A100",
    "p5": "H100",
    "p5e": "H200",
    "p5en": "H200",
}


def instance_gpu(instance_type: str) -> str | None:
    """The NVIDIA GPU model of a GPU instance type ("A10G" for ml.g5.xlarge); None for a CPU or unknown family."""
    return GPU_OF_FAMILY.get(instance_type.removeprefix("ml.").split(".", 1)[0])


def tts_build(instance_type: str) -> tuple[str, str]:
    """(BACKEND, DEVICE) of the TTS image for the instance type: the torch backend needs CUDA, every other
    instance type runs the onnx backend on its CPUs (container/Dockerfile's build arguments)."""
    return ("torch", "cuda") if is_gpu_instance(instance_type) else ("onnx", "cpu")
