"""The Kokoro-82M weights: one on-disk layout, fetched from a local copy, S3, the Hub or the offline mirror.

Reading a layout needs only ``WeightLayout``; ``fetch_weights`` and the sources fill one.
"""

from .fetch import AllSourcesFailed, FetchResult, default_sources, fetch_weights, make_source
from .layout import ChecksumMismatch, FileEntry, LayoutError, Manifest, WeightLayout
from .sources import HubSource, LocalSource, MirrorSource, Source, SourceError

__all__ = [
    "AllSourcesFailed",
    "ChecksumMismatch",
    "FetchResult",
    "FileEntry",
    "HubSource",
    "LayoutError",
    "LocalSource",
    "Manifest",
    "MirrorSource",
    "Source",
    "SourceError",
    "WeightLayout",
    "default_sources",
    "fetch_weights",
    "make_source",
]
