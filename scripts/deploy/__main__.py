"""python -m scripts.deploy SUBCOMMAND: the steps of scripts/deploy/deploy.sh and destroy.sh that talk to AWS.

  preflight [--destroy]   check everything the deploy (or destroy) needs; exit 2 with one message listing the gaps
  region                  the region to deploy to (AWS_REGION, AWS_DEFAULT_REGION, the shared state, the profile)
  image-tag               <git rev>, or <git rev>-dirty-<hash of the changes>
  ecr-login               docker login to the registry of --repository-url
  image-digest            the digest of --repository-url:--tag (exit 3 when the tag is not there)
  base-image              <base image>@<digest>: what --dockerfile is built FROM, resolved in the registry now
  tts-build               the TTS image's backend and device for INSTANCE_TYPE (torch cuda on GPU types, onnx cpu)
  tfvars                  the deployment root's var file from the shared outputs and the pushed images
                          (--previous-outputs: a redeploy keeps the endpoint's live instance count)
  release-scaling         before an apply that changes the instance type: deregister the autoscaled variant
  wait                    until the endpoint is InService (exit 1 on Failed, with the FailureReason)
  smoke                   the endpoint's health (GPU asserted on ml.g*/ml.p*), then two sentences through
                          InvokeEndpointWithBidirectionalStream; prints the time to first audio
  smoke-runtime           one reply of the AgentCore runtime (InvokeAgentRuntime): Bedrock's model, decodable speech
  outputs                 what was deployed: the endpoint name, the runtime ARN, the autoscaling target
  deployer-policy         the IAM policies the deploying identity needs (what the preflight checks) and the roles'
                          permissions boundary

Settings come from the environment as make passes them (BEDROCK_MODEL_ID, AWS_REGION, INSTANCE_TYPE,
MIN_INSTANCES, MAX_INSTANCES, WEIGHTS_SOURCE, WEIGHTS_DIR); options override them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .preflight import DeployInputs

REPO = Path(__file__).resolve().parents[2]
EXIT_PREFLIGHT = 2
EXIT_NO_IMAGE = 3


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _client(service: str, region: str) -> Any:
    import boto3
    from botocore.config import Config

    factory: Any = boto3.client  # boto3's stubs only know the services whose stubs are installed
    return factory(service, region_name=region, config=Config(retries={"max_attempts": 8, "mode": "standard"}))


def _profile_region() -> str | None:
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.Session().region_name
    except BotoCoreError:  # e.g. AWS_PROFILE names no profile: the preflight says so
        return None


def _region(args: argparse.Namespace) -> str:
    from .region import resolve_region

    if getattr(args, "region", None):
        return str(args.region)
    return resolve_region(os.environ, REPO, _profile_region())[0]


def _deploy_inputs() -> DeployInputs:
    from .preflight import DeployInputs
    from .region import resolve_region

    env = os.environ
    region, source = resolve_region(env, REPO, _profile_region())
    weights_source = env.get("WEIGHTS_SOURCE", "").strip() or "local"
    default_dir = "models/kokoro-hf" if weights_source == "hf" else "models/kokoro"
    return DeployInputs(
        bedrock_model_id=env.get("BEDROCK_MODEL_ID", ""),
        region=region,
        region_source=source,
        instance_type=env.get("INSTANCE_TYPE", "").strip() or "ml.g5.xlarge",
        min_instances=env.get("MIN_INSTANCES", "").strip() or "1",
        max_instances=env.get("MAX_INSTANCES", "").strip() or "2",
        weights_source=weights_source,
        weights_dir=Path(env.get("WEIGHTS_DIR", "").strip() or default_dir),
    )


def cmd_preflight(args: argparse.Namespace) -> int:
    from .preflight import preflight_deploy, preflight_destroy

    if args.destroy:
        report = preflight_destroy(os.environ, _region(args))
    else:
        report = preflight_deploy(REPO, os.environ, _deploy_inputs())
    action = "destroy" if args.destroy else "deploy"
    if report.problems:
        _err(report.message(action))
        return EXIT_PREFLIGHT
    for line in report.found:
        print(f"  ok: {line}")
    for line in report.warnings:
        print(f"  note: {line}")
    return 0


def cmd_region(args: argparse.Namespace) -> int:
    print(_region(args))
    return 0


def cmd_image_tag(args: argparse.Namespace) -> int:
    from .gitrev import image_tag

    print(image_tag(REPO))
    return 0


def cmd_ecr_login(args: argparse.Namespace) -> int:
    from .ecr import Repository, docker_login

    repository = Repository.parse(args.repository_url)
    docker_login(_client("ecr", repository.region), repository, docker=args.docker)
    print(f"  logged docker in to {repository.registry}")
    return 0


def cmd_image_digest(args: argparse.Namespace) -> int:
    from .ecr import Repository, image_digest

    repository = Repository.parse(args.repository_url)
    digest = image_digest(_client("ecr", repository.region), repository, args.tag)
    if digest is None:
        return EXIT_NO_IMAGE
    print(digest)
    return 0


def cmd_base_image(args: argparse.Namespace) -> int:
    from .base_image import base_image, resolve

    print(resolve(base_image(args.dockerfile), docker=args.docker))
    return 0


def cmd_tfvars(args: argparse.Namespace) -> int:
    from .gpu_slots import GPU_RESULTS, measured_gpu_slots
    from .instances import is_gpu_instance
    from .tfvars import (
        SHARED_OUTPUTS,
        DeploymentSettings,
        count_problems,
        deployment_variables,
        load_outputs,
        write_var_file,
    )

    shared = load_outputs(args.shared_outputs, SHARED_OUTPUTS)
    problems = count_problems(args.instance_type, args.min_instances, args.max_instances)
    if problems:
        _err("; ".join(problems))
        return 1
    live = _live_instances(args.previous_outputs) if args.previous_outputs else None
    gpu_slots = measured_gpu_slots(REPO / GPU_RESULTS)
    settings = DeploymentSettings(
        bedrock_model_id=args.bedrock_model_id,
        instance_type=args.instance_type,
        min_instances=int(args.min_instances),
        max_instances=int(args.max_instances),
        live_instances=live,
        gpu_slots=gpu_slots,
        session_storage=args.session_storage,
    )
    variables = deployment_variables(shared, args.tts_image, args.agent_image, settings)
    if "gpu_stream_slots" in variables:
        print(f"  autoscaling from {variables['gpu_stream_slots']['source']}")
    elif gpu_slots is not None and is_gpu_instance(args.instance_type):
        print(
            f"  make gpu-check measured {gpu_slots.gpu}, not {args.instance_type}'s GPU: the autoscaling target "
            "stays the module's estimate (run make gpu-check on that GPU, or read the endpoint's stream slots log line)"
        )
    if live is not None:
        print(
            f"  the endpoint runs {live} instance(s) now: a new configuration starts with "
            f"{variables['initial_instance_count']} (within {settings.min_instances}-{settings.max_instances})"
        )
    write_var_file(args.out, variables)
    print(f"  wrote {args.out}")
    return 0


def _live_instances(previous_outputs: Path) -> int | None:
    """The deployed endpoint's desired instance count, from the previous deployment's outputs and SageMaker."""
    from .scaling import live_desired_count
    from .tfvars import load_outputs

    outputs = load_outputs(previous_outputs)
    name, arn = outputs.get("endpoint_name"), outputs.get("endpoint_arn")
    if not name or not arn:
        return None
    return live_desired_count(_client("sagemaker", str(arn).split(":")[3]), str(name))


def cmd_tts_build(args: argparse.Namespace) -> int:
    from .instances import tts_build

    print(" ".join(tts_build(args.instance_type)))
    return 0


def _endpoint(args: argparse.Namespace) -> tuple[str, str, str | None]:
    """(endpoint name, region, the model it should serve) from --deployment-outputs or --endpoint-name."""
    from .tfvars import load_outputs

    if args.deployment_outputs is None:
        if not args.endpoint_name:
            raise SystemExit("give --deployment-outputs or --endpoint-name")
        return args.endpoint_name, _region(args), None
    outputs = load_outputs(args.deployment_outputs, ("endpoint_name", "endpoint_arn"))
    region = args.region or str(outputs["endpoint_arn"]).split(":")[3]
    model = outputs.get("sagemaker_model_name")
    return str(outputs["endpoint_name"]), region, str(model) if model else None


def cmd_release_scaling(args: argparse.Namespace) -> int:
    from .scaling import release_for_instance_type
    from .tfvars import load_outputs

    outputs = load_outputs(args.deployment_outputs)
    name, arn = outputs.get("endpoint_name"), outputs.get("endpoint_arn")
    if not name or not arn:
        print("  no endpoint in the previous deployment's outputs: nothing to deregister")
        return 0
    region = str(arn).split(":")[3]
    release_for_instance_type(
        _client("sagemaker", region),
        _client("application-autoscaling", region),
        str(name),
        args.instance_type,
        log=lambda line: print(line, flush=True),
    )
    return 0


def cmd_wait(args: argparse.Namespace) -> int:
    from .endpoint import wait_in_service

    name, region, model = _endpoint(args)
    print(f"  waiting for endpoint {name} in {region} to be InService (timeout {args.timeout:.0f} s)", flush=True)
    ready = wait_in_service(
        _client("sagemaker", region),
        name,
        timeout_s=args.timeout,
        poll_s=args.poll,
        expect_model=model,
        log=lambda line: print(line, flush=True),
    )
    print(f"  endpoint {ready.endpoint_name} is InService, serving {ready.model_name}")
    return 0


def cmd_smoke(args: argparse.Namespace) -> int:
    from .smoke import endpoint_health, smoke_endpoint
    from .tfvars import load_outputs

    name, region, _ = _endpoint(args)
    instance_type = args.instance_type
    if instance_type is None and args.deployment_outputs is not None:
        instance_type = load_outputs(args.deployment_outputs).get("instance_type")
    if not args.skip_health:
        health = endpoint_health(_client("sagemaker-runtime", region), name, instance_type)
        print(f"  {health.summary()}", flush=True)
    where = f" via {args.endpoint_uri}" if args.endpoint_uri else ""
    print(f"  smoke test: endpoint {name} in {region}{where}", flush=True)
    check = smoke_endpoint(name, region, endpoint_uri=args.endpoint_uri, timeout_s=args.timeout, **_retries(args))
    print(f"  {asyncio.run(check).summary()}")
    return 0


def cmd_smoke_runtime(args: argparse.Namespace) -> int:
    from .smoke import smoke_runtime
    from .tfvars import load_outputs

    arn = args.runtime_arn or load_outputs(args.deployment_outputs).get("agent_runtime_arn")
    if not arn:
        raise SystemExit("no agent_runtime_arn (enable_runtime_outputs is false?): give --runtime-arn")
    print(f"  smoke test: AgentCore runtime {arn}", flush=True)
    check = smoke_runtime(
        str(arn), expect_model_id=args.bedrock_model_id or None, qualifier=args.qualifier, **_retries(args)
    )
    print(f"  {asyncio.run(check).summary()}")
    return 0


def _retries(args: argparse.Namespace) -> dict[str, Any]:
    """A smoke test's tries (--attempts, --retry-delay), each said as it goes."""
    return {"attempts": args.attempts, "retry_delay_s": args.retry_delay, "log": lambda line: print(line, flush=True)}


