"""Kokoro-82M through the kokoro package's KModel (PyTorch), for the GPU endpoint image (extra ``gpu``).

The device is never changed behind the operator's back: ``cuda`` without a usable GPU is an error that names the
cause, and ``auto`` says in the log when it settles for the CPU.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kokoro_tts.engine.backends import ChunkInput
    from kokoro_tts.engine.backends.stages import OnnxStages

log = logging.getLogger(__name__)

# Chunks of several streams one decoder call takes on a GPU when KOKORO_BATCH is 0; on a CPU padding costs more
# than the calls it saves (docs/gpu.md), so there it is 1.
GPU_BATCH = 16

# AdaIN1d's InstanceNorm is affine only to dodge an old ONNX exporter bug (kokoro's own comment): its weight and
# bias stay at 1 and 0, and checkpoints need not carry them. Any other missing tensor is an error.
_OPTIONAL_SUFFIXES = (".norm.weight", ".norm.bias")


def cuda_problem(torch: Any) -> str | None:
    """Why CUDA cannot run here, or None when it can."""
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is a CPU-only build"
    try:
        if torch.cuda.is_available():
            return None
        count = torch.cuda.device_count()
    except Exception as e:  # a driver too old for the runtime raises here
        return f"CUDA failed to initialise ({e})"
    if count == 0:
        return f"no NVIDIA GPU is visible (torch built on CUDA {torch.version.cuda}; is the driver mounted?)"
    return f"torch sees {count} GPU(s) but cannot use them (is the driver older than CUDA {torch.version.cuda} needs?)"


def pick_device(torch: Any, device: str) -> str:
    if device == "cpu":
        return "cpu"
    problem = cuda_problem(torch)
    if device == "cuda" or device.startswith("cuda:"):
        if problem:
            raise RuntimeError(
                f"KOKORO_DEVICE={device} but {problem}. Run on a GPU host whose NVIDIA driver supports CUDA "
                f"{torch.version.cuda or '12'} (docs/gpu.md), or set "
                "KOKORO_DEVICE=cpu (or auto) to accept the CPU."
            )
        return device
    if device != "auto":
        raise ValueError(f"KOKORO_DEVICE must be auto, cpu or cuda, not {device!r}")
    if problem:
        log.warning("KOKORO_DEVICE=auto: running the torch backend on the CPU because %s", problem)
        return "cpu"
    return "cuda"


def load_kmodel(config_path: Path, model_path: Path | None) -> Any:
    """KModel with the weights in ``model_path`` (or its initial ones when None), loaded strictly.

    KModel's own loader retries with ``strict=False`` and so would run, silently, with random weights for any
    tensor a checkpoint lacks; here every tensor but the identity norms above must be present.
    """
    import torch
    from kokoro import KModel

    with tempfile.NamedTemporaryFile(suffix=".pth") as empty, warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)  # weight_norm's deprecation, inside kokoro
        warnings.filterwarnings("ignore", message=".*dropout option adds dropout.*")
        torch.save({}, empty.name)
        model = KModel(repo_id="hexgrad/Kokoro-82M", config=str(config_path), model=empty.name)
    if model_path is None:
        return model
    state = torch.load(model_path, map_location="cpu", weights_only=True)
    for part, tensors in state.items():
        if not hasattr(model, part):
            raise RuntimeError(f"{model_path.name}: unexpected part {part!r} (not a KModel checkpoint?)")
        tensors = {k.removeprefix("module."): v for k, v in tensors.items()}
        missing, unexpected = getattr(model, part).load_state_dict(tensors, strict=False)
        missing = [k for k in missing if not k.endswith(_OPTIONAL_SUFFIXES)]
        if missing or unexpected:
            raise RuntimeError(
                f"{model_path.name} does not fit KModel's {part}: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
    if absent := [name for name, _ in model.named_children() if name not in state]:
        raise RuntimeError(f"{model_path.name} lacks {absent}")
    return model


class TorchBackend:
    name = "torch"

    def __init__(
        self,
        config_path: Path,
        model_path: Path,
        device: str = "auto",
        threads: int = 0,
        workers: int = 0,
        batch: int = 0,
    ) -> None:
        import torch

        self._torch = torch
        self.device = pick_device(torch, device)
        self.parallel_jobs = workers or 1  # one whole chunk at a time keeps a GPU busy
        # Chunks of several streams one decoder call takes (torch_batch.py); 0: the device's default.
        self.batch_limit = batch if batch > 0 else (1 if self.device == "cpu" else GPU_BATCH)
        if not model_path.is_file():
            raise FileNotFoundError(
                f"{model_path} is missing: `python -m scripts.weights fetch --with-torch` (Hugging Face) or "
                "`python -m scripts.weights derive-torch` (from the ONNX export) makes one"
            )
        if self.device == "cpu" and threads:
            torch.set_num_threads(threads)
        self.model_file = model_path.name
        # Whole chunks only: KModel's sine generator draws a random initial phase per chunk, so its stages would
        # need the source made once per chunk (as the onnx front does) before windows could share it.
        self.stages: OnnxStages | None = None
        self.model = load_kmodel(config_path, model_path).to(self.device).eval()  # KModel, on its device

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float, *, every_core: bool = True) -> np.ndarray:
        return self.synthesize_timed(tokens, style, speed)[0]

    def synthesize_timed(
        self, tokens: list[int], style: np.ndarray, speed: float, *, every_core: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        # ``every_core`` is not read: torch keeps one thread pool, whatever runs beside this job.
        with self._torch.inference_mode():
            audio, durations = self.model.forward_with_tokens(*self._inputs(tokens, style), speed)
        return _numpy(audio, durations)

    def synthesize_batch(
        self, items: Sequence[ChunkInput], *, every_core: bool = True
    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Each item's front alone, then the decoder (most of the work) in one padded call: the same audio as
        ``synthesize_timed`` per item, up to float rounding and the excitation's random draws."""
        if len(items) > self.batch_limit:
            raise ValueError(f"{len(items)} token batches in one call; this backend takes at most {self.batch_limit}")
        if len(items) <= 1:
            return [self.synthesize_timed(item.tokens, item.style, item.speed, every_core=every_core) for item in items]
        from kokoro_tts.engine.backends.torch_batch import decode, front

        with self._torch.inference_mode():
            fronts = [front(self.model, *self._inputs(item.tokens, item.style), item.speed) for item in items]
            audio = decode(self.model.decoder, fronts)
        return [_numpy(a, f.pred_dur) for a, f in zip(audio, fronts, strict=True)]

    def _inputs(self, tokens: list[int], style: np.ndarray) -> tuple[Any, Any]:
        """KModel's input ids (the pad token either side) and style row, on the model's device."""
        torch = self._torch
        input_ids = torch.tensor([[0, *tokens, 0]], dtype=torch.long, device=self.device)
        ref_s = torch.from_numpy(np.ascontiguousarray(style, dtype=np.float32)).reshape(1, -1).to(self.device)
        return input_ids, ref_s


def _numpy(audio: Any, durations: Any) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.asarray(audio.float().cpu().numpy(), dtype=np.float32).reshape(-1),
        np.asarray(durations.cpu().numpy()).reshape(-1),
    )
