"""Per-request and per-run metrics as pure functions (one definition for every engine), and /metrics scraping."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from kvlab.schema import REQUESTS

if TYPE_CHECKING:
    from kvlab.client import RequestRecord

# ----------------------------------------------------------------- per-request definitions
# One set of metric definitions (README, "Metric definitions"): every engine's numbers go through these.


def ttft_ms(t_send: float | None, t_first: float | None) -> float | None:
    """Time to first token: first chunk carrying non-empty text (content or reasoning) minus send."""
    if t_send is None or t_first is None:
        return None
    return (t_first - t_send) * 1e3


def e2e_ms(t_send: float | None, t_last: float | None) -> float | None:
    """Request latency: last token-bearing chunk minus send."""
    if t_send is None or t_last is None:
        return None
    return (t_last - t_send) * 1e3


def tpot_ms(t_first: float | None, t_last: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first: (t_last - t_first) / (n - 1), n = usage.completion_tokens.

    Undefined (None) when n < 2 or the server reported no usage: chunk counts are not token counts.
    """
    if t_first is None or t_last is None or output_tokens is None or output_tokens < 2:
        return None
    return (t_last - t_first) * 1e3 / (output_tokens - 1)


def chunk_gaps_ms(chunk_times: Sequence[float]) -> list[float]:
    """Inter-chunk latencies in ms (per chunk, not per token: a chunk may carry several tokens)."""
    return [(b - a) * 1e3 for a, b in zip(chunk_times, chunk_times[1:])]


def itl_max_ms(chunk_times: Sequence[float]) -> float | None:
    """Largest gap between two token-bearing chunks (per chunk); None with fewer than two chunks."""
    gaps = chunk_gaps_ms(chunk_times)
    return max(gaps) if gaps else None


def split_think(text: str, open_tag: str = "<think>", close_tag: str = "</think>") -> tuple[str, str]:
    """Split model output into (reasoning, answer) when no reasoning parser ran on the server.

    Text up to ``close_tag`` (after an optional leading ``open_tag``) is reasoning; an
    ``open_tag`` never closed makes all of it reasoning (output cut off while thinking);
    text without tags is all answer.
    """
    stripped = text.lstrip()
    end = text.find(close_tag)
    if end >= 0:
        reasoning = text[:end]
        start = reasoning.find(open_tag)
        if start >= 0:
            reasoning = reasoning[start + len(open_tag):]
        return reasoning, text[end + len(close_tag):]
    if stripped.startswith(open_tag):
        return stripped[len(open_tag):], ""
    return "", text


# ----------------------------------------------------------------- tables and run summary


def request_rows(records: Iterable[RequestRecord], run_id: str) -> pl.DataFrame:
    """One REQUESTS row per record (timestamps relative to the run's first send), conformed to the schema."""
    names = [n for n in REQUESTS.names if n != "run_id"]
    rows = [{"run_id": run_id, **{n: getattr(r, n) for n in names}} for r in records]
    if not rows:
        return REQUESTS.empty()
    return REQUESTS.conform(pl.DataFrame(rows, schema=REQUESTS.polars_schema), origin=f"requests of {run_id}")


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def sum_reported(values: list[int | None]) -> int | None:
    reported = [v for v in values if v is not None]
    return int(sum(reported)) if reported else None


def summarize(records: Sequence[RequestRecord], batch_time_s: float | None) -> dict:
    """The RUNS columns a batch of request records determines.

    Latency means cover successful requests only (a failed request has no meaningful
    latency) but every failure is counted in ``requests_failed``. ``ttft_p99_ms`` is
    numpy's linear-interpolation percentile. Token sums add the requests that reported
    usage and are None when none did (never an invented 0).
    """
    ok = [r for r in records if r.status == "ok"]
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    tpots = [r.tpot_ms for r in ok if r.tpot_ms is not None]
    e2es = [r.e2e_ms for r in ok if r.e2e_ms is not None]
    return {
        "ttft_mean_ms": _mean(ttfts),
        "ttft_p99_ms": float(np.percentile(ttfts, 99)) if ttfts else None,
        "tpot_mean_ms": _mean(tpots),
        "e2e_mean_ms": _mean(e2es),
        "requests_ok": len(ok),
        "requests_failed": len(records) - len(ok),
        "served_prompt_tokens": sum_reported([r.prompt_tokens for r in records]),
        "served_output_tokens": sum_reported([r.output_tokens for r in records]),
        "cached_prompt_tokens": sum_reported([r.cached_tokens for r in records]),
        "batch_time_s": batch_time_s,
    }


# ----------------------------------------------------------------- Prometheus /metrics

_KEEP_LABELS = ("le", "quantile")  # labels that change a sample's meaning; all others are summed over


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text → {sample name: value summed over label sets}.

    Counters appear under their sample name (``vllm:prompt_tokens_total``). Histogram
    buckets and summary quantiles keep their bound in the key
    (``vllm:time_to_first_token_seconds_bucket{le="0.5"}``) because summing over it would
    be meaningless; every other label (model name, engine index, …) is summed over.
    """
    from prometheus_client.parser import text_string_to_metric_families

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


async def scrape(base_url: str, api_key: str | None = None, timeout_s: float = 30.0) -> dict[str, float]:
    """GET ``{base_url}/metrics`` and parse it; {} when the server serves no metrics (HTTP 404).

    Other HTTP errors and connection failures raise: a run should not silently lose its counters.
    """
    import aiohttp

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(base_url.rstrip("/") + "/metrics", headers=headers) as resp:
            if resp.status == 404:
                return {}
            body = await resp.text()
            if resp.status != 200:
                raise RuntimeError(f"GET {base_url}/metrics: HTTP {resp.status}: {body[:500]}")
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
