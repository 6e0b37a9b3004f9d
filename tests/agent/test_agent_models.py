"""The LLM side: the scripted (simulated) model under a real Strands agent, and model construction."""

from __future__ import annotations

import threading
import time

import pytest
from strands import Agent
from support.agent_fixtures import cancel_once_seen
from support.repo import REPO
from voice_agent.app import agent_text
from voice_agent.models import ModelUnavailable, build_model
from voice_agent.scripted_model import DEFAULT_REPLY, SIMULATED_NAME, ScriptedModel, tokenize
from voice_agent.settings import AgentSettings


def test_tokens_join_back_into_the_reply_and_look_like_llm_tokens() -> None:
    tokens = tokenize(DEFAULT_REPLY)
    assert "".join(tokens) == DEFAULT_REPLY
    assert 40 <= len(tokens) <= 120
    assert all(len(t.strip()) <= 10 for t in tokens)


def test_the_default_reply_is_several_sentences_over_about_five_seconds() -> None:
    model = ScriptedModel()
    assert DEFAULT_REPLY.count(".") + DEFAULT_REPLY.count("!") >= 4
    assert 4.0 <= model.expected_duration_s() <= 6.0
    assert "simulated" in DEFAULT_REPLY  # the audio itself says so


async def test_a_strands_agent_streams_the_reply_with_its_cadence() -> None:
    model = ScriptedModel(reply="One two. Three four.", ttft_s=0.3, tokens_per_s=20, jitter=0.0)
    source = agent_text(Agent(model=model, callback_handler=None), "hi")
    start = time.monotonic()
    arrivals: list[tuple[float, str]] = []
    async for delta in source(threading.Event()):
        arrivals.append((time.monotonic() - start, delta))
    assert "".join(d for _, d in arrivals) == "One two. Three four."
    assert arrivals[0][0] >= 0.29, "time to first token"
    assert arrivals[-1][0] >= 0.3 + (len(arrivals) - 1) / 20 * 0.9
    assert model.streams[0].completed and model.streams[0].closed and not model.streams[0].cancelled


async def test_the_cancel_signal_stops_the_stream() -> None:
    model = ScriptedModel(ttft_s=0.0, tokens_per_s=50)
    cancel = threading.Event()
    deltas = []
    async for delta in agent_text(Agent(model=model, callback_handler=None), "hi")(cancel):
        deltas.append(delta)
        if len(deltas) == 3:
            cancel.set()
    assert len(deltas) <= 4
    assert model.streams[0].cancelled and not model.streams[0].completed


async def test_cancelling_the_task_closes_the_model_stream_at_once() -> None:
    model = ScriptedModel(ttft_s=0.0, tokens_per_s=10)
    text = agent_text(Agent(model=model, callback_handler=None), "hi")(threading.Event())
    await cancel_once_seen(text, lambda _: True, timeout_s=5)
    assert model.streams[0].closed and model.streams[0].cancelled


async def test_fault_injection_raises_mid_stream() -> None:
    model = ScriptedModel(ttft_s=0.0, tokens_per_s=100, fail_after_tokens=3)
    deltas = []
    with pytest.raises(Exception, match="simulated LLM failure"):
        async for delta in agent_text(Agent(model=model, callback_handler=None), "hi")(threading.Event()):
            deltas.append(delta)
    assert len(deltas) == 3


def test_scripted_model_rejects_unknown_settings() -> None:
    with pytest.raises(ValueError):
        ScriptedModel(speed=3)
    with pytest.raises(ValueError):
        ScriptedModel(tokens_per_s=0)


def test_build_model_scripted_is_named_as_simulated() -> None:
    built = build_model(AgentSettings(model="scripted", scripted_ttft_s=0.1, scripted_tokens_per_s=7))
    assert built.name == SIMULATED_NAME == "scripted (simulated LLM: it ignores the prompt)"
    assert isinstance(built.model, ScriptedModel)
    assert built.model.get_config()["tokens_per_s"] == 7


