"""Streaming audio encoders: 16-bit PCM in, container bytes out, chunk by chunk.

Every container is written by FFmpeg through PyAV, so that each chunk's bytes can leave the server as soon as
the chunk is synthesized. WAV gets the streaming header OpenAI's speech API sends and FFmpeg writes to a pipe: the
canonical 44 bytes with the RIFF and data sizes 0xFFFFFFFF ("unknown: read to the end"), no LIST chunk
(docs/protocol.md says why). Ogg pages are cut every 20 ms so Opus does not wait for a full page.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Protocol

import av
import numpy as np
from kokoro_client.audio import SAMPLE_RATE
from kokoro_client.errors import ErrorCode, TTSError


@dataclass(frozen=True)
class AudioFormat:
    name: str
    media_type: str
    container: str | None  # None: raw PCM, no container
    codec: str | None
    options: dict[str, str]


FORMATS: dict[str, AudioFormat] = {
    f.name: f
    for f in (
        AudioFormat("pcm", "audio/pcm;rate=24000;encoding=signed-int;bits=16;channels=1", None, None, {}),
        # bitexact: no LIST/INFO "encoder" chunk, so readers that assume the 44-byte header find the data there.
        AudioFormat("wav", "audio/wav", "wav", "pcm_s16le", {"fflags": "+bitexact"}),
        AudioFormat("mp3", "audio/mpeg", "mp3", "libmp3lame", {}),
        AudioFormat("opus", "audio/ogg;codecs=opus", "ogg", "libopus", {"page_duration": "20000"}),
        AudioFormat("aac", "audio/aac", "adts", "aac", {}),
        # Lossless; STREAMINFO leaves first with the total length unknown (a pipe cannot be rewound), as FLAC allows.
        AudioFormat("flac", "audio/flac", "flac", "flac", {}),
    )
}


def audio_format(name: object) -> AudioFormat:
    """The format called ``name``, or a ``TTSError`` a client can act on."""
    if not isinstance(name, str) or name.lower() not in FORMATS:
        raise TTSError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"Unsupported audio format {name!r}; use one of: {', '.join(FORMATS)}.",
        )
    return FORMATS[name.lower()]


class StreamEncoder(Protocol):
    def encode(self, pcm: np.ndarray) -> bytes:
        """Encode int16 mono samples; returns the bytes that are ready now (possibly none)."""
        ...

    def finish(self) -> bytes:
        """Flush the encoder and close the container; returns the last bytes."""
        ...


class RawPCMEncoder:
    def encode(self, pcm: np.ndarray) -> bytes:
        return pcm.astype("<i2", copy=False).tobytes()

    def finish(self) -> bytes:
        return b""


class _Sink(io.RawIOBase):
    """A non-seekable byte sink: the muxer must write a streamable container, and we drain it per chunk."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self._buffer += data
        return len(data)

    def drain(self) -> bytes:
        data = bytes(self._buffer)
        self._buffer.clear()
        return data


class ContainerEncoder:
    def __init__(self, fmt: AudioFormat) -> None:
        assert fmt.container and fmt.codec
        self._sink = _Sink()
        self._container = av.open(
            self._sink, mode="w", format=fmt.container, options={"flush_packets": "1", **fmt.options}
        )
        stream = self._container.add_stream(fmt.codec, rate=SAMPLE_RATE, layout="mono")
        assert isinstance(stream, av.AudioStream)
        self._stream = stream
        self._pts = 0

    def encode(self, pcm: np.ndarray) -> bytes:
        if pcm.size:
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate = SAMPLE_RATE
            frame.pts = self._pts
            self._pts += pcm.size
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.drain()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.drain()


def make_encoder(fmt: AudioFormat) -> StreamEncoder:
    return RawPCMEncoder() if fmt.container is None else ContainerEncoder(fmt)


def float_to_pcm16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)
