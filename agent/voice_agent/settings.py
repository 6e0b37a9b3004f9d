"""Agent settings, read once from the environment (AgentCore Runtime passes configuration as env vars).

Each setting is declared once, here, as the server declares its own (``kokoro_client.environment``): its variable,
default and one-line help, which ``voice-agent serve --help`` lists. A value that does not parse is a
``SettingError`` naming the variable.
"""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_client.environment import SettingError, listing, setting

__all__ = ["DEFAULT_SYSTEM_PROMPT", "AgentSettings", "SettingError", "environment"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Your replies are spoken aloud, so answer in a few short, complete "
    "sentences of plain prose: no markdown, lists, code, tables or emoji. Start with the answer itself."
)


@dataclass(frozen=True)
class AgentSettings:
    # --- the LLM ---
    # scripted (the embedded default: a simulated LLM, no network), bedrock, or openai (any compatible server).
    model: str = setting(
        "AGENT_MODEL", "scripted", "the LLM: scripted (a simulated LLM that ignores the prompt), bedrock or openai"
    )
    system_prompt: str = setting(
        "AGENT_SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT, "the system prompt (default: short, plain spoken sentences)"
    )
    max_tokens: int = setting("AGENT_MAX_TOKENS", 400, "the reply's token limit")
    bedrock_model_id: str | None = setting(
        "BEDROCK_MODEL_ID", None, "AGENT_MODEL=bedrock: the model id (unset: Strands' default model)", str
    )
    # Unset: boto3's own resolution (AWS_DEFAULT_REGION, then the profile's).
    aws_region: str | None = setting("AWS_REGION", None, "Bedrock and SageMaker region", str)
    openai_base_url: str | None = setting(
        "OPENAI_BASE_URL", None, "AGENT_MODEL=openai: any OpenAI-compatible server (vLLM, llama.cpp, Ollama)", str
    )
    openai_api_key: str | None = setting("OPENAI_API_KEY", None, "AGENT_MODEL=openai: its API key", str)
    openai_model: str | None = setting("OPENAI_MODEL", None, "AGENT_MODEL=openai: its model name", str)
    # The scripted model's cadence: time to first token and tokens per second (about 5 s for its reply).
    scripted_ttft_s: float = setting("SCRIPTED_TTFT_S", 0.6, "the scripted model's time to first token (s)")
    scripted_tokens_per_s: float = setting("SCRIPTED_TOKENS_PER_S", 15.0, "the scripted model's token rate")
    scripted_reply: str | None = setting(
        "SCRIPTED_REPLY", None, "the scripted model's reply (unset: five sentences about itself)", str
    )

    # --- the TTS server ---
    # Local: the container's base URL. SageMaker: the endpoint's name (then TTS_URL is ignored).
    tts_url: str = setting("TTS_URL", "http://127.0.0.1:8080", "the TTS server's base URL (where `make serve` listens)")
    tts_endpoint_name: str | None = setting(
        "TTS_ENDPOINT_NAME", None, "a SageMaker endpoint's name: use it instead of TTS_URL", str
    )
    voice: str | None = setting("TTS_VOICE", None, "the voice when a request names none (unset: the server's)", str)
    speed: float | None = setting("TTS_SPEED", None, "the speed when a request gives none, 0.5-2.0", float)

    # --- the pipeline ---
    tts_connect_timeout_s: float = setting("TTS_CONNECT_TIMEOUT_S", 10.0, "seconds to open a TTS session")
    # The first chunk of a long sentence on a busy CPU takes a few seconds.
    tts_idle_timeout_s: float = setting("TTS_IDLE_TIMEOUT_S", 30.0, "longest wait for audio that is owed (s)")
    # Then the reply ends with tts_busy.
    tts_busy_retry_s: float = setting(
        "TTS_BUSY_RETRY_S", 10.0, "how long a batch reply retries a TTS server that answers server_busy (s)"
    )
    # The first token included.
    llm_idle_timeout_s: float = setting("LLM_IDLE_TIMEOUT_S", 60.0, "longest wait for the LLM's next token (s)")
    max_prompt_chars: int = setting("AGENT_MAX_PROMPT_CHARS", 8000, "the longest prompt accepted")

    # --- the conversation (conversations.py): turns kept per session ---
    session_turns: int = setting("AGENT_SESSION_TURNS", 20, "prompts (with their replies) a session remembers")
    session_chars: int = setting("AGENT_SESSION_CHARS", 16000, "characters of text a session remembers")
    sessions: int = setting("AGENT_SESSIONS", 1000, "sessions held in memory at once (least recently used go)")
    session_idle_s: float = setting("AGENT_SESSION_IDLE_S", 900.0, "a session unused this long is forgotten (s)")
    session_wait_s: float = setting(
        "AGENT_SESSION_WAIT_S", 5.0, "how long a new prompt waits for the reply it interrupts to stop (s)"
    )
    # Unset: turns live in this process (an AgentCore session is one microVM). Set: Strands' S3 storage keeps them.
    session_bucket: str | None = setting(
        "AGENT_SESSION_BUCKET", None, "an S3 bucket for durable turns (unset: kept in memory)", str
    )
    session_prefix: str = setting("AGENT_SESSION_PREFIX", "sessions", "the key prefix of durable turns in the bucket")

    # --- the web page (voice_agent/web) ---
    # Unset (None): `voice-agent serve` shows it only when it binds a loopback address, so the deployed container
    # (--host 0.0.0.0, no AGENT_WEB_PAGE) never serves it; create_app() alone treats None as off.
    web_page: bool | None = setting(
        "AGENT_WEB_PAGE", None, "1/0: serve the demo page at / (unset: only on a loopback address)", bool
    )

    # --- the command (`voice-agent serve`; its --host and --port win) ---
    # AgentCore Runtime sends requests to port 8080; the container passes --host 0.0.0.0.
    host: str = setting("AGENT_HOST", "127.0.0.1", "the default of --host")
    port: int = setting("AGENT_PORT", 8080, "the default of --port")

    @property
    def uses_sagemaker(self) -> bool:
        return self.tts_endpoint_name is not None


def environment() -> dict[str, str]:
    """What `voice-agent serve --help` lists: every setting's variable, then those read by what the agent runs."""
    return {
        **listing(AgentSettings),
        "AWS_DEFAULT_REGION": "the region when AWS_REGION is unset (boto3 reads it, then the profile)",
        "LOG_LEVEL": "DEBUG, INFO (default), WARNING or ERROR",
        "LOG_FORMAT": "json (one object per line; the image's default) or text (the default elsewhere)",
        "AGENT_OBSERVABILITY_ENABLED": "true under `opentelemetry-instrument` (the image): ADOT exports the traces",
    }
