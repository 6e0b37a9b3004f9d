"""Voice packs by name and as weighted blends: ours ("af_heart:0.7,af_bella:0.3") and Kokoro-FastAPI's
("af_bella+af_sky", "af_bella(2)+af_sky(1)"), so that its clients' voice strings work unchanged."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import numpy as np
from kokoro_client.errors import ErrorCode, TTSError, quoted

from kokoro_tts.text.phonemes import LANGUAGE_CODES, check_language
from kokoro_tts.weights.layout import WeightLayout

STYLE_ROWS = 510
# Matched with fullmatch: "$" would also match before a trailing newline ("af_heart\n").
_NAME = re.compile(r"[a-z]{2}_[a-z0-9_]+")
_WEIGHTED = re.compile(r"(?P<name>[^()]*)\((?P<weight>[^()]*)\)")  # Kokoro-FastAPI's "af_bella(2)"
# ASCII decimals only: float() also takes "1_000", "١" (Arabic-Indic) and "infinity".
_WEIGHT = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_BLEND_PARTS = 8


@dataclass(frozen=True)
class Voice:
    """A resolved voice: the spec the client gave, its language prefix and its style pack (510×256)."""

    spec: str
    lang: str
    pack: np.ndarray

    def style(self, n_tokens: int) -> np.ndarray:
        """The style row for an input of ``n_tokens`` phoneme tokens, shaped (1, 256)."""
        row = min(max(n_tokens - 1, 0), STYLE_ROWS - 1)
        return self.pack[row : row + 1]


class VoiceBank:
    def __init__(self, layout: WeightLayout) -> None:
        self._layout = layout
        self._names = layout.voice_names()
        if not self._names:
            raise FileNotFoundError(f"no voice packs (*.bin) in {layout.voices_dir}")
        self._packs: dict[str, np.ndarray] = {}
        self._blends: dict[str, Voice] = {}
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        """The voices this server can speak: packs whose language (first letter) the phonemizer supports. The
        weights hold more (the Japanese j* packs): asking for one of those is ``unsupported_language``."""
        return [name for name in self._names if name[0] in LANGUAGE_CODES]

    def resolve(self, spec: object) -> Voice:
        """Parse and load ``spec``; raises ``TTSError`` with a message that says what to send instead."""
        if not isinstance(spec, str) or not spec.strip():
            raise TTSError(ErrorCode.INVALID_VOICE, "voice must be a non-empty string such as 'af_heart'.")
        key = spec.replace(" ", "")
        if cached := self._blends.get(key):
            return cached
        parts = _parse_blend(key)
        for name, _ in parts:
            if name not in self._names:
                raise TTSError(
                    ErrorCode.UNKNOWN_VOICE,
                    f"Unknown voice {quoted(name)}. Available voices: {', '.join(self.names)}.",
                )
            check_language(name[0])  # every part of a blend, not only the first, which names its language
        total = sum(weight for _, weight in parts)
        pack = np.sum([self._pack(name) * (weight / total) for name, weight in parts], axis=0, dtype=np.float32)
        voice = Voice(spec=key, lang=parts[0][0][0], pack=pack)
        with self._lock:
            if len(self._blends) < 256:  # bounded: clients choose blend weights freely
                self._blends[key] = voice
        return voice

    def _pack(self, name: str) -> np.ndarray:
        with self._lock:
            if name not in self._packs:
                self._packs[name] = self._layout.load_voice(name)
            return self._packs[name]


def _parse_blend(spec: str) -> list[tuple[str, float]]:
    """[(name, weight)] from either syntax (not both in one spec); the weights are normalised by the caller."""
    if "+" in spec and ("," in spec or ":" in spec):
        raise TTSError(
            ErrorCode.INVALID_VOICE,
            f"{quoted(spec)} mixes two blend syntaxes; write 'af_heart:0.7,af_bella:0.3' or 'af_heart(7)+af_bella(3)'.",
        )
    if "+" in spec or "(" in spec:
        parts = [_plus_part(item, spec) for item in spec.split("+")]
    else:
        parts = [_comma_part(item, spec) for item in spec.split(",")]
    if len(parts) > MAX_BLEND_PARTS:
        raise TTSError(ErrorCode.INVALID_VOICE, f"A blend may mix at most {MAX_BLEND_PARTS} voices.")
    return parts


def _comma_part(item: str, spec: str) -> tuple[str, float]:
    name, sep, weight_text = item.partition(":")
    return _checked_name(name), _weight(weight_text, spec, "'af_heart:0.7,af_bella:0.3'") if sep else 1.0


def _plus_part(item: str, spec: str) -> tuple[str, float]:
    if match := _WEIGHTED.fullmatch(item):
        return _checked_name(match["name"]), _weight(match["weight"], spec, "'af_bella(2)+af_sky(1)'")
    return _checked_name(item), 1.0


def _checked_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise TTSError(
            ErrorCode.INVALID_VOICE,
            f"{quoted(name)} is not a voice name; voices look like 'af_heart', blends like 'af_heart:0.7,af_bella:0.3' "
            "or 'af_heart(7)+af_bella(3)'.",
        )
    return name


def _weight(text: str, spec: str, example: str) -> float:
    weight = float(text) if _WEIGHT.fullmatch(text) else -1.0
    if not weight > 0 or weight == float("inf"):
        raise TTSError(
            ErrorCode.INVALID_VOICE,
            f"Voice weight {quoted(text)} in {quoted(spec)} must be a positive number, as in {example}.",
        )
    return weight
