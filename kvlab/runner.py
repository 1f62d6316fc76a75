"""The local executor: launch each server configuration of a campaign on this host (kvlab.plan groups the runs),
warm up, measure, retry; the campaign (kvlab.campaign) resumes, stores and writes the manifests.

Each server configuration starts once per group of runs that share it, across every experiment of
the sweep (two studies that need the same server share one start; each run is still stored under
its own experiment). A run is retried on
the classified failures its spec names, every attempt recorded with its cause; finished runs
are skipped on the next sweep (keyed by the hash of the full run spec), and each run is
written as one atomic folder, so a killed sweep loses at most the run in flight.

A sweep on this host is ``Campaign(specs, data_dir).execute(LocalExecutor())``: the campaign's one entry point.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from kvlab import cost, search
from kvlab import load as loads
from kvlab import gpu, metrics, store
from kvlab import probe as probes
from kvlab import reasoning_tokens
from kvlab.campaign import Campaign, ServerRecord, SweepResult, is_disk_full
from kvlab.client import STALLED, BatchResult, request_rows, run_requests
from kvlab.engines.base import Failure
from kvlab.plan import by_server, starts_may_overlap
from kvlab.schema import RUNS
from kvlab.rows import attempt_row, prompts_for, run_row, sending_for, vocab_size
from kvlab.server import EngineServer, ServerError, read_api_key, reap_orphans
from kvlab.experiment import ExperimentSpec, RunSpec, expand
from kvlab.units import count
from kvlab.workloads import Prompt, fixed_batch

__all__ = [  # what tests, benchmarks and kvlab.cluster use; the rows' names are kept here (a campaign's come
    # from kvlab.campaign, where they are defined)
    "STARTUP_CAUSES",
    "LocalExecutor",
    "Measurement",
    "NotStarted",
    "RunOutcome",
    "ServerStarts",
    "attempt_row",
    "prompts_for",
    "run_row",
    "vocab_size",
]

#: Failure causes that happen before a server is ready: the same argv will fail the same way.
STARTUP_CAUSES = ("startup_oom", "kv_cache_too_small", "timeout", "crash")

#: How long to wait for the server's counters to catch up with what the client saw.
COUNTER_SETTLE_S = 5.0
#: After failed requests, how long to watch for the engine dying or logging a fatal error (a killed engine's
#: process can outlive its dropped connections by a moment on a loaded machine) before calling it an HTTP error.
ENGINE_DEATH_WAIT_S = 3.0
#: How long to keep asking for a cache flush the engine refuses (SGLang: "pending requests" just after a batch).
FLUSH_WAIT_S = 5.0


def _split_reasoning(batch: BatchResult, run: RunSpec) -> tuple[BatchResult, str]:
    """The batch with each record's reasoning tokens filled in, and a note saying how they were counted."""
    counter = reasoning_tokens.local_token_counter(run.engine.model_arg)  # None for hub ids: no local tokenizer.json
    records, method = reasoning_tokens.account(batch.records, counter)
    parser = (
        f"server reasoning parser {run.engine.reasoning_parser!r}"
        if run.engine.reasoning_parser
        else "no server reasoning parser: split at </think> in the text"
    )
    return replace(batch, records=records), f"{reasoning_tokens.describe(method)} ({parser})"


def _engine_failure(server: EngineServer, wait_s: float | None = None) -> Failure | None:
    """The engine's own failure behind failed requests: it exited, or its log shows a fatal error; None if neither
    (``wait_s``: default ENGINE_DEATH_WAIT_S, read at the call)."""
    deadline = time.monotonic() + (ENGINE_DEATH_WAIT_S if wait_s is None else wait_s)
    while True:
        failure = server.failure()
        if failure is not None:
            return failure
        if not server.running():
            return Failure(
                "crash",
                "the external server stopped answering its health check during the run"
                if server.external
                else "server exited during the run",
            )
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def _stalled(batch: BatchResult) -> list:
    """The batch's requests that got no byte for the engine's stall limit."""
    return [r for r in batch.records if r.status != "ok" and (r.error or "").startswith(STALLED)]


def _hung(batch: BatchResult, run: RunSpec) -> Failure | None:
    """Cause ``timeout`` when requests got no byte for the engine's stall limit while its process lived on."""
    stalled = _stalled(batch)
    if not stalled:
        return None
    lag = f"; the client's own event loop lagged up to {batch.loop_lag_max_ms:.0f} ms" if batch.loop_lag_max_ms else ""
    return Failure(
        "timeout",
        f"{count(len(stalled), 'request')} got no data for {run.engine.stall_timeout_s:g} s while "
        f"the engine process was alive (hung or stopped): server killed{lag}",
    )


def _zero_missing_cached(batch: BatchResult) -> BatchResult:
    """Successful requests without a cached-token count had none cached (the engine omits a 0)."""
    records = [
        replace(r, cached_tokens=0) if r.status == "ok" and r.cached_tokens is None else r for r in batch.records
    ]
    return replace(batch, records=records)


#: How long the counters are waited for after a run whose streams stalled: a hung or stopped engine answers /metrics
#: no sooner than its streams, and metrics.SCRAPE_TIMEOUT_S (30 s) would only delay the verdict (and the new server).
STALLED_SCRAPE_TIMEOUT_S = 2.0


