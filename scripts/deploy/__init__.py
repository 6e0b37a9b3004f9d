"""The Python half of `make deploy` / `make destroy` (scripts/deploy/deploy.sh and destroy.sh; docs/deploy.md).

The shell scripts run the tools (terraform, docker buildx, the weight push); this package does what needs the
AWS APIs or careful checking: the preflight, the image tag and digests, ECR login, the deployment's variables
from the shared root's outputs, the wait for InService and the smoke test through the bidirectional API.
Run it as ``python -m scripts.deploy SUBCOMMAND`` from the repository root.
"""
