"""An image in ECR as a registry holds one, for every stand-in that needs an image to exist: the deploy tests, the
fake ``docker`` (support/fakes/docker.py) and the Terraform checks against moto (terraform/tests/).

The manifest has a config blob and no layers; its digest is the sha256 of the manifest, as a registry's is (moto
would derive one from the empty layers).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"


def push_image(ecr: Any, repository: str, tag: str, config: Mapping[str, str]) -> str:
    """Puts an image whose config is ``config`` into ``repository`` under ``tag``; returns its digest."""
    blob = json.dumps(dict(config)).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "size": len(blob), "digest": _sha256(blob)},
            "layers": [],
        }
    )
    digest = _sha256(manifest.encode())
    ecr.put_image(repositoryName=repository, imageManifest=manifest, imageTag=tag, imageDigest=digest)
    return digest


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
