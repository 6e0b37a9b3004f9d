"""IAM authorization for an in-process moto server, closer to AWS than moto's own.

moto (5.x, moto/core/authorization.py) checks a request's action against the caller's policies, but passes the
resource "*" for every service except S3 and existing IAM roles, and treats any Condition it cannot read as a
Deny. A policy scoped to ARNs and conditions would then be refused everywhere. This module replaces that one check
(``ActionAuthenticatorMixin._authenticate_and_authorize_action``): moto still verifies the SigV4 signature and
finds the caller's policies; the request's resource ARNs and condition context are read from its parameters
(``requested``), and the policies are evaluated as IAM does for identity policies (explicit Deny wins, then any
Allow whose Action, Resource and Condition all match).

Some permissions AWS checks are not API calls of their own: iam:PassRole when CreateModel names a role, what
CloudFormation's registry handlers do to an AgentCore runtime in the caller's name and Application Auto Scaling's
checks of the caller (both from AWS's tables, aws_tables.py), the KMS calls S3 makes for an SSE-KMS object.
``requested`` adds those as implied calls, so the policy is held to them too. Every decision is kept in
``Authorizer.decisions`` (and appended to a JSON-lines log), so a run can be re-evaluated without one statement.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from aws_tables import CHECKED_OPERATIONS, scaling_permissions, stack_permissions

# Signing names that differ from the IAM service prefix.
IAM_PREFIX = {"monitoring": "cloudwatch"}
# moto names most S3 requests by their API operation; IAM authorizes them as these actions (the S3 user guide's
# "Required permissions for Amazon S3 API operations").
S3_ACTIONS = {
    "HeadBucket": "ListBucket",
    "HeadObject": "GetObject",
    "ListObjects": "ListBucket",
    "ListObjectsV2": "ListBucket",
    "ListObjectVersions": "ListBucketVersions",
    "ListBuckets": "ListAllMyBuckets",
    "ListMultipartUploads": "ListBucketMultipartUploads",
    "ListParts": "ListMultipartUploadParts",
    "GetBucketAccelerateConfiguration": "GetAccelerateConfiguration",
    "GetBucketCors": "GetBucketCORS",
    "GetBucketEncryption": "GetEncryptionConfiguration",
    "PutBucketEncryption": "PutEncryptionConfiguration",
    "GetBucketLifecycleConfiguration": "GetLifecycleConfiguration",
    "PutBucketLifecycleConfiguration": "PutLifecycleConfiguration",
    "DeleteBucketLifecycle": "PutLifecycleConfiguration",
    "GetBucketReplication": "GetReplicationConfiguration",
    "GetBucketNotificationConfiguration": "GetBucketNotification",
    "GetPublicAccessBlock": "GetBucketPublicAccessBlock",
    "PutPublicAccessBlock": "PutBucketPublicAccessBlock",
    "DeletePublicAccessBlock": "PutBucketPublicAccessBlock",
    "GetObjectLockConfiguration": "GetBucketObjectLockConfiguration",
    "DeleteBucketOwnershipControls": "PutBucketOwnershipControls",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "CopyObject": "PutObject",
    "UploadPartCopy": "PutObject",
    "DeleteObjects": "DeleteObject",
    "GetObjectAttributes": "GetObject",
}


@dataclass(frozen=True)
class Call:
    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)
    implied_by: str | None = None  # the API call that makes AWS check this one


@dataclass(frozen=True)
class Decision:
    principal: str
    action: str
    resource: str
    context: Mapping[str, str]
    allowed_by: str | None  # the Sid of an Allow that matched; None: denied
    implied_by: str | None = None


# --------------------------------------------------------------------------------------------------------------
# Policy evaluation


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _wildcard(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(
        "^" + ".*".join(".".join(re.escape(p) for p in part.split("?")) for part in pattern.split("*")) + "$", flags
    )


def _condition_holds(condition: Mapping[str, Mapping[str, Any]], context: Mapping[str, str]) -> bool:
    for operator, entries in condition.items():
        if operator not in ("StringEquals", "StringLike", "ArnLike"):
            raise ValueError(f"condition operator {operator} is not evaluated here")
        for key, wanted in entries.items():
            value = context.get(key)
            if value is None:
                return False  # a key the request does not carry never matches (no ...IfExists here)
            values = [str(w) for w in _as_list(wanted)]
            if operator == "StringEquals":
                matched = value in values
            elif operator in ("StringLike", "ArnLike"):
                matched = any(_wildcard(w).match(value) for w in values)
            else:
                raise ValueError(f"condition operator {operator} is not evaluated here")
            if not matched:
                return False
    return True


def statement_matches(statement: Mapping[str, Any], call: Call) -> bool:
    if not any(_wildcard(a, re.IGNORECASE).match(call.action) for a in _as_list(statement.get("Action", []))):
        return False
    if not any(_wildcard(r).match(call.resource) for r in _as_list(statement.get("Resource", []))):
        return False
    return _condition_holds(statement.get("Condition", {}), call.context)


def evaluate(documents: Iterable[Mapping[str, Any]], call: Call) -> str | None:
    """The Sid of an Allow that permits ``call`` ("(no sid)" when it has none), or None when nothing allows it or
    a Deny matches."""
    allowed_by = None
    for document in documents:
        for statement in _as_list(document["Statement"]):
            if not statement_matches(statement, call):
                continue
            if statement["Effect"] == "Deny":
                return None
            allowed_by = allowed_by or statement.get("Sid", "(no sid)")
    return allowed_by


# --------------------------------------------------------------------------------------------------------------
# What a request asks for


def _param(response: Any, name: str) -> Any:
    try:
        return response._get_param(name)
    except Exception:  # a body that is not JSON, a protocol without that helper
        return None


def _tags(response: Any, key_name: str, value_name: str) -> dict[str, str]:
    tags = _param(response, "Tags") or []
    return {t[key_name]: t[value_name] for t in tags if isinstance(t, dict) and key_name in t}


class _Moto:
    """Look-ups in moto's in-process backends (the resource a name refers to, its tags)."""

    def __init__(self, account: str, region: str) -> None:
        self.account, self.region = account, region

    def kms_key(self, key_id: str) -> tuple[str, dict[str, str]] | None:
        from moto.kms.models import kms_backends

        backend = kms_backends[self.account][self.region]
        try:
            key = backend.describe_key(key_id)
        except Exception:
            return None
        tags = backend.list_resource_tags(key.id).get("Tags", [])
        return key.arn, {t["TagKey"]: t["TagValue"] for t in tags}

    def bucket_key(self, bucket: str) -> str | None:
        from moto.s3.models import s3_backends

        try:
            found = s3_backends[self.account]["aws"].get_bucket(bucket)
        except Exception:
            return None
        rules = (found.encryption or {}).get("Rule", [])
        for rule in rules if isinstance(rules, list) else [rules]:
            default = rule.get("ApplyServerSideEncryptionByDefault", {}) if isinstance(rule, dict) else {}
            if default.get("KMSMasterKeyID"):
                return str(default["KMSMasterKeyID"])
        return None

    def role_arn(self, name: str) -> str:
        from moto.iam.models import iam_backends

        try:
            return str(iam_backends[self.account]["aws"].get_role(name).arn)
        except Exception:
            return f"arn:aws:iam::{self.account}:role/{name}"

    def role_boundary(self, name: str) -> str | None:
        from moto.iam.models import iam_backends

        try:
            boundary = iam_backends[self.account]["aws"].get_role(name).permissions_boundary_arn
        except Exception:
            return None
        return str(boundary) if boundary else None

    def stack_arn(self, name_or_id: str) -> str:
        if name_or_id.startswith("arn:"):
            return name_or_id
        from moto.cloudformation.models import cloudformation_backends

        backend = cloudformation_backends[self.account][self.region]
        for stack in list(backend.stacks.values()):
            if stack.name == name_or_id and stack.status != "DELETE_COMPLETE":
                return str(stack.stack_id)
        return f"arn:aws:cloudformation:{self.region}:{self.account}:stack/{name_or_id}/new"

    def stack_template(self, stack_arn: str) -> str | None:
        from moto.cloudformation.models import cloudformation_backends

        stack = cloudformation_backends[self.account][self.region].stacks.get(stack_arn)
        return None if stack is None else str(stack.template)


