"""Ways to reach the TTS server, one per module (local_ws, http_batch, sagemaker_bidi, sagemaker_batch), all
speaking the interface in base; the modules are imported where chosen, so an unused SDK is never loaded."""

from .base import (
    AudioEvent,
    BatchTTS,
    ControlEvent,
    SessionOptions,
    TTSEvent,
    TTSSession,
    TTSTransport,
    TTSTransportError,
    classify_chunk,
)

__all__ = [
    "AudioEvent",
    "BatchTTS",
    "ControlEvent",
    "SessionOptions",
    "TTSEvent",
    "TTSSession",
    "TTSTransport",
    "TTSTransportError",
    "classify_chunk",
]
