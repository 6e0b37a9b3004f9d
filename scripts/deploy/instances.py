"""What an endpoint instance type implies: the image it runs (torch on CUDA or onnx on CPU) and its host image."""

from __future__ import annotations

# The GPU values of inference_ami_version the AWS provider 5.100 accepts (terraform/modules/sagemaker_endpoint):
# SageMaker also lists al2023-ami-sagemaker-inference-gpu-4-1, which that provider rejects at validate.
GPU_AMI_VERSIONS = (
    "al2-ami-sagemaker-inference-gpu-2",
    "al2-ami-sagemaker-inference-gpu-2-1",
    "al2-ami-sagemaker-inference-gpu-3-1",
)


def is_gpu_instance(instance_type: str) -> bool:
    """ml.g*/ml.p* carry NVIDIA GPUs; everything else the endpoint runs on is a CPU instance."""
    family = instance_type.removeprefix("ml.").split(".", 1)[0]
    return family[:1] in ("g", "p") and family[1:2].isdigit()


def tts_build(instance_type: str) -> tuple[str, str]:
    """(BACKEND, DEVICE) of the TTS image for the instance type: the torch backend needs CUDA, every other
    instance type runs the onnx backend on its CPUs (container/Dockerfile's build arguments)."""
    return ("torch", "cuda") if is_gpu_instance(instance_type) else ("onnx", "cpu")