def _stack_calls(template: str | None, operation: str, region: str, account: str, stack: str) -> list[Call]:
    """What CloudFormation's registry handlers ask of the caller for the template's resources (aws_tables.py)."""
    try:
        parsed = json.loads(template or "{}")
    except ValueError:
        return []
    via = f"cloudformation:{operation} {stack}"
    return [Call(a, r, c, via) for a, r, c in stack_permissions(parsed, operation, region, account)]


def requested(response: Any, service: str, operation: str, moto_resource: str) -> list[Call]:
    """The calls one request makes IAM check: the operation on each resource it names, then the implied ones."""
    prefix = IAM_PREFIX.get(service, service)
    if prefix == "s3":
        operation = S3_ACTIONS.get(operation, operation)
    action = f"{prefix}:{operation}"
    account, region = str(response.current_account), str(response.region)
    moto = _Moto(account, region)
    context: dict[str, str] = {}
    resources: list[str] = []
    implied: list[Call] = []

    if prefix == "s3":
        resources = [moto_resource]
        bucket = moto_resource.split(":::", 1)[-1].split("/", 1)[0]
        key = moto.bucket_key(bucket) if "/" in moto_resource.split(":::", 1)[-1] else None
        found = moto.kms_key(key) if key else None
        if found and operation in ("PutObject", "GetObject"):
            kms_action = "kms:GenerateDataKey" if operation == "PutObject" else "kms:Decrypt"
            tags = {f"aws:ResourceTag/{k}": v for k, v in found[1].items()}
            # S3 asks KMS on the caller's behalf: AWS puts the service in the request context (kms:ViaService).
            via = {**tags, "kms:ViaService": f"s3.{region}.amazonaws.com"}
            implied.append(Call(kms_action, found[0], via, f"{action} {moto_resource}"))
    elif prefix == "iam":
        if operation == "CreateServiceLinkedRole":
            service_name = str(_param(response, "AWSServiceName"))
            context["iam:AWSServiceName"] = service_name
            resources = [f"arn:aws:iam::{account}:role/aws-service-role/{service_name}/*"]
        elif _param(response, "RoleName"):
            name = str(_param(response, "RoleName"))
            path = str(_param(response, "Path") or "/") if operation == "CreateRole" else None
            resources = [f"arn:aws:iam::{account}:role{path}{name}" if path else moto.role_arn(name)]
            # iam:PermissionsBoundary: the boundary requested (CreateRole, PutRolePermissionsBoundary), else the
            # role's own (IAM's condition key table); absent when there is none, so a condition on it fails.
            requested_boundary = _param(response, "PermissionsBoundary")
            if operation in ("CreateRole", "PutRolePermissionsBoundary"):
                boundary = str(requested_boundary) if requested_boundary else None
            else:
                boundary = moto.role_boundary(name)
            if boundary:
                context["iam:PermissionsBoundary"] = boundary
        elif _param(response, "PolicyArn"):
            resources = [str(_param(response, "PolicyArn"))]
    elif prefix == "ecr":
        single = _param(response, "repositoryName")
        names = _param(response, "repositoryNames") or ([single] if single else [])
        if names:
            resources = [f"arn:aws:ecr:{region}:{account}:repository/{name}" for name in names]
        elif _param(response, "resourceArn"):
            resources = [str(_param(response, "resourceArn"))]
    elif prefix == "kms":
        key_id = _param(response, "KeyId")
        request_tags = _tags(response, "TagKey", "TagValue")
        context.update({f"aws:RequestTag/{k}": v for k, v in request_tags.items()})
        if operation == "CreateKey":
            if request_tags:  # tags at creation are authorized as kms:TagResource
                implied.append(Call("kms:TagResource", "*", dict(context), action))
        elif key_id:
            found = moto.kms_key(str(key_id))
            if found:
                resources = [found[0]]
                context.update({f"aws:ResourceTag/{k}": v for k, v in found[1].items()})
            else:
                resources = [f"arn:aws:kms:{region}:{account}:key/{key_id}"]
    elif prefix == "logs":
        name = _param(response, "logGroupName")
        arn = _param(response, "resourceArn") or _param(response, "resourceArn".lower())
        if name:
            resources = [f"arn:aws:logs:{region}:{account}:log-group:{name}"]
        elif arn:
            resources = [str(arn).removesuffix(":*")]
    elif prefix == "sagemaker":
        if operation.startswith("InvokeEndpoint"):
            match = re.search(r"/endpoints/([^/]+)/", urlparse(response.uri).path)
            name = match.group(1) if match else _param(response, "EndpointName")
            resources = [f"arn:aws:sagemaker:{region}:{account}:endpoint/{str(name).lower()}"]
        else:
            for parameter, kind in (
                ("EndpointName", "endpoint"),
                ("EndpointConfigName", "endpoint-config"),
                ("ModelName", "model"),
            ):
                value = _param(response, parameter)
                if value:
                    resources.append(f"arn:aws:sagemaker:{region}:{account}:{kind}/{str(value).lower()}")
            if _param(response, "ResourceArn"):
                resources = [str(_param(response, "ResourceArn"))]
        if operation == "CreateModel" and _param(response, "ExecutionRoleArn"):
            role = str(_param(response, "ExecutionRoleArn"))
            implied.append(Call("iam:PassRole", role, {"iam:PassedToService": "sagemaker.amazonaws.com"}, action))
    elif prefix == "cloudformation":
        stack = _param(response, "StackName")
        if stack:
            arn = moto.stack_arn(str(stack))
            resources = [arn]
            if operation in ("CreateStack", "UpdateStack"):
                template = _param(response, "TemplateBody")
            elif operation == "DeleteStack":
                template = moto.stack_template(arn)
            else:
                template = None
            implied.extend(_stack_calls(template, operation, region, account, str(stack)))
    elif prefix == "application-autoscaling":
        namespace = _param(response, "ServiceNamespace")
        if namespace:
            context["application-autoscaling:service-namespace"] = str(namespace)
        if _param(response, "ResourceARN"):
            resources = [str(_param(response, "ResourceARN"))]
        resource_id = _param(response, "ResourceId")
        if namespace == "sagemaker" and operation in CHECKED_OPERATIONS and resource_id:
            via = f"{action} {resource_id}"
            implied.extend(Call(a, r, c, via) for a, r, c in scaling_permissions(str(resource_id), region, account))

    calls = [Call(action, r, context) for r in (resources or ["*"])]
    return calls + implied