def _scrape(
    server: EngineServer, why: list[str] | None = None, timeout_s: float = metrics.SCRAPE_TIMEOUT_S
) -> dict[str, float]:
    """The server's counters, or {} when they cannot be had: unreachable (it may be dying), an HTTP error, a body
    that is not Prometheus text, no answer within ``timeout_s``, anything else. Never raises: the run records its
    counters as not available, and ``why`` gets the reason."""
    try:
        return asyncio.run(metrics.scrape(server.base_url, server.api_key, timeout_s=timeout_s))
    except Exception as exc:  # noqa: BLE001 - a bad /metrics answer costs the run its counters, not the sweep
        if why is not None:
            why.append(
                f"no answer within {timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {str(exc)[:200]}"
            )
        return {}


#: A run folder's telemetry: the samples (CSV) and what they are (JSON: source, interval, count, or why none); the
#: names are the store's, whose load_telemetry reads them back.
TELEMETRY_FILE, TELEMETRY_INFO_FILE = store.TELEMETRY_FILE, store.TELEMETRY_INFO_FILE


def write_telemetry(folder: Path, m: Measurement) -> dict[str, Path]:
    """Write ``m``'s telemetry under ``folder`` as the run folder's files ({name: path}, for write_run).

    telemetry.csv: one row per sample, ``t_s`` seconds from the run's first send (the requests' time origin, their
    t_send_s = 0; samples before it are negative), then one column per series (empty: the server did not export it)
    and ``error`` (why a sample got nothing). telemetry.json: ``available`` (the engine exposes telemetry kvlab
    samples: /metrics series, or the scheduler lines of a log kvlab launched), ``reason`` (why not, when not),
    ``note`` (why an available telemetry holds no sample: a run shorter than the first sample's delay, or no sample
    answered; else null), ``source``, ``interval_s``, ``samples`` (how many, for runs too short for many),
    ``samples_ok``, ``time_origin``; telemetry tailed from the server log adds ``values_as_of`` (a sample holds the
    engine's last scheduler line's values). ``gpu``: the GPU columns (``gpu{i}_memory_used_bytes``,
    ``…_memory_total_bytes``, ``…_utilization_pct``, ``…_power_w``, ``…_temperature_c``, kvlab.gpu): ``available``,
    ``reason`` (why not: no NVML on the host), ``source``, ``devices`` and ``unsupported`` (a field a GPU does not
    report). A host without NVML keeps the first GPU's columns, empty: never a 0.
    """
    folder.mkdir(parents=True, exist_ok=True)
    samples = m.telemetry or []
    got = sum(err is None for _, _, err in samples)
    available = m.telemetry_missing is None
    note = (
        None
        if got or not available
        else (
            f"no sample answered ({samples[0][2]})"
            if samples
            else f"no sample was taken: the run ended before its first sample, {metrics.TELEMETRY_INTERVAL_S / 2:g} s after "
            "its first send"
        )
    )
    from_log = m.telemetry_source == "log"
    info = {
        "available": available,
        "reason": m.telemetry_missing,
        "note": note,
        "source": metrics.LOG_TELEMETRY_SOURCE if from_log else "GET /metrics, sampled during the batch",
        **({"values_as_of": metrics.LOG_TELEMETRY_AS_OF} if from_log else {}),
        "interval_s": metrics.TELEMETRY_INTERVAL_S,
        "samples": len(samples),
        "samples_ok": got,
        "time_origin": "the run's first send (requests' t_send_s = 0), time.perf_counter()",
        "gpu": m.gpus or {"available": False, "reason": "GPUs were not sampled for this run", "source": gpu.SOURCE},
    }
    (folder / TELEMETRY_INFO_FILE).write_text(json.dumps(info, indent=2))
    out = {TELEMETRY_INFO_FILE: folder / TELEMETRY_INFO_FILE}
    if samples:
        series = sorted(
            {k for _, values, _ in samples for k in values}
            | (set() if (m.gpus or {}).get("available") else set(gpu.UNAVAILABLE_COLUMNS))
        )
        store.write_csv(
            pl.DataFrame(
                [
                    {"t_s": t - m.batch.t0, **{k: values.get(k) for k in series}, "error": err}
                    for t, values, err in samples
                ],
                schema={"t_s": pl.Float64, **{k: pl.Float64 for k in series}, "error": pl.String},
            ),
            folder / TELEMETRY_FILE,
        )
        out[TELEMETRY_FILE] = folder / TELEMETRY_FILE
    return out


def _served_name(run: RunSpec) -> str:
    """The model name the server answers to (vLLM and SGLang default to the --model value)."""
    return run.engine.served_name


def _why_no_telemetry(server: EngineServer, has_metrics: bool) -> str:
    """Why a run on ``server`` has no telemetry (it neither serves the sampled /metrics series nor had its log
    tailed)."""
    label = server.adapter.label
    if server.adapter.log_telemetry:  # it would have been tailed, had kvlab launched it
        return (
            f"{label} serves no /metrics, and kvlab did not launch this server: its log, whose scheduler lines "
            "kvlab reads instead, is not here"
        )
    return f"{label} serves no /metrics" if not has_metrics else f"kvlab samples no {label} series during a run"


