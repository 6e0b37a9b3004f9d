#!/usr/bin/env bash
# make deploy: from this checkout to a running SageMaker endpoint and AgentCore runtime (docs/deploy.md).
#
#   BEDROCK_MODEL_ID=...   required: the Bedrock model or inference profile the agent uses
#   AWS_REGION             default: AWS_DEFAULT_REGION, the region terraform/shared lives in, the profile's, us-east-1
#   INSTANCE_TYPE          default ml.g5.xlarge;  MIN_INSTANCES / MAX_INSTANCES: autoscaling, default 1 / 2
#                          a GPU type (ml.g*, ml.p*) gets the torch image (CUDA), any other the onnx image (CPU)
#   SESSION_STORAGE        where the agent keeps conversation turns: memory (default; each runtime session's
#                          microVM) or s3 (the weight bucket under sessions/, expired after a day)
#   WEIGHTS_SOURCE         local (default: the layout in WEIGHTS_DIR, default models/kokoro, with the torch
#                          weights) or hf (fetched from Hugging Face into models/kokoro-hf)
#   WAIT_TIMEOUT_S, WAIT_POLL_S   the wait for InService (default 3600 / 30)
#   SMOKE_ENDPOINT_URI     the runtime endpoint for the smoke test (a VPC endpoint); default the regional one
#   SKIP_SMOKE=1           no smoke tests
#   IAM_WAIT_S             the pause before applying again when AgentCore has not seen the new role yet (30)
#
# Steps: preflight (changes nothing; lists every gap at once, the account's quota, model and region included)
# → terraform/shared → weights to S3 → both images (docker buildx FROM the base image's digest, pushed, taken by
# digest; the TTS image's backend follows INSTANCE_TYPE) → terraform/deployment (the runtime before the endpoint;
# an autoscaled variant whose instance type changes is deregistered first; a running endpoint's live instance
# count is kept) → wait for InService → smoke tests of the endpoint and of the agent runtime.
# Every step is idempotent: after a failure, fix the cause and run it again.
#
# bash 3.2 (macOS's /bin/bash) and BSD tools suffice (docs/deploy.md): each $(...) here runs one command, whose
# failure is the assignment's and so stops the script; a function run inside $(...) checks its own steps.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"

export INSTANCE_TYPE=${INSTANCE_TYPE:-ml.g5.xlarge} MIN_INSTANCES=${MIN_INSTANCES:-1} MAX_INSTANCES=${MAX_INSTANCES:-2}
export WEIGHTS_SOURCE=${WEIGHTS_SOURCE:-local}
if [ "$WEIGHTS_SOURCE" = hf ]; then
  export WEIGHTS_DIR=${WEIGHTS_DIR:-models/kokoro-hf}
else
  export WEIGHTS_DIR=${WEIGHTS_DIR:-models/kokoro}
fi

# shellcheck source=scripts/deploy/lib.sh
. scripts/deploy/lib.sh

on_failure_say "Every step is idempotent: fix the cause and run make deploy again; make destroy removes what was created (docs/deploy.md)."

# ---------------------------------------------------------------------------------------------------------------
step preflight
deploy_py preflight
REGION=$(deploy_py region)
export AWS_REGION=$REGION AWS_DEFAULT_REGION=$REGION
TAG=$(deploy_py image-tag)
# The TTS image's backend follows the instance type; the onnx image has a tag of its own (tags are immutable).
TTS_BUILD=$(deploy_py tts-build --instance-type "$INSTANCE_TYPE")
read -r TTS_BACKEND TTS_DEVICE <<<"$TTS_BUILD"
TTS_TAG=$TAG
[ "$TTS_BACKEND" = torch ] || TTS_TAG=$TAG-$TTS_BACKEND
echo "  region $REGION, image tag $TAG, instance type $INSTANCE_TYPE ($MIN_INSTANCES-$MAX_INSTANCES)," \
  "TTS backend $TTS_BACKEND on $TTS_DEVICE"

if [ "$WEIGHTS_SOURCE" = hf ]; then
  # Before anything in AWS changes: a Hub that cannot be reached stops the deploy here.
  step "weights: fetch from Hugging Face into $WEIGHTS_DIR"
  "$PY" -m scripts.weights fetch --dest "$WEIGHTS_DIR" --source hf --with-torch
fi

# ---------------------------------------------------------------------------------------------------------------
step "shared: terraform apply (ECR repositories, weight bucket)"
tf_init shared
tf shared apply -input=false -auto-approve -no-color -var "region=$REGION"
tf shared output -json >"$WORK/shared.json"
shared_out() { tf shared output -raw "$1"; }
WEIGHTS_S3_URI=$(shared_out weights_s3_uri)
TTS_REPO=$(shared_out tts_repository_url)
AGENT_REPO=$(shared_out agent_repository_url)

# ---------------------------------------------------------------------------------------------------------------
step "weights: push $WEIGHTS_DIR to $WEIGHTS_S3_URI"
"$PY" -m scripts.weights push --dest "$WEIGHTS_DIR" --to "$WEIGHTS_S3_URI"

