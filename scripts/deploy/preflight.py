"""What `make deploy` needs, checked before anything changes; one message lists every gap and how to close it.

Every check runs even when an earlier one failed: fixing one thing per attempt, with a cloud build in between,
is the experience this avoids. Tools are found on the PATH of ``env`` and run with that environment, so the
tests simulate a machine without them by changing PATH alone.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .instances import is_gpu_instance
from .region import region_conflicts
from .tfvars import count_problems

MIN_TERRAFORM = (1, 11)  # docs/deploy.md; the roots themselves accept >= 1.9
TOOL_TIMEOUT_S = 30.0
# The modules the later steps import: the weight push, the smoke test's SDK and its HTTP/2 client.
PYTHON_MODULES = ("boto3", "kokoro_tts", "voice_agent", "aws_sdk_sagemaker_runtime_http2", "awscrt")
PLATFORMS = {"linux/amd64": "the TTS endpoint image", "linux/arm64": "the agent image (AgentCore runs arm64 only)"}


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # what is there (versions, the account): printed on success
    warnings: list[str] = field(default_factory=list)

    def add(self, what: str, fix: str) -> None:
        self.problems.append(Problem(what, fix))

    def problems_in_inputs(self, inputs: DeployInputs) -> bool:
        """The settings themselves are wrong (no model id, counts that are not numbers): nothing to ask AWS about."""
        return not inputs.bedrock_model_id.strip() or bool(
            count_problems(inputs.instance_type, inputs.min_instances, inputs.max_instances)
        )

    def message(self, action: str = "deploy") -> str:
        lines = [f"{action}: preflight failed, nothing was changed. Missing or wrong ({len(self.problems)}):"]
        for problem in self.problems:
            lines.append(f"  - {problem.what}")
            lines.extend(f"      {line}" for line in problem.fix.splitlines())
        lines.extend(f"  note: {w}" for w in self.warnings)
        return "\n".join(lines)


@dataclass(frozen=True)
class DeployInputs:
    bedrock_model_id: str
    region: str
    region_source: str
    instance_type: str = "ml.g5.xlarge"
    min_instances: str = "1"
    max_instances: str = "2"
    weights_source: str = "local"  # local | hf
    weights_dir: Path = Path("models/kokoro")


def _run(env: Mapping[str, str], *argv: str, timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout:.0f} s")
    except OSError as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {result.returncode}"


def check_inputs(inputs: DeployInputs, report: Report) -> None:
    if not inputs.bedrock_model_id.strip():
        report.add(
            "BEDROCK_MODEL_ID is not set: the agent needs a Bedrock model or inference profile id.",
            "make deploy BEDROCK_MODEL_ID=us.amazon.nova-2-lite-v1:0   (an Active model or inference profile in "
            f"{inputs.region}; Anthropic models need a Marketplace subscription and a use-case form first: "
            "docs/deploy.md)",
        )
    for problem in count_problems(inputs.instance_type, inputs.min_instances, inputs.max_instances):
        report.add(problem, "e.g. make deploy ... INSTANCE_TYPE=ml.g5.xlarge MIN_INSTANCES=1 MAX_INSTANCES=2")
    if inputs.weights_source not in ("local", "hf"):
        report.add(f"WEIGHTS_SOURCE={inputs.weights_source!r} is neither local nor hf", "leave it unset, or =hf")
    model = inputs.bedrock_model_id.strip()
    geo = model.split(".", 1)[0] if model.count(".") >= 2 else ""
    if geo in ("us", "eu", "apac") and not inputs.region.startswith({"apac": "ap-"}.get(geo, f"{geo}-")):
        report.warnings.append(f"BEDROCK_MODEL_ID {model} is a {geo}. inference profile, the region is {inputs.region}")


def check_weights(inputs: DeployInputs, report: Report) -> None:
    """A GPU endpoint runs the torch backend (KOKORO_BACKEND=torch), which needs kokoro-v1_0.pth in the layout:
    `make weights` (the offline mirror) has no torch weights, so this is the likeliest gap. A CPU endpoint runs
    the onnx backend, which the layout always has."""
    if inputs.weights_source == "hf":
        report.found.append("weights: from Hugging Face (fetched with the torch weights, then pushed)")
        return
    from kokoro_tts.weights.layout import TORCH, WeightLayout

    layout = WeightLayout(inputs.weights_dir)
    complete_without_torch = layout.is_complete(with_torch=False)
    with_torch = is_gpu_instance(inputs.instance_type)
    problems = layout.problems(with_torch=with_torch)
    if not problems:
        report.found.append(f"weights: {inputs.weights_dir}" + (f" (with {TORCH})" if with_torch else " (onnx)"))
        return
    fix = (
        "make deploy ... WEIGHTS_SOURCE=hf   (fetches the layout with the torch weights from Hugging Face into\n"
        f"models/kokoro-hf first), or WEIGHTS_DIR=<a layout with {TORCH}>"
    )
    if complete_without_torch:
        report.add(
            f"{inputs.weights_dir} has no torch weights ({TORCH}), which the GPU endpoint's torch backend loads "
            "(`make weights` fetches the ONNX export only).",
            fix,
        )
    else:
        report.add(f"no complete weight layout in {inputs.weights_dir}: {problems[0]}", fix)


def check_terraform(env: Mapping[str, str], report: Report) -> None:
    terraform = shutil.which("terraform", path=env.get("PATH", ""))
    install = "install Terraform >= {}.{}: https://developer.hashicorp.com/terraform/install".format(*MIN_TERRAFORM)
    if terraform is None:
        report.add("terraform is not on PATH.", install)
        return
    result = _run(env, terraform, "version", "-json")
    try:
        version = str(json.loads(result.stdout)["terraform_version"])
    except (ValueError, KeyError, TypeError):
        report.add(f"`terraform version -json` failed: {_last_line(result)}", install)
        return
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if parts < MIN_TERRAFORM:
        report.add(f"terraform {version} is too old.", install)
    else:
        report.found.append(f"terraform {version}")


def builder_platforms(inspect_output: str) -> set[str] | None:
    """The platforms `docker buildx inspect` lists for its builder; None when it lists none (an inactive builder)."""
    platforms: set[str] = set()
    for line in inspect_output.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Platforms":
            platforms |= {p.strip().rstrip("*") for p in value.split(",") if p.strip()}
    return platforms or None


def check_docker(env: Mapping[str, str], report: Report) -> None:
    docker = shutil.which("docker", path=env.get("PATH", ""))
    if docker is None:
        report.add(
            "docker is not on PATH (the images are built with docker buildx).",
            "install Docker Engine or Docker Desktop (buildx included): https://docs.docker.com/get-docker/",
        )
        return
    info = _run(env, docker, "info", "--format", "{{.ServerVersion}}")
    if info.returncode != 0:
        report.add(
            f"no Docker engine: `docker info` failed ({_last_line(info)}).",
            "start the Docker daemon (or Docker Desktop), or point DOCKER_HOST/the docker context at a running one",
        )
    else:
        report.found.append(f"docker engine {info.stdout.strip()}")
    buildx = _run(env, docker, "buildx", "version")
    if buildx.returncode != 0:
        report.add(
            f"no docker buildx: `docker buildx version` failed ({_last_line(buildx)}).",
            "install the buildx plugin (docker-buildx-plugin, or https://github.com/docker/buildx#installing)",
        )
        return
    report.found.append(buildx.stdout.strip().splitlines()[0] if buildx.stdout.strip() else "docker buildx")
    if info.returncode != 0:
        return  # no engine: the builder's platforms cannot be known
    platforms = builder_platforms(_run(env, docker, "buildx", "inspect").stdout)
    if platforms is None:
        report.warnings.append("could not tell which platforms the buildx builder supports (inactive builder?)")
        return
    for platform, why in PLATFORMS.items():
        if platform not in platforms:
            arch = platform.split("/")[1]
            report.add(
                f"the buildx builder cannot build {platform} ({why}); it lists {', '.join(sorted(platforms))}.",
                f"install {arch} emulation: docker run --privileged --rm tonistiigi/binfmt --install {arch}\n"
                "(Docker Desktop has it built in), then check `docker buildx inspect`",
            )


def check_git(repo: Path, env: Mapping[str, str], report: Report) -> None:
    git = shutil.which("git", path=env.get("PATH", ""))
    if git is None:
        report.add("git is not on PATH (the images are tagged by git revision).", "install git")
        return
    result = _run(env, git, "-C", str(repo), "rev-parse", "--short", "HEAD")
    if result.returncode != 0:
        report.add(f"no git revision to tag the images with ({_last_line(result)}).", "run it from a git checkout")


def check_python(report: Report) -> None:
    missing = [name for name in PYTHON_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        report.add(f"this Python lacks {', '.join(missing)}.", "make install   (the .venv from requirements.lock)")


def check_credentials(
    region: str, report: Report, session: Any = None, *, permissions: bool = False
) -> tuple[Any, str] | None:
    """Credentials from the default chain (environment, profile, SSO, container, instance), proven by
    sts:GetCallerIdentity: expired SSO sessions and revoked keys show up here, not an hour into the deploy.
    With ``permissions``, then every action of scripts/deploy/permissions.py, simulated for that identity.
    Returns the session and the caller's ARN when the credentials work."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    fix = (
        "configure credentials for the target account: `aws configure`, `aws sso login --profile P` with\n"
        "AWS_PROFILE=P, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN] (docs/deploy.md)"
    )
    try:
        session = session or boto3.Session(region_name=region)
        credentials = session.get_credentials()
    except BotoCoreError as e:  # e.g. a profile that does not exist
        report.add(f"no AWS credentials: {e}", fix)
        return None
    if credentials is None:
        report.add("no AWS credentials found (environment, profile, SSO, container or instance role).", fix)
        return None
    config = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"})
    try:
        identity = session.client("sts", config=config).get_caller_identity()
    except (BotoCoreError, ClientError) as e:
        report.add(f"the AWS credentials do not work: sts:GetCallerIdentity failed ({e}).", fix)
        return None
    report.found.append(f"AWS account {identity['Account']} as {identity['Arn']}, region {region}")
    if permissions:
        check_deployer_permissions(session.client("iam", config=config), str(identity["Arn"]), report)
    return session, str(identity["Arn"])


