#!/usr/bin/env bash
# Prints a local Terraform plugin directory that holds hashicorp/aws 5.x (>= 5.100), for
# `terraform init -plugin-dir=...` on machines that cannot download providers.
# A plugin directory is the parent of the provider-host folder of Terraform's plugin layout
# (<dir>/<host>/hashicorp/aws/<version>/<os>_<arch>/terraform-provider-aws_*), the host being the
# public Terraform registry's. Looks at $TF_PLUGIN_DIR, then the standard local-mirror locations, then
# searches the filesystem (bounded depth). Exits 1 when there is none: callers then run a plain
# `terraform init`, which downloads the provider.
set -euo pipefail

HOST_GLOB='registry.terraform.*'

has_aws_provider() { # DIR
  local dir version
  for dir in "$1"/$HOST_GLOB/hashicorp/aws; do
    [ -d "$dir" ] || continue
    for version in "$dir"/5.*; do
      version=${version##*/}
      # ~> 5.100 needs 5.x with x >= 100.
      if [[ $version =~ ^5\.([0-9]+)\. ]] && [ "${BASH_REMATCH[1]}" -ge 100 ] &&
        ls "$dir/$version"/*/terraform-provider-aws* >/dev/null 2>&1; then
        return 0
      fi
    done
  done
  return 1
}

candidates=()
[ -n "${TF_PLUGIN_DIR:-}" ] && candidates+=("$TF_PLUGIN_DIR")
candidates+=(
  "$HOME/.terraform.d/plugins"
  "${XDG_DATA_HOME:-$HOME/.local/share}/terraform/plugins"
  /usr/local/share/terraform/plugins
  /usr/share/terraform/plugins
)
for dir in "${candidates[@]}"; do
  if has_aws_provider "$dir"; then
    echo "$dir"
    exit 0
  fi
done

# Skip pseudo filesystems and the per-configuration copies that `terraform init` makes in .terraform/.
while IFS= read -r found; do
  dir=$(dirname "$found")
  if has_aws_provider "$dir"; then
    echo "$dir"
    exit 0
  fi
done < <(find / -maxdepth 6 \
  \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -name .terraform -o -name .git -o -name node_modules \) -prune \
  -o -type d -name "$HOST_GLOB" -print 2>/dev/null | sort)

echo "find_tf_plugin_dir: no local plugin directory with hashicorp/aws >= 5.100; terraform init will download it" >&2
exit 1
