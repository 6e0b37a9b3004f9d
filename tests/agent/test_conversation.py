"""A conversation per session: the real AgentCore app over HTTP, the real TTS server and model, a scripted LLM that
says which earlier prompts its context holds (and records the context it was given). Turns are remembered per
session and never cross sessions; a barge-in (a report of the audio played, a hang-up, or a new prompt while the
reply runs) leaves the words heard in the history; the history stays within its limits."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from support.agent_fixtures import FAST, AgentServer, agent_settings, invoke, make_model, types
from support.agentcore_standin import deployed_agent
from support.eventually import eventually
from support.inproc_server import RunningServer
from voice_agent.events import Event
from voice_agent.scripted_model import ScriptedModel

from scripts.agent_client import Invoker, arn_invoker
from scripts.sse import post_sse

pytestmark = pytest.mark.slow

LONG_REPLY = (
    "The order left our warehouse on Monday morning. It travels by road to the regional depot first. "
    "From there a courier takes it to your door within two days."
)


@pytest.fixture(scope="module")
def echo(server: RunningServer) -> Iterator[AgentServer]:
    model = make_model(reply="Noted.", echo_context=True, **FAST)
    with AgentServer(agent_settings(server.base_url), model).running() as running:
        yield running


@pytest.fixture(scope="module")
def long_echo(server: RunningServer) -> Iterator[AgentServer]:
    """A longer reply, written as fast as a hosted LLM: its audio outlasts its writing many times over."""
    model = make_model(reply=LONG_REPLY, echo_context=True, tokens_per_s=40.0)
    with AgentServer(agent_settings(server.base_url), model).running() as running:
        yield running


@pytest.fixture(scope="module")
def bounded(server: RunningServer) -> Iterator[AgentServer]:
    settings = agent_settings(server.base_url, session_turns=2, session_chars=400)
    with AgentServer(settings, make_model(reply="Noted.", echo_context=True, **FAST)).running() as running:
        yield running


def new_session() -> str:
    return f"test-{uuid.uuid4()}"


def reply_text(events: list[Event]) -> str:
    return "".join(e["text"] for e in events if e["type"] == "text_delta")


def last_context(model: ScriptedModel) -> list[tuple[str, str]]:
    return model.streams[-1].context


async def test_a_second_prompt_is_answered_with_the_first_turn_in_context(echo: AgentServer) -> None:
    session = new_session()
    first = await invoke(echo.url, {"prompt": "Where is my order?", "session_id": session})
    assert types(first)[-1] == "agent_end"
    assert reply_text(first).startswith("This is our first turn.")
    second = await invoke(echo.url, {"prompt": "And when will it arrive?", "session_id": session})
    assert types(second)[-1] == "agent_end"
    assert reply_text(second).startswith("Earlier you said: Where is my order?.")
    assert last_context(echo.model) == [
        ("user", "Where is my order?"),
        ("assistant", reply_text(first)),
        ("user", "And when will it arrive?"),
    ]
    alone = await invoke(echo.url, {"prompt": "And when will it arrive?"})  # no session: nothing remembered
    assert reply_text(alone).startswith("This is our first turn.")


async def test_sessions_in_flight_together_never_see_each_other(echo: AgentServer) -> None:
    sessions = [new_session() for _ in range(4)]

    async def conversation(i: int) -> str:
        await invoke(echo.url, {"prompt": f"My name is caller {i}.", "session_id": sessions[i], "mode": "batch"})
        second = await invoke(echo.url, {"prompt": "Who am I?", "session_id": sessions[i], "mode": "batch"})
        assert types(second)[-1] == "agent_end", second[-1]
        return reply_text(second)

    answers = await asyncio.gather(*(conversation(i) for i in range(4)))
    for i, answer in enumerate(answers):
        assert answer.startswith(f"Earlier you said: My name is caller {i}..")


async def test_a_report_of_the_audio_played_keeps_the_words_heard(long_echo: AgentServer) -> None:
    """The reply ran to its end (its audio came faster than it plays); the caller stopped playing it at t ms: the
    turn ends at the last word whose audio had started by then, and the next prompt sees exactly that."""
    session = new_session()
    first = await invoke(long_echo.url, {"prompt": "Where is my order?", "session_id": session})
    assert types(first)[-1] == "agent_end"
    text = reply_text(first)
    words = [w for e in first if e["type"] == "words" for w in e["words"]]
    assert [text[w["char_start"] : w["char_end"]] for w in words] == [w["word"] for w in words]
    ninth = words[8]  # the caller heard the ninth word begin, and nothing after it
    played_ms = ninth["start_ms"] + 1.0
    events = await invoke(long_echo.url, {"session_id": session, "played_ms": played_ms})
    assert types(events) == ["interrupted"]
    spoken, remaining = events[0]["text_spoken"], events[0]["text_remaining"]
    assert spoken == text[: ninth["char_end"]].strip()
    assert spoken.split()[-1].rstrip(".,") == ninth["word"] and len(spoken.split()) == 9
    assert f"{spoken} {remaining}" == text.strip()
    after = await invoke(long_echo.url, {"prompt": "Sorry, go on.", "session_id": session})
    assert types(after)[-1] == "agent_end"
    assert last_context(long_echo.model)[:2] == [("user", "Where is my order?"), ("assistant", spoken)]


async def test_a_new_prompt_with_its_report_cuts_the_reply_it_interrupts(long_echo: AgentServer) -> None:
    """A barge-in as the page sends it: the reply still streaming, a new prompt with how much was played. The
    interrupted reply ends with ``superseded``; the new one starts with ``interrupted`` and sees only what was
    heard."""
    session = new_session()
    heard: list[Event] = []
    interrupted_reply: list[Event] = []

    async def first_reply() -> None:
        async for event in post_sse(f"{long_echo.url}/invocations", {"prompt": "Tell me.", "session_id": session}):
            interrupted_reply.append(event)
            if event["type"] == "words":
                heard.extend(event["words"])

    running = asyncio.create_task(first_reply())
    await eventually(lambda: len(heard) >= 4, "the first words of the reply", 60)
    played_ms = heard[2]["start_ms"] + 1.0  # the third word had begun playing
    barge_in = {"prompt": "Stop, I meant the other order.", "session_id": session, "played_ms": played_ms}
    second = await invoke(long_echo.url, barge_in)
    await asyncio.wait_for(running, 30)
    if interrupted_reply[-1]["type"] != "agent_end":  # the reply had not ended yet: it says why it stopped
        assert interrupted_reply[-1]["code"] == "superseded"
    assert types(second)[0] == "interrupted" and types(second)[-1] == "agent_end"
    spoken = second[0]["text_spoken"]
    assert len(spoken.split()) == 3 and spoken.split()[-1].strip(".,") == heard[2]["word"]
    assert last_context(long_echo.model) == [
        ("user", "Tell me."),
        ("assistant", spoken),
        ("user", "Stop, I meant the other order."),
    ]


async def test_a_hang_up_without_a_report_keeps_the_words_sent(long_echo: AgentServer) -> None:
    session = new_session()
    sent: list[Event] = []
    stream = post_sse(f"{long_echo.url}/invocations", {"prompt": "Tell me.", "session_id": session})
    async for event in stream:
        if event["type"] == "words":
            sent.extend(event["words"])
        if len(sent) >= 5:
            break
    await stream.aclose()  # the caller hangs up mid-reply
    after = await invoke(long_echo.url, {"prompt": "Hello again.", "session_id": session})
    assert types(after)[-1] == "agent_end"
    role, kept = last_context(long_echo.model)[1]
    assert role == "assistant"
    # Every word whose audio went out before the hang-up, perhaps a few more sent as it closed; never the whole reply.
    whole = f"This is our first turn. {LONG_REPLY}"
    assert 5 <= len(kept.split()) < len(whole.split())
    assert whole.startswith(kept)


async def test_the_history_keeps_within_its_turn_and_character_limits(bounded: AgentServer) -> None:
    session = new_session()
    for i in range(4):
        events = await invoke(bounded.url, {"prompt": f"Prompt number {i}.", "session_id": session, "mode": "batch"})
        assert types(events)[-1] == "agent_end"
    prompts = [text for role, text in last_context(bounded.model) if role == "user"]
    assert prompts == ["Prompt number 1.", "Prompt number 2.", "Prompt number 3."]  # two remembered, and the new one
    long_prompt = "Tell me everything. " * 15  # 300 characters: with its reply, over the 400 kept
    await invoke(bounded.url, {"prompt": long_prompt, "session_id": session, "mode": "batch"})
    await invoke(bounded.url, {"prompt": "And now?", "session_id": session, "mode": "batch"})
    prompts = [text for role, text in last_context(bounded.model) if role == "user"]
    assert prompts == [long_prompt.strip(), "And now?"]
    chars = sum(len(text) for _, text in last_context(bounded.model)[:-1])
    assert chars <= 400


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"prompt": "Hi.", "session_id": "has space"}, "invalid_session_id"),
        ({"prompt": "Hi.", "session_id": "x" * 257}, "invalid_session_id"),
        ({"prompt": "Hi.", "session_id": "../etc"}, "invalid_session_id"),
        ({"prompt": "Hi.", "played_ms": 100}, "invalid_request"),
        ({"session_id": "abc", "played_ms": -1}, "invalid_request"),
        ({"session_id": "abc", "played_ms": True}, "invalid_request"),
        ({"session_id": "abc"}, "empty_prompt"),
    ],
)
async def test_bad_session_fields_get_a_stable_code(echo: AgentServer, payload: dict[str, object], code: str) -> None:
    events = await invoke(echo.url, payload)
    assert types(events) == ["error"] and events[0]["code"] == code, events


async def test_through_agentcore_one_runtime_session_is_one_conversation(
    server: RunningServer, fake_aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore's InvokeAgentRuntime through the AgentCore stand-in: the runtime session id (a header, never the
    body) names the conversation."""
    arn = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/kokoro_tts_agent-AbCdE12345"
    model = make_model(reply="Noted.", echo_context=True, **FAST)
    with deployed_agent(agent_settings(server.base_url), model, "bedrock:test", arn) as (url, standin):
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", url)
        caller = arn_invoker(arn, region="us-east-1", session_id=f"conversation-{uuid.uuid4()}")
        stranger = arn_invoker(arn, region="us-east-1", session_id=f"conversation-{uuid.uuid4()}")

        async def ask(invoke: Invoker, prompt: str) -> str:
            events = [event async for event in invoke({"prompt": prompt, "mode": "batch"})]
            assert types(events)[-1] == "agent_end", events[-1]
            return reply_text(events)

        assert (await ask(caller, "Where is my order?")).startswith("This is our first turn.")
        assert (await ask(caller, "When will it come?")).startswith("Earlier you said: Where is my order?.")
        assert (await ask(stranger, "When will it come?")).startswith("This is our first turn.")
    assert len({invocation.session_id for invocation in standin.invocations}) == 2


