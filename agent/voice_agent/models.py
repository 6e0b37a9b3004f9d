"""Which LLM the agent talks to: the scripted default, Amazon Bedrock, or any OpenAI-compatible server."""

from __future__ import annotations

from dataclasses import dataclass

from strands.models.model import Model

from .scripted_model import SIMULATED_NAME, ScriptedModel
from .settings import AgentSettings

MODEL_KINDS = ("scripted", "bedrock", "openai")


class ModelUnavailable(Exception):
    """The configured model cannot be built (unknown kind, missing package or setting)."""


@dataclass(frozen=True)
class BuiltModel:
    model: Model
    name: str  # what agent_start reports: the provider and model id, or SIMULATED_NAME


def build_model(settings: AgentSettings, model_id: str | None = None) -> BuiltModel:
    """The model for one request; ``model_id`` (from the request) overrides the configured id."""
    kind = settings.model.lower()
    if kind == "scripted":
        model = ScriptedModel(
            ttft_s=settings.scripted_ttft_s,
            tokens_per_s=settings.scripted_tokens_per_s,
            max_tokens=settings.max_tokens,
            **({"reply": settings.scripted_reply} if settings.scripted_reply else {}),
        )
        return BuiltModel(model, SIMULATED_NAME)
    if kind == "bedrock":
        return _bedrock(settings, model_id or settings.bedrock_model_id)
    if kind == "openai":
        return _openai(settings, model_id or settings.openai_model)
    raise ModelUnavailable(f"AGENT_MODEL={settings.model!r} is not one of {', '.join(MODEL_KINDS)}")


def _bedrock(settings: AgentSettings, model_id: str | None) -> BuiltModel:
    from strands.models.bedrock import DEFAULT_BEDROCK_MODEL_ID, BedrockModel

    model_id = model_id or DEFAULT_BEDROCK_MODEL_ID
    try:
        model = BedrockModel(model_id=model_id, region_name=settings.aws_region, max_tokens=settings.max_tokens)
    except Exception as exc:  # a bad region or credentials setup shows up here, before any request
        raise ModelUnavailable(f"cannot set up Bedrock model {model_id}: {exc}") from exc
    return BuiltModel(model, f"bedrock:{model_id}")


def _openai(settings: AgentSettings, model_id: str | None) -> BuiltModel:
    # strands' OpenAIModel imports the `openai` package (the agent extra's strands-agents[openai] brings it; a
    # slimmer install may lack it): import it only when asked for, and say what is missing.
    try:
        from strands.models.openai import OpenAIModel
    except ImportError as exc:
        raise ModelUnavailable(
            "AGENT_MODEL=openai needs the 'openai' package, which is not installed "
            "(pip install 'strands-agents[openai]', which adds openai>=1.68,<3)"
        ) from exc
    if not model_id:
        raise ModelUnavailable("AGENT_MODEL=openai needs OPENAI_MODEL (or 'model_id' in the request)")
    client_args: dict[str, str] = {"api_key": settings.openai_api_key or "unused"}  # local servers ignore it
    if settings.openai_base_url:
        client_args["base_url"] = settings.openai_base_url
    model = OpenAIModel(client_args=client_args, model_id=model_id, params={"max_tokens": settings.max_tokens})
    return BuiltModel(model, f"openai:{model_id}")
