"""Filling the Kokoro-82M weight layout: fetched from a local copy, S3, the Hub or the offline mirror; the torch
weights derived from the ONNX export; pushed to S3. Install- and deploy-time work (``make weights``,
``make deploy``): the server only reads a layout (``kokoro_tts.weights.layout``).
"""

from kokoro_tts.weights.layout import ChecksumMismatch, FileEntry, LayoutError, Manifest, WeightLayout

from .fetch import AllSourcesFailed, FetchResult, default_sources, fetch_weights, make_source
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
