"""What a fresh AWS account or region lacks that can be read with the deployer's credentials, before anything bills.

Each check reads (or makes one tiny model call) and, when the deploy would fail later, adds one problem whose fix
is one line:

- the endpoint instance quota: Service Quotas, "<instance type> for endpoint usage" of sagemaker (0 in many new
  accounts for GPU types); the applied value, else AWS's default;
- the model's lifecycle: bedrock GetFoundationModel (modelLifecycle.status ACTIVE, not LEGACY), or for an
  inference profile (us./eu./apac./global.…) GetInferenceProfile, then each of its models;
- that the model answers one Converse call of one output token as the deployer: catches what an Active model can
  still lack in an account (the Marketplace subscription of a third-party model, Anthropic's use-case form);
- that the region serves AgentCore Runtime: ListAgentRuntimes (maxResults 1) there; an endpoint that does not
  resolve or answer means the region has no AgentCore Runtime (botocore's endpoint rules resolve a host for any
  region, so only a call can tell); AccessDenied means it does (the deployer policy allows the call);
- that SageMaker's bidirectional streaming answers: a TCP connection to runtime.sagemaker.<region>:8443 (the
  host and port the SDK's endpoint rules give the bidirectional API), or to SMOKE_ENDPOINT_URI;
- the service-linked roles the first deploy creates: present, or the deployer may create them
  (iam:SimulatePrincipalPolicy of iam:CreateServiceLinkedRole for that service);
- the roles' permissions boundary <name>-role-boundary, which an administrator creates once: iam:GetPolicy.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from .permissions import SERVICE_LINKED_ROLES, boundary_policy

QUOTA_SERVICE = "sagemaker"
BIDI_PORT = 8443
CONNECT_TIMEOUT_S = 5.0
PROFILE_PREFIXES = ("us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.", "global.")
ANTHROPIC_STEPS = (
    "Anthropic models need, once per account: the deployer allowed aws-marketplace:Subscribe/ViewSubscriptions, a "
    "payment method for Marketplace, and Anthropic's use-case form (Bedrock console, model catalog; docs/deploy.md)"
)


class Adder(Protocol):
    def add(self, what: str, fix: str) -> None: ...


@dataclass
class AccountInputs:
    region: str
    instance_type: str
    min_instances: int
    max_instances: int
    bedrock_model_id: str
    caller_arn: str
    bidi_endpoint: str  # https://host:port of the bidirectional API (SMOKE_ENDPOINT_URI or the regional one)
    name: str = "kokoro-tts"  # the deployment's name (terraform's var.name)


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", "")) or _code(error)


def quota_value(quotas: Any, quota_name: str) -> float | None:
    """The applied value of the sagemaker quota named ``quota_name``, else AWS's default; None when neither lists it."""
    for operation in ("list_service_quotas", "list_aws_default_service_quotas"):
        paginator = quotas.get_paginator(operation)
        for page in paginator.paginate(ServiceCode=QUOTA_SERVICE):
            for quota in page.get("Quotas", []):
                if quota.get("QuotaName") == quota_name and "Value" in quota:
                    return float(quota["Value"])
    return None


def check_quota(quotas: Any, inputs: AccountInputs, report: Adder, warn: Callable[[str], None]) -> None:
    name = f"{inputs.instance_type} for endpoint usage"
    try:
        value = quota_value(quotas, name)
    except (BotoCoreError, ClientError) as e:
        warn(f"the quota '{name}' could not be read ({e}): a quota of 0 fails the endpoint after ~10 minutes")
        return
    increase = (
        f"request {inputs.max_instances} or more: Service Quotas console → Amazon SageMaker → '{name}' → Request "
        f"increase at account level (region {inputs.region}), or a smaller MIN_INSTANCES/another INSTANCE_TYPE"
    )
    if value is None:
        report.add(
            f"Service Quotas lists no '{name}' in {inputs.region}: SageMaker cannot host that type there.",
            increase,
        )
    elif value < inputs.min_instances:
        report.add(
            f"the account's quota '{name}' in {inputs.region} is {value:g}, MIN_INSTANCES is {inputs.min_instances}: "
            "CreateEndpoint would fail with ResourceLimitExceeded.",
            increase,
        )
    elif value < inputs.max_instances:
        warn(f"quota '{name}' is {value:g}: autoscaling cannot reach MAX_INSTANCES={inputs.max_instances}")


