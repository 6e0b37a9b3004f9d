"""ECR: logging docker in, and the digest of a pushed tag (the deployment takes images by digest only)."""

from __future__ import annotations

import base64
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from .errors import DeployError

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>
_REPOSITORY_URL = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([^@:\s]+)$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class EcrError(DeployError):
    pass


@dataclass(frozen=True)
class Repository:
    url: str
    account: str
    region: str
    name: str

    @property
    def registry(self) -> str:
        return self.url.split("/", 1)[0]

    @classmethod
    def parse(cls, url: str) -> Repository:
        match = _REPOSITORY_URL.match(url)
        if match is None:
            raise EcrError(f"not an ECR repository URL: {url!r}")
        return cls(url, *match.groups())

    def image_uri(self, digest: str) -> str:
        if not DIGEST.match(digest):
            raise EcrError(f"not an image digest: {digest!r}")
        return f"{self.url}@{digest}"


def image_digest(ecr: Any, repository: Repository, tag: str) -> str | None:
    """The digest ECR holds for ``tag``, or None when the tag is not there."""
    try:
        response = ecr.describe_images(
            registryId=repository.account, repositoryName=repository.name, imageIds=[{"imageTag": tag}]
        )
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == "ImageNotFoundException":
            return None
        raise EcrError(f"cannot read {repository.url}:{tag}: {e}") from e
    details = response.get("imageDetails") or []
    if not details:
        return None
    digest = str(details[0]["imageDigest"])
    if not DIGEST.match(digest):
        raise EcrError(f"ECR returned an unexpected digest for {repository.url}:{tag}: {digest!r}")
    return digest


def docker_login(ecr: Any, repository: Repository, docker: str = "docker") -> None:
    """`docker login` to the repository's registry with a token from GetAuthorizationToken.

    The password goes through stdin, never argv, and never through the shell script (it would show in `ps`).
    """
    try:
        data = ecr.get_authorization_token(registryIds=[repository.account])["authorizationData"][0]
    except ClientError as e:
        raise EcrError(f"ecr:GetAuthorizationToken failed: {e}") from e
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    result = subprocess.run(
        [docker, "login", "--username", user, "--password-stdin", repository.registry],
        input=password,
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise EcrError(f"docker login {repository.registry} failed: {result.stderr.strip() or result.stdout.strip()}")
