"""What the identity that runs `make deploy` / `make destroy` may do: one list of statements, in three managed
policies by purpose, which the preflight checks (iam:SimulatePrincipalPolicy) and from which
`python -m scripts.deploy deployer-policy --out DIR` writes the IAM policy documents to attach, with the roles'
permissions boundary (docs/deployer-policy/*.json, kept in step by tests/scripts/test_deploy_checks.py).

Every write is scoped to the resources the deployment names in advance (terraform/: the roles <name>-*, the
repositories <name>/*, the bucket <name>-weights-*, the stack and runtime <name>_agent, the log groups, the endpoint
<name>); what stays on "*" is read-only, or an action IAM authorizes on "*" only (CreateKey, CreateAgentRuntime,
ecr:GetAuthorizationToken), or narrowed by a condition. tests/scripts/test_deployer_policy.py lints that against
IAM's action table, and terraform/tests/enforced_flow.py runs the whole flow as a user holding only this policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PASS_ROLE_SERVICES = ("sagemaker.amazonaws.com", "bedrock-agentcore.amazonaws.com")
# The service-linked roles a fresh account lacks: SageMaker endpoint autoscaling's (the first
# RegisterScalableTarget) and AgentCore's runtime identity role (the first CreateAgentRuntime).
SERVICE_LINKED_ROLES = {
    "sagemaker.application-autoscaling.amazonaws.com": "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint",
    "runtime-identity.bedrock-agentcore.amazonaws.com": "AWSServiceRoleForBedrockAgentCoreRuntimeIdentity",
}
PROJECT_TAG = "Project"  # terraform/*/variables.tf: default_tags Project = <name>


@dataclass(frozen=True)
class Statement:
    sid: str
    actions: tuple[str, ...]
    # ARN patterns; {name}, {runtime} (<name>_agent as AgentCore spells it), {stack} and {boundary} are filled in.
    resources: tuple[str, ...] = ("*",)
    condition: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    effect: str = "Allow"


# The permissions boundary every role of the deployment carries (ROLE_BOUNDARY below): an administrator creates it
# once; the deployer may create and rewrite roles only with it, and may neither remove it nor change it.
BOUNDARY_POLICY = "{name}-role-boundary"
BOUNDARY_ARN = "arn:aws:iam::*:policy/" + BOUNDARY_POLICY
WITH_BOUNDARY = {"StringLike": {"iam:PermissionsBoundary": BOUNDARY_ARN}}

# Three managed policies, split by purpose so each stays under IAM's 6,144 characters (policy_sizes()).
IMAGES_AND_WEIGHTS: tuple[Statement, ...] = (
    # Read-only calls, and actions IAM authorizes on "*" only.
    Statement(
        "ReadAndUnscoped",
        (
            "application-autoscaling:DescribeScalableTargets",
            "application-autoscaling:DescribeScalingPolicies",
            "bedrock-agentcore:CreateAgentRuntime",  # CloudFormation calls it with the deployer's credentials
            "bedrock-agentcore:ListAgentRuntimeVersions",
            # The preflight's account checks (scripts/deploy/account.py): AgentCore in the region, the model's
            # lifecycle, one Converse call of one token as the deployer, the endpoint instance quota.
            "bedrock-agentcore:ListAgentRuntimes",
            "bedrock:GetFoundationModel",
            "bedrock:GetInferenceProfile",
            "bedrock:InvokeModel",
            "cloudformation:ValidateTemplate",
            "cloudwatch:DescribeAlarms",
            "ecr:GetAuthorizationToken",
            "iam:GetRole",
            "iam:SimulatePrincipalPolicy",
            "kms:CreateKey",
            "logs:DescribeLogGroups",
            "sagemaker:DescribeEndpoint",
            "sagemaker:DescribeEndpointConfig",
            "sagemaker:DescribeModel",
            "servicequotas:ListAWSDefaultServiceQuotas",
            "servicequotas:ListServiceQuotas",
            "sts:GetCallerIdentity",
        ),
    ),
    # terraform/shared, the image push and the image-digest lookups.
    Statement(
        "Ecr",
        (
            "ecr:BatchCheckLayerAvailability",
            "ecr:BatchGetImage",
            "ecr:CompleteLayerUpload",
            "ecr:CreateRepository",
            "ecr:DeleteLifecyclePolicy",
            "ecr:DeleteRepository",
            "ecr:DescribeImages",
            "ecr:DescribeRepositories",
            "ecr:GetLifecyclePolicy",
            "ecr:InitiateLayerUpload",
            "ecr:ListTagsForResource",
            "ecr:PutImage",
            "ecr:PutImageScanningConfiguration",
            "ecr:PutImageTagMutability",
            "ecr:PutLifecyclePolicy",
            "ecr:TagResource",
            "ecr:UntagResource",
            "ecr:UploadLayerPart",
        ),
        ("arn:aws:ecr:*:*:repository/{name}/*",),
    ),
    # The grants ECR keeps on the key of a KMS-encrypted repository: made at CreateRepository, retired at
    # DeleteRepository, in the caller's name; only ECR may use this statement.
    Statement(
        "EcrKeyGrants",
        ("kms:CreateGrant", "kms:DescribeKey", "kms:RetireGrant"),
        ("arn:aws:kms:*:*:key/*",),
        {"StringLike": {"kms:ViaService": "ecr.*.amazonaws.com"}},
    ),
    Statement(
        "WeightBucket",
        (
            "s3:CreateBucket",
            "s3:DeleteBucket",
            "s3:DeleteBucketPolicy",
            "s3:DeleteObject",
            "s3:DeleteObjectVersion",
            "s3:GetAccelerateConfiguration",
            "s3:GetBucketAcl",
            "s3:GetBucketCORS",
            "s3:GetBucketLocation",
            "s3:GetBucketLogging",
            "s3:GetBucketObjectLockConfiguration",
            "s3:GetBucketOwnershipControls",
            "s3:GetBucketPolicy",
            "s3:GetBucketPublicAccessBlock",
            "s3:GetBucketRequestPayment",
            "s3:GetBucketTagging",
            "s3:GetBucketVersioning",
            "s3:GetBucketWebsite",
            "s3:GetEncryptionConfiguration",
            "s3:GetLifecycleConfiguration",
            "s3:GetObject",
            "s3:GetReplicationConfiguration",
            "s3:ListBucket",
            "s3:ListBucketVersions",
            "s3:PutBucketOwnershipControls",
            "s3:PutBucketPolicy",
            "s3:PutBucketPublicAccessBlock",
            "s3:PutBucketTagging",
            "s3:PutBucketVersioning",
            "s3:PutEncryptionConfiguration",
            "s3:PutLifecycleConfiguration",
            "s3:PutObject",
        ),
        ("arn:aws:s3:::{name}-weights-*", "arn:aws:s3:::{name}-weights-*/*"),
    ),
    # The weight bucket's key: its ARN holds a random id, so the project's tag (default_tags) is the scope. No
    # kms:PutKeyPolicy: CreateKey sets the policy and nothing in the flow changes it (terraform/tests/enforced_flow.py
    # records every call), so a key tagged <name> by someone else still cannot be taken over.
    Statement(
        "WeightKey",
        (
            "kms:Decrypt",
            "kms:DescribeKey",
            "kms:EnableKeyRotation",
            "kms:GenerateDataKey",
            "kms:GetKeyPolicy",
            "kms:GetKeyRotationStatus",
            "kms:ListResourceTags",
            "kms:ScheduleKeyDeletion",
            "kms:UntagResource",
        ),
        ("arn:aws:kms:*:*:key/*",),
        {"StringEquals": {f"aws:ResourceTag/{PROJECT_TAG}": "{name}"}},
    ),
    # Tagging at CreateKey is authorized on "*" (the key does not exist yet): only with the project's tag.
    Statement(
        "TagWeightKey",
        ("kms:TagResource",),
        ("*",),
        {"StringEquals": {f"aws:RequestTag/{PROJECT_TAG}": "{name}"}},
    ),
)

ROLES: tuple[Statement, ...] = (
    # terraform/deployment: the execution roles and their inline policies, only with the project's boundary
    # (iam:PermissionsBoundary is the role's boundary, or for CreateRole and PutRolePermissionsBoundary the one
    # requested): a role the deployer writes can never do more than ROLE_BOUNDARY allows.
    Statement(
        "RolesWithBoundary",
        (
            "iam:CreateRole",
            "iam:DeleteRole",
            "iam:DeleteRolePolicy",
            "iam:PutRolePermissionsBoundary",
            "iam:PutRolePolicy",
            "iam:UpdateAssumeRolePolicy",
            "iam:UpdateRole",
        ),
        ("arn:aws:iam::*:role/{name}-*",),
        WITH_BOUNDARY,
    ),
    Statement(
        "Roles",
        (
            "iam:GetRolePolicy",
            "iam:ListAttachedRolePolicies",
            "iam:ListInstanceProfilesForRole",
            "iam:ListRolePolicies",
            "iam:TagRole",
            "iam:UntagRole",
        ),
        ("arn:aws:iam::*:role/{name}-*",),
    ),
    # The preflight reads the boundary (scripts/deploy/account.py): without it no role can be created.
    Statement("ReadRoleBoundary", ("iam:GetPolicy",), (BOUNDARY_ARN,)),
    # Whatever else the identity holds: the boundary stays on the roles and stays as the administrator wrote it.
    Statement(
        "KeepRoleBoundary",
        (
            "iam:CreatePolicyVersion",
            "iam:DeletePolicy",
            "iam:DeletePolicyVersion",
            "iam:DeleteRolePermissionsBoundary",
            "iam:SetDefaultPolicyVersion",
        ),
        ("arn:aws:iam::*:role/{name}-*", BOUNDARY_ARN),
        effect="Deny",
    ),
    Statement(
        "PassDeploymentRoles",
        ("iam:PassRole",),
        ("arn:aws:iam::*:role/{name}-*",),
        {"StringEquals": {"iam:PassedToService": list(PASS_ROLE_SERVICES)}},
    ),
    Statement(
        "ServiceLinkedRoles",
        ("iam:CreateServiceLinkedRole",),
        tuple(f"arn:aws:iam::*:role/aws-service-role/{svc}/{role}" for svc, role in SERVICE_LINKED_ROLES.items()),
        {"StringEquals": {"iam:AWSServiceName": list(SERVICE_LINKED_ROLES)}},
    ),
)

DEPLOYMENT: tuple[Statement, ...] = (
    Statement(
        "Endpoint",
        (
            "sagemaker:AddTags",
            "sagemaker:CreateEndpoint",
            "sagemaker:CreateEndpointConfig",
            "sagemaker:CreateModel",
            "sagemaker:DeleteEndpoint",
            "sagemaker:DeleteEndpointConfig",
            "sagemaker:DeleteModel",
            "sagemaker:DeleteTags",
            "sagemaker:ListTags",
            "sagemaker:UpdateEndpoint",
            # Application Auto Scaling checks that the caller may scale the variant before it registers it.
            "sagemaker:UpdateEndpointWeightsAndCapacities",
        ),
        (
            "arn:aws:sagemaker:*:*:endpoint/{name}",
            "arn:aws:sagemaker:*:*:endpoint-config/{name}-*",
            "arn:aws:sagemaker:*:*:model/{name}-*",
        ),
    ),
    # The smoke tests and `make bench TARGET=deployed`.
    Statement(
        "InvokeEndpoint",
        (
            "sagemaker:InvokeEndpoint",
            "sagemaker:InvokeEndpointWithBidirectionalStream",
            "sagemaker:InvokeEndpointWithResponseStream",
        ),
        ("arn:aws:sagemaker:*:*:endpoint/{name}",),
    ),
    # Scalable targets have random ids: the service namespace is the scope.
    Statement(
        "Autoscaling",
        (
            "application-autoscaling:DeleteScalingPolicy",
            "application-autoscaling:DeregisterScalableTarget",
            "application-autoscaling:PutScalingPolicy",
            "application-autoscaling:RegisterScalableTarget",
        ),
        ("*",),
        {"StringEquals": {"application-autoscaling:service-namespace": "sagemaker"}},
    ),
    # The tagging calls carry no namespace; scalable targets are the only resource type they accept.
    Statement(
        "AutoscalingTags",
        (
            "application-autoscaling:ListTagsForResource",
            "application-autoscaling:TagResource",
            "application-autoscaling:UntagResource",
        ),
        ("arn:aws:application-autoscaling:*:*:scalable-target/*",),
    ),
    # The alarms target tracking creates, named after the variant's resource id.
    Statement(
        "ScalingAlarms",
        ("cloudwatch:DeleteAlarms", "cloudwatch:PutMetricAlarm"),
        ("arn:aws:cloudwatch:*:*:alarm:TargetTracking-endpoint/{name}/*",),
    ),
    Statement(
        "LogGroups",
        (
            "logs:CreateLogGroup",
            "logs:DeleteLogGroup",
            "logs:DeleteRetentionPolicy",
            "logs:ListTagsForResource",
            "logs:PutRetentionPolicy",
            "logs:TagResource",
            "logs:UntagResource",
        ),
        (
            "arn:aws:logs:*:*:log-group:/aws/sagemaker/Endpoints/{name}",
            "arn:aws:logs:*:*:log-group:/aws/sagemaker/Endpoints/{name}:*",
            "arn:aws:logs:*:*:log-group:/aws/bedrock-agentcore/runtimes/{runtime}-*",
        ),
    ),
    Statement(
        "RuntimeStack",
        (
            "cloudformation:CreateStack",
            "cloudformation:DeleteStack",
            "cloudformation:DescribeStackEvents",
            "cloudformation:DescribeStacks",
            "cloudformation:GetTemplate",
            "cloudformation:UpdateStack",
        ),
        ("arn:aws:cloudformation:*:*:stack/{stack}/*",),
    ),
    # What CloudFormation's AWS::BedrockAgentCore::Runtime handlers do in the deployer's name (the stack has no
    # service role; the registry schema lists them), and the smoke test's and bench's calls.
    Statement(
        "Runtime",
        (
            "bedrock-agentcore:CreateAgentRuntimeEndpoint",
            "bedrock-agentcore:CreateWorkloadIdentity",
            "bedrock-agentcore:DeleteAgentRuntime",
            "bedrock-agentcore:DeleteAgentRuntimeEndpoint",
            "bedrock-agentcore:DeleteWorkloadIdentity",
            "bedrock-agentcore:GetAgentRuntime",
            "bedrock-agentcore:GetAgentRuntimeEndpoint",
            "bedrock-agentcore:GetWorkloadIdentity",
            "bedrock-agentcore:InvokeAgentRuntime",
            "bedrock-agentcore:ListTagsForResource",
            "bedrock-agentcore:StopRuntimeSession",
            "bedrock-agentcore:TagResource",
            "bedrock-agentcore:UntagResource",
            "bedrock-agentcore:UpdateAgentRuntime",
            "bedrock-agentcore:UpdateAgentRuntimeEndpoint",
        ),
        (
            "arn:aws:bedrock-agentcore:*:*:runtime/{runtime}-*",
            "arn:aws:bedrock-agentcore:*:*:workload-identity-directory/default",
            "arn:aws:bedrock-agentcore:*:*:workload-identity-directory/default/workload-identity/{runtime}-*",
        ),
    ),
)

POLICIES: Mapping[str, tuple[Statement, ...]] = {
    "images-and-weights": IMAGES_AND_WEIGHTS,
    "roles": ROLES,
    "deployment": DEPLOYMENT,
}
STATEMENTS: tuple[Statement, ...] = tuple(s for group in POLICIES.values() for s in group)
# IAM's quota for a managed policy, counted as IAM counts it: the JSON without whitespace.
MANAGED_POLICY_CHARS = 6144

# The most any role of the deployment may do, whatever its own policies say: what terraform/modules/iam grants the
# SageMaker and the AgentCore execution roles, on the same resources (tests/scripts/test_role_boundary.py).
ROLE_BOUNDARY: tuple[Statement, ...] = (
    Statement(
        "ReadWeights",
        ("s3:GetObject", "s3:ListBucket"),
        ("arn:aws:s3:::{name}-weights-*", "arn:aws:s3:::{name}-weights-*/*"),
    ),
    # The bucket key, through S3 only: the weights are decrypted, the agent's turns (below) encrypted too.
    Statement(
        "BucketKeyViaS3",
        ("kms:Decrypt", "kms:GenerateDataKey"),
        ("arn:aws:kms:*:*:key/*",),
        {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}},
    ),
    # The agent's durable conversation turns (terraform/deployment agent_session_storage = "s3"): written under the
    # weight bucket's sessions/ prefix, which its lifecycle rule expires.
    Statement(
        "SessionTurns",
        ("s3:DeleteObject", "s3:GetObject", "s3:PutObject"),
        ("arn:aws:s3:::{name}-weights-*/sessions/*",),
    ),
    Statement(
        "PullImages",
        ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"),
        ("arn:aws:ecr:*:*:repository/{name}/*",),
    ),
    Statement(
        "LogGroups",
        ("logs:CreateLogGroup", "logs:DescribeLogStreams"),
        (
            "arn:aws:logs:*:*:log-group:/aws/sagemaker/Endpoints/{name}",
            "arn:aws:logs:*:*:log-group:/aws/bedrock-agentcore/runtimes/{runtime}-*",
        ),
    ),
    Statement(
        "WriteLogs",
        ("logs:CreateLogStream", "logs:PutLogEvents"),
        (
            "arn:aws:logs:*:*:log-group:/aws/sagemaker/Endpoints/{name}:log-stream:*",
            "arn:aws:logs:*:*:log-group:/aws/bedrock-agentcore/runtimes/{runtime}-*:log-stream:*",
        ),
    ),
    Statement(
        "InvokeModels",
        ("bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"),
        ("arn:aws:bedrock:*::foundation-model/*", "arn:aws:bedrock:*:*:inference-profile/*"),
    ),
    Statement(
        "InvokeTtsEndpoint",
        (
            "sagemaker:InvokeEndpoint",
            "sagemaker:InvokeEndpointWithBidirectionalStream",
            "sagemaker:InvokeEndpointWithResponseStream",
        ),
        ("arn:aws:sagemaker:*:*:endpoint/{name}",),
    ),
    # Actions IAM authorizes on "*" only (the roles' own statements narrow what they can).
    Statement(
        "Unscoped",
        (
            "aws-marketplace:Subscribe",
            "aws-marketplace:ViewSubscriptions",
            "cloudwatch:PutMetricData",
            "ecr:GetAuthorizationToken",
            "logs:DescribeLogGroups",
            "xray:GetSamplingRules",
            "xray:GetSamplingTargets",
            "xray:PutTelemetryRecords",
            "xray:PutTraceSegments",
        ),
    ),
)
ALLOWS: tuple[Statement, ...] = tuple(s for s in STATEMENTS if s.effect == "Allow")
# Kept for the preflight's callers: statement id -> its actions.
ACTIONS: Mapping[str, tuple[str, ...]] = {s.sid: s.actions for s in ALLOWS}


def runtime_name(name: str) -> str:
    """terraform/deployment: replace("<name>_agent", "-", "_"), as AgentRuntimeName allows."""
    return f"{name}_agent".replace("-", "_")


def _fill(value: Any, name: str) -> Any:
    if isinstance(value, str):
        runtime = runtime_name(name)
        return value.format(name=name, runtime=runtime, stack=runtime.replace("_", "-"))
    if isinstance(value, list):
        return [_fill(v, name) for v in value]
    return {k: _fill(v, name) for k, v in value.items()}


def all_actions() -> list[str]:
    return sorted({a for s in ALLOWS for a in s.actions})


def statement_document(statement: Statement, name: str = "kokoro-tts") -> dict[str, Any]:
    resources = [_fill(r, name) for r in statement.resources]
    document: dict[str, Any] = {
        "Sid": statement.sid,
        "Effect": statement.effect,
        "Action": sorted(statement.actions) if len(statement.actions) > 1 else statement.actions[0],
        "Resource": resources if len(resources) > 1 else resources[0],
    }
    if statement.condition:
        document["Condition"] = _fill(dict(statement.condition), name)
    return document


def document(statements: Iterable[Statement], name: str = "kokoro-tts") -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [statement_document(s, name) for s in statements]}


def policy_documents(name: str = "kokoro-tts") -> dict[str, dict[str, Any]]:
    """The deployer's managed policies, by purpose (docs/deployer-policy/<purpose>.json)."""
    return {purpose: document(statements, name) for purpose, statements in POLICIES.items()}


