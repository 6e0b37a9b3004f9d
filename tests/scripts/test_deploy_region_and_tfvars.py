"""Where the deploy deploys and with what (scripts/deploy/region.py, scripts/deploy/tfvars.py): the region from the
environment, the profile or the shared root's state, and a state in another region refused; the deployment's
variables from the shared root's outputs, images that deployment would reject refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.deploy_harness import (
    ACCOUNT,
    AGENT_REPO,
    DIGEST_A,
    DIGEST_B,
    MODEL_ID,
    REGION,
    TTS_REPO,
    shared_outputs,
)

from scripts.deploy.__main__ import main
from scripts.deploy.region import region_conflicts, resolve_region
from scripts.deploy.tfvars import DeploymentSettings, OutputsError, deployment_variables, load_outputs

pytestmark = pytest.mark.usefixtures("fake_aws_env")  # moto or a stand-in, never the real account (tests/conftest.py)


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
        "agent_session_storage": "memory",
    }


def test_session_storage_is_passed_on_or_refused_by_name() -> None:
    shared = shared_outputs()
    durable = DeploymentSettings(MODEL_ID, session_storage="s3")
    assert (
        deployment_variables(shared, f"{TTS_REPO}@{DIGEST_A}", f"{AGENT_REPO}@{DIGEST_B}", durable)[
            "agent_session_storage"
        ]
        == "s3"
    )
    with pytest.raises(OutputsError, match="SESSION_STORAGE='dynamo' must be one of memory, s3"):
        wrong = DeploymentSettings(MODEL_ID, session_storage="dynamo")
        deployment_variables(shared, f"{TTS_REPO}@{DIGEST_A}", f"{AGENT_REPO}@{DIGEST_B}", wrong)


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
