"""The session core and its dialects stay composed: a dialect reaches the core only through its public methods
(sessions/core.py), so a change inside the core cannot silently change a wire protocol; and the doors only render
what the engine's run (engine/runs.py) decides. Read with ast, nothing run."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import kokoro_tts
import pytest
from kokoro_tts.sessions import core
from kokoro_tts.sessions.bidi import BidiDialect
from kokoro_tts.sessions.cartesia import CartesiaDialect
from kokoro_tts.sessions.core import Dialect, Session
from kokoro_tts.sessions.deepgram import DeepgramDialect
from kokoro_tts.sessions.elevenlabs import ElevenLabsDialect

SERVER = Path(kokoro_tts.__file__).parent
# Every module of the sessions room but the core: the dialects and what they share (writing.py).
DIALECT_MODULES = sorted(p for p in (SERVER / "sessions").glob("*.py") if p.name not in {"core.py", "__init__.py"})
# The engine's capacity, which only its run (engine/runs.py) consults: the caps, the stream slots, the expected wait.
ADMISSION = {"slots", "waiting", "http_streams", "admit", "acquire", "try_acquire", "reclaim", "lend", "Pace"}


def foreign_private_attributes(source: str) -> list[str]:
    """Each ``x._name`` where ``x`` is not plain ``self`` or ``cls`` (dunders aside), as ``line: expression``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_catches_a_reach_into_the_core() -> None:
    source = "def f(self, session):\n    self._ok = session._queue\n    return self._session._in_flight\n"
    assert foreign_private_attributes(source) == ["2: session._queue", "3: self._session._in_flight"]


@pytest.mark.parametrize("path", DIALECT_MODULES, ids=lambda path: path.name)
def test_a_dialect_touches_no_private_attribute_of_another_object(path: Path) -> None:
    assert foreign_private_attributes(path.read_text()) == []


@pytest.mark.parametrize("dialect", [BidiDialect, DeepgramDialect, ElevenLabsDialect, CartesiaDialect])
def test_a_dialect_is_composed_into_the_core_not_derived_from_it(dialect: type) -> None:
    assert not issubclass(dialect, Session)
    assert Session not in inspect.getmro(dialect)
    members = {name for name in vars(Dialect) if not name.startswith("_")}
    assert members and members <= set(dir(dialect)), members - set(dir(dialect))


def test_the_core_knows_no_wire_protocol_frames() -> None:
    """Close codes and the word timing type are all it takes from kokoro_client.protocol; no dialect's vocabulary."""
    imported: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(Path(core.__file__).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.setdefault(node.module, set()).update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update({alias.name: set() for alias in node.names})
    vocabularies = {"kokoro_client.deepgram", "kokoro_client.elevenlabs", "kokoro_client.cartesia"}
    assert not [name for name in imported if name in vocabularies]
    assert not [name for name in imported if name.startswith("kokoro_tts.sessions.")]
    closes = {"CLOSE_NORMAL", "CLOSE_GOING_AWAY", "CLOSE_INTERNAL_ERROR"}
    assert imported.get("kokoro_client.protocol", set()) <= closes | {"WordTiming"}


def admission_decisions(source: str) -> list[str]:
    """Each use of the engine's capacity in ``source``, as ``line: expression``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in ADMISSION:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_admission_check_catches_a_door_that_decides() -> None:
    source = "async def f(engine):\n    engine.scheduler.admit(3.0)\n    await engine.slots.acquire(f, 1)\n"
    assert admission_decisions(source) == [
        "2: engine.scheduler.admit",
        "3: engine.slots.acquire",
        "3: engine.slots",
    ]


@pytest.mark.parametrize(
    "path",
    sorted(p for room in ("routes", "sessions", "server") for p in (SERVER / room).glob("*.py")),
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_no_door_makes_an_admission_decision(path: Path) -> None:
    assert admission_decisions(path.read_text()) == []


def test_the_dialect_interface_is_a_handful_of_members() -> None:
    members = {name for name in vars(Dialect) if not name.startswith("_")}
    assert len(members) <= 5, members
