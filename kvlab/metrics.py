"""An engine's Prometheus /metrics: scraping, parsing, and counter deltas over a run."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

_KEEP_LABELS = ("le", "quantile")  # labels that change a sample's meaning; all others are summed over


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text → {sample name: value summed over label sets}.

    Counters appear under their sample name (``vllm:prompt_tokens_total``). Histogram
    buckets and summary quantiles keep their bound in the key
    (``vllm:time_to_first_token_seconds_bucket{le="0.5"}``) because summing over it would
    be meaningless; every other label (model name, engine index, …) is summed over.
    """
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            kept = [(k, sample.labels[k]) for k in _KEEP_LABELS if k in sample.labels]
            key = sample.name + ("{" + ",".join(f'{k}="{v}"' for k, v in kept) + "}" if kept else "")
            value = float(sample.value)
            if math.isnan(value):
                continue
            out[key] = out.get(key, 0.0) + value
    return out


#: The most of a /metrics body kvlab reads (16 MiB; vLLM's is tens of KB): a longer one is an error.
MAX_METRICS_BYTES = 16 * 2**20


async def scrape(base_url: str, api_key: str | None = None, timeout_s: float = 30.0) -> dict[str, float]:
    """GET ``{base_url}/metrics`` and parse it; {} when the server serves no metrics (HTTP 404).

    Other HTTP errors (a redirect included: it is not followed, so a key stays with its host), a body over
    MAX_METRICS_BYTES, text that is not Prometheus' and connection failures raise: a run should not silently
    lose its counters (the runner records them as not available, with the reason).
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(base_url.rstrip("/") + "/metrics", headers=headers, allow_redirects=False) as resp:
            if resp.status == 404:
                return {}
            raw = await resp.content.read(MAX_METRICS_BYTES + 1)
            while len(raw) <= MAX_METRICS_BYTES and (more := await resp.content.read(MAX_METRICS_BYTES + 1 - len(raw))):
                raw += more
            body = raw[:2000].decode(errors="replace") if resp.status != 200 else raw.decode(errors="replace")
            if resp.status != 200:
                raise RuntimeError(f"GET {base_url}/metrics: HTTP {resp.status}: {body[:500]}")
            if len(raw) > MAX_METRICS_BYTES:
                raise ValueError(f"GET {base_url}/metrics: body over {MAX_METRICS_BYTES // 2**20} MiB")
    return parse_metrics(body)


def _lookup(sample: Mapping[str, float], name: str) -> float | None:
    for candidate in (name, name + "_total"):
        if candidate in sample:
            return sample[candidate]
    return None


def counter_deltas(
    before: Mapping[str, float],
    after: Mapping[str, float],
    names: Mapping[str, str | None],
) -> dict[str, float | None]:
    """``after - before`` for each counter in ``names`` ({canonical name: engine metric name}).

    The engine name may be given with or without ``_total``. The delta is None when the
    engine has no such metric (name None), the server did not expose it after the run,
    or there is no baseline (``before`` empty: the first scrape got nothing); a series
    absent from a non-empty ``before`` but present after counts from 0 (Prometheus series
    start at 0); a negative delta (the server restarted, resetting counters) is None.
    """
    out: dict[str, float | None] = {}
    for canonical, engine_name in names.items():
        if engine_name is None:
            out[canonical] = None
            continue
        end = _lookup(after, engine_name)
        if end is None or not before:
            out[canonical] = None
            continue
        start = _lookup(before, engine_name) or 0.0
        delta = end - start
        out[canonical] = delta if delta >= 0 else None
    return out


# --------------------------------------------------------------------------- telemetry during a run

#: How often a run's telemetry samples the server's /metrics (seconds).
TELEMETRY_INTERVAL_S = 0.5


async def sample_during(base_url: str, names: Mapping[str, str], samples: list[tuple[float, dict, str | None]],
                        api_key: str | None = None, interval_s: float = TELEMETRY_INTERVAL_S) -> None:
    """Sample ``{base_url}/metrics`` every ``interval_s`` until cancelled, appending ``(t, values, error)`` to
    ``samples``: ``t`` the ``time.perf_counter()`` stamp the GET was sent at (the client's clock), ``values``
    {canonical: value or None} for ``names`` ({canonical: Prometheus name}), ``error`` why a sample got nothing.

    Runs beside the requests in their event loop, so it does little there: one GET per interval and a parse of
    only the lines of the wanted series (a full /metrics parse costs milliseconds the requests' timestamps would
    share). Never raises but for cancellation: a failed sample is kept with its error.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    wanted = tuple(names.values())
    url = base_url.rstrip("/") + "/metrics"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=max(4 * interval_s, 2.0))) as session:
        # the first sample half an interval in, not at the first send: a GET /metrics beside the batch's arrival
        # cost vLLM's API server (which also tokenizes the prompts) about 14 ms of mean TTFT on 2 cores
        # (benchmarks/telemetry_overhead.py, 2026-12-03)
        due = time.perf_counter() + interval_s / 2
        await asyncio.sleep(interval_s / 2)
        while True:
            t = time.perf_counter()
            try:
                async with session.get(url, headers=headers, allow_redirects=False) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}")
                    raw = await resp.content.read(MAX_METRICS_BYTES)
                kept = "\n".join(line for line in raw.decode(errors="replace").splitlines() if line.startswith(wanted))
                parsed = parse_metrics(kept + "\n")
                samples.append((t, {c: _lookup(parsed, n) for c, n in names.items()}, None))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed sample is recorded, the run goes on
                samples.append((t, {}, f"{type(exc).__name__}: {str(exc)[:200]}"))
            due += interval_s
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