def _model_ids(bedrock: Any, model_id: str) -> list[str]:
    """The foundation models behind ``model_id``: itself, or an inference profile's models (by ARN)."""
    if not model_id.startswith(PROFILE_PREFIXES) and not model_id.startswith("arn:"):
        return [model_id]
    profile = bedrock.get_inference_profile(inferenceProfileIdentifier=model_id)
    if profile.get("status") != "ACTIVE":
        raise LookupError(f"inference profile {model_id} is {profile.get('status')}")
    # A profile lists its model once per region it routes to: the same id several times.
    return list(
        dict.fromkeys(str(m["modelArn"]).rsplit("/", 1)[-1] for m in profile.get("models", []) if m.get("modelArn"))
    )


def check_model_lifecycle(bedrock: Any, inputs: AccountInputs, report: Adder, warn: Callable[[str], None]) -> None:
    model = inputs.bedrock_model_id
    choose = (
        f"choose an Active model: BEDROCK_MODEL_ID=us.amazon.nova-2-lite-v1:0 (aws bedrock list-foundation-models "
        f"--region {inputs.region} --query \"modelSummaries[?modelLifecycle.status=='ACTIVE'].modelId\")"
    )
    try:
        for model_id in _model_ids(bedrock, model):
            details = bedrock.get_foundation_model(modelIdentifier=model_id)["modelDetails"]
            status = str(details.get("modelLifecycle", {}).get("status", ""))
            if status != "ACTIVE":
                report.add(
                    f"BEDROCK_MODEL_ID {model}: {model_id} is {status or 'of no known lifecycle'} in {inputs.region} "
                    "(Legacy models refuse accounts that have not used them recently).",
                    choose,
                )
    except LookupError as e:
        report.add(f"BEDROCK_MODEL_ID {model}: {e}.", choose)
    except ClientError as e:
        if _code(e) in ("ResourceNotFoundException", "ValidationException"):
            report.add(f"BEDROCK_MODEL_ID {model} is not a model or inference profile in {inputs.region}.", choose)
        else:
            warn(f"the lifecycle of {model} could not be read ({_message(e)})")
    except BotoCoreError as e:
        warn(f"the lifecycle of {model} could not be read ({e})")


def check_model_answers(runtime: Any, inputs: AccountInputs, report: Adder, warn: Callable[[str], None]) -> None:
    """One Converse call of one output token, as the deployer (a fraction of a cent)."""
    model = inputs.bedrock_model_id
    try:
        runtime.converse(
            modelId=model,
            messages=[{"role": "user", "content": [{"text": "Say OK."}]}],
            inferenceConfig={"maxTokens": 1},
        )
    except ClientError as e:
        code, message = _code(e), _message(e)
        if code in ("AccessDeniedException", "ResourceNotFoundException", "ValidationException"):
            fix = (
                ANTHROPIC_STEPS
                if "anthropic" in model
                else (
                    "allow the deployer bedrock:InvokeModel on the model (docs/deployer-policy/), or choose "
                    "BEDROCK_MODEL_ID=us.amazon.nova-2-lite-v1:0"
                )
            )
            report.add(
                f"BEDROCK_MODEL_ID {model} does not answer this account in {inputs.region}: {code}: {message}",
                fix,
            )
        else:  # throttling, a model overloaded right now: says nothing about the account
            warn(f"{model} did not answer a test call ({code}: {message})")
    except BotoCoreError as e:
        warn(f"{model} could not be called ({e})")


def check_agentcore_region(control: Any, inputs: AccountInputs, report: Adder, warn: Callable[[str], None]) -> None:
    try:
        control.list_agent_runtimes(maxResults=1)
    except EndpointConnectionError:
        report.add(
            f"AgentCore Runtime is not available in {inputs.region} (its control endpoint does not answer).",
            "deploy to a region that has it (AWS_REGION=us-east-1; the AgentCore developer guide lists the regions)",
        )
    except ClientError as e:
        if _code(e) not in ("AccessDeniedException", "UnrecognizedClientException"):
            warn(f"ListAgentRuntimes in {inputs.region} failed: {_message(e)}")
    except BotoCoreError as e:
        warn(f"AgentCore Runtime in {inputs.region} could not be checked ({e})")


def check_bidi_streaming(inputs: AccountInputs, report: Adder) -> None:
    parts = urlsplit(inputs.bidi_endpoint)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as e:
        report.add(
            f"SageMaker's bidirectional streaming does not answer at {host}:{port} ({e}): the region "
            f"{inputs.region} may not serve it, or this network blocks port {port}.",
            "deploy to a region that serves it (AWS_REGION=us-east-1), open outbound TCP "
            f"{port}, or set SMOKE_ENDPOINT_URI to a VPC endpoint that reaches it",
        )


