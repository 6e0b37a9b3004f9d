"""What a request may ask (requests.py), then phonemes to audio: the backends (onnx, torch), the deadline scheduler,
vocoder windows, voices, word timing."""
