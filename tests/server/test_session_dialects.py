"""The session core and its dialects stay composed: a dialect reaches the core only through its public methods
(sessions/core.py), so a change inside the core cannot silently change a wire protocol. Read with ast, nothing run."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from kokoro_tts.sessions import bidi, core, deepgram
from kokoro_tts.sessions.bidi import BidiDialect
from kokoro_tts.sessions.core import Dialect, Session
from kokoro_tts.sessions.deepgram import DeepgramDialect

DIALECT_MODULES = [Path(bidi.__file__), Path(deepgram.__file__)]


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


@pytest.mark.parametrize("dialect", [BidiDialect, DeepgramDialect])
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
    assert "kokoro_client.deepgram" not in imported
    assert not [name for name in imported if name.startswith("kokoro_tts.sessions.")]
    assert imported.get("kokoro_client.protocol", set()) <= {"CLOSE_NORMAL", "CLOSE_GOING_AWAY", "WordTiming"}
