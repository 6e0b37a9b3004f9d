"""Seeds and inspects the moto server that scripts/terraform_checks.sh applies both roots against.

It reads back what Terraform created through the AWS APIs (boto3 against moto), so the checks see
the resources as AWS would report them, not Terraform's own idea of them.

    moto_verify.py seed                 --endpoint URL --shared-outputs F --tfvars-out F
    moto_verify.py deployed             --endpoint URL --shared-outputs F --tfvars F --outputs F --instance-type T
    moto_verify.py deployment-destroyed --endpoint URL --shared-outputs F --tfvars F --outputs F
    moto_verify.py shared-destroyed     --endpoint URL --shared-outputs F
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # for support.*
from support.ecr_images import push_image

REGION = "us-east-1"
WEIGHT_FILE = "config.json"
SAGEMAKER_INVOKE_ACTIONS = sorted(
    [
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithBidirectionalStream",
        "sagemaker:InvokeEndpointWithResponseStream",
    ]
)


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)
    print(f"  ok: {message}")


def client(endpoint: str, service: str) -> Any:
    factory: Any = boto3.client  # boto3's stubs only accept literal service names
    return factory(service, endpoint_url=endpoint, region_name=REGION)


def load_outputs(path: str) -> dict[str, Any]:
    return {key: value["value"] for key, value in json.loads(Path(path).read_text()).items()}


def repository_name(repository_url: str) -> str:
    return repository_url.split("/", 1)[1]


def pushed_image(ecr: Any, repository_url: str, label: str) -> str:
    """Registers a minimal image and returns <repository url>@<digest>."""
    digest = push_image(ecr, repository_name(repository_url), "v1", {"label": label})
    return f"{repository_url}@{digest}"


def seed(args: argparse.Namespace) -> None:
    shared = load_outputs(args.shared_outputs)
    s3 = client(args.endpoint, "s3")
    bucket = shared["weights_bucket_name"]
    # moto ignores policy conditions on object requests, so the deny-without-TLS statement denies every
    # upload there: lift the policy for the upload and put the identical document back.
    policy = s3.get_bucket_policy(Bucket=bucket)["Policy"]
    s3.delete_bucket_policy(Bucket=bucket)
    try:
        s3.put_object(Bucket=bucket, Key=shared["weights_prefix"] + WEIGHT_FILE, Body=b"{}")
    finally:
        s3.put_bucket_policy(Bucket=bucket, Policy=policy)
    print(f"  ok: uploaded {shared['weights_s3_uri']}{WEIGHT_FILE}")
    ecr = client(args.endpoint, "ecr")
    tfvars = {
        "tts_image_uri": pushed_image(ecr, shared["tts_repository_url"], "tts"),
        "agent_image_uri": pushed_image(ecr, shared["agent_repository_url"], "agent"),
        "weights_bucket_name": shared["weights_bucket_name"],
        "weights_prefix": shared["weights_prefix"],
        "weights_kms_key_arn": shared["weights_kms_key_arn"],
    }
    print(f"  ok: pushed {tfvars['tts_image_uri']} and {tfvars['agent_image_uri']}")
    Path(args.tfvars_out).write_text(json.dumps(tfvars, indent=2) + "\n")


def check_shared(endpoint: str, shared: dict[str, Any]) -> None:
    """The long-lived resources: private, encrypted bucket with its weights; immutable, scanned repos with images."""
    s3 = client(endpoint, "s3")
    bucket = shared["weights_bucket_name"]
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    check(all(block.values()) and len(block) == 4, "weight bucket blocks all public access")
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    default = rule["ApplyServerSideEncryptionByDefault"]
    check(
        default["SSEAlgorithm"] == "aws:kms" and default["KMSMasterKeyID"] == shared["weights_kms_key_arn"],
        "weight bucket encrypts with its KMS key",
    )
    check(s3.get_bucket_versioning(Bucket=bucket).get("Status") == "Enabled", "weight bucket is versioned")
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    check(
        any(
            s["Effect"] == "Deny" and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
            for s in policy["Statement"]
        ),
        "weight bucket denies requests without TLS",
    )
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=shared["weights_prefix"])
    check(
        [o["Key"] for o in listing.get("Contents", [])] == [shared["weights_prefix"] + WEIGHT_FILE],
        f"weights are still under {shared['weights_s3_uri']}",
    )

    ecr = client(endpoint, "ecr")
    for key in ("tts_repository_url", "agent_repository_url"):
        name = repository_name(shared[key])
        repo = ecr.describe_repositories(repositoryNames=[name])["repositories"][0]
        check(
            repo["imageTagMutability"] == "IMMUTABLE" and repo["imageScanningConfiguration"]["scanOnPush"],
            f"{name} has immutable tags and scans on push",
        )
        check(len(ecr.list_images(repositoryName=name)["imageIds"]) == 1, f"{name} still holds its image")


def deployed(args: argparse.Namespace) -> None:
    shared = load_outputs(args.shared_outputs)
    tfvars = json.loads(Path(args.tfvars).read_text())
    outputs = load_outputs(args.outputs)
    check_shared(args.endpoint, shared)

    sagemaker = client(args.endpoint, "sagemaker")
    endpoint = sagemaker.describe_endpoint(EndpointName=outputs["endpoint_name"])
    check(endpoint["EndpointStatus"] == "InService", f"endpoint {outputs['endpoint_name']} is InService")
    config = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    variant = config["ProductionVariants"][0]
    check(variant["InstanceType"] == args.instance_type, f"variant runs on {args.instance_type}")
    model = sagemaker.describe_model(ModelName=variant["ModelName"])
    container = model["PrimaryContainer"]
    check(container["Image"] == tfvars["tts_image_uri"], "model runs the TTS image by digest")
    source = container["ModelDataSource"]["S3DataSource"]
    check(
        source == {"S3Uri": shared["weights_s3_uri"], "S3DataType": "S3Prefix", "CompressionType": "None"},
        "model reads the uncompressed weight prefix",
    )
    # The module's rule: torch on a GPU type (ml.g*, ml.p*), onnx on any other (moto's runs are CPU types).
    gpu = re.match(r"ml\.[gp][0-9]", args.instance_type) is not None
    backend = "torch" if gpu else "onnx"
    check(container["Environment"].get("KOKORO_BACKEND") == backend, f"container gets KOKORO_BACKEND={backend}")
    check(model["ExecutionRoleArn"] == outputs["sagemaker_role_arn"], "model runs as the SageMaker role")

    iam = client(args.endpoint, "iam")
    agent_role = outputs["agent_runtime_role_arn"].rsplit("/", 1)[1]
    trust = iam.get_role(RoleName=agent_role)["Role"]["AssumeRolePolicyDocument"]
    check(
        trust["Statement"][0]["Principal"]["Service"] == "bedrock-agentcore.amazonaws.com"
        and "aws:SourceAccount" in trust["Statement"][0]["Condition"]["StringEquals"],
        "agent role trusts AgentCore for this account only",
    )
    (policy_name,) = iam.list_role_policies(RoleName=agent_role)["PolicyNames"]
    document = iam.get_role_policy(RoleName=agent_role, PolicyName=policy_name)["PolicyDocument"]
    invoke = [s for s in document["Statement"] if any(a.startswith("sagemaker:") for a in s["Action"])]
    check(
        len(invoke) == 1
        and sorted(invoke[0]["Action"]) == SAGEMAKER_INVOKE_ACTIONS
        and invoke[0]["Resource"] == outputs["endpoint_arn"],
        "agent role may invoke (bidirectional stream included) exactly this endpoint",
    )

    cloudformation = client(args.endpoint, "cloudformation")
    stack = cloudformation.describe_stacks(StackName=outputs["agent_runtime_stack_id"])["Stacks"][0]
    check(stack["StackStatus"] == "CREATE_COMPLETE", f"stack {stack['StackName']} is CREATE_COMPLETE")
    template = cloudformation.get_template(StackName=outputs["agent_runtime_stack_id"])["TemplateBody"]
    if isinstance(template, str):
        template = json.loads(template)
    properties = template["Resources"]["Runtime"]["Properties"]
    check(
        properties["AgentRuntimeArtifact"]["ContainerConfiguration"]["ContainerUri"] == tfvars["agent_image_uri"],
        "runtime runs the agent image by digest",
    )
    check(properties["RoleArn"] == outputs["agent_runtime_role_arn"], "runtime runs as the agent role")
    check(
        properties["EnvironmentVariables"]["TTS_ENDPOINT_NAME"] == outputs["endpoint_name"],
        "runtime gets TTS_ENDPOINT_NAME",
    )
    check(properties["EnvironmentVariables"].get("AGENT_MODEL") == "bedrock", "runtime runs the agent on Bedrock")

    group = endpoint_log_group(args.endpoint, outputs)
    check(
        group is not None and group.get("retentionInDays") == 30,
        f"log group {outputs['endpoint_log_group']} exists with a 30-day retention",
    )


def endpoint_log_group(endpoint: str, outputs: dict[str, Any]) -> dict[str, Any] | None:
    name = outputs["endpoint_log_group"]
    groups = client(endpoint, "logs").describe_log_groups(logGroupNamePrefix=name)["logGroups"]
    return next((g for g in groups if g["logGroupName"] == name), None)


def deployment_destroyed(args: argparse.Namespace) -> None:
    shared = load_outputs(args.shared_outputs)
    outputs = load_outputs(args.outputs)
    sagemaker = client(args.endpoint, "sagemaker")
    check(
        not any(e["EndpointName"] == outputs["endpoint_name"] for e in sagemaker.list_endpoints()["Endpoints"]),
        "endpoint is gone",
    )
    check(not sagemaker.list_models()["Models"], "SageMaker models are gone")
    iam = client(args.endpoint, "iam")
    roles = {r["Arn"] for r in iam.list_roles()["Roles"]}
    check(
        not roles & {outputs["sagemaker_role_arn"], outputs["agent_runtime_role_arn"]},
        "both roles are gone",
    )
    cloudformation = client(args.endpoint, "cloudformation")
    try:
        status = cloudformation.describe_stacks(StackName=outputs["agent_runtime_stack_id"])["Stacks"][0]["StackStatus"]
    except ClientError:
        status = "DELETE_COMPLETE"
    check(status == "DELETE_COMPLETE", "runtime stack is deleted")
    check(endpoint_log_group(args.endpoint, outputs) is None, "the endpoint's log group is gone")
    # What destroying the deployment must not touch.
    check_shared(args.endpoint, shared)


def shared_destroyed(args: argparse.Namespace) -> None:
    shared = load_outputs(args.shared_outputs)
    s3 = client(args.endpoint, "s3")
    buckets = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    check(shared["weights_bucket_name"] not in buckets, "weight bucket is gone (force_destroy emptied it)")
    ecr = client(args.endpoint, "ecr")
    names = {r["repositoryName"] for r in ecr.describe_repositories()["repositories"]}
    check(
        not names & {repository_name(shared["tts_repository_url"]), repository_name(shared["agent_repository_url"])},
        "repositories are gone (force_destroy deleted their images)",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["seed", "deployed", "deployment-destroyed", "shared-destroyed"])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--shared-outputs", required=True)
    parser.add_argument("--tfvars")
    parser.add_argument("--tfvars-out")
    parser.add_argument("--outputs")
    parser.add_argument("--instance-type")
    args = parser.parse_args()
    steps = {
        "seed": seed,
        "deployed": deployed,
        "deployment-destroyed": deployment_destroyed,
        "shared-destroyed": shared_destroyed,
    }
    try:
        steps[args.step](args)
    except (CheckFailed, ClientError, KeyError) as error:
        print(f"  FAILED: {args.step}: {error!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
