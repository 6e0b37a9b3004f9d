"""The images' base: a Dockerfile names it by tag, the deploy builds FROM it by digest.

``resolve`` asks the registry (``docker buildx imagetools inspect``) which multi-platform index the tag points to
now; deploy.sh passes that digest as the Dockerfiles' ``PYTHON_DIGEST`` and records it in its output and in the
image's standard OCI labels (org.opencontainers.image.base.name / .base.digest), so a build is repeatable and
says what it was built from.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from .ecr import DIGEST
from .errors import DeployError

# FROM [--platform=…] <image>[${PYTHON_DIGEST:+@}${PYTHON_DIGEST}] [AS <stage>]
_FROM = re.compile(
    r"^FROM\s+(?:--platform=\S+\s+)?(\S+?)(?:\$\{PYTHON_DIGEST:\+@\}\$\{PYTHON_DIGEST\})?(?:\s+AS\s+\S+)?\s*$"
)


class BaseImageError(DeployError):
    pass


def base_image(dockerfile: Path) -> str:
    """The one image the Dockerfile's stages are built FROM (a stage built FROM an earlier stage is not one)."""
    stages: set[str] = set()
    images: set[str] = set()
    try:
        text = dockerfile.read_text()
    except OSError as e:
        raise BaseImageError(f"cannot read {dockerfile}: {e.strerror}") from None
    for line in text.splitlines():
        match = _FROM.match(line.strip())
        if match is None:
            continue
        if match.group(1) not in stages:
            images.add(match.group(1))
        if (stage := re.search(r"\s+AS\s+(\S+)\s*$", line, re.IGNORECASE)) is not None:
            stages.add(stage.group(1))
    if len(images) != 1:
        raise BaseImageError(f"{dockerfile}: expected one base image in its FROM lines, found {sorted(images)}")
    return images.pop()


def index_digest(image: str, inspect_json: str) -> str:
    """The digest in ``docker buildx imagetools inspect --format '{{json .Manifest}}'``'s output."""
    try:
        digest = json.loads(inspect_json)["digest"]
    except (ValueError, KeyError, TypeError):
        raise BaseImageError(f"cannot read the digest of {image} from: {inspect_json[:200]!r}") from None
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise BaseImageError(f"the registry gave {image} an unexpected digest: {digest!r}")
    return digest


def resolve(image: str, docker: str = "docker") -> str:
    """``<image>@<digest>``: the digest the registry holds for the tag now."""
    argv = [docker, "buildx", "imagetools", "inspect", "--format", "{{json .Manifest}}", image]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise BaseImageError(f"cannot resolve {image} to a digest: {result.stderr.strip() or result.stdout.strip()}")
    return f"{image}@{index_digest(image, result.stdout)}"
