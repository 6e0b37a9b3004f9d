"""What a new user meets before any server runs: the prerequisites check, where benchmark runs write, and the
README's claims about both."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.repo import REPO, make_dry_run

from scripts.bench.__main__ import RESULTS, default_out, main, overwrites_full_run

PREREQS = REPO / "scripts" / "check_prerequisites.sh"


def test_prerequisites_all_present_is_one_line() -> None:
    result = subprocess.run([str(PREREQS)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    expected = "prerequisites: Python 3.12, npm, Terraform, Chromium and a C compiler are here"
    assert result.stdout.strip().splitlines() == [expected]


def test_each_missing_prerequisite_is_one_line_with_its_fix(tmp_path: Path) -> None:
    """A PATH with the shell tools, Python and npm but neither Terraform, Chromium nor a C compiler."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "env", "dirname", "ls", "sort", "pyenv", "python3.12", "npm", "node"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    env = {**os.environ, "PATH": str(bin_dir)}
    result = subprocess.run(
        ["bash", str(PREREQS)], env=env, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert all(line.startswith("missing: ") for line in lines), lines
    assert any(line.startswith("missing: Terraform: ") and "PATH" in line for line in lines), lines
    assert any(line.startswith("missing: Chromium: ") and "apt-get install chromium" in line for line in lines), lines
    assert any(line.startswith("missing: a C compiler: ") and "apt-get install gcc" in line for line in lines), lines


def test_make_test_checks_the_prerequisites_before_anything_else() -> None:
    assert make_dry_run("test")[0] == "scripts/check_prerequisites.sh"


def test_quick_and_deployed_benchmarks_write_beside_the_full_results() -> None:
    assert default_out("local", quick=False) == RESULTS == REPO / "bench" / "results"
    assert default_out("local", quick=True) == RESULTS / "quick"
    assert default_out("deployed", quick=False) == RESULTS / "deployed"
    assert overwrites_full_run(RESULTS), "the committed results the README quotes are a full run"
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "bench/results/quick/latest.json"], cwd=REPO, timeout=30, check=False
    )
    assert ignored.returncode == 0, "quick results must not be committable"


def test_a_quick_run_refuses_to_write_over_a_full_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "latest.json").write_text(json.dumps({"run": {"mode": "full"}}))
    with pytest.raises(SystemExit) as exited:
        main(["--quick", "--out", str(tmp_path)])  # refused before any server starts
    assert exited.value.code == 2
    assert "holds a full run's results" in capsys.readouterr().err
    assert json.loads((tmp_path / "latest.json").read_text()) == {"run": {"mode": "full"}}


def test_the_readme_lists_prerequisites_durations_and_the_agent_order() -> None:
    readme = (REPO / "README.md").read_text()
    quickstart = readme.split("## Quickstart")[1].split("\n## ")[0]
    for needed in ("Python 3.12", "npm", "Terraform", "Chromium", "make prereqs"):
        assert needed in quickstart, needed
    assert "nothing else" not in quickstart
    assert re.search(r"make demo   # about \d+ min", quickstart) and re.search(r"make test   # [\d-]+ min", quickstart)
    agent = readme.split("## The voice agent")[1].split("\n## ")[0]
    assert agent.index("make serve") < agent.index("make agent") and "8081" in agent
    assert "KEEP=1" in readme and "bench/results/quick/" in readme


def test_docs_say_openai_is_in_the_lock_because_it_is() -> None:
    for lock in ("requirements.lock", "agent/requirements.lock"):
        assert "\nopenai==" in (REPO / lock).read_text(), lock
    assert "not in the lock" not in (REPO / "docs" / "agent.md").read_text()
