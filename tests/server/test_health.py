"""GET /health, and the same answer through /invocations with SageMaker's CustomAttributes=health."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from kokoro_tts.engine.backends import kernels
from kokoro_tts.weights.layout import WeightLayout
from support.inproc_server import RunningServer

HEALTH_KEYS = {
    "status",
    "backend",
    "device",
    "model_file",
    "model_sha256",
    "fused_snake",
    "direct_conv",
    "batch",
    "version",
}


def test_health_reports_what_is_serving(server: RunningServer, model_dir: Path) -> None:
    response = httpx.get(f"{server.base_url}/health", timeout=10)
    assert response.status_code == 200
    health = response.json()
    assert set(health) == HEALTH_KEYS
    assert health["status"] == "ok" and health["backend"] == "onnx" and health["device"] == "cpu"
    manifest = WeightLayout(model_dir).read_manifest()
    assert health["model_file"] == "kokoro.onnx"
    assert health["model_sha256"] == manifest.files["kokoro.onnx"].sha256
    assert health["fused_snake"] is True  # built by make install (tests/server/test_native_kernels.py)
    # On by default wherever the library serves this CPU (AVX-512 VNNI without AMX); the function elsewhere.
    assert health["direct_conv"] is kernels.direct_conv_runs()
    assert health["batch"] == 1  # the onnx stages take one chunk a call
    assert health["version"] == "0.1.0"


def test_invocations_with_the_health_custom_attribute_answers_health_not_audio(server: RunningServer) -> None:
    expected = httpx.get(f"{server.base_url}/health", timeout=10).json()
    for attributes in ("health", "trace=1, health", "Health;x=y"):
        response = httpx.post(
            f"{server.base_url}/invocations",
            content=b"",
            headers={"X-Amzn-SageMaker-Custom-Attributes": attributes},
            timeout=10,
        )
        assert response.status_code == 200, attributes
        assert response.headers["content-type"] == "application/json"
        assert json.loads(response.content) == expected


def test_other_custom_attributes_still_synthesize(server: RunningServer) -> None:
    response = httpx.post(
        f"{server.base_url}/invocations",
        json={"text": "Hello."},
        headers={"X-Amzn-SageMaker-Custom-Attributes": "healthy=no"},
        timeout=60,
    )
    assert response.status_code == 200
    assert not response.headers["content-type"].startswith("application/json")
    assert len(response.content) > 1000