def cmd_deployer_policy(args: argparse.Namespace) -> int:
    from .permissions import policy_files

    args.out.mkdir(parents=True, exist_ok=True)
    for file_name, text in policy_files(args.name).items():
        (args.out / file_name).write_text(text)
        print(args.out / file_name)
    return 0


def cmd_outputs(args: argparse.Namespace) -> int:
    from .tfvars import load_outputs

    outputs = load_outputs(args.deployment_outputs, ("endpoint_name", "endpoint_arn"))
    region = str(outputs["endpoint_arn"]).split(":")[3]
    runtime = outputs.get("agent_runtime_arn") or "(not read back: enable_runtime_outputs is false)"
    print(f"SageMaker endpoint:   {outputs['endpoint_name']}  ({outputs['endpoint_arn']})")
    print(f"AgentCore runtime:    {runtime}")
    if outputs.get("autoscaling_target") is not None:
        # Derived from the measured stream capacity, or an estimate on a GPU type: the source says which.
        print(
            f"Autoscaling target:   {outputs['autoscaling_target']:g} open sessions per instance "
            f"({outputs.get('autoscaling_target_source') or 'source not reported'})"
        )
    if outputs.get("agent_runtime_arn"):
        print(f"Talk to it:           .venv/bin/python -m scripts.agent_client --arn {runtime} --region {region}")
    return 0


