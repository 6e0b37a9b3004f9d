#!/usr/bin/env bash
# Prints the path of a Python 3.12 interpreter: pyenv's 3.12 first (its shims do not hand it to uv),
# else python3.12 on PATH. Exits 1 with a message when there is none.
set -euo pipefail
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  # The newest 3.12 patch release pyenv has (compared as numbers, in the shell: no sort -V on macOS).
  best= best_patch=-1
  for candidate in "$root"/versions/3.12.*; do
    patch=${candidate##*/3.12.}
    case $patch in '' | *[!0-9]*) continue ;; esac
    if [ -x "$candidate/bin/python3.12" ] && [ "$patch" -gt "$best_patch" ]; then
      best=$candidate best_patch=$patch
    fi
  done
  if [ -n "$best" ]; then echo "$best/bin/python3.12"; exit 0; fi
fi
if command -v python3.12 >/dev/null 2>&1; then command -v python3.12; exit 0; fi
echo "find_python: Python 3.12 is required (pyenv install 3.12, or put python3.12 on PATH)" >&2
exit 1
