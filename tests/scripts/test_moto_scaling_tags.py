"""terraform/tests/moto_scaling_tags.py: the tagging of scalable targets the IAM-enforced moto flow adds, spoken
through boto3 (botocore serializes the requests and parses the answers with the service's own model)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "terraform" / "tests"))

import moto_scaling_tags  # noqa: E402

TARGET = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": "endpoint/kokoro-tts/variant/AllTraffic",
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}


@pytest.fixture
def scaling() -> Iterator[Any]:
    moto_scaling_tags.install()
    with mock_aws():
        yield boto3.client(
            "application-autoscaling", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
        )


def test_tags_given_at_registration_are_listed_then_changed_and_removed(scaling: Any) -> None:
    arn = scaling.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=2, Tags={"Project": "kokoro-tts"})[
        "ScalableTargetARN"
    ]
    assert scaling.list_tags_for_resource(ResourceARN=arn)["Tags"] == {"Project": "kokoro-tts"}
    scaling.tag_resource(ResourceARN=arn, Tags={"Project": "other", "Owner": "me"})
    assert scaling.list_tags_for_resource(ResourceARN=arn)["Tags"] == {"Project": "other", "Owner": "me"}
    scaling.untag_resource(ResourceARN=arn, TagKeys=["Project", "Absent"])
    assert scaling.list_tags_for_resource(ResourceARN=arn)["Tags"] == {"Owner": "me"}


def test_a_target_registered_without_tags_has_none(scaling: Any) -> None:
    arn = scaling.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=2)["ScalableTargetARN"]
    assert scaling.list_tags_for_resource(ResourceARN=arn)["Tags"] == {}


def test_an_unknown_or_deregistered_target_is_not_found(scaling: Any) -> None:
    arn = scaling.register_scalable_target(**TARGET, MinCapacity=1, MaxCapacity=2, Tags={"Project": "kokoro-tts"})[
        "ScalableTargetARN"
    ]
    scaling.deregister_scalable_target(**TARGET)
    for call in (
        lambda: scaling.list_tags_for_resource(ResourceARN=arn),
        lambda: scaling.tag_resource(ResourceARN=arn, Tags={"a": "b"}),
        lambda: scaling.untag_resource(ResourceARN=arn, TagKeys=["a"]),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["Error"]["Code"] == "ResourceNotFoundException"