def _isolate_prefix_cache(server: EngineServer, run: RunSpec, notes: list[str]) -> dict | None:
    """Keep earlier runs' prompts out of this run's prefix-cache hits: the extra request body that salts the cache
    (None: none), or the cache flushed; ``notes`` gets how (or that the flush was refused)."""
    extra_body = None
    if run.engine.prefix_caching and server.adapter.cache_salt:
        # vLLM: every request of this run carries one new salt, which its prefix cache hashes into every
        # block: requests of the run share their prefixes, and none hits a block an earlier run left (no
        # development endpoint needed; the old blocks are evicted as any unused ones)
        extra_body = {"cache_salt": secrets.token_hex(16)}
        notes.append(
            f"prefix cache isolated from earlier runs by a per-run cache_salt ({server.adapter.label}): "
            "hits are this run's own"
        )
    elif run.engine.prefix_caching:
        flushed = server.flush_cache()
        deadline = time.monotonic() + FLUSH_WAIT_S
        while (
            flushed is False and server.adapter.flush_refused_while_busy and time.monotonic() < deadline
        ):  # SGLang refuses while a request finishes
            time.sleep(0.25)
            flushed = server.flush_cache()
        if not flushed:
            notes.append(
                "prefix cache not flushed before the run (engine refused or endpoint disabled); "
                "cache hits may include earlier runs' prompts"
            )
    return extra_body


def _telemetry_plan(server: EngineServer, run: RunSpec, has_metrics: bool) -> tuple[dict, bool]:
    """What a run samples during its batch: (the /metrics series, {} for none; whether the server log is tailed)."""
    names = server.adapter.telemetry_names if has_metrics and run.telemetry else {}
    # no /metrics: an engine that logs its scheduler's lines is read from the log kvlab launched it with
    tails_log = run.telemetry and not names and server.adapter.log_telemetry and not server.external
    return names, tails_log


@dataclass
class _Sampling:
    """How a run's telemetry is sampled during its batch (:func:`_telemetry_plan`), and the samples it gets."""

    names: dict  # the /metrics series sampled ({}: none)
    tails_log: bool  # the server log's scheduler lines are tailed instead
    gpus: gpu.GpuSampler
    samples: list[tuple[float, dict, str | None]]

    def start(self, server: EngineServer) -> asyncio.Task | None:
        """The task that samples ``server`` (and the GPUs) while the batch runs; None: nothing to sample. Called in
        the batch's event loop, just before the first send."""
        lazy = server.adapter.telemetry_counted_once_incremented
        if self.names:
            return asyncio.create_task(
                metrics.sample_during(
                    server.base_url,
                    self.names,
                    self.samples,
                    server.api_key,
                    counted_once_incremented=lazy,
                    gpus=self.gpus,
                )
            )
        if self.tails_log:
            # from the log's end now, just before the first send: earlier runs' lines are never read
            return asyncio.create_task(
                metrics.tail_log_during(
                    server.log_path,
                    metrics.log_size(server.log_path),
                    self.samples,
                    parse_line=server.adapter.telemetry_from_log,
                    gpus=self.gpus,
                )
            )
        if self.gpus.available:
            return asyncio.create_task(metrics.sample_gpus_during(self.samples, self.gpus))
        return None


async def _send_sampled(
    server: EngineServer,
    run: RunSpec,
    prompts: list[Prompt],
    extra_body: dict | None,
    sending: dict,
    sampling: _Sampling,
) -> BatchResult:
    """Send the run's ``prompts`` to ``server`` (``sending``: the load's client arguments) while ``sampling``
    samples it; the sampler is stopped when the batch ends, however it ends."""
    w = run.workload
    load = w.load
    sampler = sampling.start(server)
    try:
        return await run_requests(
            server.base_url,
            _served_name(run),
            prompts,
            concurrency=load.concurrency if load else w.concurrency,
            api_key=server.api_key,
            stall_s=run.engine.stall_timeout_s,
            ignore_eos=w.ignore_eos,
            temperature=w.temperature,
            seed=w.seed,
            keep_text=w.splits_reasoning,
            extra_body=extra_body,
            **sending,
        )
    finally:
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)


def _telemetry_missing(server: EngineServer, run: RunSpec, sampling: _Sampling, has_metrics: bool) -> str | None:
    """Why the run has no telemetry; None when it was sampled."""
    if sampling.names or sampling.tails_log:
        return None
    if run.telemetry:
        return _why_no_telemetry(server, has_metrics)
    return "not sampled: the experiment sets telemetry: false"


def _load_outcome(
    batch: BatchResult,
    load: loads.LoadSpec | None,
    sending: dict,
    schedule: loads.Schedule | None,
    watch: loads.SaturationWatch | None,
) -> loads.LoadOutcome | None:
    """Under a load: its steady-state window over the batch and why sending stopped early; None without a load."""
    if not load:
        return None
    return loads.LoadOutcome(
        load,
        loads.window_of(
            batch.records,
            load,
            loads.schedule_lead_s(sending.get("start_offsets")),
            schedule.until_s(batch.records, watch.stopped) if schedule is not None else 0.0,
        ),
        watch.stopped,
    )


def _as_stored(
    batch: BatchResult,
    run: RunSpec,
    server: EngineServer,
    outcome: loads.LoadOutcome | None,
    n_prompts: int,
    notes: list[str],
) -> BatchResult:
    """The batch as the run stores it (reasoning tokens split out, omitted cached counts as 0), ``notes`` told of
    the load's window, unsampled telemetry, how reasoning was counted and completion counts that cannot be right."""
    w = run.workload
    if outcome is not None:
        notes.append(outcome.note(n_prompts))
    if not run.telemetry:
        notes.append("the server was not sampled during the run (telemetry: false)")
    if w.splits_reasoning:
        batch, how = _split_reasoning(batch, run)
        notes.append(how)
    miscounted = [r for r in batch.records if r.status == "ok" and r.count_flag]
    if miscounted:
        notes.append(
            f"{count(len(miscounted), 'request')} reported a completion_tokens that cannot be right (first: "
            f"{miscounted[0].count_flag}): kept in requests.parquet with its count_flag, left out of "
            "served_output_tokens and TPOT"
        )
    if server.adapter.cached_tokens_omitted_when_zero and run.engine.report_cached_tokens:
        batch = _zero_missing_cached(batch)
    return batch


