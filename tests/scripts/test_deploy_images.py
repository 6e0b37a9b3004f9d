"""The images the deploy pushes (scripts/deploy/ecr.py, gitrev.py, base_image.py), against moto and a fake docker:
a tag's digest in ECR and the docker login, the image tag (the git revision plus a hash of uncommitted changes),
and the one base image each Dockerfile names, resolved to the digest the registry gives for its tag.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from support.deploy_harness import ACCOUNT, BASE, BASE_DIGEST, REGION, REPO, git, tool_dir
from support.ecr_images import push_image

from scripts.deploy.__main__ import main
from scripts.deploy.base_image import BaseImageError, base_image, index_digest, resolve
from scripts.deploy.ecr import EcrError, Repository, docker_login, image_digest
from scripts.deploy.gitrev import image_tag

pytestmark = pytest.mark.usefixtures("fake_aws_env")  # moto or a stand-in, never the real account (tests/conftest.py)


# ---------------------------------------------------------------------------------------------------------------
# ECR


def test_image_digest_of_a_pushed_tag(capsys: pytest.CaptureFixture[str]) -> None:
    with mock_aws():
        ecr = boto3.client("ecr", region_name=REGION)
        url = ecr.create_repository(repositoryName="kokoro-tts/tts")["repository"]["repositoryUri"]
        repository = Repository.parse(url)
        assert (repository.account, repository.region, repository.name) == (ACCOUNT, REGION, "kokoro-tts/tts")
        assert image_digest(ecr, repository, "abc1234") is None
        digest = push_image(ecr, "kokoro-tts/tts", "abc1234", {"label": "tts"})
        assert image_digest(ecr, repository, "abc1234") == digest
        assert repository.image_uri(digest) == f"{url}@{digest}"

        assert main(["image-digest", "--repository-url", url, "--tag", "abc1234"]) == 0
        assert capsys.readouterr().out.strip() == digest
        assert main(["image-digest", "--repository-url", url, "--tag", "other"]) == 3
    with pytest.raises(EcrError, match="not an ECR repository URL"):
        Repository.parse("docker.io/library/python")


def test_docker_login_passes_the_token_through_stdin(tmp_path: Path) -> None:
    docker = tmp_path / "docker"
    docker.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(tmp_path / 'login.json')!r}, 'w').write(json.dumps([sys.argv[1:], sys.stdin.read()]))\n"
    )
    docker.chmod(0o755)
    with mock_aws():
        ecr = boto3.client("ecr", region_name=REGION)
        repository = Repository.parse(
            ecr.create_repository(repositoryName="kokoro-tts/tts")["repository"]["repositoryUri"]
        )
        token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]
        docker_login(ecr, repository, docker=str(docker))
        argv, stdin = json.loads((tmp_path / "login.json").read_text())
        assert argv == ["login", "--username", "AWS", "--password-stdin", f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"]
        assert stdin == base64.b64decode(token).decode().split(":", 1)[1]
        with pytest.raises(EcrError, match=r"docker login .* failed: denied"):
            docker_login(ecr, repository, docker=str(write_failing(tmp_path / "bad-docker", "denied")))


def write_failing(path: Path, message: str) -> Path:
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.exit({message!r})\n")
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------------------------------------------------------
# The image tag


def test_the_image_tag_is_the_revision_plus_a_hash_of_the_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("ignored/\n")
    (repo / "app.py").write_text("print('v1')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    rev = git(repo, "rev-parse", "--short", "HEAD")
    assert image_tag(repo) == rev
    (repo / "ignored").mkdir()
    (repo / "ignored/cache.bin").write_bytes(b"x")
    assert image_tag(repo) == rev, "ignored files are not part of the image"

    (repo / "app.py").write_text("print('v2')\n")
    first = image_tag(repo)
    assert first.startswith(f"{rev}-dirty-") and len(first) == len(rev) + len("-dirty-") + 8
    assert image_tag(repo) == first, "the same changes, the same tag: the pushed image is reused"
    (repo / "app.py").write_text("print('v3')\n")
    assert image_tag(repo) not in (first, rev)
    (repo / "app.py").write_text("print('v2')\n")
    (repo / "new_module.py").write_text("x = 1\n")
    assert image_tag(repo) not in (first, rev), "a new untracked file changes the tag"

    (repo / "app.py").write_text("print('v1')\n")
    (repo / "new_module.py").unlink()
    var_file = repo / "terraform/deployment/deploy.tfvars.json"
    var_file.parent.mkdir(parents=True)
    var_file.write_text("{}")
    assert image_tag(repo) == rev, "the var file the deploy writes is not a change of the tree"


# ---------------------------------------------------------------------------------------------------------------
# The base image


@pytest.mark.parametrize("dockerfile", ["container/Dockerfile", "agent/Dockerfile"])
def test_both_images_name_one_base_image(dockerfile: str) -> None:
    assert base_image(REPO / dockerfile) == BASE


def test_a_dockerfile_with_two_bases_or_none_is_refused(tmp_path: Path) -> None:
    two = tmp_path / "Dockerfile"
    two.write_text("FROM python:3.12-slim AS build\nFROM build AS test\nFROM debian:bookworm\n")
    with pytest.raises(BaseImageError, match="one base image"):
        base_image(two)
    two.write_text("# no FROM\n")
    with pytest.raises(BaseImageError, match=r"found \[\]"):
        base_image(two)


def test_the_base_digest_is_read_from_imagetools_json_and_checked() -> None:
    answer = json.dumps({"schemaVersion": 2, "digest": BASE_DIGEST, "manifests": []})
    assert index_digest(BASE, answer) == BASE_DIGEST
    for bad in ("not json", json.dumps({"manifests": []}), json.dumps({"digest": "sha256:abc"})):
        with pytest.raises(BaseImageError):
            index_digest(BASE, bad)


def test_the_base_image_command_resolves_through_docker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tool_dir(tmp_path, basics=False, git=False, fakes=("docker",))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "tools.jsonl"))
    argv = ["base-image", "--dockerfile", str(REPO / "agent/Dockerfile"), "--docker", str(bin_dir / "docker")]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"{BASE}@{BASE_DIGEST}"
    with pytest.raises(BaseImageError, match="cannot resolve"):
        resolve(BASE, docker=str(write_failing(tmp_path / "offline-docker", "no route to registry")))
