"""Which CUDA a SageMaker GPU host can run: the inference AMI's NVIDIA driver decides.

Source: Amazon SageMaker API Reference, ``ProductionVariant`` → ``InferenceAmiVersion`` (the AMI versions and their
driver and CUDA versions), and the SageMaker Developer Guide, "Best practices to minimize interruptions during GPU
driver upgrades" (inference-gpu-drivers: without an AMI version, ml.g4dn/ml.g5/ml.p4d run driver 470 = CUDA 11.4,
ml.g6/ml.p5 driver 535 = CUDA 12.2, ml.p5e/ml.p5en driver 550 = CUDA 12.4).

"CUDA version" there is the newest toolkit the driver was released with. A newer *minor* release of the same major
still runs, through CUDA minor version compatibility (NVIDIA, "CUDA Compatibility" → "Minor Version Compatibility":
any 12.x runtime runs on a driver >= 525, with a limited feature set: no PTX compiled by a newer toolkit). So the
CUDA 12.8 build of torch runs on driver 535 or 550; a CUDA 13 build needs driver >= 580, which no SageMaker
inference AMI has. The forward-compatibility package (cuda-compat) would be the only other route, and the -2-1 and
-3-1 AMIs disable its mounting, so nothing here relies on it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The oldest driver each CUDA major's runtimes run on, newer minors included (NVIDIA, "Minor Version
# Compatibility", table 1): 11.x >= 450, 12.x >= 525, 13.x >= 580.
MINOR_COMPAT_DRIVER_FLOOR: dict[int, int] = {11: 450, 12: 525, 13: 580}


@dataclass(frozen=True)
class GpuHost:
    driver: int  # NVIDIA driver branch
    cuda: str  # the CUDA version AWS lists for it (the driver's own)

    @property
    def max_cuda_major(self) -> int:
        """The newest CUDA major whose runtimes (any minor) this driver runs."""
        return max(major for major, floor in MINOR_COMPAT_DRIVER_FLOOR.items() if self.driver >= floor)


# InferenceAmiVersion → host (ProductionVariant docs).
SAGEMAKER_INFERENCE_AMIS: dict[str, GpuHost] = {
    "al2-ami-sagemaker-inference-gpu-2": GpuHost(driver=535, cuda="12.2"),
    "al2-ami-sagemaker-inference-gpu-2-1": GpuHost(driver=535, cuda="12.2"),
    "al2-ami-sagemaker-inference-gpu-3-1": GpuHost(driver=550, cuda="12.4"),
}

# No InferenceAmiVersion on ml.g4dn/ml.g5/ml.p4d: driver 470 (inference-gpu-drivers).
SAGEMAKER_DEFAULT_DRIVER = GpuHost(driver=470, cuda="11.4")


def host_of(ami_version: str | None) -> GpuHost:
    if not ami_version:
        return SAGEMAKER_DEFAULT_DRIVER
    try:
        return SAGEMAKER_INFERENCE_AMIS[ami_version]
    except KeyError:
        raise ValueError(f"unknown InferenceAmiVersion {ami_version!r}: add it to SAGEMAKER_INFERENCE_AMIS") from None


def runs(ami_version: str | None, runtime_cuda: str) -> bool:
    """Whether a CUDA runtime of version ``runtime_cuda`` (e.g. "12.8") runs on hosts of that AMI version."""
    major = int(runtime_cuda.split(".")[0])
    floor = MINOR_COMPAT_DRIVER_FLOOR.get(major)
    return floor is not None and host_of(ami_version).driver >= floor