# --------------------------------------------------------------------------------------------------------------
# The hook


class AccessDenied(Exception):
    pass


@dataclass
class Authorizer:
    log_path: Path | None = None
    decisions: list[Decision] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, decision: Decision) -> None:
        with self._lock:
            self.decisions.append(decision)
            if self.log_path is not None:
                with self.log_path.open("a") as f:
                    f.write(json.dumps(asdict(decision)) + "\n")

    def check(self, principal: str, documents: Sequence[Mapping[str, Any]], calls: Sequence[Call]) -> None:
        """Evaluate and record each call; AccessDenied names the first one refused."""
        for call in calls:
            allowed_by = evaluate(documents, call)
            self.record(
                Decision(principal, call.action, call.resource, dict(call.context), allowed_by, call.implied_by)
            )
            if allowed_by is None:
                via = f" (implied by {call.implied_by})" if call.implied_by else ""
                raise AccessDenied(f"{principal} may not {call.action} on {call.resource}{via}")

    def install(self) -> None:
        """Replace moto's check for every request the server handles from now on."""
        from moto import settings
        from moto.core.authorization import ActionAuthenticatorMixin
        from moto.iam.access_control import IAMPolicy

        authorizer = self

        def authorize(self: Any, iam_request_cls: type, resource: str = "*") -> None:
            if ActionAuthenticatorMixin.request_count < settings.INITIAL_NO_AUTH_ACTION_COUNT:
                ActionAuthenticatorMixin.request_count += 1
                return
            parsed = urlparse(self.uri)
            path = self.raw_path + (f"?{parsed.query}" if parsed.query else "")
            iam_request = iam_request_cls(
                account_id=self.current_account,
                method=self.method,
                path=path,
                data=self.data,
                body=self.raw_body,
                headers=self.headers,
                action=self._get_action(),
            )
            iam_request.check_signature()
            operation = iam_request._action.split(":", 1)[1]
            if iam_request._action == "sts:GetCallerIdentity":
                return  # allowed whatever the policies say, as in AWS
            documents = [IAMPolicy(p)._policy_json for p in iam_request._access_key.collect_policies()]
            calls = requested(self, iam_request._service, operation, resource)
            try:
                authorizer.check(str(iam_request._access_key.arn), documents, calls)
            except AccessDenied:
                iam_request._raise_access_denied()

        ActionAuthenticatorMixin._authenticate_and_authorize_action = authorize  # type: ignore[method-assign]


def load_decisions(path: Path) -> list[Decision]:
    return [Decision(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
