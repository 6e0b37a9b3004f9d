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

# -lockfile=readonly: init never rewrites the committed lock, so the tree stays clean (and the image tag free of
# -dirty-) on every platform. A package from the registry is checked against the lock's zh: hashes, which cover
# every platform's; a mirror's unpacked package only against an h1: hash, which the lock holds for linux_amd64.
tf_init() { # ROOT: the local provider mirror when this machine has one, else the registry
  local plugin_dir platform log=$WORK/init-$1.log
  plugin_dir=$(scripts/find_tf_plugin_dir.sh 2>/dev/null) || plugin_dir=
  if tf "$1" init -input=false -no-color -lockfile=readonly ${plugin_dir:+"-plugin-dir=$plugin_dir"} >"$log" 2>&1; then
    return 0
  fi
  cat "$log" >&2
  if grep -q "checksums previously recorded" "$log"; then
    platform=$(tf_platform) || platform=this-platform
    echo "terraform/$1/.terraform.lock.hcl has no h1: checksum of the unpacked $platform package in $plugin_dir" \
      "(only the registry's packages are covered on every platform). Record it once and commit the lock:" >&2
    echo "  terraform -chdir=terraform/$1 providers lock -platform=$platform -fs-mirror=$plugin_dir" >&2
  fi
  return 1
}

tf_has_resources() { # ROOT: true when the root's state holds resources (after tf_init)
  local listed
  listed=$(tf "$1" state list 2>/dev/null) || listed=
  [ -n "$listed" ]
}