async def test_durable_turns_outlive_the_process_that_wrote_them(server: RunningServer, fake_aws_env: None) -> None:
    """AGENT_SESSION_BUCKET: Strands' S3 storage (moto) holds the turns, so an agent started afresh (another
    microVM, a redeploy) goes on with the conversation; the objects sit under the configured prefix."""
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="voice-sessions")
        settings = agent_settings(server.base_url, session_bucket="voice-sessions", session_prefix="turns")
        session = new_session()
        for prompt, expected in [("Where is my order?", "This is our first turn."), ("When?", "Earlier you said")]:
            model = make_model(reply="Noted.", echo_context=True, **FAST)
            with AgentServer(settings, model).running() as agent:  # a fresh process state each time
                events = await invoke(agent.url, {"prompt": prompt, "session_id": session, "mode": "batch"})
            assert types(events)[-1] == "agent_end", events[-1]
            assert reply_text(events).startswith(expected)
        keys = [item["Key"] for item in s3.list_objects_v2(Bucket="voice-sessions")["Contents"]]
        assert keys and all(key.startswith(f"turns/session/{session}/") for key in keys), keys


async def test_a_session_store_that_cannot_be_read_says_so(server: RunningServer, fake_aws_env: None) -> None:
    """Durable turns in a bucket that is gone: answering without the history would answer another conversation, so
    the prompt gets session_unavailable (and a prompt with no session is answered as ever)."""
    with mock_aws():
        settings = agent_settings(server.base_url, session_bucket="no-such-bucket")
        with AgentServer(settings, make_model(reply="Noted.", **FAST)).running() as agent:
            events = await invoke(agent.url, {"prompt": "Hello.", "session_id": new_session(), "mode": "batch"})
            assert types(events) == ["error"] and events[0]["code"] == "session_unavailable", events
            assert "NoSuchBucket" in events[0]["message"]
            alone = await invoke(agent.url, {"prompt": "Hello.", "mode": "batch"})
            assert types(alone)[-1] == "agent_end"
