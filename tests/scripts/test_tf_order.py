"""The deployment root creates what is cheap and can fail before what bills by the hour: the AgentCore runtime's
stack (and the service-linked role its first creation makes) comes before the GPU endpoint, so a runtime that cannot
be created stops the apply before any instance starts.

Read from `terraform graph` of the real root (the provider from the local mirror when there is one).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENDPOINT = "module.sagemaker_endpoint.aws_sagemaker_endpoint.this"
RUNTIME = "module.agentcore_runtime.aws_cloudformation_stack.this"
TERRAFORM = shutil.which("terraform")


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


@pytest.fixture(scope="module")
def depends_on(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """{resource: the resources it waits for directly}, from the deployment root's graph."""
    assert TERRAFORM, "terraform is needed by this test (make prereqs)"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path_factory.mktemp("home")), "CHECKPOINT_DISABLE": "1"}
    env["TF_DATA_DIR"] = str(tmp_path_factory.mktemp("tf-data"))
    found = subprocess.run(["bash", "scripts/find_tf_plugin_dir.sh"], cwd=REPO, capture_output=True, text=True)
    plugin_dir = [f"-plugin-dir={found.stdout.strip()}"] if found.returncode == 0 else []
    root = "-chdir=terraform/deployment"
    init = subprocess.run(
        [TERRAFORM, root, "init", "-backend=false", "-input=false", "-no-color", "-lockfile=readonly", *plugin_dir],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert init.returncode == 0, init.stderr
    graph = subprocess.run(
        [TERRAFORM, root, "graph"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    edges: dict[str, set[str]] = defaultdict(set)
    for source, target in re.findall(r'^\s*"([^"]+)" -> "([^"]+)"', graph.stdout, re.MULTILINE):
        edges[source].add(target)
    return edges


def test_the_gpu_endpoint_waits_for_the_runtime(depends_on: dict[str, set[str]]) -> None:
    assert RUNTIME in reachable(depends_on, ENDPOINT)
    for billed in ("aws_sagemaker_endpoint_configuration.this", "aws_sagemaker_model.this"):
        assert RUNTIME in reachable(depends_on, f"module.sagemaker_endpoint.{billed}")


def test_the_runtime_does_not_wait_for_the_endpoint(depends_on: dict[str, set[str]]) -> None:
    """It names the endpoint by the name the root gives it, not by the resource."""
    assert not any(node.startswith("module.sagemaker_endpoint.") for node in reachable(depends_on, RUNTIME))
