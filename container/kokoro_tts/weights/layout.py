"""The on-disk layout of the Kokoro-82M weights, and the manifest that vouches for it.

```
ROOT/config.json         Kokoro's config.json ("vocab": phoneme → token id)
ROOT/kokoro.onnx         the ONNX model
ROOT/kokoro-v1_0.pth     optional torch weights (Hugging Face)
ROOT/kokoro-v1_0-int8-derived.pth  optional torch weights derived from kokoro.onnx (`derive-torch`)
ROOT/kokoro-stage-front-prosody.onnx  optional: the prosody front cut from kokoro.onnx (`derive-stages`)
ROOT/kokoro-stage-features-pooled.onnx  optional: the decoder's frame-rate blocks and harmonic source, which make
                                  the generator's input (`derive-stages`)
ROOT/kokoro-stage-generator-pooled-snake.onnx  optional: the vocoder's generator (`derive-stages`); the norms of
                                  these two take pooled statistics, its Snake activations are kokoro.Snake nodes
ROOT/kokoro-stage-*-vnni.onnx     optional: the same three, their convolutions as int8 matrix products (the
                                  generator's as kokoro.ConvInteger1dScaled nodes: "-conv")
ROOT/kokoro-norm-priors.npz       optional: each voice's priors for the pooled statistics
ROOT/voices/<name>.bin   voice packs: little-endian float32, 510 × 256
ROOT/manifest.json       {"model", "source", "files": {path: {"sha256", "bytes"}}}, written last
```
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

MODEL = "Kokoro-82M"
CONFIG = "config.json"
ONNX = "kokoro.onnx"
TORCH = "kokoro-v1_0.pth"
DERIVED_TORCH = "kokoro-v1_0-int8-derived.pth"
# The stage graphs (scripts/weights/stage_graphs.py), built twice: as the export computes, and with every
# convolution as a uint8 x int8 matrix product, the same integers on CPUs with 8-bit dot products (VNNI), faster
# there; other x86 CPUs saturate that product (backends/ort_sessions.py picks). Three stages: the prosody front, the
# generator's input features, the generator. The instance norms of the last two take pooled statistics ("pooled"),
# and each voice's priors for those pools are measured once (NORM_PRIORS).
FRONT_GRAPH = "kokoro-stage-front-prosody.onnx"
FEATURES_GRAPH = "kokoro-stage-features-pooled.onnx"
DECODER_GRAPH = "kokoro-stage-generator-pooled-snake.onnx"
FRONT_GRAPH_VNNI = "kokoro-stage-front-prosody-vnni.onnx"
FEATURES_GRAPH_VNNI = "kokoro-stage-features-pooled-vnni.onnx"
DECODER_GRAPH_VNNI = "kokoro-stage-generator-pooled-snake-conv-vnni.onnx"
NORM_PRIORS = "kokoro-norm-priors.npz"
StagePaths = tuple[Path, Path, Path]  # front, features, generator: the order they run in
# What earlier derivations left, which derive-stages removes: the first cut (the whole decoder windowed), a front
# with the export's STFT, generators normalising over their own frames only, fronts that made the generator's input
# features for the whole chunk, the generator-only priors, generators without their Snake nodes, and the int8
# generator without its ConvInteger1d nodes.
EARLIER_STAGE_GRAPHS = (
    "kokoro-front.onnx",
    "kokoro-decoder.onnx",
    "kokoro-stage-front.onnx",
    "kokoro-stage-generator.onnx",
    "kokoro-stage-generator-vnni.onnx",
    "kokoro-stage-front-dft.onnx",
    "kokoro-stage-front-dft-vnni.onnx",
    "kokoro-generator-norms.npz",
    "kokoro-stage-generator-pooled.onnx",
    "kokoro-stage-generator-pooled-vnni.onnx",
    "kokoro-stage-generator-pooled-snake-vnni.onnx",
)
VOICES = "voices"
MANIFEST = "manifest.json"

VOCAB_SIZE = 114
VOICE_ROWS = 510  # row i is the style for a sequence of i phoneme tokens
STYLE_DIM = 256
VOICE_BYTES = VOICE_ROWS * STYLE_DIM * 4

# The 54 voice packs of Kokoro-82M v1.0.
VOICE_NAMES: tuple[str, ...] = (
    "af_alloy", "af_aoede", "af_bella", "af_heart", "af_jessica", "af_kore", "af_nicole", "af_nova",
    "af_river", "af_sarah", "af_sky", "am_adam", "am_echo", "am_eric", "am_fenrir", "am_liam", "am_michael",
    "am_onyx", "am_puck", "am_santa", "bf_alice", "bf_emma", "bf_isabella", "bf_lily", "bm_daniel",
    "bm_fable", "bm_george", "bm_lewis", "ef_dora", "em_alex", "em_santa", "ff_siwis", "hf_alpha", "hf_beta",
    "hm_omega", "hm_psi", "if_sara", "im_nicola", "jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro",
    "jm_kumo", "pf_dora", "pm_alex", "pm_santa", "zf_xiaobei", "zf_xiaoni", "zf_xiaoxiao", "zf_xiaoyi",
    "zm_yunjian", "zm_yunxi", "zm_yunxia", "zm_yunyang",
)  # fmt: skip

# The only relative paths a manifest may name: nothing can point outside the layout (an older layout's manifest
# still lists its earlier stage graphs).
_STAGE_GRAPHS = (
    FRONT_GRAPH,
    FEATURES_GRAPH,
    DECODER_GRAPH,
    FRONT_GRAPH_VNNI,
    FEATURES_GRAPH_VNNI,
    DECODER_GRAPH_VNNI,
    NORM_PRIORS,
    *EARLIER_STAGE_GRAPHS,
)
_FILES = (CONFIG, ONNX, TORCH, DERIVED_TORCH, *_STAGE_GRAPHS)
_PATH_RE = re.compile("^(?:" + "|".join(map(re.escape, _FILES)) + rf"|{VOICES}/[A-Za-z0-9_]+\.bin)$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1 << 20


class LayoutError(Exception):
    """The layout is missing, incomplete or does not match its manifest."""


class ChecksumMismatch(LayoutError):
    def __init__(self, path: str, expected: FileEntry, actual: FileEntry) -> None:
        self.path = path
        if expected.bytes != actual.bytes:
            what = f"{actual.bytes} bytes, expected {expected.bytes}"
        else:
            what = f"sha256 {actual.sha256}, expected {expected.sha256}"
        super().__init__(f"{path}: {what}")


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Manifest:
    source: str
    files: dict[str, FileEntry] = field(default_factory=dict)
    model: str = MODEL

    def to_json(self) -> bytes:
        files = {p: {"sha256": e.sha256, "bytes": e.bytes} for p, e in sorted(self.files.items())}
        doc = {"model": self.model, "source": self.source, "files": files}
        return (json.dumps(doc, indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes | str, origin: str = MANIFEST) -> Manifest:
        try:
            doc = json.loads(data)
            files: dict[str, FileEntry] = {}
            for path, entry in doc["files"].items():
                if not isinstance(path, str) or not _PATH_RE.match(path):
                    raise LayoutError(f"{origin}: unexpected file name {path!r}")
                sha, size = entry["sha256"], entry["bytes"]
                if not isinstance(sha, str) or not _SHA256_RE.match(sha) or not isinstance(size, int):
                    raise LayoutError(f"{origin}: bad entry for {path}")
                files[path] = FileEntry(sha, size)
            return cls(source=str(doc["source"]), files=files, model=str(doc["model"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise LayoutError(f"{origin} is not a valid manifest: {e!r}") from e

    def required(self, with_torch: bool = False) -> dict[str, FileEntry]:
        """The entries a fetch copies: everything but the torch weights unless asked for."""
        return {p: e for p, e in self.files.items() if with_torch or p != TORCH}


def hash_stream(chunks: Iterable[bytes], progress: Callable[[int], object] | None = None) -> FileEntry:
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return FileEntry(digest.hexdigest(), size)


def read_chunks(path: Path, chunk: int = CHUNK) -> Iterable[bytes]:
    with path.open("rb") as f:
        while block := f.read(chunk):
            yield block


def hash_file(path: Path, progress: Callable[[int], object] | None = None) -> FileEntry:
    return hash_stream(read_chunks(path), progress)


def check_structure(root: Path, files: Mapping[str, FileEntry], with_torch: bool = False) -> None:
    """Kokoro's shape of a layout: config with its vocab, the model, every voice pack at 510 × 256."""
    missing = [p for p in (CONFIG, ONNX) if p not in files]
    missing += [f"{VOICES}/{v}.bin" for v in VOICE_NAMES if f"{VOICES}/{v}.bin" not in files]
    if with_torch and TORCH not in files:
        missing.append(TORCH)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise LayoutError(f"incomplete layout in {root}: missing {shown}")
    for path, entry in files.items():
        if path.startswith(f"{VOICES}/") and entry.bytes != VOICE_BYTES:
            raise LayoutError(f"{path}: {entry.bytes} bytes, a voice pack is {VOICE_BYTES} (510×256 float32)")
    try:
        vocab = json.loads((root / CONFIG).read_bytes())["vocab"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LayoutError(f"{CONFIG}: not Kokoro's config ({e!r})") from e
    if not isinstance(vocab, dict) or len(vocab) != VOCAB_SIZE:
        raise LayoutError(f"{CONFIG}: expected a vocab of {VOCAB_SIZE} phonemes")


class WeightLayout:
    """Paths into a weights directory, and the checks that it is whole."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.config_path = self.root / CONFIG
        self.onnx_path = self.root / ONNX
        self.torch_path = self.root / TORCH
        self.voices_dir = self.root / VOICES
        self.manifest_path = self.root / MANIFEST

    def __repr__(self) -> str:
        return f"WeightLayout({str(self.root)!r})"

    def stage_graphs(self, *, int8: bool = False) -> StagePaths:
        """The three stage graphs: as exported, or (``int8``) the build for 8-bit dot products."""
        names = (
            (FRONT_GRAPH_VNNI, FEATURES_GRAPH_VNNI, DECODER_GRAPH_VNNI)
            if int8
            else (FRONT_GRAPH, FEATURES_GRAPH, DECODER_GRAPH)
        )
        return self.root / names[0], self.root / names[1], self.root / names[2]

    def voice_path(self, name: str) -> Path:
        return self.voices_dir / f"{name}.bin"

    def voice_names(self) -> list[str]:
        """The voices the manifest lists, or, without a manifest, the packs in voices/."""
        try:
            paths = list(self.read_manifest().files)
        except LayoutError:
            paths = [f"{VOICES}/{p.name}" for p in self.voices_dir.glob("*.bin")]
        return sorted(p[len(VOICES) + 1 : -4] for p in paths if p.startswith(f"{VOICES}/"))

    def load_voice(self, name: str) -> npt.NDArray[np.float32]:
        """A voice pack as a (510, 256) float32 array."""
        return np.fromfile(self.voice_path(name), dtype="<f4").reshape(VOICE_ROWS, STYLE_DIM)

    def config(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.config_path.read_bytes())
        return data

    def read_manifest(self) -> Manifest:
        try:
            data = self.manifest_path.read_bytes()
        except FileNotFoundError:
            raise LayoutError(f"{self.manifest_path} is missing: not a complete layout") from None
        return Manifest.from_json(data, str(self.manifest_path))

    def has_torch(self) -> bool:
        try:
            return TORCH in self.read_manifest().files
        except LayoutError:
            return False

    def problems(self, with_torch: bool = False) -> list[str]:
        """What keeps the layout from being complete, by sizes alone (cheap): empty when it is."""
        try:
            manifest = self.read_manifest()
            check_structure(self.root, manifest.files, with_torch)
        except LayoutError as e:
            return [str(e)]
        bad = []
        for path, entry in manifest.files.items():
            try:
                size = (self.root / path).stat().st_size
            except FileNotFoundError:
                bad.append(f"{path}: missing")
                continue
            if size != entry.bytes:
                bad.append(f"{path}: {size} bytes, expected {entry.bytes}")
        return bad

    def is_complete(self, with_torch: bool = False) -> bool:
        return not self.problems(with_torch)

    def verify(self, full: bool = True, progress: Callable[[int], object] | None = None) -> Manifest:
        """Check every file against the manifest, re-hashing it when ``full``.

        Raises LayoutError (ChecksumMismatch for a changed file) naming the bad file.
        """
        manifest = self.read_manifest()
        if problems := self.problems(with_torch=False):
            raise LayoutError("; ".join(problems))
        if full:
            for path, expected in sorted(manifest.files.items()):
                actual = hash_file(self.root / path, progress)
                if actual != expected:
                    raise ChecksumMismatch(path, expected, actual)
        return manifest
