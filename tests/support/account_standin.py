"""What moto does not serve of a fresh account, for the deploy preflight: Service Quotas' ListServiceQuotas and
ListAWSDefaultServiceQuotas (awsJson1.1, X-Amz-Target ServiceQuotasV20190624.*), Bedrock's GetFoundationModel and
GetInferenceProfile (restJson1 GETs) and Bedrock Runtime's Converse (restJson1 POST), in their wire formats, so
boto3 talks to it as to AWS (AWS_ENDPOINT_URL_SERVICE_QUOTAS, _BEDROCK, _BEDROCK_RUNTIME). Errors carry
``x-amzn-ErrorType`` and a JSON ``message`` as the services send them.

The account is a ``FakeAccount``: the quotas it has, the models and their lifecycles, the models it may call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

NOVA_2_LITE = "amazon.nova-2-lite-v1:0"
NOVA_2_LITE_PROFILE = "us.amazon.nova-2-lite-v1:0"


@dataclass
class FakeAccount:
    region: str = "us-east-1"
    # quota name -> value: applied values (ListServiceQuotas), then AWS's defaults (ListAWSDefaultServiceQuotas)
    applied_quotas: dict[str, float] = field(default_factory=lambda: {"ml.g5.xlarge for endpoint usage": 4.0})
    default_quotas: dict[str, float] = field(
        default_factory=lambda: {
            "ml.g5.xlarge for endpoint usage": 0.0,
            "ml.m5.large for endpoint usage": 4.0,
            "ml.m5.xlarge for endpoint usage": 4.0,
            "ml.c7i.xlarge for endpoint usage": 4.0,
        }
    )
    # model id -> ACTIVE | LEGACY
    models: dict[str, str] = field(
        default_factory=lambda: {NOVA_2_LITE: "ACTIVE", "anthropic.claude-3-5-haiku-20241022-v1:0": "LEGACY"}
    )
    # inference profile id -> the model ids behind it
    profiles: dict[str, list[str]] = field(
        default_factory=lambda: {
            NOVA_2_LITE_PROFILE: [NOVA_2_LITE],
            "us.anthropic.claude-3-5-haiku-20241022-v1:0": ["anthropic.claude-3-5-haiku-20241022-v1:0"],
        }
    )
    # model or profile id -> (error code, message) Converse answers with; absent: it answers
    refusals: dict[str, tuple[str, str]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status, headers={"x-amzn-ErrorType": code})


def account_app(account: FakeAccount) -> Starlette:
    def model_arn(model_id: str) -> str:
        return f"arn:aws:bedrock:{account.region}::foundation-model/{model_id}"

    async def quotas(request: Request) -> Response:
        target = request.headers.get("x-amz-target", "")
        operation = target.removeprefix("ServiceQuotasV20190624.")
        body = json.loads(await request.body() or b"{}")
        account.calls.append(operation)
        table = {"ListServiceQuotas": account.applied_quotas, "ListAWSDefaultServiceQuotas": account.default_quotas}
        if operation not in table:
            return _error(400, "InvalidAction", f"the stand-in does not serve {target}")
        if body.get("ServiceCode") != "sagemaker":
            return _error(400, "NoSuchResourceException", "the stand-in knows sagemaker's quotas only")
        listed = [
            {"ServiceCode": "sagemaker", "QuotaName": name, "QuotaCode": f"L-{abs(hash(name)) % 10**8:08d}", "Value": v}
            for name, v in table[operation].items()
        ]
        return JSONResponse({"Quotas": listed}, media_type="application/x-amz-json-1.1")

    async def foundation_model(request: Request) -> Response:
        model_id = unquote(request.path_params["model"])
        account.calls.append(f"GetFoundationModel {model_id}")
        status = account.models.get(model_id)
        if status is None:
            return _error(404, "ResourceNotFoundException", "The specified model identifier is not supported.")
        details = {"modelArn": model_arn(model_id), "modelId": model_id, "modelLifecycle": {"status": status}}
        return JSONResponse({"modelDetails": details})

    async def inference_profile(request: Request) -> Response:
        profile_id = unquote(request.path_params["profile"])
        account.calls.append(f"GetInferenceProfile {profile_id}")
        models = account.profiles.get(profile_id)
        if models is None:
            return _error(404, "ResourceNotFoundException", "The specified inference profile was not found.")
        return JSONResponse(
            {
                "inferenceProfileName": profile_id,
                "inferenceProfileArn": f"arn:aws:bedrock:{account.region}:123456789012:inference-profile/{profile_id}",
                "inferenceProfileId": profile_id,
                # One ARN per region the profile routes to, as AWS lists them.
                "models": [
                    {"modelArn": f"arn:aws:bedrock:{region}::foundation-model/{m}"}
                    for m in models
                    for region in ("us-east-1", "us-east-2", "us-west-2")
                ],
                "status": "ACTIVE",
                "type": "SYSTEM_DEFINED",
            }
        )

    async def converse(request: Request) -> Response:
        model_id = unquote(request.path_params["model"])
        account.calls.append(f"Converse {model_id}")
        body = json.loads(await request.body())
        if not body.get("messages"):
            return _error(400, "ValidationException", "messages is required")
        if model_id in account.refusals:
            code, message = account.refusals[model_id]
            return _error(403 if code == "AccessDeniedException" else 400, code, message)
        known = model_id in account.models or model_id in account.profiles
        if not known:
            return _error(400, "ValidationException", "The provided model identifier is invalid.")
        return JSONResponse(
            {
                "output": {"message": {"role": "assistant", "content": [{"text": "OK"}]}},
                "stopReason": "max_tokens",
                "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4},
                "metrics": {"latencyMs": 120},
            }
        )

    return Starlette(
        routes=[
            Route("/", quotas, methods=["POST"]),
            Route("/foundation-models/{model:path}", foundation_model, methods=["GET"]),
            Route("/inference-profiles/{profile:path}", inference_profile, methods=["GET"]),
            Route("/model/{model:path}/converse", converse, methods=["POST"]),
        ]
    )


def account_endpoints(url: str) -> dict[str, str]:
    """The environment that sends boto3's calls of these three services to the stand-in at ``url``."""
    return {
        "AWS_ENDPOINT_URL_SERVICE_QUOTAS": url,
        "AWS_ENDPOINT_URL_BEDROCK": url,
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url,
    }
