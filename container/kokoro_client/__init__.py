"""kokoro_client: the Kokoro TTS server's wire contract, and async clients that speak it.

The ground floor of the project: the TTS server (container/kokoro_tts) and the voice agent (agent/) both build on
it, and it imports neither. docs/protocol.md is the prose of these modules.

- ``protocol``: every message both ways as frozen dataclasses, ``encode``, ``parse_client_message``,
  ``parse_server_frame``, ``WS_PATH`` and the close codes.
- ``errors``: ``ErrorCode`` (every stable code the server sends) and ``TTSError``.
- ``audio``: ``SAMPLE_RATE``, ``SAMPLE_RATES``, ``FORMAT_NAMES``, the speed range.
- ``deepgram``: the Deepgram-compatible session's messages (``/v1/speak``: Speak/Flush/Clear/Close, Flushed/Cleared).
- ``chunker``: ``IncrementalSentenceChunker``, the sentence rules the server and the agent share.
- ``utterances``: ``UtteranceReader``, the rule that audio belongs to the last ``synthesis_start``.
- ``session``: the ``TTSTransport``/``TTSSession`` interface, and ``TransportCode`` (the codes of the
  ``TTSTransportError`` every transport raises); one module per transport: ``local_ws`` (a WebSocket
  to the container), ``sagemaker_bidi`` (InvokeEndpointWithBidirectionalStream over HTTP/2), ``http_batch`` and
  ``sagemaker_batch`` (the whole text in one request). Transports are imported where chosen, so an unused SDK is
  never loaded.

Example: speak two sentences over one session and collect each one's PCM::

    import asyncio
    from kokoro_client.local_ws import LocalWSTransport
    from kokoro_client.session import AudioEvent, ControlEvent, SessionOptions
    from kokoro_client.protocol import SynthesisComplete
    from kokoro_client.utterances import UtteranceReader

    async def main() -> None:
        session = await LocalWSTransport("http://127.0.0.1:8080").open_session(SessionOptions(voice="af_heart"))
        await session.send_text("Hello there.", "1")
        await session.send_text("How can I help?", "2")
        await session.finish()
        reader, audio = UtteranceReader(), {"1": bytearray(), "2": bytearray()}
        async for event in session.events():
            if isinstance(event, AudioEvent):
                audio[reader.audio(event.data).id] += event.data
            elif isinstance(reader.frame(event.frame), SynthesisComplete):
                print(event.frame)

    asyncio.run(main())
"""
