"""The preflight and the Terraform validations accept the instance types and host images the AWS provider 5.100 and
SageMaker accept, and say which image each type runs."""

from __future__ import annotations

import re
from pathlib import Path

import botocore.session
import pytest

from scripts.deploy.instances import (
    GPU_AMI_VERSIONS,
    instance_type_problem,
    is_gpu_instance,
    provider_instance_types,
    tts_build,
)
from scripts.deploy.preflight import DeployInputs, Report, check_inputs

REPO = Path(__file__).resolve().parents[2]


def sagemaker_shape_enum(shape: str) -> set[str]:
    return set(botocore.session.get_session().get_service_model("sagemaker").shape_for(shape).enum)


def test_every_type_the_provider_accepts_is_one_sagemaker_accepts() -> None:
    types = provider_instance_types()
    assert {"ml.g5.xlarge", "ml.g6.xlarge", "ml.c7i.xlarge", "ml.m5.large"} <= types
    assert types <= sagemaker_shape_enum("ProductionVariantInstanceType")


def test_the_host_images_are_the_gpu_ones_the_provider_and_sagemaker_accept() -> None:
    assert set(GPU_AMI_VERSIONS) <= sagemaker_shape_enum("ProductionVariantInferenceAmiVersion")
    # What the provider's own validation lists (terraform validate with provider 5.100.0): the gpu ones and neuron.
    assert "al2023-ami-sagemaker-inference-gpu-4-1" not in GPU_AMI_VERSIONS
    for variables in ("terraform/modules/sagemaker_endpoint/variables.tf", "terraform/deployment/variables.tf"):
        text = (REPO / variables).read_text()
        block = text[text.index('variable "inference_ami_version"') :]
        block = block[: block.index("\n}\n")]
        assert sorted(set(re.findall(r'"(al2[a-z0-9-]*-gpu[0-9-]*)"', block))) == sorted(GPU_AMI_VERSIONS), variables


@pytest.mark.parametrize(
    ("instance_type", "expected"),
    [
        ("ml.g5.xlarge", None),
        ("ml.c7i.xlarge", None),
        ("ml.m5.large", None),
        ("ml.c7g.xlarge", "Graviton (arm64) type"),
        ("ml.m6gd.large", "Graviton (arm64) type"),
        ("ml.g5.xlarg", "not an endpoint instance type the AWS provider 5.100 accepts"),
        ("g5.xlarge", "not a SageMaker instance type"),
    ],
)
def test_the_preflight_refuses_what_the_provider_or_the_image_cannot_run(instance_type: str, expected: str) -> None:
    problem = instance_type_problem(instance_type)
    assert problem is None if expected is None else expected in str(problem)
    report = Report()
    check_inputs(DeployInputs("us.amazon.nova-2-lite-v1:0", "us-east-1", "AWS_REGION", instance_type), report)
    assert bool(report.problems) == (expected is not None)


def test_gpu_types_build_the_torch_image_and_cpu_types_the_onnx_image() -> None:
    assert tts_build("ml.g5.xlarge") == ("torch", "cuda") and tts_build("ml.p5.48xlarge") == ("torch", "cuda")
    assert tts_build("ml.c7i.xlarge") == ("onnx", "cpu") and tts_build("ml.inf2.xlarge") == ("onnx", "cpu")
    assert all(is_gpu_instance(t) == t.startswith(("ml.g", "ml.p")) for t in provider_instance_types())
