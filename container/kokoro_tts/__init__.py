"""The Kokoro TTS server, in rooms that stand on one another (tests/test_import_graph.py holds the order):

settings, weights   what the server is told; where its weight files lie
audio, text         sound formats and encoders; text to phonemes (normalize, chunks, the span map)
engine              the checked request (requests.py), then phonemes to audio: backends, the scheduler, vocoder
                    windows, voices, word timing
metrics             what the engine and the front doors count
routes, sessions    the front doors: HTTP routes (SageMaker, OpenAI, captioned); WebSocket sessions and dialects
server              the ASGI app, the process (``serve``), Hypercorn's hardening
"""
