"""Streaming audio encoders: 16-bit PCM at the model's 24 kHz in, the requested rate and format out, chunk by chunk.

Every container and codec is FFmpeg's, through PyAV, so that each chunk's bytes can leave the server as soon as
the chunk is synthesized. Another output rate goes through FFmpeg's resampler (``av.AudioResampler``), one per
stream, so its filter state carries across chunk seams: the stream sounds as if resampled whole (the resampler's
few samples of delay come out at ``finish``). WAV gets the streaming header OpenAI's speech API sends and FFmpeg
writes to a pipe: the canonical 44 bytes with the RIFF and data sizes 0xFFFFFFFF ("unknown: read to the end"), no
LIST chunk (docs/protocol.md says why). Ogg pages are cut every 20 ms so Opus does not wait for a full page.

Routes encode through ``OffLoopEncoder``: resampling and encoding (tens of milliseconds a chunk for AAC at 48 kHz)
run in the encoding threads, so the event loop, and /ping with it, never waits for them.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import av
import numpy as np
from kokoro_client.audio import SAMPLE_RATE, SAMPLE_RATES, TELEPHONY_RATE
from kokoro_client.errors import ErrorCode, TTSError, quoted

_G711_RATES = (TELEPHONY_RATE, 16_000)
_OPUS_RATES = (8_000, 16_000, 24_000, 48_000)  # what libopus encodes; 22.05 and 44.1 kHz are not among them


@dataclass(frozen=True)
class AudioFormat:
    name: str
    media_type: str  # "{rate}" in it is replaced by the output rate
    container: str | None  # None: raw samples, no container
    codec: str | None  # None: signed 16-bit little-endian PCM as is
    options: dict[str, str]
    rates: tuple[int, ...] = SAMPLE_RATES
    default_rate: int = SAMPLE_RATE

    def content_type(self, rate: int) -> str:
        return self.media_type.replace("{rate}", str(rate))


FORMATS: dict[str, AudioFormat] = {
    f.name: f
    for f in (
        AudioFormat("pcm", "audio/pcm;rate={rate};encoding=signed-int;bits=16;channels=1", None, None, {}),
        # bitexact: no LIST/INFO "encoder" chunk, so readers that assume the 44-byte header find the data there.
        AudioFormat("wav", "audio/wav", "wav", "pcm_s16le", {"fflags": "+bitexact"}),
        AudioFormat("mp3", "audio/mpeg", "mp3", "libmp3lame", {}),
        AudioFormat("opus", "audio/ogg;codecs=opus", "ogg", "libopus", {"page_duration": "20000"}, _OPUS_RATES),
        AudioFormat("aac", "audio/aac", "adts", "aac", {}),
        # Lossless; STREAMINFO leaves first with the total length unknown (a pipe cannot be rewound), as FLAC allows.
        AudioFormat("flac", "audio/flac", "flac", "flac", {}),
        # G.711 for telephony: 8 kHz by default (RFC 3551's PCMU and PCMA), raw or in a WAV file.
        AudioFormat("mulaw", "audio/PCMU;rate={rate}", None, "pcm_mulaw", {}, _G711_RATES, TELEPHONY_RATE),
        AudioFormat("alaw", "audio/PCMA;rate={rate}", None, "pcm_alaw", {}, _G711_RATES, TELEPHONY_RATE),
        AudioFormat("wav_mulaw", "audio/wav", "wav", "pcm_mulaw", {"fflags": "+bitexact"}, _G711_RATES, TELEPHONY_RATE),
        AudioFormat("wav_alaw", "audio/wav", "wav", "pcm_alaw", {"fflags": "+bitexact"}, _G711_RATES, TELEPHONY_RATE),
    )
}


def audio_format(name: object) -> AudioFormat:
    """The format called ``name``, or a ``TTSError`` a client can act on."""
    if not isinstance(name, str) or name.lower() not in FORMATS:
        raise TTSError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"Unsupported audio format {quoted(name)}; use one of: {', '.join(FORMATS)}.",
        )
    return FORMATS[name.lower()]


def output_rate(fmt: AudioFormat, rate: object = None) -> int:
    """The sample rate ``fmt`` is sent at: ``rate`` if the format takes it, its default if ``rate`` is None."""
    if rate is None:
        return fmt.default_rate
    if isinstance(rate, bool) or not isinstance(rate, int) or rate not in fmt.rates:
        raise TTSError(
            ErrorCode.UNSUPPORTED_SAMPLE_RATE,
            f"'sample_rate' {quoted(rate)} is not one {fmt.name} is sent at; "
            f"use one of: {', '.join(map(str, fmt.rates))}.",
        )
    return rate


class StreamEncoder(Protocol):
    def encode(self, pcm: np.ndarray) -> bytes:
        """Encode int16 mono samples at 24 kHz; returns the bytes that are ready now (possibly none)."""
        ...

    def finish(self) -> bytes:
        """Flush the resampler and the encoder, close the container; returns the last bytes."""
        ...


def _frame(pcm: np.ndarray, rate: int) -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
    )
    frame.sample_rate = rate
    return frame


class _Resampled:
    """The base of every encoder: 24 kHz chunks in, frames at the output rate out (the same frames at 24 kHz)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._resampler = None if rate == SAMPLE_RATE else av.AudioResampler(format="s16", layout="mono", rate=rate)
        self._in_pts = 0

    def encode(self, pcm: np.ndarray) -> bytes:
        if not pcm.size:
            return b""
        frame = _frame(pcm, SAMPLE_RATE)
        frame.pts = self._in_pts
        self._in_pts += pcm.size
        return self._write(self._resampler.resample(frame) if self._resampler else [frame])

    def finish(self) -> bytes:
        return self._write(self._resampler.resample(None) if self._resampler else []) + self._close()

    def _write(self, frames: list[av.AudioFrame]) -> bytes:
        raise NotImplementedError

    def _close(self) -> bytes:
        return b""


