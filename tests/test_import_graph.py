"""The house's floors, drawn from the imports of every .py file (ast, no import executed).

kokoro_client is the ground floor; the server (kokoro_tts) and the agent (voice_agent) stand side by side on it;
scripts stand on top of them; tests on top of everything. No import runs back down-to-up, and no package imports
another that imports it back. Inside the server, its rooms stand in the same way (SERVER_FLOORS).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {
    "kokoro_client": REPO / "container" / "kokoro_client",
    "kokoro_tts": REPO / "container" / "kokoro_tts",
    "voice_agent": REPO / "agent" / "voice_agent",
    "scripts": REPO / "scripts",
    "tests": REPO / "tests",
}
FORBIDDEN = {
    "kokoro_client": {"kokoro_tts", "voice_agent", "scripts", "tests"},
    "kokoro_tts": {"voice_agent", "scripts", "tests"},
    "voice_agent": {"kokoro_tts", "scripts", "tests"},
    "scripts": {"tests"},
    "tests": set(),
}


# The server's rooms, bottom up: a room imports only rooms on floors below its own (never a neighbour on its floor).
SERVER_FLOORS: list[set[str]] = [
    {"settings", "weights"},  # what the server is told, and where its weight files lie
    {"audio", "text"},  # sound formats; text to phonemes
    {"engine"},  # phonemes to audio: backends, the scheduler, vocoder windows, voices, word timing
    {"metrics"},  # what the engine and the front doors count
    {"routes", "sessions"},  # the front doors: HTTP routes; WebSocket sessions and their dialects
    {"server"},  # the app, the process (serve), Hypercorn's hardening
]


def _modules(path: Path) -> set[str]:
    """Every dotted module name the file imports (absolute imports; ``from a import b`` gives a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _imports(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _modules(path)} & set(ROOTS)


def graph() -> dict[str, dict[str, list[str]]]:
    """package → imported package → the files that import it."""
    edges: dict[str, dict[str, list[str]]] = {name: {} for name in ROOTS}
    for name, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            for target in _imports(path) - {name}:
                edges[name].setdefault(target, []).append(str(path.relative_to(REPO)))
    return edges


def test_no_import_runs_up_a_floor() -> None:
    edges = graph()
    wrong = {
        f"{source} → {target}": files
        for source, targets in edges.items()
        for target, files in targets.items()
        if target in FORBIDDEN[source]
    }
    assert not wrong, wrong


def test_no_circles_between_packages() -> None:
    edges = {source: set(targets) for source, targets in graph().items()}
    for start in edges:
        seen, stack = set(), list(edges[start])
        while stack:
            node = stack.pop()
            assert node != start, f"{start} imports itself back through {sorted(seen)}"
            if node not in seen:
                seen.add(node)
                stack.extend(edges[node])


def test_the_server_and_the_agent_stand_on_the_client_package() -> None:
    edges = graph()
    assert "kokoro_client" in edges["kokoro_tts"]
    assert "kokoro_client" in edges["voice_agent"]


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "kokoro_tts" and len(parts) > 1 else None


def test_the_server_is_built_of_rooms_on_floors() -> None:
    floor_of = {room: floor for floor, rooms in enumerate(SERVER_FLOORS) for room in rooms}
    package = ROOTS["kokoro_tts"]
    on_disk = {path.stem if path.is_file() else path.name for path in package.iterdir() if path.name != "__pycache__"}
    assert on_disk - {"__init__"} == set(floor_of), "every room of kokoro_tts has a floor, and every floor a room"
    wrong = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        own = relative.parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        for module in _modules(path):
            room = _room(module)
            if room in floor_of and room != own and floor_of[room] >= floor_of[own]:
                wrong.append(f"{relative} ({own}, floor {floor_of[own]}) imports {module} (floor {floor_of[room]})")
    assert not wrong, "\n".join(wrong)


def test_the_server_imports_absolutely() -> None:
    """Relative imports would hide a room's floor from the check above."""
    relative = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in sorted(ROOTS["kokoro_tts"].rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert not relative, relative
