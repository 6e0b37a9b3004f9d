"""The deployer policies and the roles' boundary (docs/deployer-policy/*.json) linted against IAM's own action
table, as policy_sentry ships it (access level and resource types of every action, from the Service Authorization
Reference), and sized as IAM counts a managed policy:

- no permissions-management action on "*", and no write or tagging action on "*" unless IAM authorizes the action
  on "*" only or the statement narrows it with a condition;
- every scoped action has a resource of a type it is authorized on (a pattern of another type would deny the
  call in AWS, whatever moto does);
- an action IAM authorizes on "*" only is not scoped;
- each file fits one managed policy (6,144 characters without whitespace).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from policy_sentry.querying.actions import get_action_data

from scripts.deploy.permissions import MANAGED_POLICY_CHARS, boundary_document, iam_size, policy_documents

REPO = Path(__file__).resolve().parents[2]
GRANTING_LEVELS = ("Write", "Tagging", "Permissions management")
# Actions newer than policy_sentry's table, read as the sibling IAM documents alike (the same endpoint resource).
NEWER_THAN_THE_TABLE = {"sagemaker:InvokeEndpointWithBidirectionalStream": "sagemaker:InvokeEndpointWithResponseStream"}
POLICY_FILES = sorted((REPO / "docs" / "deployer-policy").glob("*.json"))


@cache
def action_table(action: str) -> tuple[str, tuple[str, ...]]:
    """(access level, the ARN formats IAM authorizes the action on; "*" for none)."""
    service, name = NEWER_THAN_THE_TABLE.get(action, action).split(":")
    rows = next(iter(get_action_data(service, name).values()), [])
    assert rows, f"{action} is not in IAM's action table"
    return str(rows[0]["access_level"]), tuple(str(r["resource_arn_format"]) for r in rows)


def format_regex(arn_format: str) -> re.Pattern[str]:
    parts = re.split(r"\$\{[^}]+\}", arn_format)
    return re.compile("^" + ".+".join(re.escape(p) for p in parts) + "$")


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def lint(document: dict[str, Any]) -> list[str]:
    problems = []
    for statement in document["Statement"]:
        sid, resources = statement.get("Sid", "?"), as_list(statement["Resource"])
        for action in as_list(statement["Action"]):
            level, formats = action_table(action)
            star_only = all(f == "*" for f in formats)
            if resources == ["*"]:
                if level == "Permissions management":
                    problems.append(f"{sid}: {action} ({level}) on *")
                elif level in GRANTING_LEVELS and not star_only and "Condition" not in statement:
                    problems.append(f"{sid}: {action} ({level}) on * although IAM can scope it")
                continue
            if star_only:
                problems.append(f"{sid}: {action} is authorized on * only: scoping it denies it")
                continue
            # A statement may mix resource types (a bucket and its objects); each action needs one of its own.
            concrete = [r.replace("*", "x") for r in resources]
            if not any(format_regex(f).match(c) for f in formats if f != "*" for c in concrete):
                problems.append(f"{sid}: {action} is not authorized on resources like {', '.join(resources)}")
    return problems


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.name)
def test_the_committed_policy_passes_the_lint(path: Path) -> None:
    assert lint(json.loads(path.read_text())) == []


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.name)
def test_each_policy_fits_a_managed_policy(path: Path) -> None:
    # IAM's quota counts the document without whitespace; the files are indented for reading.
    text = path.read_text()
    assert iam_size(text) <= MANAGED_POLICY_CHARS
    assert iam_size(text) == len(json.dumps(json.loads(text), separators=(",", ":")).replace(" ", ""))


def test_the_size_counts_as_iam_does() -> None:
    assert iam_size('{\n  "Version": "2012-10-17"\n}\n') == len('{"Version":"2012-10-17"}')
    big = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": f"s3:A{i}"} for i in range(400)]}
    assert iam_size(json.dumps(big, indent=2)) > MANAGED_POLICY_CHARS


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        # What the policy held before: privilege escalation on any role, key and bucket of the account.
        (
            {"Sid": "Roles", "Action": ["iam:PutRolePolicy", "iam:UpdateAssumeRolePolicy"], "Resource": "*"},
            [
                "Roles: iam:PutRolePolicy (Permissions management) on *",
                "Roles: iam:UpdateAssumeRolePolicy (Permissions management) on *",
            ],
        ),
        (
            {"Sid": "WeightKey", "Action": ["kms:PutKeyPolicy", "kms:ScheduleKeyDeletion"], "Resource": "*"},
            [
                "WeightKey: kms:PutKeyPolicy (Permissions management) on *",
                "WeightKey: kms:ScheduleKeyDeletion (Write) on * although IAM can scope it",
            ],
        ),
        (
            {"Sid": "B", "Action": ["s3:PutBucketPolicy", "s3:DeleteBucket"], "Resource": "*"},
            [
                "B: s3:PutBucketPolicy (Permissions management) on *",
                "B: s3:DeleteBucket (Write) on * although IAM can scope it",
            ],
        ),
        (
            {"Sid": "S", "Action": "cloudformation:DeleteStack", "Resource": "*"},
            ["S: cloudformation:DeleteStack (Write) on * although IAM can scope it"],
        ),
        # Scoped to a resource type the action is not authorized on, or scoping an action that has none.
        (
            {"Sid": "R", "Action": "logs:DeleteLogGroup", "Resource": "arn:aws:iam::*:role/kokoro-tts-*"},
            ["R: logs:DeleteLogGroup is not authorized on resources like arn:aws:iam::*:role/kokoro-tts-*"],
        ),
        (
            {"Sid": "C", "Action": "kms:CreateKey", "Resource": "arn:aws:kms:*:*:key/*"},
            ["C: kms:CreateKey is authorized on * only: scoping it denies it"],
        ),
        # Reads on "*", and "*"-only writes, pass.
        ({"Sid": "Ok", "Action": ["sagemaker:DescribeEndpoint", "ecr:GetAuthorizationToken"], "Resource": "*"}, []),
    ],
)
def test_the_lint_finds_privilege_granting_actions_on_star(statement: dict[str, Any], expected: list[str]) -> None:
    assert lint({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", **statement}]}) == expected


def test_the_policy_for_another_name_is_scoped_to_that_name() -> None:
    documents = [*policy_documents("acme-voice").values(), boundary_document("acme-voice")]
    assert all(lint(d) == [] for d in documents)
    text = json.dumps(documents)
    assert "kokoro" not in text and "acme-voice-weights-*" in text and "acme_voice_agent-*" in text
    assert "policy/acme-voice-role-boundary" in text
