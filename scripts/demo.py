"""``make demo``: the embedded default end to end, bidi against batch, on this machine.

Starts the TTS server (Kokoro-82M, weights from KOKORO_MODEL_DIR) and the agent app (the scripted, simulated LLM:
no network, no credentials; it ignores the prompt and always speaks the same reply) as subprocesses on free
loopback ports, asks the same prompt in bidi and in batch mode, prints both times to first audio and their ratio,
writes what a caller hears from the moment each request was sent (OUT/demo-<mode>.wav: silence for the measured
wait, gaps where audio ran out) and both one after the other (OUT/demo-compare.wav), says what to do next, and
stops both servers (also on Ctrl-C or a failure), unless --keep (`make demo KEEP=1`) keeps them and the web page
up. Server logs go to OUT/demo-tts.log and OUT/demo-agent.log.

    .venv/bin/python -m scripts.demo [--trials 3] [--keep] [--tts-url http://127.0.0.1:8080] [--out out]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from scripts.agent_client import DEFAULT_PROMPT, Invoker, Trial, collect, report, url_invoker
from scripts.servers import ServerExited, ServerNotReady, free_port, started, wait_ready

REPO = Path(__file__).resolve().parent.parent


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class PortTaken(Exception):
    pass


def wait_ready_or_exit(name: str, url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> None:
    try:
        wait_ready(url, proc, timeout_s, poll_s=0.25)
    except ServerExited as exc:
        if "Address already in use" in tail(log_path):
            raise PortTaken(url) from None
        raise SystemExit(f"{name} exited with {exc.returncode}; its log ({log_path}):\n{tail(log_path)}") from None
    except ServerNotReady:
        raise SystemExit(
            f"{name} was not ready within {timeout_s:g} s; its log ({log_path}):\n{tail(log_path)}"
        ) from None


def start(
    stack: contextlib.ExitStack, name: str, argv: list[str], env: dict[str, str], log: Path, port: int, timeout_s: float
) -> str:
    """Start a server on ``port`` (0: a free one, retried if another process takes it first); return its URL."""
    for _ in range(3):
        chosen = port or free_port()
        url = f"http://127.0.0.1:{chosen}"
        print(f"starting the {name} on {url} ...", flush=True)
        with contextlib.ExitStack() as attempt:
            output = attempt.enter_context(log.open("wb"))
            proc = attempt.enter_context(
                started([*argv, "--port", str(chosen)], env, output=output, cwd=REPO, name=name)
            )
            try:
                wait_ready_or_exit(name, url, proc, log, timeout_s)
            except PortTaken:
                if port:
                    raise SystemExit(f"port {port} is taken: pick another with --port / --agent-port") from None
                continue
            stack.push(attempt.pop_all())  # ready: keep it running until the demo ends
            return url
    raise SystemExit(f"could not find a free port for the {name}")


async def warm_up(tts_url: str, invoke: Invoker) -> None:
    """Pay the cold paths off the clock, for both modes alike: one complete synthesis (the G2P's lexicons, the
    engine's first shapes), and one agent request hung up at its first token (imports, the worker loop). Hanging
    up before any sentence reaches the TTS leaves no synthesis in flight to delay the first measured request."""
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        response = await client.post(f"{tts_url}/invocations", json={"text": "Hello! Warming up."})
        response.raise_for_status()
    async for event in invoke({"prompt": "Warm up.", "mode": "bidi"}):
        if event.get("type") in ("text_delta", "error", "agent_end"):
            break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--voice")
    parser.add_argument("--speed", type=float)
    parser.add_argument("--out", default=str(REPO / "out"))
    parser.add_argument("--tts-url", help="use this running TTS server instead of starting one")
    parser.add_argument("--port", type=int, default=0, help="the TTS server's port (0: a free one)")
    parser.add_argument("--agent-port", type=int, default=0, help="the agent's port (0: a free one)")
    parser.add_argument("--model-dir", default=os.environ.get("KOKORO_MODEL_DIR", str(REPO / "models" / "kokoro")))
    parser.add_argument("--keep", action="store_true", help="keep both servers (and the web page) up until Ctrl-C")
    parser.add_argument("--ready-timeout", type=float, default=300.0, help="seconds for the model to load")
    args = parser.parse_args()
    args.mode = "both"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # `kill` (SIGTERM) unwinds like Ctrl-C, so both servers are stopped rather than left running on their own.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    with contextlib.ExitStack() as stack:
        tts_url = args.tts_url
        if not tts_url:
            print(f"TTS model: {args.model_dir}")
            argv = [sys.executable, "-m", "kokoro_tts.server.serve", "--host", "127.0.0.1"]
            tts_env = {**env, "KOKORO_MODEL_DIR": args.model_dir}
            tts_url = start(stack, "TTS server", argv, tts_env, out / "demo-tts.log", args.port, args.ready_timeout)
        print(
            f"agent: the scripted LLM, a simulation: it ignores the prompt and always streams the same five "
            f"sentences at an LLM's pace (what is compared is the timing); TTS at {tts_url}"
        )
        argv = [sys.executable, "-m", "voice_agent.cli", "serve", "--host", "127.0.0.1"]
        agent_env = {
            **env,
            "TTS_URL": tts_url,
            "AGENT_MODEL": "scripted",
            "TTS_ENDPOINT_NAME": "",
            "AGENT_WEB_PAGE": "1",
        }
        agent_url = start(stack, "agent", argv, agent_env, out / "demo-agent.log", args.agent_port, 60)

        invoke = url_invoker(agent_url, timeout_s=120)

        async def run() -> list[Trial]:
            await warm_up(tts_url, invoke)
            print(f'prompt: "{args.prompt}"', flush=True)
            return await collect(invoke, args)

        trials = asyncio.run(run())
        print()
        code = report(trials, str(out))
        print(
            "\nTime to first audio is measured by the client: request sent → first audio chunk received. Bidi "
            "speaks the first sentence while the LLM writes the rest; batch waits for the whole reply first."
        )
        print(next_steps(out, agent_url if args.keep else None))
        if args.keep:
            print(f"web page: {agent_url}/ is up (bidi vs batch in the browser); Ctrl-C stops the servers", flush=True)
            with contextlib.suppress(KeyboardInterrupt, SystemExit):
                signal.pause()
        print("stopping the servers ...", flush=True)
    sys.exit(code)


def next_steps(out: Path, page: str | None) -> str:
    shown = out.resolve()
    with contextlib.suppress(ValueError):
        shown = shown.relative_to(Path.cwd())
    page_line = (
        f"{page}/ (up until Ctrl-C): type a prompt, hear bidi and batch"
        if page
        else "the servers stop now; `make demo KEEP=1` keeps them and the page up (a prompt, both modes, a timeline)"
    )
    return "\n".join(
        [
            "",
            "Next:",
            f"  listen  {shown}/demo-compare.wav: bidi, then batch, each from a beep at the moment it was asked",
            f"          ({shown}/demo-bidi.wav and demo-batch.wav: each mode alone)",
            f"  page    {page_line}",
            "  run it  `make serve` (the TTS server, :8080), then in another terminal `make agent` (the agent, :8081):",
            "          curl -N localhost:8081/invocations -H 'content-type: application/json' \\",
            '               -d \'{"prompt": "Where is my order?", "mode": "bidi"}\'',
            "  an LLM  AGENT_MODEL=bedrock (BEDROCK_MODEL_ID) or AGENT_MODEL=openai (OPENAI_BASE_URL): docs/agent.md",
        ]
    )


if __name__ == "__main__":
    main()
