"""Build the native kernels into the server package as one library: ``python container/native/build.py``.

The library (ops.c) holds the fused Snake activation (snake_op.c) and the direct integer convolution (conv_op.c).

The kernels are onnxruntime custom ops, so they compile against onnxruntime's C API header, which onnxruntime's
wheels do not carry. The header comes from Debian's ``libonnxruntime-dev`` package, fetched from the Debian mirror
this machine's apt already uses and checked against the hash pinned here (the image's build stage does the same).
The library calls onnxruntime only through the function table it is handed at registration, so it links against
nothing but libm: one header version serves every newer runtime (its C API keeps old versions). The server runs
without it, slower (engine/backends/kernels.py). Standard library only: the image builds it before any install.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = tuple(HERE / name for name in ("ops.c", "snake_op.c", "conv_op.c"))
LIBRARY = HERE.parent / "kokoro_tts" / "engine" / "backends" / "libkokoro_kernels.so"
CACHE = HERE.parents[1] / ".cache" / "onnxruntime-headers"

# Debian trixie's package; the header inside is architecture-independent. ORT_API_VERSION 21.
HEADER_PACKAGE = "pool/main/o/onnxruntime/libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb"
HEADER_PACKAGE_SHA256 = "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08"
HEADER = "onnxruntime_c_api.h"

# -ffast-math lets gcc call glibc's vector sinf (libmvec declares it for fast-math builds only); it is given to the
# compile step alone, since linking with it would add crtfastmath.o, which flushes denormals for the whole process.
COMPILE = ("-O3", "-ffast-math", "-fopenmp-simd", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror")


class BuildError(RuntimeError):
    """The kernel cannot be built here; the message says why and what to do."""


def debian_mirrors() -> list[str]:
    """The repository addresses apt is configured with."""
    try:
        listed = subprocess.run(
            ["apt-get", "indextargets", "--format", "$(REPO_URI)"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"no apt configuration to find a Debian mirror in ({e}); pass --include DIR") from None
    mirrors = sorted({line.strip() for line in listed.splitlines() if line.strip()})
    if not mirrors:  # apt lists its repositories once it has their indexes
        raise BuildError("apt knows no repository yet (run apt-get update), or pass --include DIR")
    return mirrors


def fetch_header(cache: Path = CACHE) -> Path:
    """The folder holding onnxruntime_c_api.h, fetched and verified once into ``cache``."""
    include = cache / HEADER_PACKAGE_SHA256[:16]
    if (include / HEADER).is_file():
        return include
    for mirror in debian_mirrors():
        try:
            with urllib.request.urlopen(mirror.rstrip("/") + "/" + HEADER_PACKAGE, timeout=60) as response:
                package = response.read()
        except OSError:
            continue  # not this repository (a security or updates suite)
        if hashlib.sha256(package).hexdigest() != HEADER_PACKAGE_SHA256:
            raise BuildError(f"{mirror}{HEADER_PACKAGE}: its SHA-256 is not the pinned one")
        return _unpack_header(package, include)
    raise BuildError(f"no configured Debian mirror serves {HEADER_PACKAGE}; pass --include DIR")


def _unpack_header(package: bytes, include: Path) -> Path:
    with tempfile.TemporaryDirectory() as folder:
        deb = Path(folder) / "package.deb"
        deb.write_bytes(package)
        data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = archive.extractfile(f"./usr/include/onnxruntime/{HEADER}")
        if member is None:
            raise BuildError(f"{HEADER_PACKAGE} has no {HEADER}")
        include.mkdir(parents=True, exist_ok=True)
        partial = include / f".{HEADER}.part"
        partial.write_bytes(member.read())
        os.replace(partial, include / HEADER)
    return include


def build(include: Path, out: Path = LIBRARY) -> Path:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BuildError("no C compiler (cc or gcc; Debian: apt-get install gcc)")
    with tempfile.TemporaryDirectory() as folder:
        objects, lib = [Path(folder) / f"{source.stem}.o" for source in SOURCES], Path(folder) / out.name
        for source, obj in zip(SOURCES, objects, strict=True):
            subprocess.run([compiler, *COMPILE, "-I", str(include), "-c", str(source), "-o", str(obj)], check=True)
        subprocess.run([compiler, "-shared", *map(str, objects), "-lm", "-o", str(lib)], check=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, out.with_name(f".{out.name}.part"))
        os.replace(out.with_name(f".{out.name}.part"), out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--include", type=Path, help=f"a folder holding {HEADER} (default: fetched from Debian)")
    parser.add_argument("--out", type=Path, default=LIBRARY)
    args = parser.parse_args(argv)
    try:
        built = build(args.include or fetch_header(), args.out)
    except (BuildError, subprocess.CalledProcessError) as e:
        print(f"error: the native kernels were not built: {e}", file=sys.stderr)
        return 1
    print(f"built {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