def _counters_after(server: EngineServer, before: dict, batch: BatchResult) -> tuple[dict, dict, list[str]]:
    """The server's counters once they have caught up with the batch (up to COUNTER_SETTLE_S): (the counters read,
    {} when none; their deltas from ``before``; why a read failed)."""
    served = sum(r.prompt_tokens or 0 for r in batch.records)
    deadline = time.monotonic() + COUNTER_SETTLE_S
    why_after: list[str] = []
    timeout_s = STALLED_SCRAPE_TIMEOUT_S if _stalled(batch) else metrics.SCRAPE_TIMEOUT_S
    while True:  # the server's counters trail the last streamed chunk by a scheduler step
        after = _scrape(server, why_after, timeout_s) if server.running() else {}
        deltas = metrics.counter_deltas(
            before, after, server.adapter.metric_names, server.adapter.counted_once_incremented
        )
        if not after or (deltas.get("prompt_tokens") or 0) >= served or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return after, deltas, why_after


def _counter_notes(before: dict, after: dict, why_before: list[str], why_after: list[str]) -> list[str]:
    """The run's note when its counters could not be read before or after it (none when both were)."""
    if not before:
        return [
            "server metrics unavailable before the run: no counter deltas"
            + (f" ({why_before[-1]})" if why_before else "")
        ]
    if not after:
        return [
            "server metrics unavailable after the run: no counter deltas" + (f" ({why_after[-1]})" if why_after else "")
        ]
    return []


def _batch_failure(server: EngineServer, batch: BatchResult, run: RunSpec) -> Failure:
    """The failure behind a batch with failed requests: the engine's own (it died or logged a fatal error), a hang,
    else an HTTP error naming the first failed request."""
    failure = _engine_failure(server) or _hung(batch, run)
    if failure is None:
        first = next(r for r in batch.records if r.status != "ok")
        n_failed = sum(r.status != "ok" for r in batch.records)
        failure = Failure("http_error", f"{count(n_failed, 'request')} failed; first: {first.error}")
    return failure


@dataclass
class Measurement:
    """One measured batch: its requests, the server's counter deltas around it, and notes on how it was taken."""

    batch: BatchResult
    deltas: dict
    notes: list[str]
    #: /metrics sampled during the batch (kvlab.metrics.sample_during), or the server log's scheduler lines tailed
    #: (kvlab.metrics.tail_log_during): (perf_counter, values, error) per sample
    telemetry: list[tuple[float, dict, str | None]] | None = None
    #: why there is no telemetry (the engine serves no /metrics and logs no scheduler lines); None when it was sampled
    telemetry_missing: str | None = None
    #: under a load (workload.load): the steady-state window and why sending stopped early (None: it did not)
    load: loads.LoadOutcome | None = None
    #: where the telemetry came from: "metrics" (GET /metrics) or "log" (the server log's scheduler lines)
    telemetry_source: str = "metrics"
    #: the GPU columns' description (kvlab.gpu.GpuSampler.describe: available, reason, devices); None: not sampled
    gpus: dict | None = None
    #: the RUNS energy columns over the batch (kvlab.cost.columns); None: not read
    energy: dict | None = None


@dataclass
class NotStarted:
    """Every attempt of run ``source_run`` failed to start its server with ``cause``: the same argv fails the same
    way, so the group's remaining runs are recorded failed instead of relaunched."""

    cause: str
    source_run: str  # the stored run folder's name, whose attempts show the failures


@dataclass
class RunOutcome:
    """One run measured with its retries and stored."""

    path: Path  # the run's folder
    status: str  # "ok" or "failed"
    server: EngineServer | None  # still serving, kept for the group's next run; None when stopped or never up
    not_started: NotStarted | None = None  # set when no attempt got a server started


@dataclass
class _RunAttempts:
    """One run's attempts (LocalExecutor._run_one): what every attempt needs, and what they leave for the next one
    and for the stored run."""

    run: RunSpec
    spec: ExperimentSpec
    prompts: list[Prompt]
    schedule: loads.Schedule | None
    vocab: int
    probing: bool  # each server started gets the accuracy probe after its warm-up
    server: EngineServer | None  # the server the next attempt runs on (None: it starts one)
    rows: list[dict] = field(default_factory=list)  # the ATTEMPTS rows (attempt_row)
    logs: dict[str, EngineServer] = field(default_factory=dict)  # per attempt, the server whose log the run keeps
    start_failed: list[bool] = field(default_factory=list)  # per attempt: did the server fail to start (not the run)?
    measured: Measurement | None = None  # the latest attempt's measurement
    version: str | None = None
    failure: Failure | None = None  # the latest attempt's (None: it succeeded)

    @property
    def never_started(self) -> bool:
        """No attempt got a server started: every one failed to start it, with a startup cause."""
        # a run killed mid-way also leaves server None: only start failures stop the group's relaunches
        return (
            self.server is None
            and all(self.start_failed)
            and all(a["status"] == "failed" and a["failure_cause"] in STARTUP_CAUSES for a in self.rows)
        )


