"""The autoscaling target's data (terraform/modules/sagemaker_endpoint/capacity.tf) against its sources: the server's
HEADROOM, the instance types the deployment accepts, EC2's vCPU counts, and the table in docs/deploy.md. What the
module derives from them is asserted by `terraform test` (terraform/deployment/tests/*.tftest.hcl)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
from kokoro_tts.engine.capacity import HEADROOM

from scripts.deploy.instances import instance_type_problem, is_gpu_instance, provider_instance_types

REPO = Path(__file__).resolve().parents[2]
CAPACITY = (REPO / "terraform/modules/sagemaker_endpoint/capacity.tf").read_text()
# Not in moto's copy of DescribeInstanceTypes: the AWS Compute Blog, "Amazon EC2 DL1 instances Deep Dive".
VCPUS_ELSEWHERE = {"ml.dl1.24xlarge": 96}


def local_number(name: str) -> float:
    found = re.search(rf"^\s*{name}\s*=\s*([0-9.]+)\b", CAPACITY, re.MULTILINE)
    assert found, f"capacity.tf has no local {name}"
    return float(found.group(1))


def cpu_vcpus() -> dict[str, int]:
    block = CAPACITY[CAPACITY.index("cpu_vcpus = {") :]
    block = block[: block.index("\n  }\n")]
    return {name: int(n) for name, n in re.findall(r'^\s*"(ml\.[a-z0-9]+\.[a-z0-9]+)"\s*=\s*(\d+)', block, re.M)}


def target(vcpus: int) -> int:
    """What the module derives for a CPU type, as the server computes its slots (engine/capacity.py)."""
    per_vcpu = local_number("onnx_measured_throughput") / local_number("onnx_measured_vcpus")
    return max(1, math.floor(local_number("stream_headroom") * per_vcpu * vcpus))


def test_the_headroom_is_the_servers() -> None:
    assert local_number("stream_headroom") == HEADROOM


def test_the_measurement_is_the_one_the_server_turned_into_6_slots() -> None:
    # 2 vCPUs measured: the module's figure for the measured machine's size is the server's own count there.
    assert (local_number("onnx_measured_throughput"), local_number("onnx_measured_vcpus")) == (8.76, 2)
    assert target(2) == 7 == max(1, math.floor(HEADROOM * 8.76))


def test_every_cpu_type_the_deployment_accepts_has_a_vcpu_count() -> None:
    accepted = {t for t in provider_instance_types() if not is_gpu_instance(t) and instance_type_problem(t) is None}
    assert set(cpu_vcpus()) == accepted
    assert len(accepted) == 117


def test_the_vcpu_counts_are_ec2s() -> None:
    """DefaultVCpus of EC2's DescribeInstanceTypes, as moto ships it (an ml. type runs on the EC2 type)."""
    spec = importlib.util.find_spec("moto")
    assert spec is not None and spec.origin is not None
    with gzip.open(Path(spec.origin).parent / "ec2/resources/instance_types.json.gz") as f:
        ec2 = json.load(f)
    expected = {
        name: VCPUS_ELSEWHERE[name]
        if name in VCPUS_ELSEWHERE
        else ec2[name.removeprefix("ml.")]["VCpuInfo"]["DefaultVCpus"]
        for name in cpu_vcpus()
    }
    assert cpu_vcpus() == expected
    assert not set(VCPUS_ELSEWHERE) & {f"ml.{name}" for name in ec2}, "moto has it now: drop it from VCPUS_ELSEWHERE"


def test_the_table_in_the_deploy_guide_is_the_derivation() -> None:
    doc = (REPO / "docs/deploy.md").read_text()
    section = doc[doc.index("## Autoscaling target") :]
    section = section[: section.index("\n## ", 1)]
    rows = {int(n): int(t) for n, t in re.findall(r"^\| (\d+) \| (\d+) \|", section, re.MULTILINE)}
    assert rows == {n: target(n) for n in set(cpu_vcpus().values())}
    assert rows[4] == 14  # ml.c7i.xlarge, the CPU type the guide names first


def test_make_deploy_ends_by_saying_the_target_and_where_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts.deploy.__main__ import main

    arn = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/kokoro-tts"
    source = "estimate: ml.g5.xlarge is a GPU type (torch backend), whose stream capacity is not measured; ..."
    outputs: dict[str, object] = {"endpoint_name": "kokoro-tts", "endpoint_arn": arn, "agent_runtime_arn": None}
    path = tmp_path / "deployment.json"
    cases: list[tuple[dict[str, object], str | None]] = [
        (
            {"autoscaling_target": 16, "autoscaling_target_source": source},
            f"Autoscaling target:   16 open sessions per instance ({source})",
        ),
        ({"autoscaling_target": None, "autoscaling_target_source": None}, None),
        ({}, None),  # outputs of a deployment made before the target had outputs
    ]
    for extra, expected in cases:
        path.write_text(json.dumps({name: {"value": value} for name, value in {**outputs, **extra}.items()}))
        assert main(["outputs", "--deployment-outputs", str(path)]) == 0
        lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Autoscaling target:")]
        assert lines == ([expected] if expected else [])
