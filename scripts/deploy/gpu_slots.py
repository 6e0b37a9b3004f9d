"""The stream slots `make gpu-check` measured on a GPU (bench/results/gpu.json, written by scripts/gpu_check.py), for
the autoscaling target of a GPU instance type (terraform/modules/sagemaker_endpoint/capacity.tf). Without that file,
or with a run that was not on CUDA, there is no measurement: the module then uses its labelled estimate."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import DeployError
from .instances import instance_gpu

GPU_RESULTS = Path("bench/results/gpu.json")


class GpuResultsError(DeployError):
    pass


@dataclass(frozen=True)
class GpuSlots:
    slots: int
    source: str  # what ran where, for autoscaling_target_source
    gpu: str  # the GPU it ran on, as torch names it ("NVIDIA H200")

    def measured_on(self, instance_type: str) -> bool:
        """Whether these slots were measured on the GPU ``instance_type`` carries (instances.GPU_OF_FAMILY)."""
        model = instance_gpu(instance_type)
        return model is not None and model.lower() in self.gpu.lower().split()

    def variable(self) -> dict[str, Any]:
        """The deployment root's gpu_stream_slots."""
        return {"slots": self.slots, "source": self.source}


def measured_gpu_slots(path: Path) -> GpuSlots | None:
    """``streams.batched.slots`` of a CUDA run of gpu-check at ``path`` (batching across sessions, as the endpoint
    runs), None when there is no file or the run was not on a GPU; a file that says neither is an error."""
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
        device = document["run"]["device"]
        batched = document["streams"]["batched"]
        slots = batched["slots"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise GpuResultsError(f"{path} is not a make gpu-check report ({type(e).__name__}: {e})") from e
    if device != "cuda":
        return None
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise GpuResultsError(f"{path}: streams.batched.slots is {slots!r}, not a count of stream slots")
    gpu = document.get("machine", {}).get("gpu") or "an unnamed GPU"
    batch = batched.get("batch")
    return GpuSlots(
        slots=slots,
        gpu=gpu,
        source=f"make gpu-check on {gpu}: {slots} stream slots with batches of {batch} ({path.as_posix()})",
    )
