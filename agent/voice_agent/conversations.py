"""A conversation per session: the turns the LLM sees again, one reply at a time, the last reply cut to what was heard.

The turns are Strands' own session snapshots (``SnapshotSessionManager``) in Strands' storage: in this process's
memory by default (a session is one AgentCore microVM; idle sessions are forgotten), or in S3 where configured.
A turn is saved once its reply ends: what the LLM wrote when the reply ran to its end, else the words whose audio
was sent; a later report of how much audio the caller played (``played_ms``) cuts it to the words heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass

from strands import Agent
from strands.models.model import Model
from strands.session.snapshot_session_manager import SnapshotSessionManager
from strands.storage import InMemoryStorage, Storage
from strands.types.content import Message

from .events import ErrorCode, Event
from .hangup import Hangup
from .heard import Cut, ReplyWords
from .metrics import request_error

log = logging.getLogger(__name__)

# AgentCore's runtimeSessionId is 33+ of these characters; a local caller may use shorter ones.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,255}")
REPLY_STATE = "voice_agent.last_reply"  # in the agent's state: the last reply's words, for a later cut


@dataclass(frozen=True)
class Limits:
    """What a session keeps (settings.py declares each, with its default)."""

    turns: int  # prompts (with their replies) the LLM sees again
    chars: int  # characters of text they hold
    sessions: int  # sessions held in memory at once (the least recently used idle one goes first)
    idle_s: float  # a session unused this long is forgotten
    wait_s: float  # how long a new prompt waits for the reply it interrupts to stop

    def __post_init__(self) -> None:
        if min(self.turns, self.chars, self.sessions) < 1 or min(self.idle_s, self.wait_s) <= 0:
            raise ValueError(f"every session limit must be positive: {self}")


class SessionBusy(Exception):
    """The session's running reply did not stop in time for the next prompt."""


class SessionUnavailable(Exception):
    """The session's turns cannot be read (durable storage failing or refused)."""


class Turn:
    """One request's use of its session: the agent with the history restored, the reply's words as they go by."""

    def __init__(self, manager: SnapshotSessionManager | None, limits: Limits) -> None:
        self.manager, self.limits = manager, limits
        self._agent: Agent | None = None
        self.words = ReplyWords()
        self.reply_from: int | None = None  # where this turn's prompt sits in the history, once it is asked
        self.complete = False  # the reply ran to its agent_end
        self.ended = False  # its last event (agent_end or error) went out

    async def agent(self, model: Model, system_prompt: str) -> Agent:
        # A session restore reads storage (S3: a request): built off the event loop.
        try:
            agent = await asyncio.to_thread(
                Agent, model=model, system_prompt=system_prompt, callback_handler=None, session_manager=self.manager
            )
        except Exception as exc:
            if self.manager is None:
                raise
            # Answering without the history would answer a different conversation: say so instead.
            log.exception("cannot read session %s", self.manager.session_id)
            why = f"{type(exc).__name__}: {exc}" + (f" ({exc.__cause__})" if exc.__cause__ else "")
            raise SessionUnavailable(f"cannot read the session's turns: {why}") from exc
        agent.system_prompt = system_prompt  # the operator's current prompt, not the one saved with the session
        self._agent = agent
        return agent

    def asked(self) -> None:
        """The prompt is about to go in: the reply's messages start here."""
        assert self._agent is not None
        self.reply_from = len(self._agent.messages)

    def see(self, event: Event) -> None:
        self.words.see(event)
        self.complete = self.complete or event["type"] == "agent_end"
        self.ended = self.ended or event["type"] in ("agent_end", "error")

    def heard(self, played_ms: float) -> Cut:
        """The caller played ``played_ms`` of the last reply: its turn keeps the words whose audio had started."""
        assert self._agent is not None
        state = self._agent.state.get(REPLY_STATE)
        if not isinstance(state, dict) or self.manager is None:
            return Cut("", "")
        cut = ReplyWords.from_state(state).cut(played_ms, complete=bool(state.get("complete")))
        _keep(self._agent.messages, int(state["from"]), cut.spoken)
        self._agent.state.delete(REPLY_STATE)  # reported once: a second report has nothing left to cut
        return cut

    async def save(self) -> None:
        """The turn as it ended: a reply that did not run to its end keeps only the words sent."""
        agent = self._agent
        if self.manager is None or agent is None:
            return
        if self.reply_from is not None:
            # A whole reply stays as Strands keeps it (tool calls and all), unless it left no answer to the prompt.
            unanswered = not agent.messages or agent.messages[-1]["role"] != "assistant"
            if not self.complete or unanswered:
                _keep(agent.messages, self.reply_from, self.words.cut(None, complete=self.complete).spoken)
            reply_from = min(self.reply_from, len(agent.messages))
            dropped = _bound(agent.messages, reply_from, self.limits)
            state = {"from": reply_from - dropped, "complete": self.complete, **self.words.as_state()}
            agent.state.set(REPLY_STATE, state)
        try:
            await self.manager.save_snapshot(agent, is_latest=True)
        except Exception:  # the reply is out already: the next turn will miss this one, and the log says why
            log.exception("cannot save session %s", self.manager.session_id)
            request_error(ErrorCode.SESSION_UNAVAILABLE)


