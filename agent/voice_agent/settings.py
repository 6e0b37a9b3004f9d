"""Agent settings, read from the environment (AgentCore Runtime passes configuration as env vars)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Your replies are spoken aloud, so answer in a few short, complete "
    "sentences of plain prose: no markdown, lists, code, tables or emoji. Start with the answer itself."
)


# Every variable the agent reads, with its default and what it does: `voice-agent serve --help` prints this table
# (tests check it names each variable read below). AGENT_HOST, AGENT_PORT and LOG_LEVEL are read by the command.
ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("AGENT_MODEL", "the LLM: scripted (default: a simulated LLM that ignores the prompt), bedrock or openai"),
    ("AGENT_SYSTEM_PROMPT", "the system prompt (default: short, plain spoken sentences)"),
    ("AGENT_MAX_TOKENS", "the reply's token limit (default 400)"),
    ("BEDROCK_MODEL_ID", "AGENT_MODEL=bedrock: the model id (default: Strands' default model)"),
    ("AWS_REGION", "Bedrock and SageMaker region (else AWS_DEFAULT_REGION, else the profile's)"),
    ("AWS_DEFAULT_REGION", "the region when AWS_REGION is unset"),
    ("OPENAI_BASE_URL", "AGENT_MODEL=openai: any OpenAI-compatible server (vLLM, llama.cpp, Ollama)"),
    ("OPENAI_API_KEY", "AGENT_MODEL=openai: its API key"),
    ("OPENAI_MODEL", "AGENT_MODEL=openai: its model name"),
    ("SCRIPTED_TTFT_S", "the scripted model's time to first token (default 0.6 s)"),
    ("SCRIPTED_TOKENS_PER_S", "the scripted model's token rate (default 15: its reply takes about 5 s)"),
    ("SCRIPTED_REPLY", "the scripted model's reply (default: five sentences about itself)"),
    ("TTS_URL", "the TTS server's base URL (default http://127.0.0.1:8080, where `make serve` listens)"),
    ("TTS_ENDPOINT_NAME", "a SageMaker endpoint's name: use it instead of TTS_URL"),
    ("TTS_VOICE", "the voice when a request names none (default: the TTS server's, af_heart)"),
    ("TTS_SPEED", "the speed when a request gives none, 0.5-2.0 (default: 1.0)"),
    ("TTS_CONNECT_TIMEOUT_S", "seconds to open a TTS session (default 10)"),
    ("TTS_IDLE_TIMEOUT_S", "longest wait for audio that is owed (default 30)"),
    ("TTS_BUSY_RETRY_S", "how long a batch reply retries a TTS server that answers server_busy (default 10)"),
    ("LLM_IDLE_TIMEOUT_S", "longest wait for the LLM's next token (default 60)"),
    ("AGENT_MAX_PROMPT_CHARS", "the longest prompt accepted (default 8000)"),
    ("AGENT_WEB_PAGE", "1/0: serve the demo page at / (default: only on a loopback address)"),
    ("AGENT_HOST", "default of --host"),
    ("AGENT_PORT", "default of --port"),
    ("LOG_LEVEL", "DEBUG, INFO (default), WARNING or ERROR"),
    ("LOG_FORMAT", "json (one object per line; the image's default) or text (the default elsewhere)"),
    ("AGENT_OBSERVABILITY_ENABLED", "true under `opentelemetry-instrument` (the image): ADOT exports the traces"),
)


def _str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or default


def _float(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else default


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def _bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    return default if not value else value in ("1", "true", "yes", "on")


def _optional_bool(name: str) -> bool | None:
    """None when unset, so the caller can pick a default from the context."""
    return _bool(name, False) if os.environ.get(name, "").strip() else None


@dataclass(frozen=True)
class AgentSettings:
    # --- the LLM ---
    # scripted (the embedded default: a simulated LLM, no network), bedrock, or openai (any compatible server).
    model: str = field(default_factory=lambda: _str("AGENT_MODEL", "scripted") or "scripted")
    system_prompt: str = field(default_factory=lambda: _str("AGENT_SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT) or "")
    bedrock_model_id: str | None = field(default_factory=lambda: _str("BEDROCK_MODEL_ID"))
    aws_region: str | None = field(default_factory=lambda: _str("AWS_REGION") or _str("AWS_DEFAULT_REGION"))
    openai_base_url: str | None = field(default_factory=lambda: _str("OPENAI_BASE_URL"))
    openai_api_key: str | None = field(default_factory=lambda: _str("OPENAI_API_KEY"))
    openai_model: str | None = field(default_factory=lambda: _str("OPENAI_MODEL"))
    max_tokens: int = field(default_factory=lambda: _int("AGENT_MAX_TOKENS", 400))
    # The scripted model's cadence: time to first token and tokens per second (about 5 s for its reply).
    scripted_ttft_s: float = field(default_factory=lambda: _float("SCRIPTED_TTFT_S", 0.6))
    scripted_tokens_per_s: float = field(default_factory=lambda: _float("SCRIPTED_TOKENS_PER_S", 15.0))
    scripted_reply: str | None = field(default_factory=lambda: _str("SCRIPTED_REPLY"))

    # --- the TTS server ---
    # Local: the container's base URL. SageMaker: the endpoint's name (then TTS_URL is ignored).
    tts_url: str = field(default_factory=lambda: _str("TTS_URL", "http://127.0.0.1:8080") or "")
    tts_endpoint_name: str | None = field(default_factory=lambda: _str("TTS_ENDPOINT_NAME"))
    voice: str | None = field(default_factory=lambda: _str("TTS_VOICE"))
    speed: float | None = field(default_factory=lambda: _float("TTS_SPEED", 0.0) or None)

    # --- the pipeline ---
    tts_connect_timeout_s: float = field(default_factory=lambda: _float("TTS_CONNECT_TIMEOUT_S", 10.0))
    # Longest wait for the next audio while a sentence is waiting for it (the first chunk of a long sentence
    # on a busy CPU takes a few seconds).
    tts_idle_timeout_s: float = field(default_factory=lambda: _float("TTS_IDLE_TIMEOUT_S", 30.0))
    # How long a batch reply keeps retrying a TTS server that refuses it with server_busy (then: tts_busy).
    tts_busy_retry_s: float = field(default_factory=lambda: _float("TTS_BUSY_RETRY_S", 10.0))
    # Longest wait for the LLM's next token (the first one included).
    llm_idle_timeout_s: float = field(default_factory=lambda: _float("LLM_IDLE_TIMEOUT_S", 60.0))
    # Sentences shorter than this are merged into the next one (0 = off; see chunker.py).
    max_prompt_chars: int = field(default_factory=lambda: _int("AGENT_MAX_PROMPT_CHARS", 8000))

    # --- the web page (voice_agent/web) ---
    # Unset (None): `voice-agent serve` shows it only when it binds a loopback address, so the deployed container
    # (--host 0.0.0.0, no AGENT_WEB_PAGE) never serves it; create_app() alone treats None as off.
    web_page: bool | None = field(default_factory=lambda: _optional_bool("AGENT_WEB_PAGE"))

    @property
    def uses_sagemaker(self) -> bool:
        return self.tts_endpoint_name is not None
