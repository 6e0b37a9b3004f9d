"""The audio the TTS server speaks: constants only (the server owns its encoders, a client its decoders)."""

from __future__ import annotations

from typing import Final

SAMPLE_RATE: Final = 24_000
"""The model's own sample rate: the default of every format but the telephony ones; every format is mono."""
SAMPLE_RATES: Final = (8_000, 16_000, 22_050, 24_000, 44_100, 48_000)
"""Every output rate a request may name (``sample_rate``); other rates than 24 kHz are resampled by the server."""
TELEPHONY_RATE: Final = 8_000
"""The default rate of ``mulaw`` and ``alaw`` (G.711), which take 8 or 16 kHz only."""
SAMPLE_WIDTH: Final = 2
"""Bytes per sample of ``pcm``: signed 16-bit little-endian."""
BYTES_PER_SECOND: Final = SAMPLE_RATE * SAMPLE_WIDTH

FORMAT_NAMES: Final = ("pcm", "wav", "mp3", "opus", "aac", "flac", "mulaw", "alaw", "wav_mulaw", "wav_alaw")
"""Every audio format a request may name; ``pcm`` is the default of a session and of ``POST /invocations``.
``mulaw``/``alaw`` are raw G.711 bytes (one byte a sample), ``wav_mulaw``/``wav_alaw`` the same in a WAV file."""
DEFAULT_FORMAT: Final = "pcm"

MIN_SPEED: Final = 0.5
MAX_SPEED: Final = 2.0
DEFAULT_SPEED: Final = 1.0
