"""Speeds beyond the model's range: FFmpeg's ``atempo`` filter through PyAV, chunk by chunk.

Kokoro's own speed divides the predicted phoneme durations; within the server's range (0.5–2.0) it sounds natural,
beyond it phonemes collapse to one frame or drag. OpenAI's API accepts 0.25–4.0, so a speed outside the model's
range is split: the model speaks at the nearest end of its range, and ``atempo`` (a WSOLA time-stretch that keeps
the pitch) stretches the rest, which scales the duration by exactly that remaining factor (0.5–2.0, one filter).
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
from av.filter import Graph

from kokoro_tts.audio.encoding import SAMPLE_RATE


def split_speed(speed: float, model_min: float, model_max: float) -> tuple[float, float]:
    """(the model's speed, the time-stretch factor after it): their product is ``speed``."""
    model_speed = min(max(speed, model_min), model_max)
    return model_speed, speed / model_speed


class TempoStretcher:
    """int16 mono in, the same stretched by ``tempo`` out (2.0: half as long); keeps state across chunks."""

    def __init__(self, tempo: float) -> None:
        self._graph = Graph()
        source = self._graph.add_abuffer(
            format="s16", sample_rate=SAMPLE_RATE, layout="mono", time_base=Fraction(1, SAMPLE_RATE)
        )
        stretch = self._graph.add("atempo", f"{tempo:.6f}")
        sink = self._graph.add("abuffersink")
        source.link_to(stretch)
        stretch.link_to(sink)
        self._graph.configure()
        self._pts = 0

    def process(self, pcm: np.ndarray) -> np.ndarray:
        """The stretched samples ready now (atempo holds back about one analysis window)."""
        if pcm.size:
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate = SAMPLE_RATE
            frame.pts = self._pts
            self._pts += pcm.size
            self._graph.push(frame)
        return self._pull()

    def finish(self) -> np.ndarray:
        self._graph.push(None)
        return self._pull()

    def _pull(self) -> np.ndarray:
        pieces = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.error.BlockingIOError, av.error.EOFError):
                break
            pieces.append(frame.to_ndarray().reshape(-1))
        return np.concatenate(pieces).astype(np.int16, copy=False) if pieces else np.zeros(0, dtype=np.int16)
