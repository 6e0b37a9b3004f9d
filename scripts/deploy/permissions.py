"""What the identity that runs `make deploy` / `make destroy` may do: one list, which the preflight checks
(iam:SimulatePrincipalPolicy) and from which `python -m scripts.deploy deployer-policy` writes the IAM policy
document to attach (docs/deployer-policy.json, kept in step by tests/test_deploy_permissions.py).

Grouped by what needs it. Resources stay "*" except for iam:PassRole, which is scoped to the project's roles and
the two services that receive them: the other actions create resources whose names are not known in advance,
and an account's own naming rules are the place to narrow them (terraform/README.md, "Permissions").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ACTIONS: Mapping[str, tuple[str, ...]] = {
    # The preflight and the scripts' own calls: the wait, the release before an instance-type change, the smoke
    # tests of the endpoint and the runtime.
    "DeployScripts": (
        "sts:GetCallerIdentity",
        "iam:SimulatePrincipalPolicy",
        "iam:GetRole",
        "sagemaker:DescribeEndpoint",
        "sagemaker:DescribeEndpointConfig",
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithBidirectionalStream",
        "bedrock-agentcore:InvokeAgentRuntime",
    ),
    # terraform/shared, the weight upload and the image push.
    "Ecr": (
        "ecr:BatchCheckLayerAvailability",
        "ecr:BatchGetImage",
        "ecr:CompleteLayerUpload",
        "ecr:CreateRepository",
        "ecr:DeleteLifecyclePolicy",
        "ecr:DeleteRepository",
        "ecr:DescribeImages",
        "ecr:DescribeRepositories",
        "ecr:GetAuthorizationToken",
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
    "WeightBucket": (
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
    "WeightKey": (
        "kms:CreateKey",
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:EnableKeyRotation",
        "kms:GenerateDataKey",
        "kms:GetKeyPolicy",
        "kms:GetKeyRotationStatus",
        "kms:ListResourceTags",
        "kms:PutKeyPolicy",
        "kms:ScheduleKeyDeletion",
        "kms:TagResource",
        "kms:UntagResource",
    ),
    # terraform/deployment.
    "Roles": (
        "iam:CreateRole",
        "iam:DeleteRole",
        "iam:DeleteRolePolicy",
        "iam:GetRolePolicy",
        "iam:ListAttachedRolePolicies",
        "iam:ListInstanceProfilesForRole",
        "iam:ListRolePolicies",
        "iam:PutRolePolicy",
        "iam:TagRole",
        "iam:UntagRole",
        "iam:UpdateAssumeRolePolicy",
        "iam:UpdateRole",
    ),
    "Endpoint": (
        "sagemaker:AddTags",
        "sagemaker:CreateEndpoint",
        "sagemaker:CreateEndpointConfig",
        "sagemaker:CreateModel",
        "sagemaker:DeleteEndpoint",
        "sagemaker:DeleteEndpointConfig",
        "sagemaker:DeleteModel",
        "sagemaker:DeleteTags",
        "sagemaker:DescribeModel",
        "sagemaker:ListTags",
        "sagemaker:UpdateEndpoint",
    ),
    "Autoscaling": (
        "application-autoscaling:DeleteScalingPolicy",
        "application-autoscaling:DeregisterScalableTarget",
        "application-autoscaling:DescribeScalableTargets",
        "application-autoscaling:DescribeScalingPolicies",
        "application-autoscaling:ListTagsForResource",
        "application-autoscaling:PutScalingPolicy",
        "application-autoscaling:RegisterScalableTarget",
        "application-autoscaling:TagResource",
        "application-autoscaling:UntagResource",
        # The alarms that target tracking creates.
        "cloudwatch:DeleteAlarms",
        "cloudwatch:DescribeAlarms",
        "cloudwatch:PutMetricAlarm",
    ),
    "LogGroups": (
        "logs:CreateLogGroup",
        "logs:DeleteLogGroup",
        "logs:DeleteRetentionPolicy",
        "logs:DescribeLogGroups",
        "logs:ListTagsForResource",
        "logs:PutRetentionPolicy",
        "logs:TagResource",
        "logs:UntagResource",
    ),
    "RuntimeStack": (
        "cloudformation:CreateStack",
        "cloudformation:DeleteStack",
        "cloudformation:DescribeStackEvents",
        "cloudformation:DescribeStacks",
        "cloudformation:GetTemplate",
        "cloudformation:UpdateStack",
        "cloudformation:ValidateTemplate",
        # CloudFormation calls AgentCore with the deployer's credentials.
        "bedrock-agentcore:CreateAgentRuntime",
        "bedrock-agentcore:CreateWorkloadIdentity",
        "bedrock-agentcore:DeleteAgentRuntime",
        "bedrock-agentcore:DeleteWorkloadIdentity",
        "bedrock-agentcore:GetAgentRuntime",
        "bedrock-agentcore:GetWorkloadIdentity",
        "bedrock-agentcore:ListAgentRuntimeVersions",
        "bedrock-agentcore:ListTagsForResource",
        "bedrock-agentcore:TagResource",
        "bedrock-agentcore:UntagResource",
        "bedrock-agentcore:UpdateAgentRuntime",
    ),
}

# Scoped statements: the roles the deployment creates (<name>-sagemaker, <name>-agentcore), handed only to the
# services that run them; the service-linked role of SageMaker autoscaling (the account's first registration).
PASS_ROLE_SERVICES = ("sagemaker.amazonaws.com", "bedrock-agentcore.amazonaws.com")
AUTOSCALING_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"


# The conditions of those scoped statements, as the simulation must be told them (it cannot guess a context).
CONDITIONED: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "iam:PassRole": ("iam:PassedToService", PASS_ROLE_SERVICES),
    "iam:CreateServiceLinkedRole": ("iam:AWSServiceName", (AUTOSCALING_SERVICE,)),
}


def all_actions() -> list[str]:
    return sorted(
        {a for actions in ACTIONS.values() for a in actions} | {"iam:PassRole", "iam:CreateServiceLinkedRole"}
    )


def policy_document(name: str = "kokoro-tts") -> dict[str, Any]:
    statements: list[dict[str, Any]] = [
        {"Sid": sid, "Effect": "Allow", "Action": sorted(actions), "Resource": "*"} for sid, actions in ACTIONS.items()
    ]
    statements.append(
        {
            "Sid": "PassDeploymentRoles",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": f"arn:aws:iam::*:role/{name}-*",
            "Condition": {"StringEquals": {"iam:PassedToService": list(PASS_ROLE_SERVICES)}},
        }
    )
    statements.append(
        {
            "Sid": "AutoscalingServiceLinkedRole",
            "Effect": "Allow",
            "Action": "iam:CreateServiceLinkedRole",
            "Resource": "*",
            "Condition": {"StringEquals": {"iam:AWSServiceName": AUTOSCALING_SERVICE}},
        }
    )
    return {"Version": "2012-10-17", "Statement": statements}


def policy_json(name: str = "kokoro-tts") -> str:
    return json.dumps(policy_document(name), indent=2) + "\n"


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


def check_permissions(
    iam: Any, caller_arn: str, actions: Iterable[str] | None = None, name: str = "kokoro-tts"
) -> PermissionCheck:
    """Simulate every action for the caller; an action the simulation denies is a gap. Unconditioned actions are
    simulated on resource "*"; iam:PassRole on the deployment's role with each service it is passed to, and
    iam:CreateServiceLinkedRole with the autoscaling service, as the policy's conditions ask. The simulation
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
    wanted = sorted(actions) if actions is not None else all_actions()
    plain = [a for a in wanted if a not in CONDITIONED]
    account = principal.split(":")[4]
    try:
        for start in range(0, len(plain), 50):
            answer = iam.simulate_principal_policy(PolicySourceArn=principal, ActionNames=plain[start : start + 50])
            result.denied.extend(_denied(answer))
        for action in (a for a in wanted if a in CONDITIONED):
            key, values = CONDITIONED[action]
            for value in values:
                # The role each service receives: <name>-sagemaker, <name>-agentcore (terraform/modules/iam).
                suffix = "sagemaker" if value.startswith("sagemaker") else "agentcore"
                role = f"arn:aws:iam::{account}:role/{name}-{suffix}"
                resources = [role] if action == "iam:PassRole" else ["*"]
                answer = iam.simulate_principal_policy(
                    PolicySourceArn=principal,
                    ActionNames=[action],
                    ResourceArns=resources,
                    ContextEntries=[{"ContextKeyName": key, "ContextKeyValues": [value], "ContextKeyType": "string"}],
                )
                result.denied.extend(f"{a} ({key}={value})" for a in _denied(answer))
    except failures as e:
        result.unchecked = f"iam:SimulatePrincipalPolicy failed ({_first_line(e)})"
        result.denied.clear()
    return result


def _denied(answer: Mapping[str, Any]) -> list[str]:
    return [str(e["EvalActionName"]) for e in answer.get("EvaluationResults", []) if e.get("EvalDecision") != "allowed"]


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__