def _keep(messages: list[Message], reply_from: int, spoken: str) -> None:
    """The reply that starts at ``reply_from`` becomes what was spoken; a reply none of which was heard takes its
    prompt with it (the caller's next prompt stands alone, and user and assistant turns still alternate)."""
    if reply_from > len(messages):
        return
    if spoken:
        messages[reply_from + 1 :] = [{"role": "assistant", "content": [{"text": spoken}]}]
    else:
        del messages[reply_from:]


def _bound(messages: list[Message], keep_from: int, limits: Limits) -> int:
    """Whole turns dropped from the front until the history is within the limits (the newest turn is always kept);
    returns how many messages went."""
    dropped = 0
    while dropped < keep_from and (
        _prompts(messages[dropped:]) > limits.turns or _chars(messages[dropped:]) > limits.chars
    ):
        dropped += 1
        while dropped < keep_from and not _is_prompt(messages[dropped]):
            dropped += 1
    del messages[:dropped]
    return dropped


def _is_prompt(message: Message) -> bool:
    return message["role"] == "user" and any("text" in block for block in message["content"])


def _prompts(messages: list[Message]) -> int:
    return sum(1 for message in messages if _is_prompt(message))


def _chars(messages: list[Message]) -> int:
    return sum(len(block.get("text") or "") for message in messages for block in message["content"])


class _Session:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.running: Hangup | None = None  # stops the reply under way
        self.used = time.monotonic()


class Conversations:
    """The sessions this process holds; ``storage`` None keeps their turns in memory (forgotten when idle)."""

    def __init__(self, limits: Limits, storage: Storage | None = None) -> None:
        self.limits = limits
        self.durable = storage is not None
        self.storage: Storage = storage if storage is not None else InMemoryStorage()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    @contextlib.asynccontextmanager
    async def turn(self, session_id: str | None, stop: Hangup) -> AsyncIterator[Turn]:
        """The session's turn for one request: a reply still running in it is stopped first (a new prompt is a
        barge-in); ``stop`` stops this one when the next comes. No session id: a turn that remembers nothing."""
        if session_id is None:
            yield Turn(None, self.limits)
            return
        await self._forget_idle(session_id)
        session = self._sessions.setdefault(session_id, _Session())
        self._sessions.move_to_end(session_id)
        if session.running is not None:
            session.running.fire()
        try:
            async with asyncio.timeout(self.limits.wait_s):
                await session.lock.acquire()
        except TimeoutError:
            raise SessionBusy(f"the session's reply did not stop within {self.limits.wait_s:g} s") from None
        session.running = stop
        turn = Turn(SnapshotSessionManager(session_id, storage=self.storage, save_latest_on="trigger"), self.limits)
        try:
            yield turn
        finally:
            try:
                await turn.save()
            finally:
                session.running = None
                session.used = time.monotonic()
                session.lock.release()

    async def _forget_idle(self, coming: str) -> None:
        now = time.monotonic()
        over = len(self._sessions) - self.limits.sessions + (coming not in self._sessions)
        for session_id, session in list(self._sessions.items()):  # least recently used first
            if session.lock.locked():
                continue
            if now - session.used > self.limits.idle_s or over > 0:
                over -= 1
                del self._sessions[session_id]
                if not self.durable:  # S3's own lifecycle rule expires durable turns
                    await SnapshotSessionManager(session_id, storage=self.storage).delete_session()
