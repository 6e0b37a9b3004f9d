#!/usr/bin/env bash
# Prints a local Terraform plugin directory that holds hashicorp/aws 5.x (>= 5.100), for
# `terraform init -plugin-dir=...` on machines that cannot download providers.
# A plugin directory is the parent of the provider-host folder of Terraform's plugin layout
# (<dir>/<host>/hashicorp/aws/<version>/<os>_<arch>/terraform-provider-aws_*), the host being the
# public Terraform registry's. Looks at $TF_PLUGIN_DIR, Terraform's implied local-mirror directories (Linux and
# macOS), then each folder directly under /opt (where machine images put tool bundles): a fixed list, never a
# search of the filesystem. Exits 1 when there is none: callers then run a plain `terraform init`, which
# downloads the provider. bash 3.2 and BSD tools suffice (docs/deploy.md).
set -euo pipefail

HOST_GLOB='registry.terraform.*'

has_aws_provider() { # DIR
  local dir version minor
  for dir in "$1"/$HOST_GLOB/hashicorp/aws; do
    [ -d "$dir" ] || continue
    for version in "$dir"/5.*.*; do
      version=${version##*/}
      # ~> 5.100 needs 5.x with x >= 100.
      minor=${version#5.}
      minor=${minor%%.*}
      case $minor in '' | *[!0-9]*) continue ;; esac
      if [ "$minor" -ge 100 ] && ls "$dir/$version"/*/terraform-provider-aws* >/dev/null 2>&1; then
        return 0
      fi
    done
  done
  return 1
}

for dir in ${TF_PLUGIN_DIR:+"$TF_PLUGIN_DIR"} \
  "$HOME/.terraform.d/plugins" \
  "${XDG_DATA_HOME:-$HOME/.local/share}/terraform/plugins" \
  "$HOME/Library/Application Support/io.terraform/plugins" \
  "/Library/Application Support/io.terraform/plugins" \
  /usr/local/share/terraform/plugins \
  /usr/share/terraform/plugins \
  /opt/*; do
  if has_aws_provider "$dir"; then
    echo "$dir"
    exit 0
  fi
done

echo "find_tf_plugin_dir: no local plugin directory with hashicorp/aws >= 5.100; terraform init will download it" >&2
exit 1
