#!/usr/bin/env bash
# make destroy: remove what make deploy created, deployment first (docs/deploy.md, terraform/README.md).
#
#   (default)          terraform destroy of terraform/deployment: the endpoint, the AgentCore runtime, the roles,
#                      the autoscaling; the ECR images and the S3 weights stay (storage costs only)
#   DESTROY_SHARED=1   then terraform/shared too: the ECR repositories with every image, and the weight bucket
#                      with every object version (applied once with force_destroy=true, then destroyed)
#
# The deployment root is destroyed with the var file make deploy wrote (terraform/deployment/deploy.tfvars.json);
# the shared root with the region its own state records. Nothing else is guessed.
#
# bash 3.2 (macOS's /bin/bash) and BSD tools suffice (docs/deploy.md): each $(...) here runs one command, whose
# failure is the assignment's and so stops the script.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"

DESTROY_SHARED=${DESTROY_SHARED:-0}
case $DESTROY_SHARED in 0 | 1) ;; *)
  echo "destroy: DESTROY_SHARED must be 0 or 1, not '$DESTROY_SHARED'" >&2
  exit 2
  ;;
esac

# shellcheck source=scripts/deploy/lib.sh
. scripts/deploy/lib.sh

on_failure_say "Fix the cause and run make destroy again (it is idempotent)."

# The region each root lives in: the deployment's from its var file, the shared root's from its own output.
var_file_region() {
  "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["region"])' "$DEPLOYMENT_VARS"
}

# ---------------------------------------------------------------------------------------------------------------
step preflight
deploy_py preflight --destroy

# ---------------------------------------------------------------------------------------------------------------
step "deployment: terraform destroy (endpoint, AgentCore runtime, roles)"
tf_init deployment
if tf_has_resources deployment; then
  if [ ! -f "$DEPLOYMENT_VARS" ]; then
    echo "destroy: terraform/deployment holds resources but $DEPLOYMENT_VARS (written by make deploy) is gone." >&2
    echo "Destroy it by hand with the same -var values as its apply (terraform/README.md, Destroying):" >&2
    echo "  terraform -chdir=terraform/deployment destroy -var region=... -var tts_image_uri=... ..." >&2
    exit 1
  fi
  region=$(var_file_region)
  echo "  region $region, variables from $DEPLOYMENT_VARS"
  AWS_REGION=$region AWS_DEFAULT_REGION=$region \
    tf deployment destroy -input=false -auto-approve -no-color "-var-file=$VAR_FILE"
  rm -f "$DEPLOYMENT_VARS"
  echo "  deployment destroyed"
else
  echo "  nothing to destroy: terraform/deployment's state holds no resources"
fi

# ---------------------------------------------------------------------------------------------------------------
if [ "$DESTROY_SHARED" != 1 ]; then
  STEP="done"
  echo
  echo "== kept terraform/shared: the ECR repositories (images) and the weight bucket (storage costs only)."
  echo "   To remove them too: make destroy DESTROY_SHARED=1"
  exit 0
fi

step "shared: terraform destroy (ECR repositories with their images, the weight bucket with every version)"
tf_init shared
if tf_has_resources shared; then
  region=$(tf shared output -raw region)
  echo "  region $region"
  # force_destroy lives in the resources' state: apply it first, or destroy refuses non-empty repositories and
  # a bucket with objects (terraform/README.md, Destroying).
  AWS_REGION=$region AWS_DEFAULT_REGION=$region \
    tf shared apply -input=false -auto-approve -no-color -var "region=$region" -var force_destroy=true
  AWS_REGION=$region AWS_DEFAULT_REGION=$region \
    tf shared destroy -input=false -auto-approve -no-color -var "region=$region" -var force_destroy=true
  echo "  shared destroyed (the bucket's KMS key is scheduled for deletion, 30 days by default)"
else
  echo "  nothing to destroy: terraform/shared's state holds no resources"
fi
STEP="done"
