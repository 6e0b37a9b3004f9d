"""Server settings, read once from the environment (SageMaker passes configuration as env vars).

Each setting is declared once, here: its variable, default and one-line help (what ``serve --help`` lists); the
comment above it says why it exists. A value that does not parse is a ``SettingError`` naming the variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kokoro_client.audio import MAX_SPEED, MIN_SPEED
from kokoro_client.environment import SettingError, listing, setting

__all__ = ["SettingError", "Settings", "environment"]


class Secret(str):
    """A setting's value that no log or repr shows."""

    def __repr__(self) -> str:
        return "'***'" if self else "''"


@dataclass(frozen=True)
class Settings:
    # SageMaker mounts the S3 weight cache at /opt/ml/model; locally `make weights` fills models/kokoro.
    model_dir: Path = setting("KOKORO_MODEL_DIR", Path("/opt/ml/model"), "the weight layout")
    backend: str = setting("KOKORO_BACKEND", "onnx", "onnx (any CPU) or torch (the GPU image)")
    device: str = setting("KOKORO_DEVICE", "auto", "auto, cpu or cuda")
    default_voice: str = setting("KOKORO_DEFAULT_VOICE", "af_heart", "the voice when a request names none")
    # Clients of the vendor-compatible routes send an API key; on a server reachable without SageMaker's IAM, the
    # operator can require one (server/api_keys.py). Unset: keys are accepted and ignored.
    api_key: Secret = setting(
        "KOKORO_API_KEY", Secret(""), "the key the vendor-compatible routes require (unset: none)", kind=Secret
    )
    # Long enough for any spoken reply, short enough that one request cannot occupy the engine for minutes.
    # Longer text is rejected with text_too_long, never truncated.
    max_text_chars: int = setting("KOKORO_MAX_TEXT_CHARS", 5000, "characters per utterance")
    # Beyond the one in flight.
    max_queued_utterances: int = setting("KOKORO_MAX_QUEUED", 32, "utterances queued in one WebSocket session")
    # One more is refused (close 1013, reason server_busy).
    max_sessions: int = setting("KOKORO_MAX_SESSIONS", 256, "WebSocket sessions open at once")
    # HTTP requests and session utterances alike; beyond it a new one is answered server_busy at once rather than
    # queued behind minutes of work.
    max_waiting_first_chunks: int = setting(
        "KOKORO_MAX_WAITING", 16, "utterances server-wide waiting for their first audio (or twice the stream slots)"
    )
    # Behind the work already accepted (the scheduler's estimate, engine/scheduler.py), or for a stream slot
    # (engine/capacity.py); beyond it the request is refused with server_busy and a Retry-After, so accepted work
    # keeps its pace and the client can go elsewhere instead of timing out.
    max_first_audio_wait_s: float = setting(
        "KOKORO_MAX_FIRST_AUDIO_WAIT_S", 4.0, "longest first-audio wait a new synthesis is taken for (s)"
    )
    # A stream (a session speaking, an HTTP synthesis) starts only when the engine can play it through without a
    # gap beside those already playing (engine/capacity.py); past the slots it waits for its first audio up to
    # KOKORO_MAX_FIRST_AUDIO_WAIT_S, then server_busy. -1 starts every stream at once, however many there are.
    streams: int = setting(
        "KOKORO_STREAMS", 0, "streams played at once without a gap (0: measured at warm-up; -1: no limit)"
    )
    # A slot is held by a stream whose client takes its audio about as fast as it plays (engine/capacity.py's
    # Pace): one that falls further behind its playback clock gives the slot up and is told slow_reader. Also how
    # long after giving its slot back a session's next utterance still goes ahead of newcomers (a reply's next
    # sentence), so that priority never lasts.
    stream_lag_s: float = setting(
        "KOKORO_STREAM_LAG_S", 3.0, "seconds a stream's client may fall behind its audio's playback, keeping its slot"
    )
    # Estimated from the text (engine/requests.py), so one session cannot reserve an hour of a slot with 32 long
    # utterances; an utterance into an empty queue is always taken (the text cap bounds it).
    max_queued_audio_s: float = setting(
        "KOKORO_MAX_QUEUED_AUDIO_S", 300.0, "seconds of audio one WebSocket session may have queued (estimated)"
    )
    # Each holds a scheduler slot until its last chunk.
    max_http_streams: int = setting("KOKORO_MAX_HTTP_STREAMS", 32, "HTTP syntheses streaming at once")
    max_h2_streams: int = setting("KOKORO_MAX_H2_STREAMS", 8, "HTTP/2 streams one connection may have open")
    body_timeout_s: float = setting("KOKORO_BODY_TIMEOUT_S", 10.0, "seconds to send a whole HTTP request body")
    # In-flight utterances finish or end with a shutting_down error, then sessions close with 1001. SageMaker
    # gives a container 30 s after SIGTERM before it kills it.
    shutdown_grace_s: float = setting("KOKORO_SHUTDOWN_GRACE_S", 20.0, "seconds from SIGTERM to exit")
    max_message_bytes: int = setting(
        "KOKORO_MAX_MESSAGE_BYTES", 64 * 1024, "largest WebSocket message or HTTP body, in bytes"
    )
    # 0: the backend chooses (onnx on a CPU: one per core, a job alone using every core; a GPU: one);
    # engine/backends/ort_sessions.py says why.
    workers: int = setting("KOKORO_WORKERS", 0, "inference jobs side by side when several wait (0: the backend's)")
    # onnxruntime's intra-op threads.
    threads: int = setting("KOKORO_THREADS", 0, "threads inside one inference job (0: the backend chooses)")
    # Token batches of several streams due together, decoded in one padded call (engine/backends/torch_batch.py):
    # on a GPU one call for many streams costs about what one does. torch only; 0: 16 on a GPU, 1 on a CPU.
    batch: int = setting("KOKORO_BATCH", 0, "streams' chunks one torch call decodes at most (0: the backend's)")
    # The native kernels (engine/backends/kernels.py) where they are built: the generator's Snake activations as one
    # vectorised pass; 0 registers none of them and runs the graph's own operators, as the benchmark does to compare.
    fused_snake: bool = setting("KOKORO_FUSED_SNAKE", True, "the native kernels, where they are built (1 or 0)")
    # With them, the int8 generator's convolutions by the direct kernel where the CPU suits it (AVX-512 VNNI, no AMX).
    direct_conv: bool = setting("KOKORO_DIRECT_CONV", True, "the direct int8 convolution kernel, where it serves (1/0)")
    # Each window its own scheduler job, so the first audio costs one short window (engine/windows.py); 0 is the
    # side-by-side baseline. onnx only.
    windowed: bool = setting("KOKORO_WINDOWED", True, "1: decode each chunk's audio in vocoder windows; 0: whole")
    # An utterance written as a stream (bidi's append) whose first sentence end has not come this long after its
    # first fragment starts with a clause or phrase (text/fragments.py's EarlyCut; docs/engine.md has the
    # measurement); 0 speaks whole sentences only.
    first_piece_ms: int = setting(
        "KOKORO_FIRST_PIECE_MS", 600, "longest wait for a streamed utterance's first sentence end (ms; 0: off)"
    )
    warmup_text: str = setting(
        "KOKORO_WARMUP_TEXT", "Warming up the speech engine.", "the sentence synthesized once before /ping is 200"
    )
    min_speed: float = MIN_SPEED
    max_speed: float = MAX_SPEED


def environment() -> dict[str, str]:
    """Each setting's variable → its help and default, as ``serve --help`` lists them."""
    return listing(Settings)