def _parser() -> argparse.ArgumentParser:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="python -m scripts.deploy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("preflight", help="check the prerequisites; exit 2 listing every gap")
    p.add_argument("--destroy", action="store_true", help="only what a destroy needs (terraform, credentials)")
    p.add_argument("--region")
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("region", help="print the region to deploy to")
    p.add_argument("--region")
    p.set_defaults(func=cmd_region)

    sub.add_parser("image-tag", help="print the image tag for this tree").set_defaults(func=cmd_image_tag)

    p = sub.add_parser("ecr-login", help="docker login to an ECR registry")
    p.add_argument("--repository-url", required=True)
    p.add_argument("--docker", default="docker")
    p.set_defaults(func=cmd_ecr_login)

    p = sub.add_parser("image-digest", help="print the digest of a tag (exit 3 when absent)")
    p.add_argument("--repository-url", required=True)
    p.add_argument("--tag", required=True)
    p.set_defaults(func=cmd_image_digest)

    p = sub.add_parser("base-image", help="print the base image of a Dockerfile, pinned by its digest now")
    p.add_argument("--dockerfile", type=Path, required=True)
    p.add_argument("--docker", default="docker")
    p.set_defaults(func=cmd_base_image)

    p = sub.add_parser("tfvars", help="write the deployment root's var file")
    p.add_argument("--shared-outputs", type=Path, required=True, help="terraform -chdir=terraform/shared output -json")
    p.add_argument("--tts-image", required=True, help="<tts repository url>@sha256:…")
    p.add_argument("--agent-image", required=True, help="<agent repository url>@sha256:…")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--bedrock-model-id", default=env.get("BEDROCK_MODEL_ID", ""))
    p.add_argument("--instance-type", default=env.get("INSTANCE_TYPE") or "ml.g5.xlarge")
    p.add_argument("--min-instances", default=env.get("MIN_INSTANCES") or "1")
    p.add_argument("--max-instances", default=env.get("MAX_INSTANCES") or "2")
    p.add_argument(
        "--session-storage",
        default=env.get("SESSION_STORAGE") or "memory",
        help="where the agent keeps conversation turns: memory or s3 (the weight bucket, sessions/)",
    )
    p.add_argument(
        "--previous-outputs",
        type=Path,
        help="the deployment in place (terraform output -json): a new configuration keeps its live instance count",
    )
    p.set_defaults(func=cmd_tfvars)

    p = sub.add_parser("tts-build", help="print the TTS image's BACKEND and DEVICE for an instance type")
    p.add_argument("--instance-type", default=env.get("INSTANCE_TYPE") or "ml.g5.xlarge")
    p.set_defaults(func=cmd_tts_build)

    def endpoint_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--deployment-outputs", type=Path, help="terraform -chdir=terraform/deployment output -json")
        p.add_argument("--endpoint-name")
        p.add_argument("--region")

    p = sub.add_parser("release-scaling", help="deregister an autoscaled variant whose instance type changes")
    p.add_argument("--deployment-outputs", type=Path, required=True, help="the outputs of the deployment in place")
    p.add_argument("--instance-type", default=env.get("INSTANCE_TYPE") or "ml.g5.xlarge", help="the type to come")
    p.set_defaults(func=cmd_release_scaling)

    p = sub.add_parser("wait", help="wait until the endpoint is InService")
    endpoint_args(p)
    p.add_argument("--timeout", type=float, default=float(env.get("WAIT_TIMEOUT_S") or 3600))
    p.add_argument("--poll", type=float, default=float(env.get("WAIT_POLL_S") or 30))
    p.set_defaults(func=cmd_wait)

    p = sub.add_parser("smoke", help="two sentences through the bidirectional streaming API")
    endpoint_args(p)
    p.add_argument("--endpoint-uri", default=env.get("SMOKE_ENDPOINT_URI") or None, help="instead of the regional one")
    p.add_argument("--attempts", type=int, default=3)
    p.add_argument("--retry-delay", type=float, default=15.0)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for one session")
    p.add_argument("--instance-type", help="the device to expect (cuda on ml.g*/ml.p*); default from the outputs")
    p.add_argument("--skip-health", action="store_true", help="no InvokeEndpoint health check")
    p.set_defaults(func=cmd_smoke)

    p = sub.add_parser("smoke-runtime", help="one agent reply through InvokeAgentRuntime")
    p.add_argument("--deployment-outputs", type=Path, help="terraform -chdir=terraform/deployment output -json")
    p.add_argument("--runtime-arn")
    p.add_argument("--qualifier", help="the runtime endpoint (default: DEFAULT)")
    p.add_argument(
        "--bedrock-model-id", default=env.get("BEDROCK_MODEL_ID", ""), help="the model agent_start must name"
    )
    p.add_argument("--attempts", type=int, default=2)
    p.add_argument("--retry-delay", type=float, default=15.0)
    p.set_defaults(func=cmd_smoke_runtime)

    p = sub.add_parser("outputs", help="print the endpoint name, the runtime ARN and the autoscaling target")
    p.add_argument("--deployment-outputs", type=Path, required=True)
    p.set_defaults(func=cmd_outputs)

    p = sub.add_parser(
        "deployer-policy", help="write the deploying identity's IAM policies and the roles' boundary (JSON files)"
    )
    p.add_argument("--name", default="kokoro-tts", help="the deployment's name: scopes every write to <name>-*")
    p.add_argument(
        "--out", type=Path, required=True, help="folder for the files (docs/deployer-policy/ holds them for kokoro-tts)"
    )
    p.set_defaults(func=cmd_deployer_policy)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import DeployError

    args = _parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except DeployError as e:
        _err(f"{args.command}: {e}")
        return 1
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
