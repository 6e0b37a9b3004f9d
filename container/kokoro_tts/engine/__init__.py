"""Phonemes to audio: the backends (onnx, torch), the deadline scheduler, vocoder windows, voices, word timing."""
