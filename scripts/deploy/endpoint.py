"""Waiting for the SageMaker endpoint to be InService, with progress, failing clearly when it cannot be.

Terraform already waits for a create or update, but an apply can also end with the endpoint still updating
(another deploy, autoscaling) or rolled back to the previous configuration, which is InService too. So this
also checks that the endpoint serves the model the apply just made.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from .errors import DeployError

if TYPE_CHECKING:
    from mypy_boto3_sagemaker import SageMakerClient

# Statuses that can still become InService; anything else that is not InService is the end.
_TRANSIENT = {"Creating", "Updating", "SystemUpdating", "RollingBack", "OutOfService"}


class EndpointError(DeployError):
    pass


@dataclass(frozen=True)
class Ready:
    endpoint_name: str
    model_name: str | None
    waited_s: float


def _fmt(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def _serving_model(client: SageMakerClient, config_name: str) -> str | None:
    variants = client.describe_endpoint_config(EndpointConfigName=config_name).get("ProductionVariants", [])
    return variants[0].get("ModelName") if variants else None


def wait_in_service(
    client: SageMakerClient,
    endpoint_name: str,
    *,
    timeout_s: float = 3600.0,
    poll_s: float = 30.0,
    expect_model: str | None = None,
    log: Callable[[str], Any] = print,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Ready:
    """Poll DescribeEndpoint every ``poll_s`` until InService; raise EndpointError on Failed (with its
    FailureReason), on a status that cannot recover, on a rollback away from ``expect_model``, or at ``timeout_s``."""
    start = clock()
    while True:
        try:
            described = client.describe_endpoint(EndpointName=endpoint_name)
        except ClientError as e:
            error = e.response.get("Error", {})
            if error.get("Code") == "ValidationException" and "not find" in str(error.get("Message", "")):
                raise EndpointError(f"endpoint {endpoint_name} does not exist in {client.meta.region_name}") from e
            raise EndpointError(f"DescribeEndpoint {endpoint_name} failed: {e}") from e
        status = described["EndpointStatus"]
        reason = described.get("FailureReason")
        elapsed = clock() - start
        log(f"  endpoint {endpoint_name}: {status} ({_fmt(elapsed)})")
        if status == "InService":
            model = _serving_model(client, described["EndpointConfigName"])
            if expect_model is not None and model != expect_model:
                why = f": {reason}" if reason else ""
                raise EndpointError(
                    f"endpoint {endpoint_name} is InService but serves model {model}, not {expect_model}: "
                    f"the update did not take (rolled back?){why}"
                )
            return Ready(endpoint_name, model, elapsed)
        if status not in _TRANSIENT:
            why = reason or "no FailureReason given"
            raise EndpointError(f"endpoint {endpoint_name} is {status}: {why}")
        if elapsed + poll_s > timeout_s:
            raise EndpointError(
                f"endpoint {endpoint_name} still {status} after {_fmt(elapsed)} (timeout {_fmt(timeout_s)}); "
                "it may still come up: watch it in the SageMaker console or rerun `python -m scripts.deploy wait`"
            )
        sleep(poll_s)
