"""Server settings, read once from the environment (SageMaker passes configuration as env vars)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kokoro_client.audio import MAX_SPEED, MIN_SPEED


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def _default_model_dir() -> Path:
    # SageMaker mounts the S3 weight cache at /opt/ml/model; locally `make weights` fills models/kokoro.
    if explicit := os.environ.get("KOKORO_MODEL_DIR"):
        return Path(explicit)
    return Path("/opt/ml/model")


@dataclass(frozen=True)
class Settings:
    model_dir: Path = field(default_factory=_default_model_dir)
    backend: str = field(default_factory=lambda: os.environ.get("KOKORO_BACKEND", "onnx"))
    device: str = field(default_factory=lambda: os.environ.get("KOKORO_DEVICE", "auto"))
    default_voice: str = field(default_factory=lambda: os.environ.get("KOKORO_DEFAULT_VOICE", "af_heart"))
    # Characters per utterance: long enough for any spoken reply, short enough that one request cannot
    # occupy the engine for minutes. Longer text is rejected with text_too_long, never truncated.
    max_text_chars: int = field(default_factory=lambda: _env_int("KOKORO_MAX_TEXT_CHARS", 5000))
    # Utterances queued in one WebSocket session beyond the one in flight.
    max_queued_utterances: int = field(default_factory=lambda: _env_int("KOKORO_MAX_QUEUED", 32))
    # WebSocket sessions open at once; one more is refused (close 1013, reason server_busy).
    max_sessions: int = field(default_factory=lambda: _env_int("KOKORO_MAX_SESSIONS", 256))
    # Utterances, server-wide, waiting for their first audio chunk (HTTP requests and session utterances);
    # beyond it a new one is answered server_busy at once rather than queued behind minutes of work.
    max_waiting_first_chunks: int = field(default_factory=lambda: _env_int("KOKORO_MAX_WAITING", 16))
    # Seconds a new HTTP synthesis may expect to wait for its first audio behind the work already accepted (the
    # scheduler's estimate, scheduler.py); beyond it the request is refused with server_busy and a Retry-After, so
    # accepted work keeps its pace and the client can go elsewhere instead of timing out.
    max_first_audio_wait_s: float = field(default_factory=lambda: _env_float("KOKORO_MAX_FIRST_AUDIO_WAIT_S", 4.0))
    # HTTP syntheses streaming at once (each holds a scheduler slot until its last chunk).
    max_http_streams: int = field(default_factory=lambda: _env_int("KOKORO_MAX_HTTP_STREAMS", 32))
    # HTTP/2 streams one connection may have open at once.
    max_h2_streams: int = field(default_factory=lambda: _env_int("KOKORO_MAX_H2_STREAMS", 8))
    # Seconds a client has to send a whole HTTP request body.
    body_timeout_s: float = field(default_factory=lambda: _env_float("KOKORO_BODY_TIMEOUT_S", 10.0))
    # Seconds from SIGTERM to exit: in-flight utterances finish or end with a shutting_down error, then sessions
    # close with 1001. SageMaker gives a container 30 s after SIGTERM before it kills it.
    shutdown_grace_s: float = field(default_factory=lambda: _env_float("KOKORO_SHUTDOWN_GRACE_S", 20.0))
    # Largest WebSocket message or HTTP body accepted, in bytes.
    max_message_bytes: int = field(default_factory=lambda: _env_int("KOKORO_MAX_MESSAGE_BYTES", 64 * 1024))
    # Inference jobs run side by side when several wait; 0: the backend chooses (onnx on a CPU: one per core, a job
    # alone using every core; a GPU: one). backends/ort_sessions.py says why.
    workers: int = field(default_factory=lambda: _env_int("KOKORO_WORKERS", 0))
    # Threads inside one inference job (onnxruntime intra-op); 0 lets the backend choose.
    threads: int = field(default_factory=lambda: _env_int("KOKORO_THREADS", 0))
    # Decode each chunk's audio window by window (engine/windows.py), each window its own scheduler job, so the
    # first audio costs one short window; 0 synthesizes whole chunks (the side-by-side baseline). onnx only.
    windowed: bool = field(default_factory=lambda: os.environ.get("KOKORO_WINDOWED", "1") != "0")
    min_speed: float = MIN_SPEED
    max_speed: float = MAX_SPEED
    warmup_text: str = field(
        default_factory=lambda: os.environ.get("KOKORO_WARMUP_TEXT", "Warming up the speech engine.")
    )
