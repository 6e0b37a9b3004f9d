"""The WebSocket front doors: the session core and the dialects it speaks (our protocol v1, Deepgram's)."""
