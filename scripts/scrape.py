"""A server's /metrics (the TTS server's or the agent's), read with Prometheus' own text-format parser: every
sample by name and labels. One reader for the tests, the benchmark and the soak."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(base_url: str) -> Samples:
    return samples(_checked(httpx.get(f"{base_url}/metrics", timeout=10, trust_env=False)))


async def scrape_async(client: httpx.AsyncClient, base_url: str) -> Samples:
    return samples(_checked(await client.get(f"{base_url}/metrics")))


def value(found: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for one not exposed yet (a labelled counter appears with its first increment)."""
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def _checked(response: httpx.Response) -> str:
    response.raise_for_status()
    kind = response.headers.get("content-type", "")
    if not kind.startswith("text/plain"):
        raise ValueError(f"/metrics answered {kind!r}, not Prometheus' text format")
    return response.text


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much a sample moved between two scrapes."""
    return value(after, name, **labels) - value(before, name, **labels)