def check_deployer_permissions(iam: Any, caller_arn: str, report: Report) -> None:
    from .permissions import check_permissions

    attach = (
        "attach the deployer policies to that identity:\n"
        "python -m scripts.deploy deployer-policy --out deployer-policy\n"
        "(the same documents as docs/deployer-policy/; docs/deploy.md, Permissions)"
    )
    result = check_permissions(iam, caller_arn)
    if result.unchecked:
        report.warnings.append(f"the deployer's permissions were not checked: {result.unchecked}")
    elif result.denied:
        report.add(f"{result.principal} may not: {', '.join(result.denied)}.", attach)
    else:
        report.found.append(f"permissions: every action of the deployer policy is allowed for {result.principal}")


def check_regions(repo: Path, inputs: DeployInputs, report: Report) -> None:
    for conflict in region_conflicts(inputs.region, repo):
        report.add(
            f"{conflict} (region from {inputs.region_source}).",
            "deploy to the same region (unset AWS_REGION, or set it to that one), or `make destroy "
            "DESTROY_SHARED=1` there first",
        )


def preflight_deploy(repo: Path, env: Mapping[str, str], inputs: DeployInputs, session: Any = None) -> Report:
    report = Report()
    check_inputs(inputs, report)
    check_python(report)
    if importlib.util.find_spec("kokoro_tts") is not None:
        check_weights(inputs, report)
    check_terraform(env, report)
    check_docker(env, report)
    check_git(repo, env, report)
    check_regions(repo, inputs, report)
    working = check_credentials(inputs.region, report, session, permissions=True)
    if working is not None and not report.problems_in_inputs(inputs):
        check_account_gaps(env, inputs, report, *working)
    return report


def check_account_gaps(env: Mapping[str, str], inputs: DeployInputs, report: Report, session: Any, arn: str) -> None:
    """What the account or region lacks for this deploy (scripts/deploy/account.py), before anything is created."""
    from .account import AccountInputs, bidi_endpoint, check_account

    account = AccountInputs(
        region=inputs.region,
        instance_type=inputs.instance_type,
        min_instances=int(inputs.min_instances),
        max_instances=int(inputs.max_instances),
        bedrock_model_id=inputs.bedrock_model_id.strip(),
        caller_arn=arn,
        bidi_endpoint=bidi_endpoint(env, inputs.region),
    )
    before = len(report.problems)
    check_account(session, account, report, report.warnings.append)
    if len(report.problems) == before:
        report.found.append(
            f"account: quota for {inputs.instance_type}, {account.bedrock_model_id} Active and answering, "
            f"AgentCore Runtime and bidirectional streaming in {inputs.region}, service-linked roles"
        )


def preflight_destroy(env: Mapping[str, str], region: str, session: Any = None) -> Report:
    report = Report()
    check_terraform(env, report)
    check_credentials(region, report, session)
    return report