def _stored_row(tries: _RunAttempts, status: str, server: ServerRecord | None) -> pl.DataFrame:
    """The RUNS row of the run ``tries`` made (``server``: the record of its latest server start)."""
    measured = tries.measured
    rows = tries.rows
    row = run_row(
        tries.run,
        tries.prompts,
        status,
        len(rows),
        tries.failure.cause if tries.failure else (rows[-2]["failure_cause"] if len(rows) > 1 else None),
        tries.version,
        measured.batch if measured is not None else None,
        measured.deltas if measured is not None else {},
        "; ".join(measured.notes if measured is not None else []),
        kv_pool_tokens=server.kv_pool_tokens if server else None,
        load=measured.load if measured is not None else None,
    )
    energy = measured.energy if measured is not None else None
    return row.with_columns(pl.lit(v, dtype=RUNS.polars_schema[k]).alias(k) for k, v in (energy or {}).items())


class ServerStarts:
    """The server starts of one local campaign: a context that, on leaving it, stops every server launched
    early and never used.

    With ``overlap``, as each group begins the next group's server is launched beside this group's start (two
    starts side by side take about half the time of two one after the other: docs/performance.md) where
    plan.starts_may_overlap allows; it is paused once this group's server is ready and resumed when its own
    group begins. ``records`` gets a ServerRecord for every start, failed or not."""

    def __init__(self, log_dir: Path, overlap: bool = True, records: list[ServerRecord] | None = None):
        self.log_dir = log_dir
        self.overlap = overlap
        self.records: list[ServerRecord] = [] if records is None else records
        self._ahead: EngineServer | None = None  # the next group's server, launched early (paused while measuring)
        self._handed: EngineServer | None = None  # launched early for the group now running, not yet used

    def __enter__(self) -> ServerStarts:
        return self

    def __exit__(self, *exc) -> None:
        for server in (self._handed, self._ahead):
            if server is not None:
                server.stop()
        self._handed = self._ahead = None

    @property
    def current(self) -> ServerRecord | None:
        """The record of the latest start (the server of the group now running)."""
        return self.records[-1] if self.records else None

    @contextmanager
    def group(self, run: RunSpec, nxt: RunSpec | None) -> Iterator[None]:
        """While ``run``'s group runs: its server launched early (if any) is resumed and handed to its first start,
        and ``nxt``'s group's server is launched; on leaving, a handed server never started is stopped."""
        self._handed, self._ahead = self._ahead, None
        if self._handed is not None:
            self._handed.resume()
        self._launch_ahead(run, nxt)
        try:
            yield
        finally:
            if self._handed is not None:  # launched early, not reached (interrupted before its start)
                self._handed.stop()
                self._handed = None

    def _launch_ahead(self, run: RunSpec, nxt: RunSpec | None) -> None:
        """Launch the next group's server now (a failed launch is left to its group to retry)."""
        if not (self.overlap and nxt is not None and starts_may_overlap(run, nxt)):
            return
        ahead = EngineServer(nxt.engine, self.log_dir / f"server-{nxt.server_key}-attempt1.log")
        try:
            ahead.start()
        except OSError:
            return
        self._ahead = ahead

    def server(self, run: RunSpec, attempt: int) -> EngineServer:
        """The server for ``run``'s attempt: the one launched early for this group serves its first start; later
        ones are new."""
        server = self._handed or EngineServer(
            run.engine, self.log_dir / f"server-{run.server_key}-attempt{attempt}.log"
        )
        self._handed = None
        return server

    def start(self, server: EngineServer, run: RunSpec) -> None:
        """Start ``server`` (unless it was launched early) and wait until it is ready, recording the start
        either way; then pause the next group's server, launched early, so that nothing else runs while this
        one is measured."""
        t = time.perf_counter()
        early = server.launched
        try:
            if not early:
                server.start()
            server.wait_ready()
        finally:
            self.records.append(
                ServerRecord(
                    server_key=run.server_key,
                    engine=run.engine.name,
                    argv=server.recorded_argv,
                    launched_by_kvlab=not server.external,
                    url=run.engine.url,
                    env=None if server.external else server.adapter.env_overrides(run.engine),
                    experiments=[run.experiment],
                    log=server.log_path.name,
                    started_at=datetime.now(timezone.utc).isoformat(),
                    ready_s=server.ready_after_s if server.ready_after_s is not None else time.perf_counter() - t,
                    start_overlapped=early or (self._ahead is not None and not self._ahead.paused),
                    paused_s=server.paused_s,
                    kv_pool_tokens=None
                    if server.external
                    else server.adapter.kv_pool_tokens(server.log_text(this_start=True)),
                )
            )
        if self._ahead is not None:
            self._ahead.pause()


