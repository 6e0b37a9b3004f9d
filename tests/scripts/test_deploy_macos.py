"""`make deploy` from macOS's stock shells: bash 3.2 (/bin/bash, `/usr/bin/env bash`) and the BSD tools.

Every line of the deploy path's scripts reads as bash 3.2 and BSD-tool safe (support/macos_shell.bash32_problems,
which is shown to catch what bash 3.2 rejects), and `make deploy` with a macOS-like PATH (bash 3.2's shell options
and builtins, BSD flags: support/macos_shell.macos_tools) reaches the preflight. Every deploy test's PATH is the
macOS-like one (support/deploy_harness.tool_dir), so the whole flow runs under it too (test_deploy_end_to_end).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.deploy_harness import clean_env, make_checkout, tool_calls, tool_dir
from support.macos_shell import bash32_problems

REPO = Path(__file__).resolve().parents[2]
# What `make deploy` and `make destroy` run (every shell script of scripts/deploy/), and what they call (a fresh
# `make deploy` runs find_python.sh).
DEPLOY_PATH = sorted(
    [str(path.relative_to(REPO)) for path in (REPO / "scripts" / "deploy").glob("*.sh")]
    + ["scripts/find_tf_plugin_dir.sh", "scripts/find_python.sh"]
)


@pytest.mark.parametrize("script", DEPLOY_PATH)
def test_every_line_of_the_deploy_path_is_bash32_and_bsd_safe(script: str) -> None:
    assert bash32_problems((REPO / script).read_text()) == []


@pytest.mark.parametrize(
    "line",
    [
        "shopt -s inherit_errexit # a failing command inside $(...) fails the script too",
        '  --out "$DEPLOYMENT_VARS" "${previous[@]}"',
        'if [[ $version =~ ^5\\.([0-9]+)\\. ]] && [ "${BASH_REMATCH[1]}" -ge 100 ]; then',
        'for c in $(ls -d "$root"/versions/3.12.* | sort -V -r); do',
        "declare -A seen=()",
        "mapfile -t lines <file",
        'echo "${name,,}"',
        "sed -i 's/a/b/' file",
        'dir=$(readlink -f "$0")',
        "when=$(date -d yesterday +%s)",
        "grep -P '\\d+' file",
        "timeout 10 make test",
        "cmd |& tee log",
    ],
)
def test_the_reading_catches_what_bash32_or_bsd_tools_reject(line: str) -> None:
    assert bash32_problems(line), line


@pytest.mark.parametrize(
    "line",
    [
        '--out "$DEPLOYMENT_VARS" ${previous:+--previous-outputs "$previous"}',
        'for x in ${a[@]+"${a[@]}"}; do',
        "shopt -s nullglob extglob",
        "sed -i '' 's/a/b/' file",
        "grep -q 'checksums previously recorded' \"$log\"",
        "minor=${version#5.}  # the minor version",
        "[ ${#need[@]} -gt 0 ]",
    ],
)
def test_the_reading_passes_what_bash32_accepts(line: str) -> None:
    assert bash32_problems(line) == []


def test_the_macos_bash_refuses_what_bash32_lacks(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path, git=False)
    env = clean_env(tmp_path, bin_dir)
    script = tmp_path / "script.sh"
    script.write_text("#!/usr/bin/env bash\nset -euo pipefail\nshopt -s nullglob\nshopt -s inherit_errexit\necho on\n")
    script.chmod(0o755)
    ran = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode != 0 and "on" not in ran.stdout
    assert "inherit_errexit: invalid shell option name" in ran.stderr
    gnu = subprocess.run(
        ["/bin/sh", "-c", "readlink -f /; sort -V </dev/null"], env=env, capture_output=True, text=True
    )
    assert gnu.returncode != 0 and "illegal option" in gnu.stderr


def test_a_macos_make_deploy_reaches_the_preflight(tmp_path: Path) -> None:
    """make deploy, as a Mac user with the venv installed and nothing else set up types it: the preflight runs and
    lists the gaps (exit 2), nothing past it runs."""
    make = shutil.which("make")
    assert make, "make is needed by the test"
    checkout = make_checkout(tmp_path)
    for name in ("Makefile", "requirements.lock", "pyproject.toml"):
        shutil.copy2(REPO / name, checkout / name)
    (checkout / ".venv").mkdir()
    (checkout / ".venv/.installed").touch()  # after the lock and pyproject: make install has run
    bin_dir = tool_dir(tmp_path, fakes=("terraform", "docker"))
    log = tmp_path / "tools.jsonl"
    env = clean_env(tmp_path, bin_dir, FAKE_LOG=str(log), WEIGHTS_DIR=str(tmp_path / "none"))
    uv = Path(env["HOME"]) / ".local/bin/uv"  # where make install puts uv
    uv.parent.mkdir(parents=True)
    uv.write_text("#!/bin/sh\nexit 0\n")
    uv.chmod(0o755)

    result = subprocess.run([make, "deploy"], cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr  # make's exit for a failed recipe
    assert "== preflight" in result.stdout
    assert "BEDROCK_MODEL_ID is not set" in result.stderr and "no AWS credentials" in result.stderr
    for bash4 in ("invalid shell option name", "unbound variable", "illegal option", "command not found"):
        assert bash4 not in result.stderr
    assert [c["args"][0] for c in tool_calls(log, "terraform")] == ["version"]
