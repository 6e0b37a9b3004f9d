"""The deploy's preflight (scripts/deploy/preflight.py): every missing prerequisite named in one message, simulated
through PATH and the environment of a subprocess (the fake terraform and docker of tests/support/fakes); what it
says when all is there; and deploy.sh changing nothing while it fails.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from kokoro_tts.weights.layout import TORCH
from support.deploy_harness import (
    ACCOUNT,
    MODEL_ID,
    REGION,
    REPO,
    account_env,
    clean_env,
    credentials,
    make_checkout,
    tool_calls,
    tool_dir,
    write_layout,
)

from scripts.deploy.preflight import (
    DeployInputs,
    Report,
    builder_platforms,
    check_docker,
    check_inputs,
    check_weights,
)

pytestmark = pytest.mark.usefixtures("fake_aws_env")  # moto or a stand-in, never the real account (tests/conftest.py)


def run_preflight(env: Mapping[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scripts.deploy", "preflight"],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def tools_env(tmp_path: Path, weights: Path, **extra: str) -> dict[str, str]:
    """The preflight's environment with the fake terraform and docker and no other tool, a model id and these
    weights."""
    bin_dir = tool_dir(tmp_path, basics=False, fakes=("terraform", "docker"))
    log = str(tmp_path / "tools.jsonl")
    return clean_env(tmp_path, bin_dir, BEDROCK_MODEL_ID=MODEL_ID, WEIGHTS_DIR=str(weights), FAKE_LOG=log, **extra)


def test_preflight_names_every_missing_prerequisite_in_one_message(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = clean_env(tmp_path, empty, WEIGHTS_DIR=str(tmp_path / "no-weights"))
    result = run_preflight(env)
    assert result.returncode == 2, result.stderr
    message = result.stderr
    assert message.count("preflight failed") == 1
    for expected in (
        "BEDROCK_MODEL_ID is not set",
        "make deploy BEDROCK_MODEL_ID=",
        "no AWS credentials found",
        "aws sso login",
        "docker is not on PATH",
        "terraform is not on PATH",
        "git is not on PATH",
        f"no complete weight layout in {tmp_path / 'no-weights'}",
        "WEIGHTS_SOURCE=hf",
    ):
        assert expected in message, f"{expected!r} missing from:\n{message}"


def test_preflight_names_a_stopped_engine_missing_buildx_old_terraform_bad_credentials_no_torch_weights(
    tmp_path: Path,
) -> None:
    layout = write_layout(tmp_path / "onnx-only", with_torch=False)
    env = tools_env(
        tmp_path,
        layout,
        FAKE_DOCKER_ENGINE="down",
        FAKE_BUILDX="missing",
        FAKE_TF_VERSION="1.8.5",
        MIN_INSTANCES="3",
        MAX_INSTANCES="2",
        # Credentials that cannot be checked: nothing listens there.
        **credentials("http://127.0.0.1:9"),
    )
    result = run_preflight(env)
    assert result.returncode == 2, result.stderr
    message = result.stderr
    for expected in (
        "no Docker engine: `docker info` failed (Cannot connect to the Docker daemon",
        "no docker buildx",
        "terraform 1.8.5 is too old",
        "install Terraform >= 1.11",
        "the AWS credentials do not work: sts:GetCallerIdentity failed",
        f"{layout} has no torch weights ({TORCH})",
        "MAX_INSTANCES=2 is smaller than MIN_INSTANCES=3",
    ):
        assert expected in message, f"{expected!r} missing from:\n{message}"
    assert "BEDROCK_MODEL_ID is not set" not in message


def test_preflight_passes_and_says_what_it_found(
    tmp_path: Path, moto_url: str, account_url: str, torch_layout: Path
) -> None:
    env = tools_env(tmp_path, torch_layout, **credentials(moto_url), **account_env(account_url))
    result = run_preflight(env)
    assert result.returncode == 0, result.stderr
    assert f"AWS account {ACCOUNT}" in result.stdout
    assert "terraform 1.11.4" in result.stdout
    assert "docker engine 28.2.2" in result.stdout
    assert f"weights: {torch_layout} (with {TORCH})" in result.stdout
    assert f"account: quota for ml.g5.xlarge, {MODEL_ID} Active and answering" in result.stdout


def test_preflight_wants_a_builder_for_both_platforms(tmp_path: Path) -> None:
    bin_dir = tool_dir(tmp_path, basics=False, git=False, fakes=("docker",))
    env = clean_env(
        tmp_path, bin_dir, FAKE_LOG=str(tmp_path / "log"), FAKE_PLATFORMS="linux/amd64, linux/amd64/v2, linux/386"
    )
    report = Report()
    check_docker(env, report)
    [problem] = report.problems
    assert "cannot build linux/arm64 (the agent image" in problem.what
    assert "tonistiigi/binfmt --install arm64" in problem.fix
    assert builder_platforms("Platforms: linux/arm64*, linux/amd64\nPlatforms: linux/riscv64") == {
        "linux/arm64",
        "linux/amd64",
        "linux/riscv64",
    }
    assert builder_platforms("Name: builder\nDriver: docker-container\n") is None


def test_preflight_checks_the_inputs_and_the_weights(tmp_path: Path) -> None:
    inputs = DeployInputs("", "eu-west-1", "AWS_REGION", instance_type="g5.xlarge", min_instances="one")
    report = Report()
    check_inputs(inputs, report)
    whats = [p.what for p in report.problems]
    assert any("BEDROCK_MODEL_ID is not set" in w for w in whats)
    assert any("INSTANCE_TYPE='g5.xlarge'" in w for w in whats)
    assert any("must be whole numbers" in w for w in whats)

    report = Report()
    check_inputs(DeployInputs(MODEL_ID, "eu-west-1", "AWS_REGION"), report)
    assert report.problems == []
    assert report.warnings == [f"BEDROCK_MODEL_ID {MODEL_ID} is a us. inference profile, the region is eu-west-1"]

    report = Report()
    check_weights(DeployInputs(MODEL_ID, REGION, "default", weights_source="hf"), report)
    assert report.problems == []


def test_deploy_sh_changes_nothing_when_the_preflight_fails(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path)
    bin_dir = tool_dir(tmp_path, fakes=("terraform", "docker"))
    log = tmp_path / "tools.jsonl"
    env = clean_env(tmp_path, bin_dir, FAKE_LOG=str(log), WEIGHTS_DIR=str(tmp_path / "none"))
    result = subprocess.run(
        [str(checkout / "scripts/deploy/deploy.sh")], cwd=checkout, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "BEDROCK_MODEL_ID is not set" in result.stderr and "no AWS credentials" in result.stderr
    assert "FAILED at step" not in result.stderr  # the preflight's own message says it all
    assert [c["args"][0] for c in tool_calls(log, "terraform")] == ["version"]
    assert {c["args"][0] for c in tool_calls(log, "docker")} <= {"info", "buildx"}
    assert not any(c["args"][:2] == ["buildx", "build"] for c in tool_calls(log, "docker"))
    assert not (checkout / "terraform/deployment/deploy.tfvars.json").exists()
