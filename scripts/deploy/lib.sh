# shellcheck shell=bash
# shellcheck disable=SC2034 # STEP and DEPLOYMENT_VARS are read by the scripts that source this file
# Sourced by scripts/deploy/deploy.sh and scripts/deploy/destroy.sh (after `cd` to the repository root): the environment and
# the terraform helpers both use.

PY=${PYTHON:-$PWD/.venv/bin/python}
if [ ! -x "$PY" ]; then
  echo "$(basename "$0"): $PY not found: run make install first" >&2
  exit 2
fi
deploy_py() { "$PY" -m scripts.deploy "$@"; }

export GIT_OPTIONAL_LOCKS=0 # nothing here may touch the git index
export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1
# A CLI config path that does not exist only produces warnings on every command.
if [ -n "${TF_CLI_CONFIG_FILE:-}" ] && [ ! -f "$TF_CLI_CONFIG_FILE" ]; then unset TF_CLI_CONFIG_FILE; fi

# The deployment root's variables, written by deploy.sh and read by destroy.sh. Not an *.auto.tfvars.json:
# `terraform test` would load one into the root's tests.
VAR_FILE=deploy.tfvars.json
DEPLOYMENT_VARS=terraform/deployment/$VAR_FILE

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kokoro-deploy.XXXXXX")
STEP=preflight

# On exit: remove WORK and, after a failure past preflight (whose own message says it all), name the failed step
# and what to do next ($1).
on_failure_say() {
  FAILURE_HINT=$1
  trap _on_exit EXIT
  trap 'exit 130' INT TERM
}
_on_exit() {
  local rc=$?
  rm -rf "$WORK"
  if [ $rc -ne 0 ] && [ "$STEP" != preflight ]; then
    echo >&2
    echo "$(basename "$0" .sh): FAILED at step '$STEP' (exit $rc). $FAILURE_HINT" >&2
  fi
}

step() {
  STEP=$1
  echo
  echo "== $1"
}

tf() { # ROOT terraform-args...
  local root=$1
  shift
  terraform -chdir="terraform/$root" "$@"
}

tf_platform() { # the os_arch this terraform installs providers for (linux_amd64, darwin_arm64, ...)
  terraform version -json | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["platform"])'
}

tf_init() { # ROOT: the local provider mirror when this machine has one, else the registry
  local args=(-input=false -no-color) plugin_dir= lock_args=() platform log=$WORK/init-$1.log
  if plugin_dir=$(scripts/find_tf_plugin_dir.sh 2>/dev/null); then
    args+=("-plugin-dir=$plugin_dir")
    lock_args+=("-fs-mirror=$plugin_dir")
  fi
  if tf "$1" init "${args[@]}" >"$log" 2>&1; then
    return 0
  fi
  # The lock's zh: hashes cover every platform's package from the registry, but a mirror's unpacked package
  # is checked by its h1: hash, which the lock holds only for the platforms someone ran init on: add this one's.
  if grep -q "checksums previously recorded" "$log"; then
    platform=$(tf_platform)
    echo "  terraform/$1/.terraform.lock.hcl has no checksum of this platform's ($platform) provider package:" \
      "adding it (terraform providers lock -platform=$platform${plugin_dir:+ -fs-mirror=$plugin_dir}); commit the lock file"
    if tf "$1" providers lock -no-color "-platform=$platform" "${lock_args[@]}" >>"$log" 2>&1 &&
      tf "$1" init "${args[@]}" >>"$log" 2>&1; then
      return 0
    fi
  fi
  cat "$log" >&2
  return 1
}

tf_has_resources() { # ROOT: true when the root's state holds resources (after tf_init)
  local listed
  listed=$(tf "$1" state list 2>/dev/null) || listed=
  [ -n "$listed" ]
}
