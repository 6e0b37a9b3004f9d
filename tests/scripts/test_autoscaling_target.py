"""The autoscaling target's data (terraform/modules/sagemaker_endpoint/capacity.tf) against its sources: the server's
HEADROOM, the instance types the deployment accepts, EC2's vCPU counts, make gpu-check's report, and the table in
docs/deploy.md; the target's headroom below the slots; the drain on scale-in inside SageMaker's SIGTERM window. What
the module derives from them is asserted by `terraform test` (terraform/deployment/tests/*.tftest.hcl).
"""

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


def slots(vcpus: int) -> int:
    """The stream slots the server computes on a CPU type (engine/capacity.py), as the module derives them."""
    per_vcpu = local_number("onnx_measured_throughput") / local_number("onnx_measured_vcpus")
    return max(1, math.floor(local_number("stream_headroom") * per_vcpu * vcpus))


def target_below(stream_slots: int) -> int:
    """The module's target for ``stream_slots``: the largest whole mean m with m + z sqrt(m) <= slots."""
    z = local_number("load_quantile")
    return max(1, math.floor(((math.sqrt(z * z + 4 * stream_slots) - z) / 2) ** 2))


def target(vcpus: int) -> int:
    return target_below(slots(vcpus))


def test_the_headroom_is_the_servers() -> None:
    assert local_number("stream_headroom") == HEADROOM


def test_the_measurement_is_the_one_the_server_turned_into_7_slots() -> None:
    # 2 vCPUs measured: the module's slots for the measured machine's size are the server's own count there.
    assert (local_number("onnx_measured_throughput"), local_number("onnx_measured_vcpus")) == (8.76, 2)
    assert slots(2) == 7 == max(1, math.floor(HEADROOM * 8.76))


@pytest.mark.parametrize("stream_slots", [3, 4, 7, 14, 16, 28, 40, 126, 672, 2000])
def test_the_target_leaves_the_fluctuation_of_a_poisson_load_below_the_slots(stream_slots: int) -> None:
    """Held at the target's mean, the open sessions of an instance exceed its slots at most 1 time in 20 (the
    Poisson tail itself, not the normal approximation the module solves); one more session of mean would break
    the module's bound (the target is the largest such whole number)."""
    target = target_below(stream_slots)
    assert 1 <= target < stream_slots

    def over(mean: float) -> float:  # P(N > slots) for N ~ Poisson(mean)
        return 1 - sum(math.exp(-mean) * mean**k / math.factorial(k) for k in range(stream_slots + 1))

    if stream_slots <= 150:  # the series in floats
        assert over(target) <= 0.05
    z = local_number("load_quantile")
    assert target + z * math.sqrt(target) <= stream_slots < (target + 1) + z * math.sqrt(target + 1)


@pytest.mark.parametrize("stream_slots", [1, 2])
def test_an_instance_with_one_or_two_slots_still_tracks_one_session(stream_slots: int) -> None:
    assert target_below(stream_slots) == 1


