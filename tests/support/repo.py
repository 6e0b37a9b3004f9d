"""The repository the tests run in, and what ``make`` would run there."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def make_dry_run(target: str) -> list[str]:
    """The commands ``make -n TARGET`` would run, as a fresh make prints them: CI runs the suite inside ``make
    test``, whose MAKEFLAGS would make a nested make print "Entering/Leaving directory" around them."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", target], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    return dry.stdout.strip().splitlines()
