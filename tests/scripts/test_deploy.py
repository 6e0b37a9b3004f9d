"""make deploy / make destroy (scripts/deploy/: deploy.sh, destroy.sh and the Python half), without an AWS account.

- The preflight: every missing prerequisite named in one message, simulated through PATH and the environment
  of a subprocess; nothing changes before it passes.
- The AWS calls against moto: the wait for InService (progress, Failed with its reason, the timeout, a rollback),
  image digests and the ECR login, the deployment's variables from the shared outputs.
- The smoke test through the real SDK and the SageMaker stand-in, in front of the real TTS server.
- deploy.sh and destroy.sh end to end, in a throwaway copy of the scripts, with fake terraform and docker that
  act on a moto server, the smoke test going to the stand-in.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from kokoro_client.aws_credentials import Boto3CredentialsResolver
from kokoro_client.session import AudioEvent, ControlEvent, TTSEvent
from kokoro_tts.weights.layout import TORCH, VOICE_BYTES, VOICE_NAMES, Manifest, hash_file
from moto import mock_aws
from moto.server import ThreadedMotoServer
from smithy_core.exceptions import SmithyIdentityError
from support.account_standin import FakeAccount, account_app, account_endpoints
from support.agent_fixtures import FAST, agent_settings, make_model
from support.agentcore_standin import HealthStandin, deployed_agent, running
from support.inproc_server import RunningServer
from support.sagemaker import Certs, ScriptedContainer, sagemaker, scripted
from websockets.asyncio.server import ServerConnection

from scripts.deploy.__main__ import main
from scripts.deploy.base_image import BaseImageError, base_image, index_digest, resolve
from scripts.deploy.ecr import EcrError, Repository, docker_login, image_digest
from scripts.deploy.endpoint import EndpointError, wait_in_service
from scripts.deploy.gitrev import image_tag
from scripts.deploy.preflight import (
    DeployInputs,
    Report,
    builder_platforms,
    check_docker,
    check_inputs,
    check_weights,
)
from scripts.deploy.region import region_conflicts, resolve_region
from scripts.deploy.smoke import SmokeFailure, check_events, run_smoke, smoke_endpoint
from scripts.deploy.tfvars import DeploymentSettings, OutputsError, deployment_variables, load_outputs
from scripts.servers import free_port
from scripts.weights.sources import packaged_config

REPO = Path(__file__).resolve().parents[2]


ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
MODEL_ID = "us.amazon.nova-2-lite-v1:0"
TTS_REPO = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/kokoro-tts/tts"
AGENT_REPO = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/kokoro-tts/agent"
RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/kokoro_tts_agent-AbCdE12345"
HEALTHY_GPU = {"status": "ok", "backend": "torch", "device": "cuda", "model_sha256": "ab" * 32, "version": "1.0.0"}
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
# What the deploy scripts run besides terraform, docker and python (a PATH made of exactly these).
BASIC_TOOLS = ("bash", "env", "dirname", "basename", "mktemp", "rm", "cat", "ls", "find", "sort", "mkdir")


@pytest.fixture(autouse=True)
def _aws_env(fake_aws_env: None) -> None:
    """Every test here talks to moto or a stand-in, never the real account (see conftest.fake_aws_env)."""


# The subprocess tests' terraform and docker: tests/support/fakes/terraform.py and docker.py, which log each call and
# act on the moto server (AWS_ENDPOINT_URL) the way the real tools would act on AWS.
FAKES = REPO / "tests" / "support" / "fakes"


def tool_dir(tmp_path: Path, *, basics: bool = True, git: bool = True, fakes: Iterable[str] = ()) -> Path:
    """A PATH directory with exactly these tools: the basics (symlinks), git, and fakes (support/fakes/NAME.py,
    run by this test's interpreter)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in (*(BASIC_TOOLS if basics else ()), *(("git",) if git else ())):
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


@pytest.fixture(scope="module")
def torch_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_layout(tmp_path_factory.mktemp("weights") / "kokoro", with_torch=True)


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def account_url() -> Iterator[str]:
    """What moto does not serve of the account the preflight reads (quotas, Bedrock): quota, Nova 2 Lite Active."""
    with running(account_app(FakeAccount()), free_port()) as url:
        yield url


def account_env(url: str) -> dict[str, str]:
    """The preflight's Service Quotas, Bedrock and bidirectional-streaming probe go to the stand-in."""
    return {**account_endpoints(url), "SMOKE_ENDPOINT_URI": url}


@pytest.fixture
def moto_url(moto_server: str) -> str:
    """The moto server, emptied."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=10)
    return moto_server


def tool_calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [c for c in calls if tool is None or c["tool"] == tool]


# ---------------------------------------------------------------------------------------------------------------
# Preflight


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
    bin_dir = tool_dir(tmp_path, basics=False, fakes=("terraform", "docker"))
    layout = write_layout(tmp_path / "onnx-only", with_torch=False)
    env = clean_env(
        tmp_path,
        bin_dir,
        BEDROCK_MODEL_ID=MODEL_ID,
        WEIGHTS_DIR=str(layout),
        FAKE_LOG=str(tmp_path / "tools.jsonl"),
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
    bin_dir = tool_dir(tmp_path, basics=False, fakes=("terraform", "docker"))
    env = clean_env(
        tmp_path,
        bin_dir,
        BEDROCK_MODEL_ID=MODEL_ID,
        WEIGHTS_DIR=str(torch_layout),
        FAKE_LOG=str(tmp_path / "tools.jsonl"),
        **credentials(moto_url),
        **account_env(account_url),
    )
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


# ---------------------------------------------------------------------------------------------------------------
# Regions


def test_the_region_comes_from_the_environment_then_the_shared_state(tmp_path: Path) -> None:
    assert resolve_region({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"}, tmp_path) == (
        "eu-west-1",
        "AWS_REGION",
    )
    assert resolve_region({}, tmp_path, "ap-south-1") == ("ap-south-1", "the AWS profile")
    assert resolve_region({}, tmp_path) == ("us-east-1", "default")

    shared = tmp_path / "terraform/shared/terraform.tfstate"
    shared.parent.mkdir(parents=True)
    shared.write_text(json.dumps({"outputs": {"region": {"value": "eu-central-1"}}, "resources": [{}]}))
    assert resolve_region({}, tmp_path, "ap-south-1") == ("eu-central-1", "terraform/shared/terraform.tfstate")
    deployment = tmp_path / "terraform/deployment/terraform.tfstate"
    deployment.parent.mkdir(parents=True)
    arn = f"arn:aws:sagemaker:eu-central-1:{ACCOUNT}:endpoint/kokoro-tts"
    deployment.write_text(json.dumps({"outputs": {"endpoint_arn": {"value": arn}}, "resources": [{}]}))
    assert region_conflicts("eu-central-1", tmp_path) == []
    assert region_conflicts("us-east-1", tmp_path) == [
        "terraform/shared was applied in eu-central-1 (its state says so), not us-east-1",
        "terraform/deployment was applied in eu-central-1 (its state says so), not us-east-1",
    ]
    # A destroyed root (no resources left) binds nothing.
    shared.write_text(json.dumps({"outputs": {"region": {"value": "eu-central-1"}}, "resources": []}))
    assert resolve_region({}, tmp_path) == ("us-east-1", "default")


# ---------------------------------------------------------------------------------------------------------------
# The deployment's variables


def shared_outputs(**overrides: Any) -> dict[str, Any]:
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


def test_deployment_variables_from_the_shared_outputs(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    path.write_text(
        json.dumps({k: {"value": v, "type": "string", "sensitive": False} for k, v in shared_outputs().items()})
    )
    shared = load_outputs(path, ("region", "tts_repository_url", "weights_kms_key_arn"))
    settings = DeploymentSettings(f" {MODEL_ID} ", "ml.g6.xlarge", 2, 4)
    variables = deployment_variables(shared, f"{TTS_REPO}@{DIGEST_A}", f"{AGENT_REPO}@{DIGEST_B}", settings)
    assert variables == {
        "region": REGION,
        "tts_image_uri": f"{TTS_REPO}@{DIGEST_A}",
        "agent_image_uri": f"{AGENT_REPO}@{DIGEST_B}",
        "weights_bucket_name": "kokoro-tts-weights-20250101",
        "weights_prefix": "kokoro-82m/v1.0/",
        "weights_kms_key_arn": None,  # an SSE-S3 bucket: null is passed on, not dropped
        "bedrock_model_id": MODEL_ID,
        "instance_type": "ml.g6.xlarge",
        "initial_instance_count": 2,
        "min_instance_count": 2,
        "max_instance_count": 4,
    }


@pytest.mark.parametrize(
    ("tts", "agent", "shared", "error"),
    [
        (f"{TTS_REPO}:latest", f"{AGENT_REPO}@{DIGEST_B}", {}, "not referenced by digest"),
        (f"{AGENT_REPO}@{DIGEST_A}", f"{AGENT_REPO}@{DIGEST_B}", {}, "not in the shared root's repository"),
        (
            f"{TTS_REPO}@{DIGEST_A}".replace(REGION, "eu-west-1"),
            f"{AGENT_REPO}@{DIGEST_B}",
            {"tts_repository_url": TTS_REPO.replace(REGION, "eu-west-1")},
            "is in eu-west-1, the deployment in us-east-1",
        ),
    ],
)
def test_deployment_variables_refuse_images_the_deployment_would_reject(
    tts: str, agent: str, shared: dict[str, Any], error: str
) -> None:
    with pytest.raises(OutputsError, match=error):
        deployment_variables(shared_outputs(**shared), tts, agent, DeploymentSettings(MODEL_ID))


def test_outputs_of_a_root_that_was_not_applied_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    path.write_text("{}")
    with pytest.raises(OutputsError, match=r"lacks the output\(s\) region, tts_repository_url: was that root applied"):
        load_outputs(path, ("region", "tts_repository_url"))
    with pytest.raises(OutputsError, match="cannot read terraform outputs"):
        load_outputs(tmp_path / "missing.json")


def test_the_tfvars_command_writes_the_var_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps({k: {"value": v} for k, v in shared_outputs().items()}))
    out = tmp_path / "deploy.tfvars.json"
    argv = ["tfvars", "--shared-outputs", str(shared), "--out", str(out), "--bedrock-model-id", MODEL_ID]
    images = ["--tts-image", f"{TTS_REPO}@{DIGEST_A}", "--agent-image", f"{AGENT_REPO}@{DIGEST_B}"]
    assert main([*argv, *images]) == 0
    assert json.loads(out.read_text())["tts_image_uri"] == f"{TTS_REPO}@{DIGEST_A}"
    assert main([*argv, *images, "--min-instances", "3"]) == 1
    assert "MAX_INSTANCES=2 is smaller than MIN_INSTANCES=3" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# ECR


def push_manifest(ecr: Any, repository: str, tag: str, label: str) -> str:
    config = json.dumps({"label": label}).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
            },
            "layers": [],
        }
    )
    digest = "sha256:" + hashlib.sha256(manifest.encode()).hexdigest()
    ecr.put_image(repositoryName=repository, imageManifest=manifest, imageTag=tag, imageDigest=digest)
    return digest


def test_image_digest_of_a_pushed_tag(capsys: pytest.CaptureFixture[str]) -> None:
    with mock_aws():
        ecr = boto3.client("ecr", region_name=REGION)
        url = ecr.create_repository(repositoryName="kokoro-tts/tts")["repository"]["repositoryUri"]
        repository = Repository.parse(url)
        assert (repository.account, repository.region, repository.name) == (ACCOUNT, REGION, "kokoro-tts/tts")
        assert image_digest(ecr, repository, "abc1234") is None
        digest = push_manifest(ecr, "kokoro-tts/tts", "abc1234", "tts")
        assert image_digest(ecr, repository, "abc1234") == digest
        assert repository.image_uri(digest) == f"{url}@{digest}"

        assert main(["image-digest", "--repository-url", url, "--tag", "abc1234"]) == 0
        assert capsys.readouterr().out.strip() == digest
        assert main(["image-digest", "--repository-url", url, "--tag", "other"]) == 3
    with pytest.raises(EcrError, match="not an ECR repository URL"):
        Repository.parse("docker.io/library/python")


def test_docker_login_passes_the_token_through_stdin(tmp_path: Path) -> None:
    docker = tmp_path / "docker"
    docker.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(tmp_path / 'login.json')!r}, 'w').write(json.dumps([sys.argv[1:], sys.stdin.read()]))\n"
    )
    docker.chmod(0o755)
    with mock_aws():
        ecr = boto3.client("ecr", region_name=REGION)
        repository = Repository.parse(
            ecr.create_repository(repositoryName="kokoro-tts/tts")["repository"]["repositoryUri"]
        )
        token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]
        docker_login(ecr, repository, docker=str(docker))
        argv, stdin = json.loads((tmp_path / "login.json").read_text())
        assert argv == ["login", "--username", "AWS", "--password-stdin", f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"]
        assert stdin == base64.b64decode(token).decode().split(":", 1)[1]
        with pytest.raises(EcrError, match=r"docker login .* failed: denied"):
            docker_login(ecr, repository, docker=str(write_failing(tmp_path / "bad-docker", "denied")))


def write_failing(path: Path, message: str) -> Path:
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.exit({message!r})\n")
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------------------------------------------------------
# The image tag


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_image_tag_is_the_revision_plus_a_hash_of_the_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("ignored/\n")
    (repo / "app.py").write_text("print('v1')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    rev = git(repo, "rev-parse", "--short", "HEAD")
    assert image_tag(repo) == rev
    (repo / "ignored").mkdir()
    (repo / "ignored/cache.bin").write_bytes(b"x")
    assert image_tag(repo) == rev, "ignored files are not part of the image"

    (repo / "app.py").write_text("print('v2')\n")
    first = image_tag(repo)
    assert first.startswith(f"{rev}-dirty-") and len(first) == len(rev) + len("-dirty-") + 8
    assert image_tag(repo) == first, "the same changes, the same tag: the pushed image is reused"
    (repo / "app.py").write_text("print('v3')\n")
    assert image_tag(repo) not in (first, rev)
    (repo / "app.py").write_text("print('v2')\n")
    (repo / "new_module.py").write_text("x = 1\n")
    assert image_tag(repo) not in (first, rev), "a new untracked file changes the tag"

    (repo / "app.py").write_text("print('v1')\n")
    (repo / "new_module.py").unlink()
    var_file = repo / "terraform/deployment/deploy.tfvars.json"
    var_file.parent.mkdir(parents=True)
    var_file.write_text("{}")
    assert image_tag(repo) == rev, "the var file the deploy writes is not a change of the tree"


# ---------------------------------------------------------------------------------------------------------------
# Waiting for InService


@dataclass
class FakeTime:
    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedSageMaker:
    """moto's SageMaker client, whose DescribeEndpoint answers with scripted statuses first."""

    def __init__(self, client: Any, script: list[dict[str, str]]) -> None:
        self._client = client
        self.script = script
        self.meta = client.meta

    def describe_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        described: dict[str, Any] = self._client.describe_endpoint(**kwargs)
        return {**described, **self.script.pop(0)} if self.script else described

    def describe_endpoint_config(self, **kwargs: Any) -> Any:
        return self._client.describe_endpoint_config(**kwargs)


@pytest.fixture
def endpoint() -> Iterator[Any]:
    with mock_aws():
        sm = boto3.client("sagemaker", region_name=REGION)
        sm.create_model(
            ModelName="kokoro-tts-m1",
            ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/kokoro-tts-sagemaker",
            PrimaryContainer={"Image": f"{TTS_REPO}@{DIGEST_A}"},
        )
        sm.create_endpoint_config(
            EndpointConfigName="kokoro-tts-c1",
            ProductionVariants=[
                # moto rejects ml.g5 types (terraform/README.md): the instance type is not the point here.
                {
                    "VariantName": "AllTraffic",
                    "ModelName": "kokoro-tts-m1",
                    "InstanceType": "ml.m5.large",
                    "InitialInstanceCount": 1,
                }
            ],
        )
        sm.create_endpoint(EndpointName="kokoro-tts", EndpointConfigName="kokoro-tts-c1")
        yield sm


def test_wait_shows_progress_until_in_service(endpoint: Any) -> None:
    time_ = FakeTime()
    lines: list[str] = []
    client = ScriptedSageMaker(endpoint, [{"EndpointStatus": "Creating"}] * 3)
    ready = wait_in_service(
        client,
        "kokoro-tts",
        poll_s=30,
        expect_model="kokoro-tts-m1",
        log=lines.append,
        sleep=time_.sleep,
        clock=time_.clock,
    )
    assert (ready.model_name, ready.waited_s) == ("kokoro-tts-m1", 90)
    assert lines == [
        "  endpoint kokoro-tts: Creating (0m00s)",
        "  endpoint kokoro-tts: Creating (0m30s)",
        "  endpoint kokoro-tts: Creating (1m00s)",
        "  endpoint kokoro-tts: InService (1m30s)",
    ]
    assert time_.sleeps == [30, 30, 30]


def test_wait_fails_on_failed_with_the_failure_reason(endpoint: Any) -> None:
    reason = "The primary container for production variant AllTraffic did not pass the ping health check."
    client = ScriptedSageMaker(
        endpoint, [{"EndpointStatus": "Creating"}, {"EndpointStatus": "Failed", "FailureReason": reason}]
    )
    time_ = FakeTime()
    with pytest.raises(EndpointError) as caught:
        wait_in_service(client, "kokoro-tts", poll_s=10, log=lambda _: None, sleep=time_.sleep, clock=time_.clock)
    assert str(caught.value) == f"endpoint kokoro-tts is Failed: {reason}"


def test_wait_gives_up_at_the_timeout(endpoint: Any) -> None:
    client = ScriptedSageMaker(endpoint, [{"EndpointStatus": "Updating"}] * 100)
    time_ = FakeTime()
    with pytest.raises(EndpointError, match=r"still Updating after 1m30s \(timeout 1m40s\)"):
        wait_in_service(
            client, "kokoro-tts", timeout_s=100, poll_s=30, log=lambda _: None, sleep=time_.sleep, clock=time_.clock
        )


def test_wait_notices_an_update_that_rolled_back(endpoint: Any) -> None:
    client = ScriptedSageMaker(endpoint, [{"EndpointStatus": "InService", "FailureReason": "image pull failed"}])
    with pytest.raises(EndpointError, match=r"serves model kokoro-tts-m1, not kokoro-tts-m2.*: image pull failed"):
        wait_in_service(client, "kokoro-tts", expect_model="kokoro-tts-m2", log=lambda _: None)


def test_wait_for_an_endpoint_that_does_not_exist(endpoint: Any) -> None:
    with pytest.raises(EndpointError, match="endpoint nope does not exist in us-east-1"):
        wait_in_service(endpoint, "nope", log=lambda _: None)


def test_the_wait_command_reads_the_deployment_outputs(
    endpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = tmp_path / "deployment.json"
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/kokoro-tts"
    values = {"endpoint_name": "kokoro-tts", "endpoint_arn": arn, "sagemaker_model_name": "kokoro-tts-m1"}
    outputs.write_text(json.dumps({k: {"value": v} for k, v in values.items()}))
    assert main(["wait", "--deployment-outputs", str(outputs), "--poll", "0.01"]) == 0
    assert "endpoint kokoro-tts is InService, serving kokoro-tts-m1" in capsys.readouterr().out
    values["sagemaker_model_name"] = "kokoro-tts-m0"
    outputs.write_text(json.dumps({k: {"value": v} for k, v in values.items()}))
    assert main(["wait", "--deployment-outputs", str(outputs), "--poll", "0.01"]) == 1
    assert "serves model kokoro-tts-m1, not kokoro-tts-m0" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# The smoke test


def events(*items: TTSEvent) -> list[tuple[float, TTSEvent]]:
    return [(0.1 * i, event) for i, event in enumerate(items)]


def start(uid: str) -> ControlEvent:
    return ControlEvent({"type": "synthesis_start", "id": uid})


def complete(uid: str, size: int | None) -> ControlEvent:
    message: dict[str, Any] = {"type": "synthesis_complete", "id": uid}
    return ControlEvent(message if size is None else {**message, "bytes": size})


def test_check_events_attributes_audio_to_each_sentence() -> None:
    ids = ["smoke-0", "smoke-1"]
    ok = events(start("smoke-0"), AudioEvent(b"\x01" * 10), AudioEvent(b"\x02" * 6), complete("smoke-0", 16))
    ok += events(start("smoke-1"), AudioEvent(b"\x03" * 8), complete("smoke-1", None))
    utterances, first_audio = check_events(ok, ids)
    assert [(u.id, u.audio_bytes, u.reported_bytes) for u in utterances] == [("smoke-0", 16, 16), ("smoke-1", 8, None)]
    assert first_audio == pytest.approx(0.1)

    with pytest.raises(SmokeFailure) as caught:
        check_events(events(start("smoke-0"), complete("smoke-0", 0), start("smoke-1")), ids)
    assert str(caught.value).startswith("no audio for smoke-0; no synthesis_complete for smoke-1")
    error = ControlEvent({"type": "error", "code": "engine_error", "message": "CUDA out of memory"})
    with pytest.raises(SmokeFailure, match="error event engine_error: CUDA out of memory"):
        check_events([*ok, (1.0, error)], ids)
    with pytest.raises(SmokeFailure, match="smoke-0: synthesis_complete says 99 bytes, 4 arrived"):
        check_events(events(start("smoke-0"), AudioEvent(b"abcd"), complete("smoke-0", 99)), ["smoke-0"])


async def test_smoke_test_through_the_bidirectional_api(server: RunningServer, certs: Certs) -> None:
    async with asyncio.timeout(60), sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, app):
        result = await run_smoke(transport)
    assert [u.id for u in result.utterances] == ["smoke-0", "smoke-1"]
    assert all(u.audio_bytes == u.reported_bytes and u.audio_bytes > 0 for u in result.utterances)
    assert 0 < result.first_audio_s < result.total_s
    assert "time to first audio" in result.summary()
    [stream] = app.streams
    assert stream.forwarded_frames == 3  # two sentences and the close message


async def test_smoke_test_fails_on_a_sentence_without_audio(certs: Certs) -> None:
    async def reply(ws: ServerConnection, frame: bytes | str) -> None:
        message = json.loads(frame)
        if message["type"] == "synthesize":
            await ws.send(json.dumps({"type": "synthesis_start", "id": message["id"]}))
            await ws.send(json.dumps({"type": "synthesis_complete", "id": message["id"], "bytes": 0}))
        elif message["type"] == "close":
            await ws.close(1000)

    container = ScriptedContainer(reply)
    async with asyncio.timeout(30), scripted(container) as url, sagemaker(url, certs) as (transport, _):
        with pytest.raises(SmokeFailure, match="no audio for smoke-0; no audio for smoke-1"):
            await run_smoke(transport)


async def test_smoke_test_retries_an_endpoint_that_cannot_open_a_stream(certs: Certs) -> None:
    async with scripted(ScriptedContainer(lambda ws, frame: asyncio.sleep(0))) as url:
        pass  # closed again: the stand-in cannot reach its container (ModelError)
    lines: list[str] = []
    async with asyncio.timeout(30), sagemaker(url, certs) as (transport, _):
        with pytest.raises(SmokeFailure) as caught:
            await smoke_endpoint(
                "kokoro-tts", REGION, endpoint_uri=transport.endpoint_uri, attempts=2, retry_delay_s=0, log=lines.append
            )
    assert caught.value.retryable
    assert "tts_unavailable [ModelError]" in str(caught.value)
    assert len(lines) == 1 and lines[0].startswith("  attempt 1/2 failed")


async def test_the_smoke_test_signs_with_what_boto3_finds(tmp_path: Path) -> None:
    """boto3's chain (SSO, assumed roles, container, instance), not only what the SDK's own chain knows."""
    session = boto3.Session(aws_access_key_id="AKIDBOTO3", aws_secret_access_key="secret", aws_session_token="token")
    identity = await Boto3CredentialsResolver(session).get_identity(properties={})
    assert (identity.access_key_id, identity.secret_access_key, identity.session_token) == (
        "AKIDBOTO3",
        "secret",
        "token",
    )

    class NoCredentials:
        def get_credentials(self) -> None:
            return None

    with pytest.raises(SmithyIdentityError, match="boto3 found no AWS credentials"):
        await Boto3CredentialsResolver(NoCredentials()).get_identity(properties={})


# ---------------------------------------------------------------------------------------------------------------
# deploy.sh and destroy.sh end to end, with fake terraform and docker acting on moto


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


def plugin_dir(tmp_path: Path) -> Path:
    """What scripts/find_tf_plugin_dir.sh recognizes as a local mirror of hashicorp/aws."""
    mirror = tmp_path / "plugins"
    provider = mirror / "registry.terraform.io/hashicorp/aws/5.100.0/linux_amd64"
    provider.mkdir(parents=True)
    (provider / "terraform-provider-aws_v5.100.0_x5").write_bytes(b"")
    return mirror


async def run_script(argv: list[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str]:
    """Run a script without blocking this event loop (the stand-in it talks to runs in it)."""
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=dict(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    # A bound against a hang, not a speed check: the whole deploy with its smoke tests of the real server and agent,
    # on a shared 2-core machine.
    out, _ = await asyncio.wait_for(process.communicate(), 360)
    assert process.returncode is not None
    return process.returncode, out.decode()


def commands(log: Path, start: int = 0) -> list[str]:
    """'terraform <root> <command>' and 'docker <args>' lines, in call order, from the log's ``start``th call."""
    lines = []
    for call in tool_calls(log)[start:]:
        if call["tool"] == "terraform":
            lines.append(" ".join(filter(None, ["terraform", call["root"], call["args"][0]])))
        else:
            lines.append(" ".join(["docker", *call["args"][: 2 if call["args"][0] == "buildx" else 1]]))
    return lines


@pytest.fixture
def deploy_env(tmp_path: Path, moto_url: str, account_url: str, torch_layout: Path) -> dict[str, str]:
    bin_dir = tool_dir(tmp_path, fakes=("terraform", "docker"))
    return clean_env(
        tmp_path,
        bin_dir,
        BEDROCK_MODEL_ID=MODEL_ID,
        WEIGHTS_DIR=str(torch_layout),
        FAKE_LOG=str(tmp_path / "tools.jsonl"),
        TF_PLUGIN_DIR=str(plugin_dir(tmp_path)),
        WAIT_POLL_S="0.05",
        **credentials(moto_url),
        **account_env(account_url),
    )


async def test_deploy_sh_end_to_end_then_again_then_destroy(
    server: RunningServer, certs: Certs, deploy_env: dict[str, str], tmp_path: Path
) -> None:
    checkout = make_checkout(tmp_path)
    log = Path(deploy_env["FAKE_LOG"])
    rev = git(checkout, "rev-parse", "--short", "HEAD")
    deploy = [str(checkout / "scripts/deploy/deploy.sh")]

    health = HealthStandin("kokoro-tts", HEALTHY_GPU)
    agent = agent_settings(f"http://127.0.0.1:{server.port}")
    with (
        running(health.app(), free_port()) as health_url,
        deployed_agent(agent, make_model(**FAST), f"bedrock:{MODEL_ID}", RUNTIME_ARN) as (runtime_url, runtime),
    ):
        async with sagemaker(f"ws://127.0.0.1:{server.port}", certs) as (transport, app):
            env = {
                **deploy_env,
                "SMOKE_ENDPOINT_URI": transport.endpoint_uri,
                "SSL_CERT_FILE": str(certs.certfile),
                "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": health_url,
                "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": runtime_url,
            }
            code, out = await run_script(deploy, env, checkout)
    assert code == 0, out

    # Every step, in order, each tool called as the real one would be.
    assert commands(log) == [
        "terraform version",
        "docker info",
        "docker buildx version",
        "docker buildx inspect",  # the platforms
        "terraform shared init",
        "terraform shared apply",
        "terraform shared output",
        "terraform shared output",
        "terraform shared output",
        "terraform shared output",
        "docker login",
        "docker buildx imagetools",  # the TTS image's base, by digest
        "docker buildx build",  # TTS
        "docker buildx imagetools",
        "docker buildx build",  # agent
        "terraform deployment init",
        "terraform deployment state",  # nothing deployed yet: nothing to deregister before the apply
        "terraform deployment apply",
        "terraform deployment output",
    ]
    calls = tool_calls(log)
    init = next(c for c in calls if c["tool"] == "terraform" and c["args"][0] == "init")
    assert f"-plugin-dir={deploy_env['TF_PLUGIN_DIR']}" in init["args"]
    shared_apply = next(c for c in tool_calls(log, "terraform") if c["root"] == "shared" and c["args"][0] == "apply")
    assert {"-auto-approve", "-var", "region=us-east-1"} <= set(shared_apply["args"])
    builds = [c["args"] for c in tool_calls(log, "docker") if c["args"][:2] == ["buildx", "build"]]
    for argv, platform, dockerfile, repo in (
        (builds[0], "linux/amd64", "container/Dockerfile", TTS_REPO),
        (builds[1], "linux/arm64", "agent/Dockerfile", AGENT_REPO),
    ):
        assert argv[argv.index("--platform") + 1] == platform
        assert argv[argv.index("-f") + 1] == dockerfile
        assert argv[argv.index("-t") + 1] == f"{repo}:{rev}"
        assert {"--push", "--provenance=false", "--sbom=false"} <= set(argv)
        # FROM the base image by the digest the registry gave for its tag, recorded in the labels and the output.
        assert f"PYTHON_DIGEST={BASE_DIGEST}" in argv and argv[argv.index(f"PYTHON_DIGEST={BASE_DIGEST}") - 1] == (
            "--build-arg"
        )
        assert f"org.opencontainers.image.base.digest={BASE_DIGEST}" in argv
        assert f"org.opencontainers.image.base.name={BASE}" in argv
        assert f"from {dockerfile}, FROM {BASE}@{BASE_DIGEST}" in out

    # The deployment got the images by the digests ECR holds, and the shared outputs.
    variables = json.loads((checkout / "terraform/deployment/deploy.tfvars.json").read_text())
    ecr = boto3.client("ecr", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])
    for key, repo in (("tts_image_uri", TTS_REPO), ("agent_image_uri", AGENT_REPO)):
        digest = image_digest(ecr, Repository.parse(repo), rev)
        assert variables[key] == f"{repo}@{digest}"
    assert variables["bedrock_model_id"] == MODEL_ID
    assert variables["weights_prefix"] == "kokoro-82m/v1.0/"
    assert (variables["instance_type"], variables["min_instance_count"], variables["max_instance_count"]) == (
        "ml.g5.xlarge",
        1,
        2,
    )
    # The weights are in the bucket, manifest last.
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="kokoro-tts-weights-test")["Contents"]]
    assert "kokoro-82m/v1.0/manifest.json" in keys and f"kokoro-82m/v1.0/{TORCH}" in keys
    # Waited, smoke-tested through the stand-in (two sentences and the close), and said what it deployed.
    assert "endpoint kokoro-tts is InService" in out
    assert "smoke test passed: 2 sentences spoken" in out and "time to first audio" in out
    [stream] = app.streams
    assert stream.forwarded_frames == 3
    assert "endpoint health: ok, backend torch on cuda" in out
    assert [h.get("x-amzn-sagemaker-custom-attributes") for h in health.calls] == ["health"]
    assert f"runtime smoke test passed: model bedrock:{MODEL_ID}" in out
    [invocation] = runtime.invocations
    assert json.loads(invocation.payload)["mode"] == "bidi" and invocation.accept == "text/event-stream"
    assert "SageMaker endpoint:   kokoro-tts" in out
    assert f"AgentCore runtime:    arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/kokoro_tts_agent-" in out

    # Again, unchanged: the images are reused (immutable tags), the weights are not uploaded again.
    before = len(tool_calls(log))
    code, out = await run_script(deploy, {**deploy_env, "SKIP_SMOKE": "1"}, checkout)
    assert code == 0, out
    assert out.count("is already in ECR: reusing it") == 2
    assert not any(c["tool"] == "docker" and c["args"][:2] == ["buildx", "build"] for c in tool_calls(log)[before:])
    assert "0 uploaded" in out
    assert "smoke test skipped" in out

    # make destroy: the deployment only, with the var file; then DESTROY_SHARED=1 for the rest.
    before = len(tool_calls(log))
    code, out = await run_script([str(checkout / "scripts/deploy/destroy.sh")], deploy_env, checkout)
    assert code == 0, out
    assert [c for c in commands(log, before) if "destroy" in c or "apply" in c] == ["terraform deployment destroy"]
    destroy = tool_calls(log)[-1]
    assert "-var-file=deploy.tfvars.json" in destroy["args"] and destroy["region"] == REGION
    assert not (checkout / "terraform/deployment/deploy.tfvars.json").exists()
    assert "make destroy DESTROY_SHARED=1" in out

    before = len(tool_calls(log))
    code, out = await run_script(
        [str(checkout / "scripts/deploy/destroy.sh")], {**deploy_env, "DESTROY_SHARED": "1"}, checkout
    )
    assert code == 0, out
    assert "nothing to destroy: terraform/deployment's state holds no resources" in out
    changes = [c for c in tool_calls(log)[before:] if c["tool"] == "terraform" and c["args"][0] in ("apply", "destroy")]
    assert [(c["root"], c["args"][0]) for c in changes] == [("shared", "apply"), ("shared", "destroy")]
    assert all({"-var", "force_destroy=true", "region=us-east-1"} <= set(c["args"]) for c in changes)