def boundary_document(name: str = "kokoro-tts") -> dict[str, Any]:
    """The roles' permissions boundary (docs/deployer-policy/role-boundary.json), named boundary_policy(name)."""
    return document(ROLE_BOUNDARY, name)


def boundary_policy(name: str = "kokoro-tts") -> str:
    return BOUNDARY_POLICY.format(name=name)


def policy_files(name: str = "kokoro-tts") -> dict[str, str]:
    """File name -> JSON text: the three deployer policies and the roles' boundary."""
    documents = {**policy_documents(name), "role-boundary": boundary_document(name)}
    return {f"{purpose}.json": json.dumps(doc, indent=2) + "\n" for purpose, doc in documents.items()}


def iam_size(document_text: str) -> int:
    """A policy's length as IAM's quotas count it: without whitespace."""
    return sum(1 for c in document_text if not c.isspace())


@dataclass
class PermissionCheck:
    principal: str | None = None
    denied: list[str] = field(default_factory=list)
    unchecked: str | None = None  # why the check could not run (then ``denied`` means nothing)


def principal_arn(caller_arn: str, get_role: Callable[[str], str]) -> str | None:
    """The IAM ARN to simulate for sts:GetCallerIdentity's Arn: a user's as it is, an assumed role's role (whose
    path, e.g. SSO's aws-reserved/..., only iam:GetRole knows); None for the account root, which may do anything."""
    kind = caller_arn.split(":", 5)[5] if caller_arn.count(":") >= 5 else ""
    if kind == "root":
        return None
    if kind.startswith("assumed-role/"):
        return get_role(kind.split("/")[1])
    return caller_arn


