"""The house's floors, drawn from the imports of every .py file (ast, no import executed).

kokoro_client is the ground floor; the server (kokoro_tts) and the agent (voice_agent) stand side by side on it;
scripts stand on top of them; tests on top of everything. No import runs back down-to-up, and no package imports
another that imports it back.
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


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(ROOTS)


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
