"""The provider lock works on every platform users deploy from, and `make deploy` never rewrites it.

- The committed locks carry the zh: hashes of every package of the official hashicorp/aws 5.100.0 release, which
  `terraform init` checks a registry download against on any platform, beside the linux_amd64 h1: hash.
- make deploy's tf_init (scripts/deploy/lib.sh) runs `terraform init -lockfile=readonly`: a package checked by its
  zh: hash (a registry download on a Mac) installs and the lock stays as committed, where a plain init adds that
  platform's h1: line, a change in the tree that tags the next images `-dirty-`. A mirror's unpacked package is
  checked by its h1: hash only: without it, init stops and says the one command that records it.
  Shown with the real terraform and a fake provider package in a filesystem mirror (init never runs the provider);
  a packed mirror (the registry's zip) stands in for the registry, which tests do not reach.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
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


def packed_mirror(path: Path, platform: str) -> tuple[Path, str]:
    """A filesystem mirror (packed layout: the registry's zip) of one platform's stand-in package, and the zip's
    zh: hash, as the registry's SHA256SUMS would list it."""
    folder = path / PROVIDER.rsplit("/", 1)[0]
    folder.mkdir(parents=True)
    archive = folder / f"terraform-provider-aws_5.100.0_{platform}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(zipfile.ZipInfo("terraform-provider-aws_v5.100.0_x5"), "#!/bin/sh\nexit 1\n")
    return path, hashlib.sha256(archive.read_bytes()).hexdigest()


def probe_checkout(tmp_path: Path, lock: str, *, mirror_finder: bool) -> Path:
    """A checkout with lib.sh, a root pinning hashicorp/aws like the real ones, and its lock; without the mirror
    finder, this machine has no local mirror (as on a Mac): tf_init uses the CLI's installation methods."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts/deploy").mkdir(parents=True)
    shutil.copy2(REPO / "scripts/deploy/lib.sh", checkout / "scripts/deploy/lib.sh")
    finder = checkout / "scripts/find_tf_plugin_dir.sh"
    if mirror_finder:
        shutil.copy2(REPO / "scripts/find_tf_plugin_dir.sh", finder)
    else:
        finder.write_text("#!/bin/sh\nexit 1\n")
        finder.chmod(0o755)
    root = checkout / "terraform/probe"
    root.mkdir(parents=True)
    shutil.copy2(REPO / "terraform/deployment/versions.tf", root / "versions.tf")
    (root / ".terraform.lock.hcl").write_text(lock)
    return checkout


def lock_of(*hash_lines: str) -> str:
    listed = "".join(f'    "{h}",\n' for h in hash_lines)
    return (
        'provider "registry.terraform.io/hashicorp/aws" {\n  version     = "5.100.0"\n'
        f'  constraints = "~> 5.100"\n  hashes = [\n{listed}  ]\n}}\n'
    )


def tf_init(checkout: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """make deploy's init of the probe root."""
    return subprocess.run(
        ["bash", "-c", ". scripts/deploy/lib.sh && tf_init probe"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {"PATH": str(Path(TERRAFORM or "terraform").parent) + ":/usr/bin:/bin", "HOME": str(tmp_path)}
    return env | {"CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}


def test_init_of_a_package_checked_by_its_zh_hash_leaves_the_lock_as_committed(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    here = json.loads(terraform("version", "-json", cwd=tmp_path, env=env).stdout)["platform"]
    mirror, zh = packed_mirror(tmp_path / "registry", here)
    cli_config = tmp_path / "cli.tfrc"
    cli_config.write_text(f'provider_installation {{\n  filesystem_mirror {{\n    path = "{mirror}"\n  }}\n}}\n')
    env["TF_CLI_CONFIG_FILE"] = str(cli_config)
    committed = lock_of(f"zh:{zh}")  # this platform's package by its zh: hash only, as on a Mac
    checkout = probe_checkout(tmp_path, committed, mirror_finder=False)
    root = checkout / "terraform/probe"

    # What a plain init does: it records this platform's h1: hash, a change to a committed file.
    plain = terraform("-chdir=terraform/probe", "init", "-no-color", cwd=checkout, env=env)
    assert plain.returncode == 0, plain.stderr
    assert len(hashes((root / ".terraform.lock.hcl").read_text(), "h1")) == 1
    (root / ".terraform.lock.hcl").write_text(committed)
    shutil.rmtree(root / ".terraform")

    flow = tf_init(checkout, env)
    assert flow.returncode == 0, flow.stdout + flow.stderr
    assert (root / ".terraform.lock.hcl").read_text() == committed
    assert (root / ".terraform/providers" / PROVIDER / here / "terraform-provider-aws_v5.100.0_x5").is_file()


def test_init_from_an_unpacked_mirror_without_its_h1_hash_stops_and_says_how_to_record_it(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    here = json.loads(terraform("version", "-json", cwd=tmp_path, env=env).stdout)["platform"]
    other = next(p for p in OTHER_PLATFORMS if p != here)
    # The lock, made on another platform from its package.
    made = terraform(
        "providers",
        "lock",
        f"-platform={other}",
        f"-fs-mirror={fake_mirror(tmp_path / 'mirror-other', other)}",
        cwd=probe_checkout(tmp_path / "maker", "", mirror_finder=False) / "terraform/probe",
        env=env,
    )
    assert made.returncode == 0, made.stderr
    lock = (tmp_path / "maker/checkout/terraform/probe/.terraform.lock.hcl").read_text()
    assert len(hashes(lock, "h1")) == 1
    checkout = probe_checkout(tmp_path, lock, mirror_finder=True)

    mirror = fake_mirror(tmp_path / "mirror-here", here)
    flow = tf_init(checkout, {**env, "TF_PLUGIN_DIR": str(mirror)})
    assert flow.returncode == 1
    assert "checksums previously recorded" in flow.stderr
    assert f"terraform -chdir=terraform/probe providers lock -platform={here} -fs-mirror={mirror}" in flow.stderr
    assert (checkout / "terraform/probe/.terraform.lock.hcl").read_text() == lock
