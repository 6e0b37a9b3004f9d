"""The tests' listener: Whisper base through faster-whisper (scripts/listener.py, shared with the benchmark)."""

from scripts.listener import WhisperListener, word_error_rate, word_errors, words

__all__ = ["WhisperListener", "word_error_rate", "word_errors", "words"]