def simulation_cases(account: str, region: str, name: str = "kokoro-tts") -> list[dict[str, Any]]:
    """One SimulatePrincipalPolicy request per statement and condition value: its actions on a resource of the
    deployment (the pattern with its wildcards filled in as the deployment names things), with the context its
    condition asks for. Unscoped statements are simulated on "*"."""
    runtime = runtime_name(name)
    samples = {
        "Ecr": f"arn:aws:ecr:{region}:{account}:repository/{name}/tts",
        "EcrKeyGrants": f"arn:aws:kms:{region}:{account}:key/00000000-0000-0000-0000-000000000000",
        "WeightBucket": f"arn:aws:s3:::{name}-weights-0",
        "WeightKey": f"arn:aws:kms:{region}:{account}:key/00000000-0000-0000-0000-000000000000",
        "TagWeightKey": f"arn:aws:kms:{region}:{account}:key/00000000-0000-0000-0000-000000000000",
        "Roles": f"arn:aws:iam::{account}:role/{name}-sagemaker",
        "RolesWithBoundary": f"arn:aws:iam::{account}:role/{name}-sagemaker",
        "ReadRoleBoundary": f"arn:aws:iam::{account}:policy/{boundary_policy(name)}",
        "Endpoint": f"arn:aws:sagemaker:{region}:{account}:endpoint/{name}",
        "InvokeEndpoint": f"arn:aws:sagemaker:{region}:{account}:endpoint/{name}",
        "ScalingAlarms": f"arn:aws:cloudwatch:{region}:{account}:alarm:TargetTracking-endpoint/{name}/variant/x",
        "LogGroups": f"arn:aws:logs:{region}:{account}:log-group:/aws/sagemaker/Endpoints/{name}",
        "RuntimeStack": f"arn:aws:cloudformation:{region}:{account}:stack/{runtime.replace('_', '-')}/1",
        "Runtime": f"arn:aws:bedrock-agentcore:{region}:{account}:runtime/{runtime}-AbCdE12345",
    }
    contexts: dict[str, list[tuple[str, str]]] = {
        "EcrKeyGrants": [("kms:ViaService", f"ecr.{region}.amazonaws.com")],
        "WeightKey": [(f"aws:ResourceTag/{PROJECT_TAG}", name)],
        "TagWeightKey": [(f"aws:RequestTag/{PROJECT_TAG}", name)],
        "Autoscaling": [("application-autoscaling:service-namespace", "sagemaker")],
        "RolesWithBoundary": [("iam:PermissionsBoundary", f"arn:aws:iam::{account}:policy/{boundary_policy(name)}")],
    }
    cases: list[dict[str, Any]] = []
    for statement in ALLOWS:
        actions = sorted(statement.actions)
        if statement.sid == "PassDeploymentRoles":
            for service in PASS_ROLE_SERVICES:
                suffix = "sagemaker" if service.startswith("sagemaker") else "agentcore"
                role = f"arn:aws:iam::{account}:role/{name}-{suffix}"
                cases.append(_case(actions, role, [("iam:PassedToService", service)]))
        elif statement.sid == "ServiceLinkedRoles":
            for service, role in SERVICE_LINKED_ROLES.items():
                arn = f"arn:aws:iam::{account}:role/aws-service-role/{service}/{role}"
                cases.append(_case(actions, arn, [("iam:AWSServiceName", service)]))
        else:
            for start in range(0, len(actions), 50):
                chunk = actions[start : start + 50]
                cases.append(_case(chunk, samples.get(statement.sid, "*"), contexts.get(statement.sid, [])))
    return cases


