"""The provider lock works on every platform users deploy from.

- The committed locks carry the zh: hashes of every package of the official hashicorp/aws 5.100.0 release, which
  `terraform init` checks a registry download against on any platform, beside the linux_amd64 h1: hash.
- A mirror's unpacked package is checked by its h1: hash only, which a lock holds just for the platforms someone
  ran init on: make deploy's tf_init (scripts/deploy/lib.sh) then adds this platform's hash itself, saying so.
  Shown with the real terraform and a fake provider package in a filesystem mirror (init never runs the provider).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = shutil.which("terraform")
PROVIDER = "registry.terraform.io/hashicorp/aws/5.100.0"
# SHA256SUMS of the hashicorp/aws 5.100.0 release (its 15 packages: darwin, freebsd, linux, openbsd, windows),
# as `terraform init` from the public registry records them (the same set in independent public lock files).
RELEASE_ZH = {
    "054b8dd49f0549c9a7cc27d159e45327b7b65cf404da5e5a20da154b90b8a644",
    "0b97bf8d5e03d15d83cc40b0530a1f84b459354939ba6f135a0086c20ebbe6b2",
    "1589a2266af699cbd5d80737a0fe02e54ec9cf2ca54e7e00ac51c7359056f274",
    "6330766f1d85f01ae6ea90d1b214b8b74cc8c1badc4696b165b36ddd4cc15f7b",
    "7c8c2e30d8e55291b86fcb64bdf6c25489d538688545eb48fd74ad622e5d3862",
    "99b1003bd9bd32ee323544da897148f46a527f622dc3971af63ea3e251596342",
    "9b12af85486a96aedd8d7984b0ff811a4b42e3d88dad1a3fb4c0b580d04fa425",
    "9f8b909d3ec50ade83c8062290378b1ec553edef6a447c56dadc01a99f4eaa93",
    "aaef921ff9aabaf8b1869a86d692ebd24fbd4e12c21205034bb679b9caf883a2",
    "ac882313207aba00dd5a76dbd572a0ddc818bb9cbf5c9d61b28fe30efaec951e",
    "bb64e8aff37becab373a1a0cc1080990785304141af42ed6aa3dd4913b000421",
    "dfe495f6621df5540d9c92ad40b8067376350b005c637ea6efac5dc15028add4",
    "f0ddf0eaf052766cfe09dea8200a946519f653c384ab4336e2a4a64fdd6310e9",
    "f1b7e684f4c7ae1eed272b6de7d2049bb87a0275cb04dbb7cda6636f600699c9",
    "ff461571e3f233699bf690db319dfe46aec75e58726636a0d97dd9ac6e32fb70",
}
OTHER_PLATFORMS = ("darwin_arm64", "linux_arm64", "darwin_amd64", "linux_amd64")


def hashes(lock: str, kind: str) -> set[str]:
    return set(re.findall(rf'"{kind}:([^"]+)"', lock))


@pytest.mark.parametrize("root", ["shared", "deployment"])
def test_the_committed_lock_holds_every_platform_package_of_the_release(root: str) -> None:
    lock = (REPO / "terraform" / root / ".terraform.lock.hcl").read_text()
    assert 'version     = "5.100.0"' in lock
    assert hashes(lock, "zh") == RELEASE_ZH
    assert "edXOJWE4ORX8Fm+dpVpICzMZJat4AX0VRCAy/xkcOc0=" in hashes(lock, "h1")  # linux_amd64's package


def terraform(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert TERRAFORM, "terraform is needed by this test (make prereqs)"
    return subprocess.run([TERRAFORM, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def fake_mirror(path: Path, platform: str) -> Path:
    """A filesystem mirror (unpacked layout) holding a stand-in hashicorp/aws 5.100.0 package for one platform."""
    package = path / PROVIDER / platform
    package.mkdir(parents=True)
    binary = package / "terraform-provider-aws_v5.100.0_x5"
    binary.write_text(f"#!/bin/sh\necho 'a stand-in provider for {platform}'\nexit 1\n")
    binary.chmod(0o755)
    return path


def test_init_adds_the_checksum_of_a_platform_the_lock_was_not_made_on(tmp_path: Path) -> None:
    env = {"PATH": str(Path(TERRAFORM or "terraform").parent) + ":/usr/bin:/bin", "HOME": str(tmp_path)}
    env |= {"CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    here = json.loads(terraform("version", "-json", cwd=tmp_path, env=env).stdout)["platform"]
    other = next(p for p in OTHER_PLATFORMS if p != here)

    checkout = tmp_path / "checkout"
    for name in ("scripts/find_tf_plugin_dir.sh", "scripts/deploy/lib.sh"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, checkout / name)
    root = checkout / "terraform/probe"
    root.mkdir(parents=True)
    shutil.copy2(REPO / "terraform/deployment/versions.tf", root / "versions.tf")

    # The lock, made on another platform from its package.
    made = terraform(
        "-chdir=terraform/probe",
        "providers",
        "lock",
        f"-platform={other}",
        f"-fs-mirror={fake_mirror(tmp_path / 'mirror-other', other)}",
        cwd=checkout,
        env=env,
    )
    assert made.returncode == 0, made.stderr
    lock = (root / ".terraform.lock.hcl").read_text()
    assert len(hashes(lock, "h1")) == 1

    # This platform's package: a plain init refuses it, as it would on a Mac with the linux-only lock.
    mirror = fake_mirror(tmp_path / "mirror-here", here)
    plain = terraform("-chdir=terraform/probe", "init", f"-plugin-dir={mirror}", "-no-color", cwd=checkout, env=env)
    assert plain.returncode != 0 and "checksums previously recorded" in plain.stderr
    shutil.rmtree(root / ".terraform", ignore_errors=True)

    # make deploy's init: the missing checksum is added, with a line saying so, and init succeeds.
    flow = subprocess.run(
        ["bash", "-c", ". scripts/deploy/lib.sh && tf_init probe"],
        cwd=checkout,
        env={**env, "TF_PLUGIN_DIR": str(mirror)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert flow.returncode == 0, flow.stdout + flow.stderr
    assert f"has no checksum of this platform's ({here}) provider package: adding it" in flow.stdout
    assert "commit the lock file" in flow.stdout
    completed = (root / ".terraform.lock.hcl").read_text()
    assert len(hashes(completed, "h1")) == 2 and hashes(lock, "h1") < hashes(completed, "h1")
    assert (root / ".terraform/providers" / PROVIDER / here / "terraform-provider-aws_v5.100.0_x5").is_file()