class LocalExecutor:
    """Runs a campaign's pending runs on this host (see kvlab.campaign.Executor): one server group after the
    other, each server started once for its group, every run measured with its retries and stored as it ends."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep, overlap_starts: bool = True):
        self.sleep = sleep
        self.overlap_starts = overlap_starts  # see plan.starts_may_overlap
        self.servers: list[ServerRecord] = []

    def preflight(self, campaign: Campaign, todo: list[RunSpec]) -> None:
        """Reap servers a killed sweep left; RuntimeError naming the engine when an API key is not set (every key
        is set before anything launches)."""
        reap_orphans()
        for r in todo:
            try:
                read_api_key(r.engine)
            except ValueError as exc:
                raise RuntimeError(f"engine {r.engine_label}: {exc}") from None

    def manifest_extra(self, experiment: str) -> dict:
        return {}

    def run(self, campaign: Campaign, todo: list[RunSpec], result: SweepResult) -> None:
        """Run every pending run, grouped by server; a load ladder's rungs in order of level, leaving out those
        above a rung past saturation (kvlab.load.not_climbed)."""
        ladders = _stored_rungs(campaign, todo)
        with (
            tempfile.TemporaryDirectory(prefix="kvlab-logs-") as tmp,
            ServerStarts(Path(tmp), self.overlap_starts, self.servers) as starts,
        ):
            groups = [_climbing_order(g) for _, g in by_server(todo)]
            for i, group in enumerate(groups):
                vocab = vocab_size(group[0])
                # one probe per start of a server any experiment of the group asks it of (shared servers included)
                probing = any(campaign.specs[r.experiment].probe for r in group)
                server, not_started = None, None
                with starts.group(group[0], groups[i + 1][0] if i + 1 < len(groups) else None):
                    try:
                        for run in group:
                            ladder = (
                                loads.ladder_key(run)
                                if run.workload.load is not None and run.workload.load.stop_climbing
                                else None
                            )
                            why = (
                                loads.not_climbed(ladders.get(ladder, []), loads.level(run.workload.load))
                                if ladder
                                else None
                            )
                            if not_started is not None:
                                # Same argv, same failure: record it instead of relaunching max_attempts times.
                                self._record_not_started(campaign, run, not_started, result)
                            elif why is not None:
                                campaign.leave_unclimbed(run, why, result)
                            elif run.workload.load is not None and run.workload.load.search is not None:
                                outcome = self._search(campaign, starts, run, server, vocab, result, probing)
                                server, not_started = outcome.server, outcome.not_started
                            else:
                                outcome = self._run_one(campaign, starts, run, server, vocab, result, probing)
                                server, not_started = outcome.server, outcome.not_started
                                if ladder and (rung := _rung(outcome.path)) is not None:
                                    ladders.setdefault(ladder, []).append(rung)
                    finally:
                        if server is not None:
                            server.stop()

    def _search(
        self,
        campaign: Campaign,
        starts: ServerStarts,
        run: RunSpec,
        server: EngineServer | None,
        vocab: int,
        result: SweepResult,
        probing: bool = False,
    ) -> RunOutcome:
        """Run ``run``'s load.search (kvlab.search): each probe a run of its own at its level, measured on ``server``
        (a probe stored already, by an earlier or killed sweep, is read back), the probes so far kept in the search
        run's folder after each; then the search run's row with its result and the mechanism at the first failing
        level, stored."""
        exp_dir = campaign.exp_dir(run.experiment)
        held: list = [server, None]  # the server the probes run on, and why it did not start
        stored: dict[float, Path] = {}

        def measure(level: float) -> dict:
            probe = run.model_copy(update={"workload": search.probe_workload(run.workload, level)})
            path = exp_dir / probe.key
            if not (path / store.RUN_FILE).exists():
                out = self._run_one(campaign, starts, probe, held[0], vocab, result, probing)
                held[0], held[1], path = out.server, out.not_started, out.path
            stored[level] = path
            return pl.read_parquet(path / store.RUN_FILE).row(0, named=True)

        def progress(b: search.Bracket) -> None:
            search.write_progress(exp_dir / run.key, b)

        bracket = search.search(run.workload.load.search, measure, run.workload.load.rate_rps is None, progress)
        path = campaign.write_run(
            run,
            _search_row(run, bracket, stored),
            files={search.PROGRESS_FILE: exp_dir / run.key / search.PROGRESS_FILE},
        )
        status = "ok" if any(p.run_id for p in bracket.probes) else "failed"
        campaign.stored(run, path, status, result)
        return RunOutcome(path, status, held[0], held[1])

    def _warmup(self, server: EngineServer, run: RunSpec, vocab: int) -> None:
        prompts = fixed_batch.prompts(1, 16, 2, vocab, seed=987_654)
        asyncio.run(run_requests(server.base_url, _served_name(run), prompts, api_key=server.api_key, timeout_s=300))

    def _probe(self, starts: ServerStarts, server: EngineServer, run: RunSpec) -> None:
        """Send kvlab.probe's probe set to the just-started ``server`` (after its warm-up, before its first measured
        run: no run's requests, counters or telemetry include it) and keep its outputs on the start's record."""
        starts.current.probe = probes.run_probe(
            server.base_url, _served_name(run), probes.configuration(run), api_key=server.api_key
        )

    # ------------------------------------------------------------------ one run
    def _measure(
        self, server: EngineServer, run: RunSpec, prompts: list[Prompt], schedule: loads.Schedule | None = None
    ) -> Measurement:
        """Send the run's prompts to the ready ``server`` (after isolating or flushing its prefix cache), and
        read the server's counters around them; ``schedule``: the open-loop send offsets, and the gap after the last
        send that a span window waits out, the run's draws gave (``load.draws: random_ids``), else kvlab.load draws
        the offsets."""
        notes = []
        if server.external:
            notes.append(
                f"server at {run.engine.url} not launched by kvlab: its settings are as the experiment "
                "file states them, unchecked"
            )
        extra_body = _isolate_prefix_cache(server, run, notes)
        has_metrics = server.adapter.metrics_path is not None
        why_before: list[str] = []
        before = _scrape(server, why_before) if has_metrics else {}
        names, tails_log = _telemetry_plan(server, run, has_metrics)
        samples: list[tuple[float, dict, str | None]] = []
        load = run.workload.load
        watch = loads.SaturationWatch(load, run.slo.ttft_ms if run.slo else None, samples) if load else None

        gpus = gpu.GpuSampler().open()  # NVML: every GPU on the same grid (or why not: a host without NVML)
        sampling = _Sampling(names, tails_log, gpus, samples)

        sending = loads.client_args(load, prompts, watch, schedule) if load else _replay_args(prompts, schedule)
        on_gpu = not run.on_cpu
        energy_before = cost.read_energy(gpu=on_gpu)
        try:
            batch = asyncio.run(_send_sampled(server, run, prompts, extra_body, sending, sampling))
        finally:
            gpus.close()
        energy = cost.columns(energy_before, cost.read_energy(gpu=on_gpu))
        gpu_info = gpus.describe()
        missing = _telemetry_missing(server, run, sampling, has_metrics)
        outcome = _load_outcome(batch, load, sending, schedule, watch)
        batch = _as_stored(batch, run, server, outcome, len(prompts), notes)
        if not has_metrics:
            return Measurement(
                batch,
                metrics.counter_deltas({}, {}, server.adapter.metric_names),
                notes + [f"{server.adapter.label} serves no /metrics: server-side counters not available"],
                samples if tails_log or gpus.available else None,
                missing,
                outcome,
                "log" if tails_log else "metrics",
                gpu_info,
                energy,
            )
        after, deltas, why_after = _counters_after(server, before, batch)
        notes += _counter_notes(before, after, why_before, why_after)
        return Measurement(
            batch,
            deltas,
            notes,
            samples if names or gpus.available else None,
            missing,
            outcome,
            gpus=gpu_info,
            energy=energy,
        )

    def _run_one(
        self,
        campaign: Campaign,
        starts: ServerStarts,
        run: RunSpec,
        server: EngineServer | None,
        vocab: int,
        result: SweepResult,
        probing: bool = False,
    ) -> RunOutcome:
        """Measure one run with its retries on ``server`` (None: start one) and store it; ``probing``: each server it
        starts gets the accuracy probe after its warm-up (:meth:`_probe`)."""
        spec = campaign.specs[run.experiment]
        prompts, schedule = sending_for(run, vocab)
        tries = _RunAttempts(run, spec, prompts, schedule, vocab, probing, server)
        for n in range(1, spec.retry.max_attempts + 1):
            if not self._attempt(tries, n, starts, result):
                break
        path, status = self._store(campaign, starts, tries, result)
        return RunOutcome(
            path,
            status,
            tries.server,
            NotStarted(tries.rows[-1]["failure_cause"], path.name) if tries.never_started else None,
        )

    def _attempt(self, tries: _RunAttempts, n: int, starts: ServerStarts, result: SweepResult) -> bool:
        """Make attempt ``n`` of ``tries``' run and record it; True when the run is to be tried again (after the
        retry's backoff, slept here)."""
        retry = tries.spec.retry
        t = time.perf_counter()
        at_start = False
        try:
            failure = self._try(tries, n, starts, result)
        except ServerError as exc:
            failure = exc.failure
            tries.server, at_start = None, True
        tries.failure = failure
        tries.start_failed.append(at_start)
        elapsed = time.perf_counter() - t
        result.attempts += 1
        result.experiments[tries.run.experiment].attempts += 1
        retrying = failure is not None and failure.cause in retry.retry_on and n < retry.max_attempts
        tries.rows.append(attempt_row(tries.run, n, failure, elapsed, retry.backoff(n) if retrying else None))
        if tries.server is not None and failure is not None and failure.cause != "http_error":
            tries.server.stop()  # a crashed or hung engine serves no further run: the next one starts a new server
            tries.server = None
        if failure is None or not retrying:
            return False
        self.sleep(retry.backoff(n))
        return True

    def _try(self, tries: _RunAttempts, n: int, starts: ServerStarts, result: SweepResult) -> Failure | None:
        """Attempt ``n``'s measurement on a ready server, and its failure (None: every request succeeded); a server
        that fails to start raises ServerError."""
        server = self._ready_server(tries, n, starts, result)
        tries.logs[f"server-attempt{n}.log"] = server
        tries.version = tries.version or server.version()
        tries.measured = self._measure(server, tries.run, tries.prompts, tries.schedule)
        batch = tries.measured.batch
        return None if batch.ok else _batch_failure(server, batch, tries.run)

    def _ready_server(self, tries: _RunAttempts, n: int, starts: ServerStarts, result: SweepResult) -> EngineServer:
        """The server attempt ``n`` runs on: the one ``tries`` holds while it runs, else a new one, started, warmed
        up and probed as the run's experiment asks (``tries.server`` is set as soon as it is launched)."""
        server = tries.server
        if server is None or not server.running():
            if server is not None:
                server.stop()
            result.server_starts += 1
            server = tries.server = starts.server(tries.run, n)
            tries.logs[f"server-attempt{n}.log"] = server
            starts.start(server, tries.run)
            if tries.spec.warmup:
                self._warmup(server, tries.run, tries.vocab)
            if tries.probing:
                self._probe(starts, server, tries.run)
        elif tries.run.experiment not in starts.current.experiments:  # a server shared across experiments
            starts.current.experiments.append(tries.run.experiment)
        return server

    def _store(
        self, campaign: Campaign, starts: ServerStarts, tries: _RunAttempts, result: SweepResult
    ) -> tuple[Path, str]:
        """Store the run its attempts measured (its row, requests, attempts, server logs and telemetry) as one
        folder: (its path, its status). A full disk stops the sweep (campaign.disk_full), the run not stored."""
        run, measured = tries.run, tries.measured
        status = "ok" if tries.failure is None else "failed"
        row = _stored_row(tries, status, starts.current)
        batch = measured.batch if measured is not None else None
        requests = _with_trace(request_rows(batch.records, run.key), tries.prompts) if batch else None
        try:
            recorded = {name: srv.recorded_log(starts.log_dir / f"recorded-{name}") for name, srv in tries.logs.items()}
            files = {name: path for name, path in recorded.items() if path}
            if measured is not None:
                files |= write_telemetry(starts.log_dir / f"telemetry-{run.key}", measured)
            path = campaign.write_run(
                run,
                row,
                requests,
                pl.DataFrame(tries.rows),
                files,
                argv=starts.current.argv if starts.current else None,
            )
        except Exception as exc:  # ENOSPC/EDQUOT: the run fails with cause disk_full, is not stored, the sweep stops
            if not is_disk_full(exc):
                raise
            if tries.server is not None:
                tries.server.stop()
            raise campaign.disk_full(run, exc, result) from None
        campaign.stored(run, path, status, result)
        return path, status

    def _record_not_started(self, campaign: Campaign, run: RunSpec, start: NotStarted, result: SweepResult) -> Path:
        note = (
            f"not launched: the same server configuration failed to start in every attempt of run "
            f"{start.source_run} ({start.cause})"
        )
        return campaign.record_unsent(run, start.cause, [], note, result)


