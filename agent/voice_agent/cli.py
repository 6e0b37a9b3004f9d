"""``voice-agent serve``: run the agent app, after checking what can be checked before it starts.

    voice-agent serve [--host H] [--port P] [--no-tts-check]

A client that invokes an agent in both modes and compares them is a tool: ``python -m scripts.agent_client``.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import logging
import signal
import socket
import sys
import time

from kokoro_client import logs

from .settings import AgentSettings, SettingError, environment

log = logging.getLogger(__name__)


# --- serve: check what can be checked before the server starts, and say it in one line -----------------------------

SERVE_DESCRIPTION = """Run the agent app: POST /invocations (a prompt in, SSE events with the spoken reply out),
GET /ping, and on a loopback address the demo page at /. The TTS server must be running first (`make serve`):
with a local TTS server (TTS_URL), serve checks that it answers /ping before it starts."""

TTS_WAIT_S = 120.0  # a TTS server still loading its model (/ping 503) is waited for this long


def environment_help() -> str:
    listed = environment()
    width = max(len(name) for name in listed)
    lines = [f"  {name:<{width}}  {text}" for name, text in listed.items()]
    return "environment variables (settings.py):\n" + "\n".join(lines)


def tts_problem(url: str, wait_s: float = TTS_WAIT_S) -> str | None:
    """None when the TTS server at ``url`` answers /ping 200 (waiting while it says it is loading); else one line
    saying what is wrong and what to do."""
    import httpx

    ping = f"{url.rstrip('/')}/ping"
    fix = "start it first with `make serve` (another terminal), or point TTS_URL at one"
    deadline = time.monotonic() + wait_s
    said_loading = False
    while True:
        try:
            status = httpx.get(ping, timeout=5, trust_env=False).status_code
        except httpx.TransportError as exc:
            return f"no TTS server answers at {ping} ({type(exc).__name__}: {exc}): {fix}"
        if status == 200:
            return None
        if status != 503:
            return f"{ping} answered HTTP {status}, not the TTS server's 200: is TTS_URL ({url}) the TTS server?"
        if time.monotonic() > deadline:
            return f"the TTS server at {url} was still loading its model after {wait_s:.0f} s (/ping 503): see its log"
        if not said_loading:
            print(f"waiting for the TTS server at {url} to load its model (/ping 503) ...", file=sys.stderr, flush=True)
            said_loading = True
        time.sleep(0.5)


def port_problem(host: str, port: int) -> str | None:
    """None when ``host:port`` can be listened on; else one line (uvicorn would log it after the startup lines)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        return f"cannot listen on {host}: {exc.strerror}"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is already in use (`make serve` uses 8080, `make agent` 8081): "
                    "stop what listens there, or pick another port (--port, or make agent PORT=8082)"
                )
            return f"cannot listen on {host}:{port}: {exc.strerror}"
    return None


def serve(args: argparse.Namespace) -> None:
    try:
        settings = AgentSettings()
    except SettingError as exc:
        sys.exit(f"voice-agent: {exc}")
    port = args.port if args.port is not None else settings.port
    host = args.host or settings.host
    problem = port_problem(host, port)
    if problem is None and not settings.uses_sagemaker and not args.no_tts_check:
        problem = tts_problem(settings.tts_url)
    if problem:
        sys.exit(f"voice-agent: {problem}")
    # The AgentCore SDK gives its logger a JSON handler of its own unless it has one, and its records reach the
    # root handler too: every SDK line was printed twice. With this one, the root handler prints each line once.
    logging.getLogger("bedrock_agentcore.app").addHandler(logging.NullHandler())
    run_app(settings, host, port)


def agentcore_ids() -> dict[str, str | None]:
    """The AgentCore SDK's ids of the invocation being handled (its X-Amzn-Bedrock-AgentCore-Runtime-Session-Id
    header, and the request id it reads or makes), for every log line written while handling it."""
    from bedrock_agentcore.runtime.context import BedrockAgentCoreContext

    return {
        "request_id": BedrockAgentCoreContext.get_request_id(),
        "session_id": BedrockAgentCoreContext.get_session_id(),
    }


def run_app(settings: AgentSettings, host: str, port: int) -> None:
    """The app on ``host:port`` until the process is stopped (the demo page only on loopback unless told)."""
    from .app import create_app  # before logging is configured, as the SDK's logger expects (one line each)

    logs.configure(extra_ids=agentcore_ids)  # LOG_LEVEL and LOG_FORMAT
    if settings.web_page is None:  # AGENT_WEB_PAGE unset: the page only on loopback (local runs, not the container)
        from .web import is_loopback

        settings = dataclasses.replace(settings, web_page=is_loopback(host))
    log.info(
        "voice agent on %s:%d: model %s, TTS %s",
        host,
        port,
        settings.model,
        settings.tts_endpoint_name or settings.tts_url,
    )
    if settings.web_page:
        log.info("web page: http://%s:%d/", host if ":" not in host else f"[{host}]", port)
    # uvicorn re-raises SIGTERM once it has shut down; its default action would end the process before the exit
    # handlers run, and with them the tracer's flush of the last spans (docs/observability.md).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    # log_config=None: uvicorn's lines go through the root handler too (one format, the invocation's ids).
    create_app(settings).run(port=port, host=host, log_config=None)


def _exit_on_signal(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="voice-agent", description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser(
        "serve",
        help="run the agent app (POST /invocations, GET /ping, the demo page)",
        description=SERVE_DESCRIPTION,
        epilog=environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve_parser.add_argument(
        "--host",
        help="the address to listen on (default: AGENT_HOST, else 127.0.0.1, loopback only; "
        "the container passes 0.0.0.0)",
    )
    serve_parser.add_argument(
        "--port",
        type=int,
        help="the port (default: AGENT_PORT, else 8080, AgentCore's; `make agent` passes 8081, beside `make serve`)",
    )
    serve_parser.add_argument(
        "--no-tts-check",
        action="store_true",
        help="start without checking that the TTS server answers /ping (requests fail with tts_unavailable "
        "until it does)",
    )
    args = parser.parse_args(argv)
    serve(args)


if __name__ == "__main__":
    main()
