"""The image tag: the git revision, and for a dirty tree a hash of what differs from it.

The ECR repositories have immutable tags, and deploy.sh reuses an image whose tag is already there instead of
building it again. A bare ``<rev>-dirty`` would then serve the first dirty build for every later, different set of
changes; ``<rev>-dirty-<hash of the changes>`` names exactly one state of the tree, and an unchanged dirty tree
still reuses its image.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from .errors import DeployError


class GitError(DeployError):
    pass


def _git(repo: Path, *args: str) -> bytes:
    # GIT_OPTIONAL_LOCKS=0: `git status` must not refresh the index behind other people's backs.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], env=env, capture_output=True, check=True, timeout=60
        ).stdout
    except FileNotFoundError as e:
        raise GitError("git is not installed") from e
    except subprocess.CalledProcessError as e:
        raise GitError(f"git {' '.join(args)} failed: {e.stderr.decode(errors='replace').strip()}") from e


# What the deploy itself writes into the tree: a second deploy must not see its own var file as a change.
DEPLOY_OUTPUTS = ("terraform/deployment/deploy.tfvars.json",)


def image_tag(repo: Path, exclude: tuple[str, ...] = DEPLOY_OUTPUTS) -> str:
    rev = _git(repo, "rev-parse", "--short", "HEAD").decode().strip()
    paths = ["--", ".", *(f":(exclude){path}" for path in exclude)]
    status = _git(repo, "status", "--porcelain", "--untracked-files=all", *paths)
    if not status.strip():
        return rev
    digest = hashlib.sha256()
    digest.update(_git(repo, "diff", "HEAD", "--binary", "--no-ext-diff", "--no-color", *paths))
    # Untracked files that are not ignored are part of the build context too (a new module, say).
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard", "-z", *paths).split(b"\0")
    for name in sorted(n for n in untracked if n):
        path = repo / os.fsdecode(name)
        digest.update(b"\0" + name + b"\0")
        if path.is_file():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"{rev}-dirty-{digest.hexdigest()[:8]}"
