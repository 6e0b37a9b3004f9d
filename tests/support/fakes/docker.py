"""A stand-in for the ``docker`` CLI, for the deploy tests (tests/scripts/test_deploy_*.py): installed on PATH by
``support.deploy_harness.tool_dir``, it answers what the deploy asks of Docker and pushes to the moto server's ECR
(AWS_ENDPOINT_URL) what a build would push.

What it records: each call, as one JSON line appended to $FAKE_LOG: ``{"tool": "docker", "args": [...]}``; and the
registry of the last ``docker login``, in the file docker-logged-in beside that log.

What it answers:

- ``info``: engine 28.2.2, or the daemon's "Cannot connect" when $FAKE_DOCKER_ENGINE=down.
- ``buildx version``: buildx v0.24.0, or "unknown command" when $FAKE_BUILDX=missing.
- ``buildx inspect``: a builder whose platforms are $FAKE_PLATFORMS (default amd64 and arm64 among others).
- ``buildx imagetools inspect --format {{json .Manifest}} NAME``: an image index whose digest is the sha256 of NAME.
- ``login --username AWS --password-stdin REGISTRY``: remembers REGISTRY (the password must come on stdin).
- ``buildx build --push``: refused without a login to the tag's registry; else a manifest of the platform, the
  Dockerfile and the tag is put to ECR under the tag.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.*
from support.ecr_images import push_image


def build_and_push(args: list[str], logged_in: Path) -> None:
    opts = {args[i]: args[i + 1] for i in range(2, len(args) - 1) if args[i] in ("--platform", "-f", "-t")}
    repo, tag = opts["-t"].rsplit(":", 1)
    if "--push" not in args or not logged_in.exists() or logged_in.read_text() != repo.split("/")[0]:
        sys.exit("fake docker: push without a login to that registry")
    import boto3  # only for the builds: the other calls stay quick

    config = {"platform": opts["--platform"], "dockerfile": opts["-f"], "tag": tag}
    push_image(boto3.client("ecr", region_name=repo.split(".")[3]), repo.split("/", 1)[1], tag, config)


def main(argv: list[str]) -> None:
    args = list(argv)
    log = Path(os.environ["FAKE_LOG"])
    with log.open("a") as f:
        f.write(json.dumps({"tool": "docker", "args": args}) + "\n")
    logged_in = log.with_name("docker-logged-in")
    if args[:1] == ["info"]:
        if os.environ.get("FAKE_DOCKER_ENGINE") == "down":
            sys.exit(
                "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
            )
        print("28.2.2")
    elif args[:2] == ["buildx", "version"]:
        if os.environ.get("FAKE_BUILDX") == "missing":
            sys.exit("docker: unknown command: docker buildx")
        print("github.com/docker/buildx v0.24.0 d0e5e86")
    elif args[:2] == ["buildx", "inspect"]:
        platforms = os.environ.get("FAKE_PLATFORMS", "linux/amd64, linux/amd64/v2, linux/arm64*, linux/386")
        print(
            f"Name:   default\nDriver: docker\n\nNodes:\nName:      default\nStatus:    running\nPlatforms: {platforms}"
        )
    elif args[:3] == ["buildx", "imagetools", "inspect"]:
        if args[3:5] != ["--format", "{{json .Manifest}}"] or len(args) != 6:
            sys.exit(f"fake docker: unexpected {args}")
        # The registry's answer for a multi-platform tag: its index, whose digest the fake derives from the name.
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": "sha256:" + hashlib.sha256(args[5].encode()).hexdigest(),
            "size": 9218,
            "manifests": [],
        }
        print(json.dumps(index, indent=2))
    elif args[:1] == ["login"]:
        password = sys.stdin.read()
        if args[1:4] != ["--username", "AWS", "--password-stdin"] or not password:
            sys.exit(f"fake docker: bad login {args}")
        logged_in.write_text(args[4])
    elif args[:2] == ["buildx", "build"]:
        build_and_push(args, logged_in)
    else:
        sys.exit(f"fake docker: unexpected {args}")


if __name__ == "__main__":
    main(sys.argv[1:])
