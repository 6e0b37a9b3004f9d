"""The agent's request checks and its choice of TTS transports, from the settings: no model, no server."""

from __future__ import annotations

from typing import Any

import pytest
from voice_agent.request import RequestError, parse_request
from voice_agent.settings import AgentSettings


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (None, "invalid_request"),
        ({"prompt": ""}, "empty_prompt"),
        ({"prompt": "x" * 9000}, "prompt_too_long"),
        ({"prompt": "Hi", "mode": "BIDI"}, "unknown_mode"),
        ({"prompt": "Hi", "speed": True}, "invalid_speed"),
        ({"prompt": "Hi", "speed": 0.4}, "invalid_speed"),
        ({"prompt": "Hi", "voice": 3}, "invalid_request"),
        ({"prompt": "Hi", "format": "aiff"}, "invalid_request"),
    ],
)
def test_bad_requests(payload: Any, code: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_request(payload, AgentSettings())
    assert caught.value.code == code


def test_a_good_request_with_defaults_from_the_settings() -> None:
    settings = AgentSettings(voice="af_bella", speed=1.1)
    request = parse_request({"prompt": "  Hi  ", "mode": "batch"}, settings)
    assert (request.prompt, request.mode, request.voice, request.speed, request.format) == (
        "Hi",
        "batch",
        "af_bella",
        1.1,
        "pcm",
    )
    assert parse_request({"prompt": "Hi", "voice": "am_adam", "speed": 2}, settings).voice == "am_adam"


def test_the_tts_transports_follow_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from kokoro_client.http_batch import HTTPBatchTTS
    from kokoro_client.local_ws import LocalWSTransport
    from kokoro_client.sagemaker_batch import SageMakerBatchTTS
    from kokoro_client.sagemaker_bidi import SageMakerBidiTransport
    from voice_agent.app import make_tts

    local = make_tts(AgentSettings(tts_url="http://tts:9000", tts_endpoint_name=None))
    assert isinstance(local[0], LocalWSTransport) and local[0].url == "ws://tts:9000/invocations-bidirectional-stream"
    assert isinstance(local[1], HTTPBatchTTS) and local[1].url == "http://tts:9000/invocations"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    remote = make_tts(AgentSettings(tts_endpoint_name="kokoro", aws_region="eu-west-1"))
    assert isinstance(remote[0], SageMakerBidiTransport) and remote[0].endpoint_name == "kokoro"
    assert isinstance(remote[1], SageMakerBatchTTS) and remote[1].endpoint_name == "kokoro"
