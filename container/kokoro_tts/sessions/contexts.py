"""The contexts of a vendor socket (ElevenLabs', Cartesia's): several utterances on one socket, each written as it
comes (sessions/writing.py) and named by the client. Which contexts take text (by the client's name) and which are
not yet finished (by utterance id) is kept here once; each dialect renders its own messages around it."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from kokoro_tts.sessions.core import Session
from kokoro_tts.sessions.writing import WrittenUtterance


class Context(Protocol):
    @property
    def written(self) -> WrittenUtterance: ...


class Contexts[K: Hashable, C: Context]:
    def __init__(self, session: Session) -> None:
        self._session = session
        self.open: dict[K, C] = {}  # those that take text, by the client's name
        self.speaking: dict[str, C] = {}  # every one not yet finished, by utterance id
        self._names: dict[str, K] = {}  # utterance id -> the client's name

    def add(self, name: K, context: C) -> None:
        utterance_id = context.written.utterance.id
        self.open[name] = context
        self.speaking[utterance_id] = context
        self._names[utterance_id] = name

    def named(self, name: K) -> C | None:
        """The context open under ``name``, else the earliest one of that name still speaking."""
        if (context := self.open.get(name)) is not None:
            return context
        return next((c for u, c in self.speaking.items() if self._names[u] == name), None)

    async def end(self, name: K) -> C | None:
        """Ends the text of the context open under ``name``: what is buffered is spoken, then it finishes."""
        context = self.open.pop(name, None)
        if context is not None:
            await context.written.end()
        return context

    def stop(self, context: C) -> bool:
        """Stops ``context`` at once: no early cut, its queued text dropped, its audio in flight stopped (within a
        window). True when it was still queued: it had no run, so no ``Finished`` will come for it."""
        context.written.stop()
        utterance_id = context.written.utterance.id
        name = self._names[utterance_id]
        if self.open.get(name) is context:
            del self.open[name]
        if not self._session.cancel(utterance_id):
            return False
        self._forget(utterance_id)
        return True

    def finished(self, utterance_id: str) -> C | None:
        """The context whose utterance finished, now forgotten; one that ended early (an error) takes no more text."""
        context = self.speaking.get(utterance_id)
        if context is None:
            return None
        name = self._names[utterance_id]
        if self.open.get(name) is context:
            del self.open[name]
            context.written.stop()
        self._forget(utterance_id)
        return context

    def name_of(self, context: C) -> K:
        return self._names[context.written.utterance.id]

    def _forget(self, utterance_id: str) -> None:
        self.speaking.pop(utterance_id, None)
        self._names.pop(utterance_id, None)
