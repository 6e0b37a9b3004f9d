"""A stand-in for the ``terraform`` CLI, for the deploy tests (tests/scripts/test_deploy_*.py): installed on PATH
by ``support.deploy_harness.tool_dir``, it does to the moto server (AWS_ENDPOINT_URL) what the real roots would do
to AWS.

What it records: each call, as one JSON line appended to $FAKE_LOG:
``{"tool": "terraform", "root": <the -chdir root's name>, "args": [...], "region": $AWS_REGION}``.

What it answers:

- ``version -json``: $FAKE_TF_VERSION (default 1.11.4).
- ``init``: nothing.
- ``apply`` in terraform/shared: the ECR repositories and the weight bucket, and the shared outputs.
- ``apply`` in terraform/deployment: the model, the endpoint configuration and the endpoint, with SageMaker's
  naming and its refusal to change the instance type of a variant registered for autoscaling (which moto does
  not enforce), then the autoscaling target and policy.
- ``output`` (``-json`` or one name), ``state list``, ``destroy``: from and on the root's terraform.tfstate, which
  holds the outputs and the resources' types only.

$FAKE_TF_FAIL="<root> <command>" (e.g. "shared apply") makes that call fail.
$FAKE_TF_FAIL_ONCE="<root> <command>: <message>" makes the first such call fail with that message on stderr (as
CloudFormation's error reaches terraform's output), the later ones do their work.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"  # moto's
ENDPOINT = "kokoro-tts"
VARIANT = f"endpoint/{ENDPOINT}/variant/AllTraffic"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"


def log_call(name: str | None, args: list[str]) -> None:
    with open(os.environ["FAKE_LOG"], "a") as f:
        entry = {"tool": "terraform", "root": name, "args": args, "region": os.environ.get("AWS_REGION")}
        f.write(json.dumps(entry) + "\n")


def variables(root: Path, args: list[str]) -> dict[str, Any]:
    """The values of -var-file= and -var, in order, later ones winning."""
    values: dict[str, Any] = {}
    for i, arg in enumerate(args):
        if arg.startswith("-var-file="):
            values.update(json.loads((root / arg.split("=", 1)[1]).read_text()))
        elif arg == "-var":
            key, _, value = args[i + 1].partition("=")
            values[key] = value
    return values


def aws(service: str, region: str) -> Any:
    import boto3  # only for the calls that need it: `terraform version` stays quick

    return boto3.client(service, region_name=region)  # type: ignore[call-overload]


def save(state_path: Path, outputs: dict[str, Any], resources: list[str]) -> None:
    doc = {
        "version": 4,
        "outputs": {k: {"value": v, "type": "string"} for k, v in outputs.items()},
        "resources": [{"mode": "managed", "type": r} for r in resources],
    }
    state_path.write_text(json.dumps(doc))


def apply_shared(v: dict[str, Any], state_path: Path) -> None:
    """terraform/shared: the two ECR repositories and the weight bucket."""
    region = v.get("region", "us-east-1")
    ecr, urls = aws("ecr", region), {}
    for repo in ("tts", "agent"):
        try:
            urls[repo] = ecr.create_repository(repositoryName=f"kokoro-tts/{repo}")["repository"]["repositoryUri"]
        except ecr.exceptions.RepositoryAlreadyExistsException:
            found = ecr.describe_repositories(repositoryNames=[f"kokoro-tts/{repo}"])["repositories"][0]
            urls[repo] = found["repositoryUri"]
    bucket = "kokoro-tts-weights-test"
    s3 = aws("s3", region)
    if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=bucket)
    outputs = {
        "region": region,
        "tts_repository_url": urls["tts"],
        "agent_repository_url": urls["agent"],
        "weights_bucket_name": bucket,
        "weights_prefix": "kokoro-82m/v1.0/",
        "weights_s3_uri": f"s3://{bucket}/kokoro-82m/v1.0/",
        "weights_kms_key_arn": f"arn:aws:kms:{region}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    }
    save(state_path, outputs, ["aws_ecr_repository.this", "aws_s3_bucket.this"])


def apply_deployment(v: dict[str, Any], state_path: Path) -> None:
    """terraform/deployment: the model, its endpoint configuration, the endpoint, then its autoscaling."""
    region = v["region"]
    sm, scaling = aws("sagemaker", region), aws("application-autoscaling", region)
    # moto rejects ml.g5/ml.g6/ml.c7i types (terraform/README.md, the moto run): those run as ml.m5.large here.
    wanted = v["instance_type"]
    instance = "ml.m5.large" if wanted.startswith(("ml.g5.", "ml.g6.", "ml.c7i.")) else wanted
    model = "kokoro-tts-" + hashlib.sha256(v["tts_image_uri"].encode()).hexdigest()[:8]
    # The module's names: a new image or instance type is a new configuration; a new initial count alone is not
    # (ignore_changes), but a new configuration starts with it.
    config = model + "-" + hashlib.sha256(wanted.encode()).hexdigest()[:4]
    variant_config = {
        "VariantName": "AllTraffic",
        "ModelName": model,
        "InstanceType": instance,
        "InitialInstanceCount": int(v["initial_instance_count"]),
    }
    # The module's rule: the GPU host image on ml.g*/ml.p* only.
    if re.match(r"ml\.[gp][0-9]", wanted):
        variant_config["InferenceAmiVersion"] = v.get("inference_ami_version", "al2-ami-sagemaker-inference-gpu-3-1")
    if model not in {m["ModelName"] for m in sm.list_models()["Models"]}:
        sm.create_model(
            ModelName=model,
            ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/kokoro-tts-sagemaker",
            PrimaryContainer={"Image": v["tts_image_uri"]},
        )
    if config not in {c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]}:
        sm.create_endpoint_config(EndpointConfigName=config, ProductionVariants=[variant_config])
    if sm.list_endpoints()["Endpoints"]:
        update_endpoint(sm, scaling, config, instance)
    else:
        sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=config)
    # aws_appautoscaling_target and _policy, after the endpoint they refer to: registered (again).
    register_autoscaling(scaling, int(v["min_instance_count"]), int(v["max_instance_count"]))
    outputs = {
        "endpoint_name": ENDPOINT,
        "endpoint_arn": f"arn:aws:sagemaker:{region}:{ACCOUNT}:endpoint/{ENDPOINT}",
        "sagemaker_model_name": model,
        "instance_type": wanted,
        "agent_runtime_arn": f"arn:aws:bedrock-agentcore:{region}:{ACCOUNT}:runtime/kokoro_tts_agent-AbCdE12345",
    }
    save(
        state_path,
        outputs,
        ["aws_sagemaker_endpoint.this", "aws_appautoscaling_target.this", "aws_cloudformation_stack.runtime"],
    )


def create_endpoint(sm: Any, model: str, config: str, image: str) -> None:
    """An endpoint named as the module names it, on ``config`` (one ml.m5.large) serving ``model`` from ``image``,
    as a test's starting point."""
    sm.create_model(
        ModelName=model,
        ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/kokoro-tts-sagemaker",
        PrimaryContainer={"Image": image},
    )
    # moto rejects ml.g5 types (terraform/README.md): the instance type is not the point where this is used.
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": model,
        "InstanceType": "ml.m5.large",
        "InitialInstanceCount": 1,
    }
    sm.create_endpoint_config(EndpointConfigName=config, ProductionVariants=[variant])
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=config)