def test_the_drain_on_scale_in_fits_sagemakers_sigterm_window() -> None:
    """SageMaker stops a removed instance's container with SIGTERM, then SIGKILL 30 s later ("Custom Inference Code
    with Hosting Services"): the server's drain (the utterance in flight, then the connections) ends before."""
    from kokoro_tts.settings import Settings

    grace = Settings().shutdown_grace_s
    serve = (REPO / "container/kokoro_tts/server/serve.py").read_text()
    assert "begin_shutdown(app, grace_s=0.5 * settings.shutdown_grace_s)" in serve
    assert "config.graceful_timeout = 0.8 * settings.shutdown_grace_s" in serve
    assert 0.5 * grace < 0.8 * grace < 30


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
    rows = {int(n): (int(s), int(t)) for n, s, t in re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \|", section, re.M)}
    assert rows == {n: (slots(n), target(n)) for n in set(cpu_vcpus().values())}
    assert rows[4] == (14, 9)  # ml.c7i.xlarge, the CPU type the guide names first


def test_every_figure_the_deploy_guide_quotes_for_slots_and_targets_is_the_codes() -> None:
    """The prose and the CPU-or-GPU table quote the module's figures, not older ones."""
    doc = (REPO / "docs/deploy.md").read_text()
    c7i_large, c7i_xlarge, gpu = target(2), target(4), target_below(int(local_number("gpu_slots_estimate")))
    assert f"{slots(2)} stream slots" in doc and f"target {c7i_large} on an ml.c7i.large" in doc
    assert f"{slots(4)} stream slots and a target of {c7i_xlarge} on an ml.c7i.xlarge" in doc
    assert f"an estimate: {int(local_number('gpu_slots_estimate'))} stream slots, target {gpu}" in doc
    for stale in ("6 (per core) and 12 (per vCPU)", "ml.c7i.large 6, ml.c7i.xlarge 12", "16 open sessions"):
        assert stale not in doc


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


def gpu_report(path: Path, *, device: str = "cuda", slots: object = 40, gpu: str = "NVIDIA H200") -> Path:
    """A report shaped as scripts/gpu_check.py writes it (the fields the deploy reads, and their neighbours)."""
    batched = {"batch": 8, "slots": slots, "throughput_audio_s_per_s": 61.2, "levels": []}
    document = {
        "run": {"device": device, "note": None, "weights": "kokoro-v1_0.pth", "workers": 1, "wall_s": 300.0},
        "machine": {"cores": 16, "arch": "x86_64", "gpu": gpu, "torch": "2.8.0", "torch_cuda": "12.8"},
        "streams": {"batched": batched, "unbatched": {**batched, "batch": 1, "slots": 12}, "batching_gain": 3.3},
    }
    path.write_text(json.dumps(document))
    return path


def test_the_gpu_slots_come_from_make_gpu_checks_report(tmp_path: Path) -> None:
    from scripts.deploy.gpu_slots import GpuSlots, measured_gpu_slots

    assert measured_gpu_slots(tmp_path / "gpu.json") is None  # gpu-check has not run: the module's estimate
    measured = measured_gpu_slots(gpu_report(tmp_path / "gpu.json"))
    assert measured == GpuSlots(
        40, f"make gpu-check on NVIDIA H200: 40 stream slots with batches of 8 ({tmp_path}/gpu.json)", "NVIDIA H200"
    )
    # gpu-check's CPU run tests the check itself: no GPU figure.
    assert measured_gpu_slots(gpu_report(tmp_path / "cpu.json", device="cpu", slots=3)) is None


@pytest.mark.parametrize("slots", [None, 0, "40", True])
def test_a_gpu_report_without_a_slot_count_stops_the_deploy(tmp_path: Path, slots: object) -> None:
    from scripts.deploy.gpu_slots import GpuResultsError, measured_gpu_slots

    with pytest.raises(GpuResultsError, match=r"streams\.batched\.slots"):
        measured_gpu_slots(gpu_report(tmp_path / "gpu.json", slots=slots))
    (tmp_path / "gpu.json").write_text("{}")
    with pytest.raises(GpuResultsError, match="is not a make gpu-check report"):
        measured_gpu_slots(tmp_path / "gpu.json")


def test_every_gpu_family_the_provider_accepts_names_its_gpu() -> None:
    from scripts.deploy.instances import instance_gpu, is_gpu_instance, provider_instance_types

    gpu_types = [name for name in provider_instance_types() if is_gpu_instance(name)]
    assert gpu_types and all(instance_gpu(name) for name in gpu_types)
    assert (instance_gpu("ml.g5.xlarge"), instance_gpu("ml.p5e.48xlarge"), instance_gpu("ml.c7i.large")) == (
        "A10G",
        "H200",
        None,
    )


def test_the_committed_gpu_report_if_any_is_one_the_deploy_reads() -> None:
    from scripts.deploy.gpu_slots import GPU_RESULTS, measured_gpu_slots

    measured = measured_gpu_slots(REPO / GPU_RESULTS)  # None where make gpu-check has not been committed
    assert measured is None or measured.slots >= 1


def test_the_var_file_carries_the_measured_slots_on_a_gpu_type_only(tmp_path: Path) -> None:
    from support.deploy_harness import AGENT_REPO, DIGEST_A, DIGEST_B, MODEL_ID, TTS_REPO, shared_outputs

    from scripts.deploy.gpu_slots import measured_gpu_slots
    from scripts.deploy.tfvars import DeploymentSettings, deployment_variables

    shared = shared_outputs()
    measured = measured_gpu_slots(gpu_report(tmp_path / "gpu.json"))
    images = (f"{TTS_REPO}@{DIGEST_A}", f"{AGENT_REPO}@{DIGEST_B}")
    on_h200 = DeploymentSettings(MODEL_ID, "ml.p5e.48xlarge", gpu_slots=measured)
    on_gpu = deployment_variables(shared, *images, on_h200)
    assert on_gpu["gpu_stream_slots"] == {"slots": 40, "source": measured.source if measured else None}
    # Measured on an H200, not an A10G: ml.g5 keeps the labelled estimate, never a faster GPU's slots.
    on_a10g = deployment_variables(shared, *images, DeploymentSettings(MODEL_ID, "ml.g5.xlarge", gpu_slots=measured))
    assert "gpu_stream_slots" not in on_a10g
    on_cpu = deployment_variables(shared, *images, DeploymentSettings(MODEL_ID, "ml.c7i.xlarge", gpu_slots=measured))
    assert "gpu_stream_slots" not in on_cpu
    unmeasured = deployment_variables(shared, *images, DeploymentSettings(MODEL_ID, "ml.g5.xlarge"))
    assert "gpu_stream_slots" not in unmeasured  # the module's labelled estimate
