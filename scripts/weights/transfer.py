"""Atomic, checksummed writes into a layout, with one progress bar per fetch."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Never

from kokoro_tts.weights.layout import ChecksumMismatch, FileEntry, hash_file, read_chunks
from tqdm import tqdm


def progress_bar(desc: str, quiet: bool = False, total: int | None = None) -> tqdm[Never]:
    """Bytes, to stderr; silent with ``quiet`` or when stderr is not a terminal."""
    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=quiet or not sys.stderr.isatty(),
        leave=False,
    )


def write_atomic(target: Path, data: bytes) -> None:
    """Write a small file whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class LayoutWriter:
    """Writes files into a layout root: each through a temp file beside it, hashed on the way, then renamed.

    ``entries`` collects what was written, for the manifest.
    """

    def __init__(self, root: Path, bar: tqdm[Never]) -> None:
        self.root = root
        self.bar = bar
        self.entries: dict[str, FileEntry] = {}

    def expect(self, nbytes: int) -> None:
        """Grow the progress bar's total by what a source is about to transfer."""
        self.bar.total = (self.bar.total or 0) + nbytes
        self.bar.refresh()

    def reuse(self, rel: str, expected: FileEntry) -> bool:
        """Keep a file already in place with the expected size and checksum."""
        target = self.root / rel
        try:
            if target.stat().st_size != expected.bytes:
                return False
        except FileNotFoundError:
            return False
        if hash_file(target) != expected:
            return False
        self.entries[rel] = expected
        self.bar.update(expected.bytes)
        return True

    def write(self, rel: str, chunks: Iterable[bytes], expected: FileEntry | None = None) -> FileEntry:
        """Stream ``chunks`` into ``rel``.

        With ``expected``, a mismatch raises ChecksumMismatch and leaves the target as it was.
        """
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            digest, size = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                    self.bar.update(len(chunk))
                f.flush()
                os.fsync(f.fileno())
            actual = FileEntry(digest.hexdigest(), size)
            if expected is not None and actual != expected:
                raise ChecksumMismatch(rel, expected, actual)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.entries[rel] = actual
        return actual

    def copy(self, rel: str, src: Path, expected: FileEntry | None = None) -> FileEntry:
        if expected is not None and self.reuse(rel, expected):
            return expected
        return self.write(rel, read_chunks(src), expected)