def register_autoscaling(scaling: Any, minimum: int, maximum: int) -> None:
    """aws_appautoscaling_target and _policy as the deployment module declares them."""
    scaling.register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId=VARIANT,
        ScalableDimension=DIMENSION,
        MinCapacity=minimum,
        MaxCapacity=maximum,
    )
    scaling.put_scaling_policy(
        PolicyName="kokoro-tts-concurrent-requests",
        ServiceNamespace="sagemaker",
        ResourceId=VARIANT,
        ScalableDimension=DIMENSION,
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 16.0,
            "PredefinedMetricSpecification": {
                "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
            },
        },
    )


def update_endpoint(sm: Any, scaling: Any, config: str, instance: str) -> None:
    """The endpoint moves to ``config`` if it is not on it already, as UpdateEndpoint would move it."""
    current = sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    if current == config:
        return
    # SageMaker's refusal, which moto does not enforce ("Update endpoints that use auto scaling").
    before = sm.describe_endpoint_config(EndpointConfigName=current)["ProductionVariants"][0]["InstanceType"]
    registered = scaling.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[VARIANT])
    if before != instance and registered["ScalableTargets"]:
        sys.exit(
            "fake terraform: UpdateEndpoint: ValidationException: the instance type of variant AllTraffic "
            "cannot change while it is registered for autoscaling: deregister it first"
        )
    # UpdateEndpoint: moto has none, so the endpoint is made again on the new configuration, with its
    # initial count, as the provider's UpdateEndpoint (no RetainAllVariantProperties) leaves it.
    sm.delete_endpoint(EndpointName=ENDPOINT)
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=config)


def output(state: dict[str, Any], args: list[str]) -> None:
    values = {k: o["value"] for k, o in state["outputs"].items()}
    if "-json" in args:
        print(json.dumps({k: {"value": v, "type": "string", "sensitive": False} for k, v in values.items()}))
    elif args[-1] in values:
        sys.stdout.write(str(values[args[-1]]))
    else:
        sys.exit(f"fake terraform: no output {args[-1]}")


def main(argv: list[str]) -> None:
    args = list(argv)
    root = Path(args.pop(0).split("=", 1)[1]) if args and args[0].startswith("-chdir=") else None
    name = root.name if root else None
    log_call(name, args)
    if os.environ.get("FAKE_TF_FAIL") == f"{name} {args[0]}":
        sys.exit("fake terraform: failing as asked")
    call, _, message = os.environ.get("FAKE_TF_FAIL_ONCE", "").partition(": ")
    failed_once = Path(os.environ["FAKE_LOG"] + ".failed-once")
    if call == f"{name} {args[0]}" and not failed_once.exists():
        failed_once.touch()
        sys.exit(f"Error: {message}")
    if args[0] == "version":
        print(json.dumps({"terraform_version": os.environ.get("FAKE_TF_VERSION", "1.11.4"), "platform": "linux_amd64"}))
        sys.exit(0)
    if root is None:
        sys.exit(f"fake terraform: no -chdir for {args}")
    state_path = root / "terraform.tfstate"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"outputs": {}, "resources": []}

    command = args[0]
    if command == "init":
        pass
    elif command == "apply" and name == "shared":
        apply_shared(variables(root, args), state_path)
    elif command == "apply" and name == "deployment":
        apply_deployment(variables(root, args), state_path)
    elif command == "output":
        output(state, args)
    elif command == "state" and args[1] == "list":
        for resource in state["resources"]:
            print(resource["type"])
    elif command == "destroy":
        variables(root, args)  # terraform needs every variable to destroy too
        state_path.unlink(missing_ok=True)
    else:
        sys.exit(f"fake terraform: unexpected {args}")


if __name__ == "__main__":
    main(sys.argv[1:])