def _search_row(run: RunSpec, bracket: search.Bracket, stored: dict[float, Path]) -> pl.DataFrame:
    """The search run's RUNS row: what served it (from its probes' rows), no measurement of its own, its result's
    ``search_*`` columns and, at the first failing level, the mechanism from that run's telemetry."""
    rows = {lvl: pl.read_parquet(p / store.RUN_FILE).row(0, named=True) for lvl, p in stored.items()}
    first = rows[bracket.probes[0].level] if bracket.probes else {}
    passing = rows.get(bracket.passing) if bracket.passing is not None else None
    failing = rows.get(bracket.failing) if bracket.failing is not None else None
    why = None
    if failing is not None:
        tele = stored[bracket.failing] / TELEMETRY_FILE
        why = search.mechanism(failing, passing, pl.read_csv(tele) if tele.exists() else None)
    ok = any(r.get("status") == "ok" for r in rows.values())
    row = run_row(
        run,
        [],
        "ok" if ok else "failed",
        0,
        None if ok else first.get("failure_cause"),
        first.get("engine_version"),
        None,
        {},
        f"load.search over {len(bracket.probes)} probes, each a run of its own: {bracket.stop}",
        first.get("kv_pool_tokens"),
    )
    return row.with_columns(
        pl.lit(v, dtype=RUNS.polars_schema[k]).alias(k)
        for k, v in search.columns(run.workload.load.search, bracket, why).items()
    )


