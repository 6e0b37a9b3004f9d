"""A server's /metrics, read with Prometheus' own text-format parser: every sample by name and labels."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base_url: str) -> Samples:
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for one not exposed yet (a labelled counter appears with its first increment)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
