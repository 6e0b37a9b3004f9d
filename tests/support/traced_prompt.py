"""One prompt through the agent's ``handle``, in a fresh interpreter (the OpenTelemetry global is set once per
process), against a real TTS server; prints what the tracer saw as JSON.

    python -m support.traced_prompt TTS_URL MODE [--tracing]

``--tracing`` installs an SDK tracer provider with an in-memory exporter as the global one, as
``opentelemetry-instrument`` does with its configured exporter; without it nothing is configured (the local default).
"""

from __future__ import annotations

import asyncio
import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from voice_agent.app import handle, make_conversations, make_tts
from voice_agent.models import BuiltModel
from voice_agent.scripted_model import SIMULATED_NAME, ScriptedModel
from voice_agent.settings import AgentSettings


async def main(tts_url: str, mode: str, tracing: bool) -> None:
    exporter = InMemorySpanExporter()
    if tracing:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
    settings = AgentSettings(model="scripted", tts_url=tts_url, tts_endpoint_name=None)
    transport, batch = make_tts(settings)
    model = ScriptedModel(reply="Hello there! Goodbye now.", ttft_s=0.05, tokens_per_s=50.0, jitter=0.0)
    events = [
        event
        async for event in handle(
            {"prompt": "Hi", "mode": mode},
            settings,
            lambda _: BuiltModel(model, SIMULATED_NAME),
            transport,
            batch,
            make_conversations(settings),
        )
    ]
    spans = [
        {
            "name": span.name,
            "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
            "id": span.context.span_id,
            "parent": span.parent.span_id if span.parent else None,
            "trace": span.context.trace_id,
            "status": span.status.status_code.name,
            "attributes": {k: v for k, v in (span.attributes or {}).items() if isinstance(v, str | int | float)},
        }
        for span in exporter.get_finished_spans()
    ]
    print(
        json.dumps(
            {
                "events": [e["type"] for e in events],
                "provider": type(trace.get_tracer_provider()).__name__,
                "spans": spans,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], "--tracing" in sys.argv[3:]))
