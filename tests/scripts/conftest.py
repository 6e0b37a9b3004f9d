"""Fixtures of the deploy tests (tests/scripts/test_deploy_*.py): a moto server, the stand-in for what moto does
not serve of the account, a weight layout, and the environment deploy.sh runs in. Their helpers are
tests/support/deploy_harness.py."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.account_standin import FakeAccount, account_app
from support.agentcore_standin import running
from support.deploy_harness import MODEL_ID, account_env, clean_env, credentials, tool_dir, write_layout

from scripts.servers import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def torch_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_layout(tmp_path_factory.mktemp("weights") / "kokoro", with_torch=True)


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer  # here: moto takes a while to import, and few tests want it

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def account_url() -> Iterator[str]:
    """What moto does not serve of the account the preflight reads (quotas, Bedrock): quota, Nova 2 Lite Active."""
    with running(account_app(FakeAccount()), free_port()) as url:
        yield url


@pytest.fixture
def moto_url(moto_server: str) -> str:
    """The moto server, emptied, holding what an administrator creates once before the first deploy: the roles'
    permissions boundary (docs/deploy.md, Permissions), which the preflight reads."""
    import boto3

    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=10)
    iam = boto3.client(
        "iam", endpoint_url=moto_server, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    boundary = (REPO / "docs" / "deployer-policy" / "role-boundary.json").read_text()
    iam.create_policy(PolicyName="kokoro-tts-role-boundary", PolicyDocument=boundary)
    return moto_server


def plugin_dir(tmp_path: Path) -> Path:
    """What scripts/find_tf_plugin_dir.sh recognizes as a local mirror of hashicorp/aws."""
    mirror = tmp_path / "plugins"
    provider = mirror / "registry.terraform.io/hashicorp/aws/5.100.0/linux_amd64"
    provider.mkdir(parents=True)
    (provider / "terraform-provider-aws_v5.100.0_x5").write_bytes(b"")
    return mirror


@pytest.fixture
def deploy_env(tmp_path: Path, moto_url: str, account_url: str, torch_layout: Path) -> dict[str, str]:
    """What deploy.sh runs with: the basics, git and the fake terraform and docker on PATH (logging to
    tools.jsonl), credentials for the moto server, the account stand-in, a weight layout with torch weights."""
    bin_dir = tool_dir(tmp_path, fakes=("terraform", "docker"))
    return clean_env(
        tmp_path,
        bin_dir,
        BEDROCK_MODEL_ID=MODEL_ID,
        WEIGHTS_DIR=str(torch_layout),
        FAKE_LOG=str(tmp_path / "tools.jsonl"),
        TF_PLUGIN_DIR=str(plugin_dir(tmp_path)),
        WAIT_POLL_S="0.05",
        **credentials(moto_url),
        **account_env(account_url),
    )