def _with_trace(requests: pl.DataFrame, prompts: list[Prompt]) -> pl.DataFrame:
    """REQUESTS rows with what their prompts carry of a trace (trace_line, reusable_tokens), by request index."""
    lines = {p.index: (p.trace_line, p.reusable_tokens) for p in prompts if p.trace_line is not None}
    if not lines or requests.is_empty():
        return requests
    index = requests["request_index"].to_list()
    return requests.with_columns(
        pl.Series("trace_line", [lines.get(i, (None, None))[0] for i in index], dtype=pl.Int64),
        pl.Series("reusable_tokens", [lines.get(i, (None, None))[1] for i in index], dtype=pl.Int64),
    )


def _replay_args(prompts: list[Prompt], schedule: loads.Schedule | None) -> dict:
    """Without a load: the send offsets a workload's own schedule gives (kind trace: its timestamps), else none."""
    if schedule is None:
        return {}
    return {"start_offsets": dict(zip(loads.chain_starts(prompts), schedule.offsets, strict=True))}


def _rung(folder: Path) -> loads.Rung | None:
    """The stored run in ``folder`` as a rung of its load ladder (None: not a measured load point)."""
    path = folder / store.RUN_FILE
    return loads.rung_of(pl.read_parquet(path).row(0, named=True)) if path.exists() else None


def _stored_rungs(campaign: Campaign, todo: list[RunSpec]) -> dict[str, list[loads.Rung]]:
    """The rungs already stored of the ladders ``todo`` climbs (ladder key -> rungs), from the experiments' folders."""
    climbing = {k for r in todo if r.workload.load is not None and (k := loads.ladder_key(r))}
    pending = {(r.experiment, r.key) for r in todo}
    out: dict[str, list[loads.Rung]] = {}
    for spec in campaign.specs.values() if climbing else ():
        for r in expand(spec):
            if r.workload.load is None or (r.experiment, r.key) in pending:
                continue
            key = loads.ladder_key(r)
            if key in climbing and (rung := _rung(campaign.exp_dir(r.experiment) / r.key)) is not None:
                out.setdefault(key, []).append(rung)
    return out


def _climbing_order(group: list[RunSpec]) -> list[RunSpec]:
    """A server group's runs with each load ladder's rungs in order of level (the first rung keeps its place);
    every other run as it was."""
    firsts: dict[str, int] = {}
    for i, r in enumerate(group):
        if r.workload.load is not None:
            firsts.setdefault(loads.ladder_key(r), i)

    def place(ir: tuple[int, RunSpec]) -> tuple:
        i, r = ir
        if r.workload.load is None:
            return (i, 0.0)
        return (firsts[loads.ladder_key(r)], loads.level(r.workload.load))

    return [r for _, r in sorted(enumerate(group), key=place)]
