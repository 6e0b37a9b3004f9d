"""The audio the TTS server speaks: constants only (the server owns its encoders, a client its decoders)."""

from __future__ import annotations

from typing import Final

SAMPLE_RATE: Final = 24_000
"""The server's only sample rate; every format is mono."""
SAMPLE_WIDTH: Final = 2
"""Bytes per sample of ``pcm``: signed 16-bit little-endian."""
BYTES_PER_SECOND: Final = SAMPLE_RATE * SAMPLE_WIDTH

FORMAT_NAMES: Final = ("pcm", "wav", "mp3", "opus", "aac", "flac")
"""Every audio format a request may name; ``pcm`` is the default of a session and of ``POST /invocations``."""
DEFAULT_FORMAT: Final = "pcm"

MIN_SPEED: Final = 0.5
MAX_SPEED: Final = 2.0
DEFAULT_SPEED: Final = 1.0
