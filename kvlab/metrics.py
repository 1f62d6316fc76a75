"""An engine's Prometheus /metrics: scraping, parsing, and counter deltas over a run; telemetry during a run, from
/metrics or, for an engine that serves none, from its scheduler's log lines."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kvlab import httpcall
from kvlab.gpu import GpuSampler

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


#: How long a GET /metrics may take before it counts as no answer.
SCRAPE_TIMEOUT_S = 30.0


async def scrape(base_url: str, api_key: str | None = None, timeout_s: float = SCRAPE_TIMEOUT_S) -> dict[str, float]:
    """GET ``{base_url}/metrics`` and parse it; {} when the server serves no metrics (HTTP 404).

    Other HTTP errors (a redirect included: it is not followed, so a key stays with its host), a body over
    MAX_METRICS_BYTES, text that is not Prometheus' and connection failures raise: a run should not silently
    lose its counters (the runner records them as not available, with the reason).
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = base_url.rstrip("/") + "/metrics"
    try:
        answer = await httpcall.request("GET", url, deadline_s=timeout_s, max_bytes=MAX_METRICS_BYTES, headers=headers)
    except httpcall.HttpLimitError as exc:
        if str(exc).startswith(httpcall.DEADLINE_PASSED):
            raise TimeoutError(str(exc)) from None
        raise ValueError(f"GET {base_url}/metrics: body over {MAX_METRICS_BYTES // 2**20} MiB") from None
    if answer.status == 404:
        return {}
    if answer.status != 200:
        raise RuntimeError(
            f"GET {base_url}/metrics: HTTP {answer.status}: {answer.body[:2000].decode(errors='replace')[:500]}"
        )
    body = answer.text()
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
    counted_once_incremented: tuple[str, ...] = (),
) -> dict[str, float | None]:
    """``after - before`` for each counter in ``names`` ({canonical name: engine metric name}).

    The engine name may be given with or without ``_total``. The delta is None when the
    engine has no such metric (name None), the server did not expose it after the run,
    or there is no baseline (``before`` empty: the first scrape got nothing); a series
    absent from a non-empty ``before`` but present after counts from 0 (Prometheus series
    start at 0); a negative delta (the server restarted, resetting counters) is None.

    ``counted_once_incremented`` (the adapter's, canonical names) are counters the engine exports only after their
    first increment: absent from both scrapes while ``after`` serves the engine's ``prompt_tokens`` counter (the
    collectors are on and counting), such a counter's delta is 0; absent after but present before stays None.
    """
    witness = names.get("prompt_tokens")
    counting = bool(before) and witness is not None and _lookup(after, witness) is not None
    out: dict[str, float | None] = {}
    for canonical, engine_name in names.items():
        if engine_name is None:
            out[canonical] = None
            continue
        end = _lookup(after, engine_name)
        if end is None and counting and canonical in counted_once_incremented and _lookup(before, engine_name) is None:
            out[canonical] = 0.0
            continue
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


#: The telemetry series whose presence shows an engine's counters are being exported (kvlab.engines telemetry_names'
#: canonical name; every request adds to it): beside it, a counter exported only once incremented is 0 when absent.
TELEMETRY_WITNESS = "generation_tokens_total"


def telemetry_values(
    parsed: Mapping[str, float], names: Mapping[str, str], counted_once_incremented: tuple[str, ...] = ()
) -> dict[str, float | None]:
    """One telemetry sample's {canonical: value or None} for ``names`` ({canonical: Prometheus name}) from a parsed
    /metrics body: None where the body lacks the series, except a series of ``counted_once_incremented`` (the
    adapter's ``telemetry_counted_once_incremented``: a labelled counter the engine exports only after its first
    increment), which is 0 while the body serves :data:`TELEMETRY_WITNESS`."""
    values = {c: _lookup(parsed, n) for c, n in names.items()}
    if values.get(TELEMETRY_WITNESS) is not None:
        values |= {c: 0.0 for c in counted_once_incremented if c in values and values[c] is None}
    return values


