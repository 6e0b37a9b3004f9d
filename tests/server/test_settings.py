"""Settings are declared once (settings.py): the environment is read through them, a bad value names its
variable, and a default the docs quote is the declared one."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
from kokoro_tts.settings import SettingError, Settings, environment

REPO = Path(__file__).resolve().parents[2]
DECLARED = {f.metadata["env"]: f.metadata["default"] for f in fields(Settings) if "env" in f.metadata}


def test_each_setting_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOKORO_MAX_SESSIONS", "7")
    monkeypatch.setenv("KOKORO_BODY_TIMEOUT_S", "2.5")
    monkeypatch.setenv("KOKORO_WINDOWED", "0")
    monkeypatch.setenv("KOKORO_MODEL_DIR", "/tmp/layout")
    monkeypatch.setenv("KOKORO_MAX_QUEUED", "")  # set but empty: the default
    settings = Settings()
    assert (settings.max_sessions, settings.body_timeout_s, settings.windowed) == (7, 2.5, False)
    assert settings.model_dir == Path("/tmp/layout")
    assert settings.max_queued_utterances == DECLARED["KOKORO_MAX_QUEUED"]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("KOKORO_MAX_SESSIONS", "many", "expected an integer"),
        ("KOKORO_MAX_SESSIONS", "2.5", "expected an integer"),
        ("KOKORO_BODY_TIMEOUT_S", "ten", "expected a number"),
        ("KOKORO_WINDOWED", "yes", "use 1 (on) or 0 (off)"),
    ],
)
def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingError, match=re.escape(f"{variable}={value!r}: {says}")):
        Settings()


def test_help_lists_every_setting_with_its_default() -> None:
    listed = environment()
    assert set(listed) == set(DECLARED)
    assert listed["KOKORO_MAX_SESSIONS"].endswith("(256)")
    assert listed["KOKORO_WINDOWED"].endswith("(1)")


def test_the_defaults_the_docs_quote_are_the_declared_ones() -> None:
    quoted: list[tuple[str, str, str]] = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for name, value in re.findall(r"`(KOKORO_[A-Z_]+)` \((\d+(?:\.\d+)?)(?: s)?\)", doc.read_text()):
            quoted.append((doc.name, name, value))
    assert len(quoted) >= 5, quoted  # docs/protocol.md quotes the limits' defaults
    wrong = [(doc, name, value) for doc, name, value in quoted if float(value) != float(DECLARED[name])]
    assert not wrong, f"docs quote defaults that settings.py does not declare: {wrong}"


def test_the_api_key_is_read_but_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOKORO_API_KEY", "sk-do-not-log-me")
    settings = Settings()
    assert settings.api_key == "sk-do-not-log-me"
    assert "sk-do-not-log-me" not in repr(settings)
