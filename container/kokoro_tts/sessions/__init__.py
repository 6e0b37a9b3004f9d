"""The WebSocket front doors: the bidirectional session and its Deepgram dialect."""