def _absent(read: Callable[[], object], what: str, warn: Callable[[str], None]) -> bool:
    """Whether IAM says ``what`` does not exist (``read`` raised NoSuchEntity); False when it exists, and when it
    could not be read (then with a warning naming it)."""
    try:
        read()
        return False
    except ClientError as e:
        if _code(e) == "NoSuchEntity":
            return True
        warn(f"{what} could not be read ({_message(e)})")
    except BotoCoreError as e:
        warn(f"{what} could not be read ({e})")
    return False


def check_service_linked_roles(iam: Any, inputs: AccountInputs, report: Adder, warn: Callable[[str], None]) -> None:
    # Created by the first autoscaled endpoint and the first runtime of an account.
    for service, role in SERVICE_LINKED_ROLES.items():
        if not _absent(partial(iam.get_role, RoleName=role), f"service-linked role {role}", warn):
            continue
        try:
            result = iam.simulate_principal_policy(
                PolicySourceArn=inputs.caller_arn,
                ActionNames=["iam:CreateServiceLinkedRole"],
                ContextEntries=[
                    {"ContextKeyName": "iam:AWSServiceName", "ContextKeyValues": [service], "ContextKeyType": "string"}
                ],
            )
        except Exception as e:
            warn(f"{role} does not exist yet and whether the deployer may create it could not be checked ({e})")
            continue
        decisions = {r.get("EvalDecision") for r in result.get("EvaluationResults", [])}
        if decisions != {"allowed"}:
            report.add(
                f"the service-linked role {role} does not exist, and the deployer may not create it "
                f"(iam:CreateServiceLinkedRole for {service}).",
                f"allow it (docs/deployer-policy/roles.json), or have an administrator run once: aws iam "
                f"create-service-linked-role --aws-service-name {service}",
            )


def check_role_boundary(iam: Any, inputs: AccountInputs, report: Adder, warn: Callable[[str], None]) -> None:
    """The permissions boundary the deployment's roles carry: an administrator creates it once; without it the
    deployment's first role cannot be created."""
    account = inputs.caller_arn.split(":")[4] if inputs.caller_arn.count(":") >= 5 else ""
    name = boundary_policy(inputs.name)
    arn = f"arn:aws:iam::{account}:policy/{name}"
    if not _absent(partial(iam.get_policy, PolicyArn=arn), f"the roles' permissions boundary {name}", warn):
        return
    report.add(
        f"the roles' permissions boundary {arn} does not exist: the deployer may create roles only with it.",
        f"have an administrator create it once: aws iam create-policy --policy-name {name} "
        "--policy-document file://docs/deployer-policy/role-boundary.json (docs/deploy.md, Permissions)",
    )


def check_account(session: Any, inputs: AccountInputs, report: Adder, warn: Callable[[str], None]) -> None:
    """Every check above, each independent of the others' results."""
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=20, retries={"max_attempts": 2, "mode": "standard"})

    def client(service: str) -> Any:
        return session.client(service, region_name=inputs.region, config=config)

    checks: list[tuple[str, Callable[[], None]]] = [
        ("the endpoint quota", lambda: check_quota(client("service-quotas"), inputs, report, warn)),
        ("the model's lifecycle", lambda: check_model_lifecycle(client("bedrock"), inputs, report, warn)),
        ("a model call", lambda: check_model_answers(client("bedrock-runtime"), inputs, report, warn)),
        ("AgentCore", lambda: check_agentcore_region(client("bedrock-agentcore-control"), inputs, report, warn)),
        ("bidirectional streaming", lambda: check_bidi_streaming(inputs, report)),
        ("the service-linked roles", lambda: check_service_linked_roles(client("iam"), inputs, report, warn)),
        ("the roles' permissions boundary", lambda: check_role_boundary(client("iam"), inputs, report, warn)),
    ]
    for what, check in checks:
        try:
            check()
        except Exception as e:  # an answer botocore cannot parse, say: one check that cannot run only warns
            warn(f"{what} could not be checked: {type(e).__name__}: {e}")


def bidi_endpoint(env: Mapping[str, str], region: str) -> str:
    from kokoro_client.sagemaker_bidi import DEFAULT_ENDPOINT

    return env.get("SMOKE_ENDPOINT_URI", "").strip() or DEFAULT_ENDPOINT.format(region=region)
