#!/usr/bin/env bash
# Offline checks of terraform/, no AWS account needed:
#   fmt       terraform fmt -check
#   validate  init (-backend=false) + validate of both roots (and so of every module they call)
#   test      terraform test in both roots (mock provider: plan and apply)
#   checkov   static analysis, zero failed checks (skips are written beside their resources)
#   moto      real apply + destroy of shared then deployment against a moto server on loopback
#   iam       the whole deploy and destroy flow as a user holding only docs/deployer-policy/, IAM enforced
#             (terraform/tests/enforced_flow.py): every call allowed; each statement needed by some call (or
#             listed as one moto cannot exercise); without a statement the shared root's apply fails
#             (the deployer's attempts to escape the roles' boundary: tests/scripts/test_iam_authorizer.py)
#
# Usage: scripts/terraform_checks.sh [STEP...]   (default: every step, in the order above)
#        scripts/terraform_checks.sh --lock      re-pin requirements-checkov.lock
# Prints PASS/FAIL per step (moto and iam run beside the others: they mostly wait) and exits non-zero when any
# step fails. Needs terraform, uv, Python 3.12
# (scripts/find_python.sh) and, for the moto step, the project's .venv (make install).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"

TF_ROOT=terraform
ROOTS=(shared deployment)
CHECKOV_VERSION=3.3.30
CHECKOV_LOCK=requirements-checkov.lock
CHECKOV_VENV=$TF_ROOT/.venv-checkov
CACHE=$REPO/$TF_ROOT/.cache
MOTO_SERVER=$REPO/.venv/bin/moto_server
VENV_PYTHON=$REPO/.venv/bin/python
UV=$(command -v uv 2>/dev/null || echo "$HOME/.local/bin/uv")

if [ "${1:-}" = "--lock" ]; then
  echo "checkov==$CHECKOV_VERSION" | "$UV" pip compile - --universal --generate-hashes --python-version 3.12 \
    --quiet --custom-compile-command "scripts/terraform_checks.sh --lock" -o "$CHECKOV_LOCK"
  echo "wrote $CHECKOV_LOCK"
  exit 0
fi

STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(fmt validate test checkov moto iam)
for step in "${STEPS[@]}"; do
  case $step in fmt | validate | test | checkov | moto | iam) ;; *)
    echo "unknown step: $step (fmt validate test checkov moto iam)" >&2
    exit 2
    ;;
  esac
done

# Nothing here may reach a real AWS account: dummy credentials, no profile, no instance metadata.
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_SESSION_TOKEN=testing
export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_PROFILE
export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1
# A CLI config path that does not exist only produces warnings on every command.
if [ -n "${TF_CLI_CONFIG_FILE:-}" ] && [ ! -f "$TF_CLI_CONFIG_FILE" ]; then unset TF_CLI_CONFIG_FILE; fi

# A local provider mirror when this machine has one; otherwise init downloads the provider, once, into a cache.
INIT_ARGS=(-input=false -no-color)
if PLUGIN_DIR=$(scripts/find_tf_plugin_dir.sh 2>/dev/null); then
  INIT_ARGS+=("-plugin-dir=$PLUGIN_DIR")
else
  export TF_PLUGIN_CACHE_DIR=${TF_PLUGIN_CACHE_DIR:-$CACHE/plugins}
  mkdir -p "$TF_PLUGIN_CACHE_DIR"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/terraform-checks.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