BASE = "python:3.12-slim-bookworm"
BASE_DIGEST = "sha256:" + hashlib.sha256(BASE.encode()).hexdigest()  # what the fake docker's registry answers


@pytest.mark.parametrize("dockerfile", ["container/Dockerfile", "agent/Dockerfile"])
def test_both_images_name_one_base_image(dockerfile: str) -> None:
    assert base_image(REPO / dockerfile) == BASE


def test_a_dockerfile_with_two_bases_or_none_is_refused(tmp_path: Path) -> None:
    two = tmp_path / "Dockerfile"
    two.write_text("FROM python:3.12-slim AS build\nFROM build AS test\nFROM debian:bookworm\n")
    with pytest.raises(BaseImageError, match="one base image"):
        base_image(two)
    two.write_text("# no FROM\n")
    with pytest.raises(BaseImageError, match=r"found \[\]"):
        base_image(two)


def test_the_base_digest_is_read_from_imagetools_json_and_checked() -> None:
    answer = json.dumps({"schemaVersion": 2, "digest": BASE_DIGEST, "manifests": []})
    assert index_digest(BASE, answer) == BASE_DIGEST
    for bad in ("not json", json.dumps({"manifests": []}), json.dumps({"digest": "sha256:abc"})):
        with pytest.raises(BaseImageError):
            index_digest(BASE, bad)


