"""Admission control: past the bound on a new request's first-audio wait, HTTP synthesis is
refused at once with server_busy and a Retry-After; what is taken is spoken in full. Real Hypercorn, loopback."""

from __future__ import annotations

import asyncio
import time

import httpx
from support.inproc_server import RunningServer

SENTENCE = "Admission control keeps the work it has taken on time, and says so at once when it cannot take more."


async def test_a_burst_past_the_bound_is_refused_at_once_with_retry_after(
    server: RunningServer, tight_admission: None
) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        (await client.post(f"{server.base_url}/invocations", json={"text": "Warming up."})).raise_for_status()

        async def post() -> tuple[httpx.Response, float]:
            started = time.monotonic()
            response = await client.post(f"{server.base_url}/invocations", json={"text": SENTENCE})
            return response, time.monotonic() - started

        answers = await asyncio.gather(*(post() for _ in range(8)))
    taken = [r for r, _ in answers if r.status_code == 200]
    refused = [(r, took) for r, took in answers if r.status_code != 200]
    assert taken and refused, [r.status_code for r, _ in answers]
    assert all(len(r.content) > 24000 for r in taken)  # each taken request spoken in full: over half a second
    for response, took in refused:
        assert response.status_code == 503 and response.json()["error"]["code"] == "server_busy"
        assert int(response.headers["retry-after"]) >= 1
        assert took < 5.0, f"refused only after {took:.1f} s"  # before any synthesis: generous for a shared CPU
