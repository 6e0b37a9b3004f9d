"""What the deploy tests (tests/scripts/test_deploy_*.py) share: moto's account and the names the deploy gives
things, a PATH holding exactly the tools a test wants, as macOS has them (support/macos_shell: bash 3.2's shell
options, BSD flags; the fake terraform and docker of support/fakes among them),
an environment with no AWS configuration, the throwaway git checkout deploy.sh and destroy.sh run in, and readers
of the log the fakes write. Their fixtures are in tests/scripts/conftest.py.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kokoro_tts.weights.layout import TORCH, VOICE_BYTES, VOICE_NAMES, Manifest, hash_file

from scripts.weights.sources import packaged_config
from support.account_standin import account_endpoints
from support.macos_shell import macos_tools

REPO = Path(__file__).resolve().parents[2]
FAKES = Path(__file__).resolve().parent / "fakes"

ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
MODEL_ID = "us.amazon.nova-2-lite-v1:0"
TTS_REPO = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/kokoro-tts/tts"
AGENT_REPO = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/kokoro-tts/agent"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
BASE = "python:3.12-slim-bookworm"  # both Dockerfiles' base image
BASE_DIGEST = "sha256:" + hashlib.sha256(BASE.encode()).hexdigest()  # what the fake docker's registry answers
# What the deploy scripts run besides terraform, docker and python (a PATH made of exactly these).
BASIC_TOOLS = (
    *("bash", "env", "dirname", "basename", "mktemp", "rm", "cat", "ls", "find", "sort", "mkdir", "grep", "tee"),
    "sleep",
)


def tool_dir(tmp_path: Path, *, basics: bool = True, git: bool = True, fakes: Iterable[str] = ()) -> Path:
    """A PATH directory with exactly these tools: the basics as macOS has them (support/macos_shell), git
    (a symlink), and fakes (support/fakes/NAME.py, run by this test's interpreter)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if basics:
        macos_tools(bin_dir, BASIC_TOOLS)
    for name in ("git",) if git else ():
        found = shutil.which(name)
        assert found, f"{name} is needed by the test"
        (bin_dir / name).symlink_to(found)
    for name in fakes:
        program = FAKES / f"{name}.py"
        assert program.is_file(), f"no fake {name} in {FAKES}"
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(program))} "$@"\n')
        path.chmod(0o755)
    return bin_dir


def clean_env(tmp_path: Path, path: Path, **extra: str) -> dict[str, str]:
    """A subprocess environment with no AWS configuration or credentials unless given."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": str(path),
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        "LANG": "C.UTF-8",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHON": sys.executable,  # the scripts' interpreter; a checkout copy has no .venv of its own
    }
    return {**env, **extra}


def credentials(endpoint: str) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": endpoint}


def account_env(url: str) -> dict[str, str]:
    """The preflight's Service Quotas, Bedrock and bidirectional-streaming probe go to the stand-in."""
    return {**account_endpoints(url), "SMOKE_ENDPOINT_URI": url}


def write_layout(dest: Path, with_torch: bool) -> Path:
    """A small layout that passes every check (Kokoro's config, voice packs of the right size, zeros)."""
    (dest / "voices").mkdir(parents=True)
    shutil.copy(packaged_config(), dest / "config.json")
    (dest / "kokoro.onnx").write_bytes(b"not really an onnx model")
    for voice in VOICE_NAMES:
        (dest / "voices" / f"{voice}.bin").write_bytes(bytes(VOICE_BYTES))
    if with_torch:
        (dest / TORCH).write_bytes(b"not really torch weights")
    files = {p.relative_to(dest).as_posix(): hash_file(p) for p in dest.rglob("*") if p.is_file()}
    (dest / "manifest.json").write_bytes(Manifest(source="test", files=files).to_json())
    return dest


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def make_checkout(tmp_path: Path) -> Path:
    """A throwaway git checkout with the deploy scripts, so the runs write nothing into the real tree."""
    checkout = tmp_path / "checkout"
    # The deploy flow, the weights it pushes, and the agent client its runtime smoke test speaks through.
    # The Dockerfiles too: the deploy reads their base image (the fake docker builds nothing from them).
    names = ("scripts/__init__.py", "scripts/find_tf_plugin_dir.sh", "scripts/agent_client.py", "scripts/sse.py")
    for name in (*names, "container/Dockerfile", "agent/Dockerfile"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, checkout / name)
    for package in ("scripts/deploy", "scripts/weights"):
        shutil.copytree(REPO / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__"))
    for root in ("shared", "deployment"):
        (checkout / "terraform" / root).mkdir(parents=True)
        (checkout / "terraform" / root / "main.tf").write_text("# a stand-in for the root\n")
    # Not deploy.tfvars.json: the image tag must ignore it by itself (terraform/.gitignore may not list it).
    (checkout / ".gitignore").write_text("__pycache__/\nterraform.tfstate\n")
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "deploy scripts")
    return checkout


def tool_calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The calls the fakes logged, in order; only ``tool``'s if given."""
    if not log.exists():
        return []
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [c for c in calls if tool is None or c["tool"] == tool]


def docker_builds(log: Path) -> list[list[str]]:
    """The argv of each ``docker buildx build``, in order."""
    return [c["args"] for c in tool_calls(log, "docker") if c["args"][:2] == ["buildx", "build"]]


def shared_outputs(**overrides: Any) -> dict[str, Any]:
    """The shared root's outputs as `make deploy` reads them (terraform output -json values)."""
    values = {
        "region": REGION,
        "tts_repository_url": TTS_REPO,
        "agent_repository_url": AGENT_REPO,
        "weights_bucket_name": "kokoro-tts-weights-20250101",
        "weights_prefix": "kokoro-82m/v1.0/",
        "weights_s3_uri": "s3://kokoro-tts-weights-20250101/kokoro-82m/v1.0/",
        "weights_kms_key_arn": None,
    }
    return {**values, **overrides}
