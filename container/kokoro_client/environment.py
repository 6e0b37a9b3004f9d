"""Settings read from the environment, each declared once: its variable, default and one-line help.

The server and the agent both run as containers configured by env vars (SageMaker, AgentCore), so they declare
their settings the same way: a frozen dataclass whose fields are ``setting(...)``. A value that does not parse is
a ``SettingError`` naming the variable; ``--help`` lists what ``listing`` returns.
"""

from __future__ import annotations

import os
from dataclasses import Field, field, fields
from typing import Any


class SettingError(ValueError):
    """An environment variable's value is not one its setting takes."""


def read[T](env: str, default: T, kind: type | None = None) -> T:
    """``env``'s value as ``kind`` (the default's type unless given), or ``default`` when unset or empty."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    parse: Any = kind or type(default)
    if parse is bool:
        if raw not in ("0", "1"):
            raise SettingError(f"{env}={raw!r}: use 1 (on) or 0 (off)")
        return raw == "1"  # type: ignore[return-value]
    try:
        made: T = parse(raw)
        return made
    except ValueError:
        raise SettingError(f"{env}={raw!r}: expected {'an integer' if parse is int else 'a number'}") from None


def setting[T](env: str, default: T, help: str, kind: type | None = None) -> T:
    """A dataclass field read from ``env`` when it is set and not empty, else ``default``; ``kind`` parses a
    setting whose default is None."""
    metadata = {"env": env, "help": help, "default": default}
    made: T = field(default_factory=lambda: read(env, default, kind), metadata=metadata)
    return made


def listing(settings: type) -> dict[str, str]:
    """Each declared setting's variable → its help and default, as ``--help`` lists them."""
    declared: tuple[Field[Any], ...] = fields(settings)
    return {
        f.metadata["env"]: f"{f.metadata['help']} ({_shown(f.metadata['default'])})"
        for f in declared
        if "env" in f.metadata
    }


def _shown(default: object) -> str:
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "1" if default else "0"
    return str(default)