async def sample_during(
    base_url: str,
    names: Mapping[str, str],
    samples: list[tuple[float, dict, str | None]],
    api_key: str | None = None,
    interval_s: float = TELEMETRY_INTERVAL_S,
    counted_once_incremented: tuple[str, ...] = (),
    gpus: GpuSampler | None = None,
) -> None:
    """Sample ``{base_url}/metrics`` every ``interval_s`` until cancelled, appending ``(t, values, error)`` to
    ``samples``: ``t`` the ``time.perf_counter()`` stamp the GET was sent at (the client's clock), ``values``
    {canonical: value or None} for ``names`` ({canonical: Prometheus name}; :func:`telemetry_values`, with
    ``counted_once_incremented``), ``error`` why a sample got nothing.

    Runs beside the requests in their event loop, so it does little there: one GET per interval and a parse of
    only the lines of the wanted series (a full /metrics parse costs milliseconds the requests' timestamps would
    share). Never raises but for cancellation: a failed sample is kept with its error. ``gpus``: each sample also
    holds every GPU's NVML reading (:func:`_on_grid`).
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    wanted = tuple(names.values())
    url = base_url.rstrip("/") + "/metrics"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), trust_env=False) as session:

        async def take() -> tuple[dict, str | None]:
            answer = await httpcall.request(
                "GET",
                url,
                deadline_s=max(4 * interval_s, 2.0),
                max_bytes=MAX_METRICS_BYTES,
                headers=headers,
                session=session,
            )
            if answer.status != 200:
                raise RuntimeError(f"HTTP {answer.status}")
            raw = answer.body
            kept = "\n".join(line for line in raw.decode(errors="replace").splitlines() if line.startswith(wanted))
            parsed = parse_metrics(kept + "\n")
            return telemetry_values(parsed, names, counted_once_incremented), None

        await _on_grid(take, samples, interval_s, gpus)


async def sample_gpus_during(
    samples: list[tuple[float, dict, str | None]], gpus: GpuSampler, interval_s: float = TELEMETRY_INTERVAL_S
) -> None:
    """The GPUs alone on the telemetry grid, for a run whose engine series are not sampled (no /metrics, no log)."""

    async def nothing() -> tuple[dict, str | None]:
        return {}, None

    await _on_grid(nothing, samples, interval_s, gpus)


async def _on_grid(
    take, samples: list[tuple[float, dict, str | None]], interval_s: float, gpus: GpuSampler | None = None
) -> None:
    """Append ``(t, *await take())`` to ``samples`` every ``interval_s`` until cancelled, ``t`` the
    ``time.perf_counter()`` stamp taken just before ``take`` runs; a ``take`` that raises is kept as a sample with
    its error (the run goes on). The first sample comes half an interval in, not at the first send: a GET /metrics
    beside the batch's arrival cost vLLM's API server (which also tokenizes the prompts) about 14 ms of mean TTFT on
    2 cores (benchmarks/telemetry_overhead.py, 2026-12-03); the log tail keeps the same grid.

    ``gpus`` (kvlab.gpu.GpuSampler, NVML open): each sample also holds every GPU's reading, taken in a worker thread
    right after ``take`` (its ``gpu{i}_*`` values; a failed engine sample keeps them beside its error)."""
    due = time.perf_counter() + interval_s / 2
    await asyncio.sleep(interval_s / 2)
    reads_gpus = gpus is not None and gpus.available
    while True:
        t = time.perf_counter()
        try:
            values, error = await take()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed sample is recorded, the run goes on
            values, error = {}, f"{type(exc).__name__}: {str(exc)[:200]}"
        if reads_gpus:
            try:
                values = {**values, **await asyncio.to_thread(gpus.sample)}
            except asyncio.CancelledError:  # the engine's reading is taken (a log tail has moved past it): keep it
                samples.append((t, values, error))
                raise
        samples.append((t, values, error))
        due += interval_s
        await asyncio.sleep(max(0.0, due - time.perf_counter()))


# --------------------------------------------------------------------------- telemetry from a server's log

#: What telemetry.json says a log-tailed series is, and how old its values can be.
LOG_TELEMETRY_SOURCE = "server log (scheduler lines), tailed during the batch"
LOG_TELEMETRY_AS_OF = (
    "each sample holds the values of the engine's last scheduler log line before the read (its "
    "t_s is the read's time): the scheduler logs every prefill batch and only every "
    "decode_log_interval-th decode step (40 by default), so a value may be older than its sample; "
    "token usage is logged to 2 decimals"
)
#: A read of the log that found no scheduler line written since the one before: a gap, not a value.
NO_NEW_LOG_LINE = "no new scheduler line in the server log since the last read"
#: The most of a log's new bytes one read looks at: only the latest scheduler line is wanted, so a read that finds
#: more (a progress bar, a traceback) looks at the newest this many bytes only.
LOG_TAIL_WINDOW_BYTES = 256 * 1024


def log_size(path: str | Path) -> int:
    """The log's size in bytes now: where a run's own lines begin (0 when there is no log yet)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