# Each configuration keeps its .terraform under terraform/.cache, so a developer's own init is left alone.
tf_init() { # DIR [extra init args]
  local dir=$1
  shift
  TF_DATA_DIR=$CACHE/data/${dir//\//_} terraform -chdir="$TF_ROOT/$dir" init -backend=false "${INIT_ARGS[@]}" "$@" >/dev/null
}

tf_in() { # DIR terraform-args...
  local dir=$1
  shift
  TF_DATA_DIR=$CACHE/data/${dir//\//_} terraform -chdir="$TF_ROOT/$dir" "$@"
}

step_fmt() {
  terraform fmt -check -recursive -diff -no-color "$TF_ROOT"
}

step_validate() {
  # The roots call every module, so validating them validates the modules too.
  local dir
  for dir in "${ROOTS[@]}"; do
    echo "== $dir"
    tf_init "$dir"
    tf_in "$dir" validate -no-color
  done
}

step_test() {
  local dir
  for dir in "${ROOTS[@]}"; do
    echo "== $dir"
    tf_init "$dir"
    tf_in "$dir" test -no-color
  done
}

ensure_checkov() {
  local want stamp=$CHECKOV_VENV/.lock.sha256
  want=$(sha256sum "$CHECKOV_LOCK" | cut -d' ' -f1)
  if [ -x "$CHECKOV_VENV/bin/checkov" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  rm -rf "$CHECKOV_VENV"
  "$UV" venv --quiet --python "$(scripts/find_python.sh)" "$CHECKOV_VENV"
  "$UV" pip sync --quiet --python "$CHECKOV_VENV/bin/python" "$CHECKOV_LOCK"
  echo "$want" >"$stamp"
}

step_checkov() {
  ensure_checkov
  # --skip-download: no network beyond the package index, and the guideline links are not needed.
  "$CHECKOV_VENV/bin/checkov" --directory "$TF_ROOT" --framework terraform --skip-download --compact --quiet \
    --skip-path .venv-checkov --skip-path .cache --skip-path .terraform
}

free_port() {
  "$VENV_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Points the provider at moto through an override file in a temporary copy: the modules and roots stay as users run them.
write_moto_override() { # ROOT_DIR URL
  local url=$2 service
  {
    echo 'provider "aws" {'
    echo '  skip_credentials_validation = true'
    echo '  skip_requesting_account_id  = true'
    echo '  skip_metadata_api_check     = true'
    echo '  s3_use_path_style           = true'
    echo '  max_retries                 = 5'
    echo '  endpoints {'
    for service in applicationautoscaling cloudformation ecr iam kms logs s3 sagemaker sts; do
      echo "    $service = \"$url\""
    done
    echo '  }'
    echo '}'
  } >"$1/moto_override.tf"
}

moto_tf() { # ROOT terraform-args...
  local root=$1
  shift
  TF_DATA_DIR=$WORK/data/$root terraform -chdir="$WORK/tf/$root" "$@"
}

stop_moto() {
  kill "$MOTO_PID" 2>/dev/null || true
  wait "$MOTO_PID" 2>/dev/null || true
}

step_moto() {
  [ -x "$MOTO_SERVER" ] || {
    echo "$MOTO_SERVER not found: run make install first"
    return 1
  }
  local port url verify=("$VENV_PYTHON" "$REPO/$TF_ROOT/tests/moto_verify.py")
  port=$(free_port)
  url=http://127.0.0.1:$port
  "$MOTO_SERVER" -H 127.0.0.1 -p "$port" >"$WORK/moto_server.log" 2>&1 &
  MOTO_PID=$!
  # Steps run in a subshell: this trap stops the server when the step ends, however it ends.
  trap stop_moto EXIT
  trap 'exit 130' INT TERM
  local tries=0
  until "$VENV_PYTHON" -c "import urllib.request; urllib.request.urlopen('$url/moto-api/data.json', timeout=1)" 2>/dev/null; do
    tries=$((tries + 1))
    if [ $tries -gt 50 ] || ! kill -0 "$MOTO_PID" 2>/dev/null; then
      echo "moto server did not start on $url"
      cat "$WORK/moto_server.log"
      return 1
    fi
    sleep 0.2
  done
  echo "moto server on $url"

  mkdir -p "$WORK/tf"
  cp -R "$TF_ROOT/modules" "$WORK/tf/"
  local root
  for root in "${ROOTS[@]}"; do
    mkdir -p "$WORK/tf/$root"
    cp "$TF_ROOT/$root"/*.tf "$TF_ROOT/$root"/.terraform.lock.hcl "$WORK/tf/$root/"
    write_moto_override "$WORK/tf/$root" "$url"
    moto_tf "$root" init "${INIT_ARGS[@]}" >/dev/null
  done

  # moto rejects ml.g5/ml.g6 instance types, cannot tag Application Auto Scaling targets and cannot
  # resolve Fn::GetAtt on AWS::BedrockAgentCore::Runtime (see terraform/README.md, Testing).
  cat >"$WORK/tf/deployment/moto.auto.tfvars" <<'EOF'
bedrock_model_id       = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
instance_type          = "ml.m5.large"
enable_autoscaling     = false
enable_runtime_outputs = false
EOF
  local shared_out=$WORK/shared.json deployment_out=$WORK/deployment.json tfvars=$WORK/tf/deployment/shared.auto.tfvars.json

  echo "== apply shared"
  moto_tf shared apply -auto-approve -no-color -var force_destroy=true
  moto_tf shared output -json >"$shared_out"
  echo "== plan shared again: no changes expected"
  moto_tf shared plan -detailed-exitcode -no-color -var force_destroy=true
  echo "== upload a weight file, push both images"
  "${verify[@]}" seed --endpoint "$url" --shared-outputs "$shared_out" --tfvars-out "$tfvars"
  echo "== apply deployment"
  moto_tf deployment apply -auto-approve -no-color
  moto_tf deployment output -json >"$deployment_out"
  "${verify[@]}" deployed --endpoint "$url" --shared-outputs "$shared_out" --tfvars "$tfvars" \
    --outputs "$deployment_out" --instance-type ml.m5.large
  echo "== destroy deployment"
  moto_tf deployment destroy -auto-approve -no-color
  "${verify[@]}" deployment-destroyed --endpoint "$url" --shared-outputs "$shared_out" --tfvars "$tfvars" \
    --outputs "$deployment_out"
  echo "== destroy shared"
  moto_tf shared destroy -auto-approve -no-color -var force_destroy=true
  "${verify[@]}" shared-destroyed --endpoint "$url" --shared-outputs "$shared_out"
}

step_iam() {
  local flow=("$VENV_PYTHON" "$REPO/$TF_ROOT/tests/enforced_flow.py") sid refusals=()
  # Removing a statement the shared root needs stops the flow there (the others fail later; the analysis below
  # shows which of the recorded calls each one alone allows). Each such run has its own moto server, so it runs
  # beside the flow with the committed policy instead of after it.
  for sid in Ecr; do
    "${flow[@]}" run --log "$WORK/without-$sid.jsonl" --without "$sid" >"$WORK/without-$sid.log" 2>&1 &
    refusals+=("$sid:$!")
  done
  echo "== the flow with the committed policy"
  "${flow[@]}" run --log "$WORK/decisions.jsonl"
  echo "== which calls need each statement"
  "${flow[@]}" needs --log "$WORK/decisions.jsonl"
  local refusal pid
  for refusal in "${refusals[@]}"; do
    sid=${refusal%%:*} pid=${refusal#*:}
    echo "== the flow without $sid: must be refused"
    if wait "$pid"; then
      cat "$WORK/without-$sid.log"
      echo "the flow passed without statement $sid"
      return 1
    fi
    grep "^DENIED" "$WORK/without-$sid.log" || {
      cat "$WORK/without-$sid.log"
      return 1
    }
  done
}

run_step() { # STEP: runs it into $WORK/STEP.log; its exit status and seconds go to $WORK/STEP.rc
  local step=$1 start=$SECONDS rc
  # set -e holds inside the subshell because it is not part of a condition.
  set +e
  (
    set -e
    "step_$step"
  ) >"$WORK/$step.log" 2>&1
  rc=$?
  set -e
  echo "$rc $((SECONDS - start))" >"$WORK/$step.rc"
}

# moto and iam spend most of their time waiting (the provider's own wait for an S3 lifecycle configuration to read
# back is ~55 s of each apply), so each runs beside the others; the rest run one after another, as validate and
# test share an init.
# Each lane is a process group of its own (set -m), so that an interrupt stops what it started too: terraform and
# the moto server, not only the lane's shell.
LANES=()
trap 'for lane in "${LANES[@]}"; do kill -- "-$lane" 2>/dev/null || true; done; exit 130' INT TERM
SERIAL=()
set -m
for step in "${STEPS[@]}"; do
  case $step in
  moto | iam)
    run_step "$step" &
    LANES+=($!)
    ;;
  *) SERIAL+=("$step") ;;
  esac
done
set +m
for step in "${SERIAL[@]}"; do run_step "$step"; done
[ ${#LANES[@]} -eq 0 ] || wait "${LANES[@]}"

FAILED=()
for step in "${STEPS[@]}"; do
  read -r rc took <"$WORK/$step.rc"
  if [ "$rc" -eq 0 ]; then
    echo "PASS $step (${took}s)"
    [ "${VERBOSE:-0}" = 1 ] && cat "$WORK/$step.log"
  else
    echo "FAIL $step (${took}s), last lines of its log:"
    tail -n 60 "$WORK/$step.log" | sed 's/^/  | /'
    FAILED+=("$step")
  fi
done

if [ ${#FAILED[@]} -gt 0 ]; then
  echo "terraform checks: FAIL (${FAILED[*]})"
  exit 1
fi
echo "terraform checks: PASS (${STEPS[*]})"