class RawPCMEncoder(_Resampled):
    def encode(self, pcm: np.ndarray) -> bytes:
        if self._resampler is None:  # the common case stays a copy
            return pcm.astype("<i2", copy=False).tobytes()
        return super().encode(pcm)

    def _write(self, frames: list[av.AudioFrame]) -> bytes:
        return b"".join(f.to_ndarray().astype("<i2", copy=False).tobytes() for f in frames)


class RawCodecEncoder(_Resampled):
    """Samples through a codec with no container around them: G.711 μ-law or A-law, one byte a sample."""

    def __init__(self, fmt: AudioFormat, rate: int) -> None:
        super().__init__(rate)
        assert fmt.codec
        codec = av.CodecContext.create(fmt.codec, "w")
        assert isinstance(codec, av.AudioCodecContext)
        codec.sample_rate, codec.layout, codec.format = rate, "mono", "s16"
        self._codec = codec

    def _write(self, frames: list[av.AudioFrame]) -> bytes:
        return b"".join(bytes(packet) for frame in frames for packet in self._codec.encode(frame))

    def _close(self) -> bytes:
        return b"".join(bytes(packet) for packet in self._codec.encode(None))


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


class ContainerEncoder(_Resampled):
    def __init__(self, fmt: AudioFormat, rate: int = SAMPLE_RATE) -> None:
        super().__init__(rate)
        assert fmt.container and fmt.codec
        self._sink = _Sink()
        self._container = av.open(
            self._sink, mode="w", format=fmt.container, options={"flush_packets": "1", **fmt.options}
        )
        stream = self._container.add_stream(fmt.codec, rate=rate, layout="mono")
        assert isinstance(stream, av.AudioStream)
        self._stream = stream
        self._pts = 0

    def _write(self, frames: list[av.AudioFrame]) -> bytes:
        for frame in frames:
            frame.pts = self._pts
            self._pts += frame.samples
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.drain()

    def _close(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.drain()


def make_encoder(fmt: AudioFormat, sample_rate: int = SAMPLE_RATE) -> StreamEncoder:
    """A fresh encoder for one stream: ``fmt`` at ``sample_rate`` (check it first with ``output_rate``)."""
    if fmt.container is not None:
        return ContainerEncoder(fmt, sample_rate)
    if fmt.codec is not None:
        return RawCodecEncoder(fmt, sample_rate)
    return RawPCMEncoder(sample_rate)


# Threads for every stream's encoding, server-wide: one per core (a stream's calls run one at a time, in order).
ENCODING_THREADS = min(8, os.cpu_count() or 2)
_ENCODING = ThreadPoolExecutor(max_workers=ENCODING_THREADS, thread_name_prefix="encode")


class OffLoopEncoder[E: StreamEncoder]:
    """A stream's encoder, made and run in the encoding threads: ``await encode(pcm)``, then ``await finish()``.
    ``make`` builds the encoder (opening a codec takes a while too) on the first call."""

    def __init__(self, make: Callable[[], E]) -> None:
        self._make = make
        self._encoder: E | None = None

    @property
    def encoder(self) -> E | None:
        """The encoder, once the first call has made it."""
        return self._encoder

    def _made(self) -> E:
        if self._encoder is None:
            self._encoder = self._make()
        return self._encoder

    async def encode(self, pcm: np.ndarray) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(_ENCODING, lambda: self._made().encode(pcm))

    async def finish(self) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(_ENCODING, lambda: self._made().finish())


def off_loop_encoder(fmt: AudioFormat, sample_rate: int = SAMPLE_RATE) -> OffLoopEncoder[StreamEncoder]:
    """``make_encoder(fmt, sample_rate)``, run off the event loop."""
    return OffLoopEncoder(lambda: make_encoder(fmt, sample_rate))


def float_to_pcm16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)
