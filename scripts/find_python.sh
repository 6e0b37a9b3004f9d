#!/usr/bin/env bash
# Prints the path of a Python 3.12 interpreter: pyenv's 3.12 first (its shims do not hand it to uv),
# else python3.12 on PATH. Exits 1 with a message when there is none.
set -euo pipefail
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  # Newest patch release first (a numeric sort of the third field: BSD and GNU sort alike).
  for version in $(ls "$root/versions" 2>/dev/null | grep '^3\.12\.' | sort -t. -k3,3nr); do
    candidate=$root/versions/$version
    if [ -x "$candidate/bin/python3.12" ]; then echo "$candidate/bin/python3.12"; exit 0; fi
  done
fi
if command -v python3.12 >/dev/null 2>&1; then command -v python3.12; exit 0; fi
echo "find_python: Python 3.12 is required (pyenv install 3.12, or put python3.12 on PATH)" >&2
exit 1