def test_build_model_bedrock_takes_the_request_model_id_over_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = AgentSettings(model="bedrock", bedrock_model_id="env.model-v1", aws_region="us-west-2")
    assert build_model(settings).name == "bedrock:env.model-v1"
    built = build_model(settings, "request.model-v2")
    assert built.name == "bedrock:request.model-v2"
    assert built.model.get_config()["model_id"] == "request.model-v2"


def test_build_model_openai_without_the_package_says_what_is_missing() -> None:
    try:
        import openai  # noqa: F401
    except ImportError:
        with pytest.raises(ModelUnavailable, match="openai"):
            build_model(AgentSettings(model="openai", openai_model="m"))
    else:  # pragma: no cover - only where openai happens to be installed
        assert build_model(AgentSettings(model="openai", openai_model="m")).name == "openai:m"


def test_build_model_unknown_kind() -> None:
    with pytest.raises(ModelUnavailable, match="AGENT_MODEL"):
        build_model(AgentSettings(model="llama"))


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MODEL", "bedrock")
    monkeypatch.setenv("TTS_URL", "http://tts:8080")
    monkeypatch.setenv("TTS_ENDPOINT_NAME", "kokoro-endpoint")
    monkeypatch.setenv("TTS_SPEED", "1.2")
    monkeypatch.setenv("AGENT_WEB_PAGE", "1")
    settings = AgentSettings()
    assert (settings.model, settings.tts_url) == ("bedrock", "http://tts:8080")
    assert settings.tts_endpoint_name == "kokoro-endpoint"
    assert settings.speed == 1.2 and settings.web_page is True and settings.uses_sagemaker
    monkeypatch.delenv("TTS_ENDPOINT_NAME")
    monkeypatch.delenv("AGENT_MODEL")
    assert AgentSettings().model == "scripted" and not AgentSettings().uses_sagemaker


def test_the_default_reply_is_five_sentences_as_the_docs_say() -> None:
    """README and docs/agent.md describe the scripted reply as five sentences; the chunker is what counts them."""
    from kokoro_client.chunker import IncrementalSentenceChunker

    chunker = IncrementalSentenceChunker()
    sentences = [s for token in tokenize(DEFAULT_REPLY) for s in chunker.feed(token)]
    sentences += [last] if (last := chunker.flush()) else []
    assert len(sentences) == 5, sentences
    assert "five-sentence" in (REPO / "README.md").read_text()
    assert "5-sentence reply" in (REPO / "docs" / "agent.md").read_text()


async def test_at_its_token_limit_the_model_stops_as_providers_do_and_strands_says_so() -> None:
    """AGENT_MAX_TOKENS reaches the scripted model, which stops where a provider would, with the stop reason
    Strands' own OpenAI provider makes of finish_reason "length" (Bedrock sends it as is): Strands then raises
    MaxTokensReachedException, which the agent's text source turns into the pipeline's TokenLimitReached."""
    from strands.models.openai import OpenAIModel
    from voice_agent.pipeline import TokenLimitReached

    openai_stop = OpenAIModel(model_id="m").format_chunk({"chunk_type": "message_stop", "data": "length"})
    model = build_model(AgentSettings(model="scripted", scripted_ttft_s=0.0, max_tokens=5)).model
    assert isinstance(model, ScriptedModel) and model.get_config()["max_tokens"] == 5
    model.update_config(tokens_per_s=200.0)
    events = [event async for event in model.stream([])]
    assert [e for e in events if "messageStop" in e] == [openai_stop] == [{"messageStop": {"stopReason": "max_tokens"}}]
    deltas: list[str] = []
    with pytest.raises(TokenLimitReached):
        async for delta in agent_text(Agent(model=model, callback_handler=None), "hi")(threading.Event()):
            deltas.append(delta)
    assert "".join(deltas) == "".join(tokenize(DEFAULT_REPLY)[:5])
    # A reply within the limit ends as before.
    model.update_config(max_tokens=len(tokenize(DEFAULT_REPLY)))
    events = [event async for event in model.stream([])]
    assert [e for e in events if "messageStop" in e] == [{"messageStop": {"stopReason": "end_turn"}}]
    with pytest.raises(ValueError):
        ScriptedModel(max_tokens=0)