def _case(actions: list[str], resource: str, context: list[tuple[str, str]]) -> dict[str, Any]:
    case: dict[str, Any] = {"ActionNames": actions, "ResourceArns": [resource]}
    if context:
        case["ContextEntries"] = [
            {"ContextKeyName": key, "ContextKeyValues": [value], "ContextKeyType": "string"} for key, value in context
        ]
    return case


def check_permissions(
    iam: Any, caller_arn: str, actions: Iterable[str] | None = None, name: str = "kokoro-tts"
) -> PermissionCheck:
    """Simulate every statement's actions for the caller, on a resource of the deployment and with the context the
    statement's condition needs (simulation_cases); an action the simulation denies is a gap. The simulation
    itself needs iam:SimulatePrincipalPolicy (and iam:GetRole for a role): without them the check says why it
    could not run."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    failures = (BotoCoreError, ClientError, ResponseParserError)  # an answer that is not IAM's (a proxy, an emulator)
    result = PermissionCheck()
    try:
        principal = principal_arn(caller_arn, lambda role: str(iam.get_role(RoleName=role)["Role"]["Arn"]))
    except failures as e:
        result.unchecked = f"iam:GetRole of the caller's role failed ({_first_line(e)})"
        return result
    if principal is None:
        result.unchecked = "the account root may do everything"
        return result
    result.principal = principal
    wanted = set(actions) if actions is not None else set(all_actions())
    account = principal.split(":")[4]
    region = "us-east-1"
    try:
        for case in simulation_cases(account, region, name):
            names = [a for a in case["ActionNames"] if a in wanted]
            if not names:
                continue
            answer = iam.simulate_principal_policy(PolicySourceArn=principal, **{**case, "ActionNames": names})
            context = ", ".join(
                f"{e['ContextKeyName']}={e['ContextKeyValues'][0]}" for e in case.get("ContextEntries", [])
            )
            result.denied.extend(f"{a} ({context})" if context else a for a in _denied(answer))
    except failures as e:
        result.unchecked = f"iam:SimulatePrincipalPolicy failed ({_first_line(e)})"
        result.denied.clear()
    result.denied.sort()
    return result


def _denied(answer: Mapping[str, Any]) -> list[str]:
    return [str(e["EvalActionName"]) for e in answer.get("EvaluationResults", []) if e.get("EvalDecision") != "allowed"]


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__
