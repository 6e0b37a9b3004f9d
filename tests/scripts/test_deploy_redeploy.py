"""make deploy over a live deployment (deploy.sh run again in a throwaway checkout, the fake terraform and docker
of tests/support/fakes acting on moto): a new instance type on an autoscaled endpoint (which SageMaker refuses
until the variant is deregistered), a CPU type then a GPU type (the onnx image, then the torch one with the GPU
host image), and a new image on an endpoint autoscaling has scaled out.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

import boto3
import pytest
from support.deploy_harness import REGION, TTS_REPO, docker_builds, git, make_checkout, tool_calls

pytestmark = pytest.mark.usefixtures("fake_aws_env")  # moto or a stand-in, never the real account (tests/conftest.py)


def run_deploy(checkout: Path, env: Mapping[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    """scripts/deploy/deploy.sh in the checkout, with ``extra`` over ``env``."""
    return subprocess.run(
        [str(checkout / "scripts/deploy/deploy.sh")],
        cwd=checkout,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=180,
    )


def argv_pairs(argv: list[str], flag: str) -> set[str]:
    """The values given to ``flag`` (each ``flag VALUE`` in argv)."""
    return {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag}


def test_a_redeploy_changes_the_instance_type_of_an_autoscaled_endpoint(
    deploy_env: dict[str, str], tmp_path: Path
) -> None:
    """SageMaker refuses to change the instance type of a variant registered for autoscaling (the fake
    terraform enforces that, as moto does not): make deploy deregisters it first, the apply registers it again."""
    checkout = make_checkout(tmp_path)
    env = {**deploy_env, "SKIP_SMOKE": "1", "INSTANCE_TYPE": "ml.m5.large"}

    sm = boto3.client("sagemaker", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])
    scaling = boto3.client("application-autoscaling", region_name=REGION, endpoint_url=deploy_env["AWS_ENDPOINT_URL"])

    def live_instance_type() -> str:
        config = sm.describe_endpoint(EndpointName="kokoro-tts")["EndpointConfigName"]
        return str(sm.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"][0]["InstanceType"])

    def registered() -> list[str]:
        return [
            t["ResourceId"] for t in scaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
        ]

    result = run_deploy(checkout, env)
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
    result = run_deploy(checkout, env, INSTANCE_TYPE="ml.m5.xlarge")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "endpoint/kokoro-tts/variant/AllTraffic: ml.m5.large -> ml.m5.xlarge" in result.stdout
    assert live_instance_type() == "ml.m5.xlarge"
    assert registered() == ["endpoint/kokoro-tts/variant/AllTraffic"]
    [policy] = scaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    metric = policy["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]
    assert metric["PredefinedMetricType"] == "SageMakerVariantConcurrentRequestsPerModelHighResolution"

    # Unchanged again: nothing is deregistered.
    result = run_deploy(checkout, env, INSTANCE_TYPE="ml.m5.xlarge")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deregistered" not in result.stdout and registered() == ["endpoint/kokoro-tts/variant/AllTraffic"]


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

    builds = docker_builds(log)
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
    builds = docker_builds(log)
    assert argv_pairs(builds[-1], "--build-arg") >= {"BACKEND=torch", "DEVICE=cuda"}
    assert builds[-1][builds[-1].index("-t") + 1] == f"{TTS_REPO}:{rev}"
    config = sm.describe_endpoint(EndpointName="kokoro-tts")["EndpointConfigName"]
    [variant] = sm.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"]
    assert variant["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-gpu-3-1"


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
    # What Application Auto Scaling does on a busy endpoint.
    sm.update_endpoint_weights_and_capacities(
        EndpointName="kokoro-tts",
        DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 3}],
    )
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


def test_an_apply_that_agentcore_refuses_for_a_role_not_yet_propagated_runs_again(
    deploy_env: dict[str, str], tmp_path: Path
) -> None:
    """CreateAgentRuntime right after the role's creation: AgentCore's "Role validation failed" (IAM propagation,
    which the AWS provider's own runtime resource retries on) makes deploy.sh apply once more after a pause; any
    other failure stops it."""
    checkout = make_checkout(tmp_path)
    log = Path(deploy_env["FAKE_LOG"])
    refused = "creating CloudFormation Stack: ROLLBACK_COMPLETE: Role validation failed for role arn:aws:iam::x"
    result = run_deploy(
        checkout, deploy_env, SKIP_SMOKE="1", IAM_WAIT_S="0", FAKE_TF_FAIL_ONCE=f"deployment apply: {refused}"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "AgentCore did not see the runtime's new role yet (IAM propagation): applying again in 0 s" in result.stdout
    applies = [c for c in tool_calls(log, "terraform") if c["root"] == "deployment" and c["args"][0] == "apply"]
    assert len(applies) == 2

    log.unlink()
    Path(f"{log}.failed-once").unlink()
    other = run_deploy(checkout, deploy_env, SKIP_SMOKE="1", IAM_WAIT_S="0", FAKE_TF_FAIL_ONCE="deployment apply: x")
    assert other.returncode == 1 and "FAILED at step 'deployment" in other.stderr
    assert len([c for c in tool_calls(log, "terraform") if c["root"] == "deployment" and c["args"][0] == "apply"]) == 1
