"""deploy.sh and destroy.sh end to end (make deploy, make destroy), in a throwaway git checkout, with the fake
terraform and docker of tests/support/fakes acting on a moto server and the smoke tests going to the stand-ins:
every step in order, a second run that reuses what the first made, the destroy of each root; where a failed
run stopped; what destroy.sh refuses.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from kokoro_tts.weights.layout import TORCH
from support.agent_fixtures import FAST, agent_settings, make_model
from support.agentcore_standin import AgentCoreStandin, HealthStandin, deployed_agent, running
from support.deploy_harness import (
    ACCOUNT,
    AGENT_REPO,
    BASE,
    BASE_DIGEST,
    MODEL_ID,
    REGION,
    TTS_REPO,
    docker_builds,
    git,
    make_checkout,
    tool_calls,
)
from support.inproc_server import RunningServer
from support.sagemaker import Certs, sagemaker

from scripts.deploy.ecr import Repository, image_digest
from scripts.sagemaker_standin import StandIn
from scripts.servers import free_port

RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/kokoro_tts_agent-AbCdE12345"
HEALTHY_GPU = {"status": "ok", "backend": "torch", "device": "cuda", "model_sha256": "ab" * 32, "version": "1.0.0"}

pytestmark = pytest.mark.usefixtures("fake_aws_env")  # moto or a stand-in, never the real account (tests/conftest.py)


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


@dataclass
class FirstDeploy:
    """The first deploy.sh run and the stand-ins its smoke tests spoke to."""

    code: int
    out: str
    sagemaker: StandIn  # the bidirectional stream
    health: HealthStandin  # InvokeEndpoint's health answer
    runtime: AgentCoreStandin  # InvokeAgentRuntime, in front of the real agent app


async def deploy_with_standins(
    checkout: Path, deploy_env: dict[str, str], server: RunningServer, certs: Certs
) -> FirstDeploy:
    """deploy.sh with every smoke test going to a stand-in in front of the real TTS server and agent app."""
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
            code, out = await run_script([str(checkout / "scripts/deploy/deploy.sh")], env, checkout)
    return FirstDeploy(code, out, app, health, runtime)


def assert_every_step_in_order(log: Path) -> None:
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


def assert_each_tool_called_as_the_real_one_would_be(log: Path, deploy_env: dict[str, str], rev: str, out: str) -> None:
    calls = tool_calls(log)
    init = next(c for c in calls if c["tool"] == "terraform" and c["args"][0] == "init")
    assert f"-plugin-dir={deploy_env['TF_PLUGIN_DIR']}" in init["args"]
    assert "-lockfile=readonly" in init["args"]  # the committed lock stays as it is
    shared_apply = next(c for c in tool_calls(log, "terraform") if c["root"] == "shared" and c["args"][0] == "apply")
    assert {"-auto-approve", "-var", "region=us-east-1"} <= set(shared_apply["args"])
    builds = docker_builds(log)
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


def assert_the_deployment_got_the_images_by_digest_and_the_shared_outputs(
    checkout: Path, deploy_env: dict[str, str], rev: str
) -> None:
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


def assert_the_weights_are_in_the_bucket(deploy_env: dict[str, str]) -> None:
    """The weight layout is in the shared bucket under its prefix, the manifest and the torch weights with it."""
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="kokoro-tts-weights-test")["Contents"]]
    assert "kokoro-82m/v1.0/manifest.json" in keys and f"kokoro-82m/v1.0/{TORCH}" in keys


def assert_waited_smoke_tested_and_said_what_it_deployed(first: FirstDeploy) -> None:
    """Smoke-tested through the stand-ins: two sentences and the close on the stream, the health answer, the
    runtime's bidirectional invocation."""
    out = first.out
    assert "endpoint kokoro-tts is InService" in out
    assert "smoke test passed: 2 sentences spoken" in out and "time to first audio" in out
    [stream] = first.sagemaker.streams
    assert stream.forwarded_frames == 3
    assert "endpoint health: ok, backend torch on cuda" in out
    assert [h.get("x-amzn-sagemaker-custom-attributes") for h in first.health.calls] == ["health"]
    assert f"runtime smoke test passed: model bedrock:{MODEL_ID}" in out
    [invocation] = first.runtime.invocations
    assert json.loads(invocation.payload)["mode"] == "bidi" and invocation.accept == "text/event-stream"
    assert "SageMaker endpoint:   kokoro-tts" in out
    assert f"AgentCore runtime:    arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/kokoro_tts_agent-" in out