async def tail_log_during(
    path: str | Path,
    start: int,
    samples: list[tuple[float, dict, str | None]],
    parse_line: Callable[[str], dict[str, float | None] | None],
    interval_s: float = TELEMETRY_INTERVAL_S,
    gpus: GpuSampler | None = None,
) -> None:
    """Read the lines appended to the server log ``path`` after byte ``start`` every ``interval_s`` until
    cancelled, appending ``(t, values, error)`` to ``samples`` as :func:`sample_during` does: ``t`` the
    ``time.perf_counter()`` stamp of the read, ``values`` the newest scheduler line's among those written since the
    read before, as ``parse_line`` reads one (the engine's grammar: its adapter's ``telemetry_from_log``, None for a
    line that is not a scheduler line). A read that finds no new scheduler line is a sample with
    ``error`` :data:`NO_NEW_LOG_LINE` (a gap, never a repeated or made-up value); lines before ``start`` (earlier
    runs', the warm-up's) are never read. When cancelled (the batch has ended) it reads once more and keeps that
    read's newest line, if one was written since the read before (a failed or empty last read adds nothing). Never
    raises but for cancellation: a failed grid read is kept with its error.
    """
    pos, partial = start, b""

    async def take() -> tuple[dict, str | None]:
        nonlocal pos, partial
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size - pos > LOG_TAIL_WINDOW_BYTES:  # only the newest line is wanted: skip to the last window
                pos, partial = size - LOG_TAIL_WINDOW_BYTES, b""
                f.seek(pos)
                f.readline()  # the window's first line is cut: drop it
            else:
                f.seek(pos)
            chunk = f.read(size - f.tell())
            pos = size
        lines = (partial + chunk).split(b"\n")
        partial = lines.pop()  # a line still being written is read whole next time
        latest = next(
            (v for v in (parse_line(line.decode(errors="replace")) for line in reversed(lines)) if v is not None), None
        )
        return (latest, None) if latest is not None else ({}, NO_NEW_LOG_LINE)

    try:
        await _on_grid(take, samples, interval_s, gpus)
    except asyncio.CancelledError:
        # the batch has ended: one last read keeps the lines written since the grid's last read (a short batch's
        # decode lines can fall between two reads of the 0.5 s grid, leaving a read that saw only a prefill line as
        # all the run had); ``take`` never suspends, so it runs whole inside the cancellation
        t = time.perf_counter()
        try:
            values, error = await take()
        except Exception:  # noqa: BLE001 - the grid's samples stand; a failed last read adds nothing
            raise asyncio.CancelledError from None
        if error is None:
            if gpus is not None and gpus.available:
                values = {**values, **gpus.sample()}
            samples.append((t, values, None))
        raise