def test_the_base_image_command_resolves_through_docker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tool_dir(tmp_path, basics=False, git=False, fakes=("docker",))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "tools.jsonl"))
    argv = ["base-image", "--dockerfile", str(REPO / "agent/Dockerfile"), "--docker", str(bin_dir / "docker")]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"{BASE}@{BASE_DIGEST}"
    with pytest.raises(BaseImageError, match="cannot resolve"):
        resolve(BASE, docker=str(write_failing(tmp_path / "offline-docker", "no route to registry")))


def test_deploy_sh_says_where_it_failed(deploy_env: dict[str, str], tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path)
    env = {**deploy_env, "FAKE_TF_FAIL": "shared apply"}
    result = subprocess.run(
        [str(checkout / "scripts/deploy/deploy.sh")], cwd=checkout, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "deploy: FAILED at step 'shared: terraform apply" in result.stderr
    assert "fake terraform: failing as asked" in result.stderr


def test_destroy_sh_refuses_bad_input_and_a_lost_var_file(deploy_env: dict[str, str], tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path)
    destroy = [str(checkout / "scripts/deploy/destroy.sh")]

    def run(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            destroy, cwd=checkout, env={**deploy_env, **extra}, capture_output=True, text=True, timeout=60
        )

    result = run(DESTROY_SHARED="yes")
    assert result.returncode == 2 and "DESTROY_SHARED must be 0 or 1" in result.stderr

    result = run()
    assert result.returncode == 0, result.stderr
    assert "nothing to destroy: terraform/deployment's state holds no resources" in result.stdout

    # Resources in the state, but the var file make deploy wrote is gone: say how to do it by hand.
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/kokoro-tts"
    state = {"outputs": {"endpoint_arn": {"value": arn}}, "resources": [{"type": "aws_sagemaker_endpoint"}]}
    (checkout / "terraform/deployment/terraform.tfstate").write_text(json.dumps(state))
    result = run()
    assert result.returncode == 1
    assert "terraform/deployment holds resources but terraform/deployment/deploy.tfvars.json" in result.stderr
    assert "terraform/README.md, Destroying" in result.stderr


def test_a_redeploy_changes_the_instance_type_of_an_autoscaled_endpoint(
    deploy_env: dict[str, str], tmp_path: Path
) -> None:
    """SageMaker refuses to change the instance type of a variant registered for autoscaling (the fake
    terraform enforces that, as moto does not): make deploy deregisters it first, the apply registers it again."""
    checkout = make_checkout(tmp_path)
    env = {**deploy_env, "SKIP_SMOKE": "1", "INSTANCE_TYPE": "ml.m5.large"}

    def deploy(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(checkout / "scripts/deploy/deploy.sh")],
            cwd=checkout,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=180,
        )

    sm = boto3.client("sagemaker", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])
    scaling = boto3.client("application-autoscaling", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])

    def live_instance_type() -> str:
        config = sm.describe_endpoint(EndpointName="kokoro-tts")["EndpointConfigName"]
        return str(sm.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"][0]["InstanceType"])

    def registered() -> list[str]:
        return [
            t["ResourceId"] for t in scaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
        ]

    result = deploy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert live_instance_type() == "ml.m5.large"
    assert registered() == ["endpoint/kokoro-tts/variant/AllTraffic"]

    # The apply alone, with the new type: refused, the way SageMaker refuses it.
    variables = json.loads((checkout / "terraform/deployment/deploy.tfvars.json").read_text())
    (checkout / "terraform/deployment/bigger.tfvars.json").write_text(
        json.dumps({**variables, "instance_type": "ml.m5.xlarge"})
    )
    refused = subprocess.run(
        ["terraform", "-chdir=terraform/deployment", "apply", "-auto-approve", "-var-file=bigger.tfvars.json"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "registered for autoscaling" in refused.stderr
    (checkout / "terraform/deployment/bigger.tfvars.json").unlink()  # a clean tree again: the images are reused
    assert live_instance_type() == "ml.m5.large"

    # make deploy with the new type: deregistered, updated, registered again, with its policy.
    result = deploy(INSTANCE_TYPE="ml.m5.xlarge")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "endpoint/kokoro-tts/variant/AllTraffic: ml.m5.large -> ml.m5.xlarge" in result.stdout
    assert live_instance_type() == "ml.m5.xlarge"
    assert registered() == ["endpoint/kokoro-tts/variant/AllTraffic"]
    [policy] = scaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    metric = policy["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]
    assert metric["PredefinedMetricType"] == "SageMakerVariantConcurrentRequestsPerModelHighResolution"

    # Unchanged again: nothing is deregistered.
    result = deploy(INSTANCE_TYPE="ml.m5.xlarge")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deregistered" not in result.stdout and registered() == ["endpoint/kokoro-tts/variant/AllTraffic"]


def run_deploy(checkout: Path, env: Mapping[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(checkout / "scripts/deploy/deploy.sh")],
        cwd=checkout,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_cpu_instance_type_deploys_the_onnx_image_without_a_host_image(
    deploy_env: dict[str, str], tmp_path: Path
) -> None:
    """ml.c7i.* (any CPU type): the onnx image, built for the CPU, under a tag of its own; no InferenceAmiVersion."""
    checkout = make_checkout(tmp_path)
    log = Path(deploy_env["FAKE_LOG"])
    rev = git(checkout, "rev-parse", "--short", "HEAD")
    result = run_deploy(checkout, deploy_env, SKIP_SMOKE="1", INSTANCE_TYPE="ml.c7i.xlarge")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TTS backend onnx on cpu" in result.stdout

    builds = [c["args"] for c in tool_calls(log, "docker") if c["args"][:2] == ["buildx", "build"]]
    tts = next(argv for argv in builds if argv[argv.index("-f") + 1] == "container/Dockerfile")
    assert argv_pairs(tts, "--build-arg") >= {"BACKEND=onnx", "DEVICE=cpu"}
    assert tts[tts.index("-t") + 1] == f"{TTS_REPO}:{rev}-onnx"
    agent = next(argv for argv in builds if argv[argv.index("-f") + 1] == "agent/Dockerfile")
    assert not any(a.startswith(("BACKEND=", "DEVICE=")) for a in argv_pairs(agent, "--build-arg"))

    sm = boto3.client("sagemaker", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])
    config = sm.describe_endpoint(EndpointName="kokoro-tts")["EndpointConfigName"]
    [variant] = sm.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"]
    assert "InferenceAmiVersion" not in variant
    variables = json.loads((checkout / "terraform/deployment/deploy.tfvars.json").read_text())
    assert variables["instance_type"] == "ml.c7i.xlarge" and variables["tts_image_uri"].startswith(f"{TTS_REPO}@")

    # Then a GPU type: the torch image under the plain tag (not the onnx one reused), with the host image.
    result = run_deploy(checkout, deploy_env, SKIP_SMOKE="1", INSTANCE_TYPE="ml.g5.xlarge")
    assert result.returncode == 0, result.stdout + result.stderr
    builds = [c["args"] for c in tool_calls(log, "docker") if c["args"][:2] == ["buildx", "build"]]
    assert argv_pairs(builds[-1], "--build-arg") >= {"BACKEND=torch", "DEVICE=cuda"}
    assert builds[-1][builds[-1].index("-t") + 1] == f"{TTS_REPO}:{rev}"
    config = sm.describe_endpoint(EndpointName="kokoro-tts")["EndpointConfigName"]
    [variant] = sm.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"]
    assert variant["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-gpu-3-1"


def argv_pairs(argv: list[str], flag: str) -> set[str]:
    return {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag}


def test_a_redeploy_keeps_a_scaled_out_endpoint_scaled_out(deploy_env: dict[str, str], tmp_path: Path) -> None:
    """Autoscaling took the endpoint to 3 instances; a redeploy with a new image (a new endpoint configuration,
    which the provider's UpdateEndpoint applies without RetainAllVariantProperties) must leave it at 3."""
    checkout = make_checkout(tmp_path)
    env = {**deploy_env, "SKIP_SMOKE": "1", "INSTANCE_TYPE": "ml.m5.large", "MAX_INSTANCES": "4"}
    sm = boto3.client("sagemaker", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])

    def live() -> tuple[str, int]:
        described = sm.describe_endpoint(EndpointName="kokoro-tts")
        return described["EndpointConfigName"], described["ProductionVariants"][0]["DesiredInstanceCount"]

    result = run_deploy(checkout, env)
    assert result.returncode == 0, result.stdout + result.stderr
    first_config, count = live()
    assert count == 1
    scale_out = [{"VariantName": "AllTraffic", "DesiredInstanceCount": 3}]
    # What Application Auto Scaling does on a busy endpoint.
    sm.update_endpoint_weights_and_capacities(EndpointName="kokoro-tts", DesiredWeightsAndCapacities=scale_out)
    assert live()[1] == 3

    (checkout / "scripts/deploy/README").write_text("a change: a new image tag, a new model, a new configuration\n")
    result = run_deploy(checkout, env)
    assert result.returncode == 0, result.stdout + result.stderr
    config, count = live()
    assert config != first_config, "the redeploy should have moved the endpoint to a new configuration"
    assert count == 3
    assert "the endpoint runs 3 instance(s) now: a new configuration starts with 3 (within 1-4)" in result.stdout

    # Bounds that no longer allow the live count win: a lower ceiling caps it.
    (checkout / "scripts/deploy/README").write_text("another change\n")
    result = run_deploy(checkout, env, MAX_INSTANCES="2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert live()[1] == 2