async def deploy_again_unchanged(checkout: Path, deploy_env: dict[str, str], log: Path) -> None:
    """The images are reused (immutable tags), the weights are not uploaded again."""
    before = len(tool_calls(log))
    code, out = await run_script(
        [str(checkout / "scripts/deploy/deploy.sh")], {**deploy_env, "SKIP_SMOKE": "1"}, checkout
    )
    assert code == 0, out
    assert out.count("is already in ECR: reusing it") == 2
    assert not any(c["tool"] == "docker" and c["args"][:2] == ["buildx", "build"] for c in tool_calls(log)[before:])
    assert "0 uploaded" in out
    assert "smoke test skipped" in out


async def destroy_the_deployment(checkout: Path, deploy_env: dict[str, str], log: Path) -> None:
    """make destroy: the deployment only, with the var file; it says how to destroy the rest."""
    before = len(tool_calls(log))
    code, out = await run_script([str(checkout / "scripts/deploy/destroy.sh")], deploy_env, checkout)
    assert code == 0, out
    assert [c for c in commands(log, before) if "destroy" in c or "apply" in c] == ["terraform deployment destroy"]
    destroy = tool_calls(log)[-1]
    assert "-var-file=deploy.tfvars.json" in destroy["args"] and destroy["region"] == REGION
    assert not (checkout / "terraform/deployment/deploy.tfvars.json").exists()
    assert "make destroy DESTROY_SHARED=1" in out


async def destroy_the_shared_root(checkout: Path, deploy_env: dict[str, str], log: Path) -> None:
    """make destroy DESTROY_SHARED=1 once the deployment is gone: the shared root is applied again with
    force_destroy=true (so that its repositories and bucket go with what they hold), then destroyed."""
    before = len(tool_calls(log))
    code, out = await run_script(
        [str(checkout / "scripts/deploy/destroy.sh")], {**deploy_env, "DESTROY_SHARED": "1"}, checkout
    )
    assert code == 0, out
    assert "nothing to destroy: terraform/deployment's state holds no resources" in out
    changes = [c for c in tool_calls(log)[before:] if c["tool"] == "terraform" and c["args"][0] in ("apply", "destroy")]
    assert [(c["root"], c["args"][0]) for c in changes] == [("shared", "apply"), ("shared", "destroy")]
    assert all({"-var", "force_destroy=true", "region=us-east-1"} <= set(c["args"]) for c in changes)


async def test_deploy_sh_end_to_end_then_again_then_destroy(
    server: RunningServer, certs: Certs, deploy_env: dict[str, str], tmp_path: Path
) -> None:
    checkout = make_checkout(tmp_path)
    log = Path(deploy_env["FAKE_LOG"])
    rev = git(checkout, "rev-parse", "--short", "HEAD")

    first = await deploy_with_standins(checkout, deploy_env, server, certs)
    assert first.code == 0, first.out
    assert_every_step_in_order(log)
    assert_each_tool_called_as_the_real_one_would_be(log, deploy_env, rev, first.out)
    assert_the_deployment_got_the_images_by_digest_and_the_shared_outputs(checkout, deploy_env, rev)
    assert_the_weights_are_in_the_bucket(deploy_env)
    assert_waited_smoke_tested_and_said_what_it_deployed(first)

    await deploy_again_unchanged(checkout, deploy_env, log)
    await destroy_the_deployment(checkout, deploy_env, log)
    await destroy_the_shared_root(checkout, deploy_env, log)


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