# ---------------------------------------------------------------------------------------------------------------
step "images: build and push (tag $TAG)"
deploy_py ecr-login --repository-url "$TTS_REPO"

# Prints <repository url>@<digest>. The tags are immutable: a tag already pushed is this very tree's image
# (image-tag hashes a dirty tree's changes), so it is reused rather than built again.
build_push() { # REPOSITORY_URL PLATFORM DOCKERFILE TAG [--build-arg K=V ...]
  local repo=$1 platform=$2 dockerfile=$3 tag=$4 digest rc=0
  shift 4
  digest=$(deploy_py image-digest --repository-url "$repo" --tag "$tag") || rc=$?
  if [ $rc -eq 0 ]; then
    echo "  $repo:$tag is already in ECR: reusing it" >&2
  elif [ $rc -eq 3 ]; then
    # FROM the base image by the digest its tag points to now: recorded here and in the image's OCI labels.
    local base
    base=$(deploy_py base-image --dockerfile "$dockerfile") || return 1
    echo "  building $repo:$tag for $platform from $dockerfile, FROM $base" >&2
    # One platform, no attestations: a plain image manifest, which SageMaker and AgentCore accept.
    docker buildx build --platform "$platform" -f "$dockerfile" -t "$repo:$tag" "$@" \
      --build-arg "PYTHON_DIGEST=${base##*@}" \
      --label "org.opencontainers.image.base.name=${base%@*}" \
      --label "org.opencontainers.image.base.digest=${base##*@}" \
      --provenance=false --sbom=false --push . >&2 || return 1
    digest=$(deploy_py image-digest --repository-url "$repo" --tag "$tag") || {
      echo "deploy: $repo:$tag is not in ECR after the push" >&2
      return 1
    }
  else
    return $rc
  fi
  echo "$repo@$digest"
}
TTS_IMAGE=$(build_push "$TTS_REPO" linux/amd64 container/Dockerfile "$TTS_TAG" \
  --build-arg "BACKEND=$TTS_BACKEND" --build-arg "DEVICE=$TTS_DEVICE")
AGENT_IMAGE=$(build_push "$AGENT_REPO" linux/arm64 agent/Dockerfile "$TAG")
echo "  TTS image:   $TTS_IMAGE"
echo "  agent image: $AGENT_IMAGE"

# ---------------------------------------------------------------------------------------------------------------
step "deployment: terraform apply (roles, AgentCore runtime, then the endpoint and its autoscaling)"
tf_init deployment
previous=
if tf_has_resources deployment; then
  # SageMaker refuses to change the instance type of an autoscaled variant: deregister it first; the apply
  # registers it again after the update (scripts/deploy/scaling.py).
  tf deployment output -json >"$WORK/previous.json"
  deploy_py release-scaling --deployment-outputs "$WORK/previous.json" --instance-type "$INSTANCE_TYPE"
  # The provider's UpdateEndpoint resets the variant to the configuration's count: give it the live one.
  previous=$WORK/previous.json
fi
deploy_py tfvars --shared-outputs "$WORK/shared.json" --tts-image "$TTS_IMAGE" --agent-image "$AGENT_IMAGE" \
  --out "$DEPLOYMENT_VARS" ${previous:+--previous-outputs "$previous"}
# AgentCore assumes the runtime's role during CreateAgentRuntime, seconds after Terraform created the role and its
# policy. Before IAM has propagated them it answers "Role validation failed" or "Access denied while validating ECR
# URI" (the AWS provider's own runtime resource retries on exactly these two), the runtime's stack rolls back and
# the apply stops before the endpoint, so nothing bills. One more apply after a pause finds the role in place.
apply_deployment() {
  tf deployment apply -input=false -auto-approve -no-color "-var-file=$VAR_FILE" 2>&1 | tee "$WORK/apply.log"
}
if ! apply_deployment; then
  grep -q -e "Role validation failed" -e "Access denied while validating ECR URI" "$WORK/apply.log" || exit 1
  echo "  AgentCore did not see the runtime's new role yet (IAM propagation): applying again in ${IAM_WAIT_S:-30} s"
  sleep "${IAM_WAIT_S:-30}"
  apply_deployment
fi
tf deployment output -json >"$WORK/deployment.json"

# ---------------------------------------------------------------------------------------------------------------
step "wait: endpoint InService"
deploy_py wait --deployment-outputs "$WORK/deployment.json"

if [ "${SKIP_SMOKE:-0}" = 1 ]; then
  echo
  echo "== smoke test skipped (SKIP_SMOKE=1)"
else
  step "smoke test: the endpoint's health, then two sentences through the bidirectional streaming API"
  deploy_py smoke --deployment-outputs "$WORK/deployment.json"
  step "smoke test: one reply of the AgentCore runtime (Bedrock's words, spoken)"
  deploy_py smoke-runtime --deployment-outputs "$WORK/deployment.json"
fi

STEP="done"
echo
echo "== deployed"
deploy_py outputs --deployment-outputs "$WORK/deployment.json"
echo "make destroy removes the endpoint and the runtime (images and weights stay; DESTROY_SHARED=1 for those too)."
