"""Execute experiments: launch each server configuration (kvlab.plan groups the runs), warm up, measure, retry, resume.

Each server configuration starts once per group of runs that share it, across every experiment of
the sweep (two studies that need the same server share one start; each run is still stored under
its own experiment). A run is retried on
the classified failures its spec names, every attempt recorded with its cause; finished runs
are skipped on the next sweep (keyed by the hash of the full run spec), and each run is
written as one atomic folder, so a killed sweep loses at most the run in flight.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from kvlab import host, metrics, store
from kvlab.client import STALLED, BatchResult, request_rows, run_requests, sum_reported, summarize
from kvlab.engines.base import Failure
from kvlab.engines.spec import redact_secrets
from kvlab.paths import DATA_DIR
from kvlab.plan import by_server, starts_may_overlap
from kvlab.schema import RUNS
from kvlab.server import EngineServer, ServerError, StateDirError, ensure_state_dir, read_api_key, reap_orphans
from kvlab.spec import ExperimentSpec, RunSpec, expand
from kvlab.workloads import Prompt, fixed_batch, shared_tokens

#: Failure causes that happen before a server is ready: the same argv will fail the same way.
STARTUP_CAUSES = ("startup_oom", "kv_cache_too_small", "timeout", "crash")

#: How long to wait for the server's counters to catch up with what the client saw.
COUNTER_SETTLE_S = 5.0
#: After failed requests, how long to watch for the engine dying or logging a fatal error (a killed engine's
#: process can outlive its dropped connections by a moment on a loaded machine) before calling it an HTTP error.
ENGINE_DEATH_WAIT_S = 3.0
#: How long to keep asking for a cache flush the engine refuses (SGLang: "pending requests" just after a batch).
FLUSH_WAIT_S = 5.0
#: A sweep refuses to start with less free space than this where its runs go (a run folder with its logs
#: is a few MB; a full disk mid-run would lose the run in flight).
MIN_FREE_BYTES = 256 * 2**20
#: The lock file in each experiment's folder (no leading dot: clean_partial removes dot files).
LOCK_FILE = "sweep.lock"


class SweepError(RuntimeError):
    """A sweep cannot start: its data folder is not writable or full, or another sweep holds an experiment."""


class DiskFullError(SweepError):
    """The disk filled up while a run was being stored: the sweep stops. ``failure`` (cause ``disk_full``) says
    what failed to be written; the run is not stored, so the next sweep measures it again."""

    def __init__(self, message: str, failure: Failure, run: RunSpec | None, free_bytes: int):
        super().__init__(message)
        self.failure, self.run, self.free_bytes = failure, run, free_bytes


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC or EDQUOT, as an OSError or as polars reports it (a ComputeError saying "(os error 28)")."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return any(f"(os error {n})" in str(exc) for n in (errno.ENOSPC, errno.EDQUOT))


def _free_near(path: Path) -> tuple[Path, int]:
    """The nearest existing folder at or above ``path`` and the bytes free on its disk."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path, shutil.disk_usage(path).free


@dataclass
class SweepResult:
    """Counts of one sweep (``experiment`` names every experiment it ran) and, in ``experiments``, of each one."""

    experiment: str
    planned: int
    skipped: int
    ok: int = 0
    failed: int = 0
    server_starts: int = 0
    attempts: int = 0
    run_dirs: list[Path] = field(default_factory=list)
    wall_s: float = 0.0
    superseded: int = 0  # finished runs of an earlier version of the experiment, moved to superseded/
    experiments: dict[str, SweepResult] = field(default_factory=dict)

    def tally(self, run: RunSpec, status: str, attempts: int = 0) -> None:
        """Count a stored run (and ``attempts`` more attempts) in these totals and in its experiment's."""
        for r in (self, self.experiments[run.experiment]):
            r.attempts += attempts
            if status == "ok":
                r.ok += 1
            else:
                r.failed += 1


def prompts_for(run: RunSpec, vocab_size: int) -> list[Prompt]:
    """The exact prompts of one run, from its workload kind's generator (deterministic from the workload
    seed and repeat)."""
    return run.workload.generate(vocab_size, seed=run.workload.seed * 1000 + run.repeat)


def _split_reasoning(batch: BatchResult, run: RunSpec) -> tuple[BatchResult, str]:
    """The batch with each record's reasoning tokens filled in, and a note saying how they were counted."""
    from dataclasses import replace

    from kvlab import reasoning

    counter = reasoning.local_token_counter(run.engine.model_arg)  # None for hub ids: no local tokenizer.json
    records, method = reasoning.account(batch.records, counter)
    parser = f"server reasoning parser {run.engine.reasoning_parser!r}" if run.engine.reasoning_parser \
        else "no server reasoning parser: split at </think> in the text"
    return replace(batch, records=records), f"{reasoning.describe(method)} ({parser})"


def _engine_failure(server: EngineServer, wait_s: float | None = None) -> Failure | None:
    """The engine's own failure behind failed requests: it exited, or its log shows a fatal error; None if neither
    (``wait_s``: default ENGINE_DEATH_WAIT_S, read at the call)."""
    deadline = time.monotonic() + (ENGINE_DEATH_WAIT_S if wait_s is None else wait_s)
    while True:
        failure = server.failure()
        if failure is not None:
            return failure
        if not server.running():
            return Failure("crash", "the external server stopped answering its health check during the run"
                           if server.external else "server exited during the run")
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def _hung(batch: BatchResult, run: RunSpec) -> Failure | None:
    """Cause ``timeout`` when requests got no byte for the engine's stall limit while its process lived on."""
    stalled = [r for r in batch.records if r.status != "ok" and (r.error or "").startswith(STALLED)]
    if not stalled:
        return None
    return Failure("timeout", f"{len(stalled)} request(s) got no data for {run.engine.stall_timeout_s:g} s while "
                              "the engine process was alive (hung or stopped): server killed")


def _zero_missing_cached(batch: BatchResult) -> BatchResult:
    """Successful requests without a cached-token count had none cached (the engine omits a 0)."""
    from dataclasses import replace

    records = [replace(r, cached_tokens=0) if r.status == "ok" and r.cached_tokens is None else r
               for r in batch.records]
    return replace(batch, records=records)


def _scrape(server: EngineServer, why: list[str] | None = None) -> dict[str, float]:
    """The server's counters, or {} when they cannot be had: unreachable (it may be dying), an HTTP error, a body
    that is not Prometheus text, anything else. Never raises: the run records its counters as not available,
    and ``why`` gets the reason."""
    try:
        return asyncio.run(metrics.scrape(server.base_url, server.api_key))
    except Exception as exc:  # noqa: BLE001 - a bad /metrics answer costs the run its counters, not the sweep
        if why is not None:
            why.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        return {}


def _served_name(run: RunSpec) -> str:
    """The model name the server answers to (vLLM and SGLang default to the --model value)."""
    return run.engine.served_name


def vocab_size(run: RunSpec) -> int:
    cfg = run.engine.local_config()
    # A hub model on a GPU host: ids below 1000 exist in every tokenizer kvlab targets.
    return int(cfg["vocab_size"]) if cfg else 1000


def run_row(run: RunSpec, prompts: list[Prompt], status: str, attempts: int, cause: str | None,
             version: str | None, batch: BatchResult | None, deltas: dict, notes: str) -> pl.DataFrame:
    """The run's RUNS row; ``prompts`` are what it sends (or would have sent), whose shared tokens it records."""
    e, w = run.engine, run.workload
    summary = summarize(batch.records, batch.batch_time_s) if batch else {}
    kind = host.device_kind(e.model_dump(mode="json"), host.describe())
    row = {
        "source": "measured", "experiment": run.experiment, "run_id": run.key, "hardware": run.hardware,
        "gpu_count": host.gpu_count() if kind == "gpu" else None, "device_kind": kind,
        "model": e.served_model_name or Path(e.model).name, "engine": e.name,
        "engine_version": version, "tp": e.tp, "dcp": e.dcp, "dp": e.dp,
        "dtype": e.served_dtype() or (e.local_config() or {}).get("torch_dtype"), "mem_util": e.mem_util,
        "kv_budget_bytes": e.kv_cache_bytes,
        "prefix_caching": e.prefix_caching, "context_label": run.context_label,
        "context_tokens": run.context_tokens, "scale_factor": run.scale_factor, "mode": w.kind,
        "batch_size": w.in_flight,  # fixed_batch: all batch_size at once
        "shared_prefix_tokens": shared_tokens(prompts),
        "reasoning_tokens": (sum_reported([r.reasoning_tokens for r in batch.records])
                             if batch and w.splits_reasoning else None),
        "prompt_tokens": w.prompt_len, "output_tokens": w.output_tokens, "repeat": run.repeat,
        "attempts": attempts, "status": status, "failure_cause": cause,
        "started_at": batch.started_at if batch else datetime.now(timezone.utc).isoformat(),
        "notes": notes or None,
        **summary,
        # the server's counter deltas that have a RUNS column (cached_tokens duplicates prefix hits)
        **{f"server_{k}": (None if v is None else int(v)) for k, v in deltas.items()
           if f"server_{k}" in RUNS.polars_schema},
    }
    if status != "ok":
        row["batch_time_s"] = None
    return pl.DataFrame([row])


def attempt_row(run: RunSpec, n: int, failure: Failure | None, elapsed_s: float, backoff_s: float | None) -> dict:
    """One row of a run's ATTEMPTS table: attempt ``n`` (1-based), ok or failed with ``failure``'s cause."""
    return {
        "run_id": run.key, "attempt": n, "status": "failed" if failure else "ok",
        "failure_cause": failure.cause if failure else None, "detail": failure.detail if failure else None,
        "fits_max_len": failure.fits_max_len if failure else None, "elapsed_s": elapsed_s, "backoff_s": backoff_s,
    }


class Sweep:
    """One execution of one or more experiments, each into ``data_dir/runs/<name>/``.

    Runs are grouped by server configuration across all the experiments given, so studies that need
    the same server (same argv and environment) share one start; each run keeps its own experiment's
    retry policy and folder, and each experiment's manifest lists the servers its runs used.
    """

    def __init__(self, specs: ExperimentSpec | list[ExperimentSpec], data_dir: Path = DATA_DIR, fresh: bool = False,
                 on_run: Callable[[RunSpec, str], None] | None = None, sleep=time.sleep,
                 only: set[tuple[str, str]] | None = None, overlap_starts: bool = True):
        specs = [specs] if isinstance(specs, ExperimentSpec) else list(specs)
        names = [s.name for s in specs]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"experiment name(s) given twice in one sweep: {', '.join(dupes)} "
                             "(their runs would share one folder)")
        self.specs = {s.name: s for s in specs}
        self.data_dir = Path(data_dir)
        self.fresh = fresh
        self.on_run = on_run or (lambda run, status: None)
        self.sleep = sleep
        self.only = only  # (experiment, run key) pairs this sweep may run (a cluster node's share); None: all
        self.overlap_starts = overlap_starts  # see plan.starts_may_overlap
        self._ahead: EngineServer | None = None  # the next group's server, launched early (paused while measuring)
        self._handed: EngineServer | None = None  # launched early for the group now running, not yet used
        self.servers: list[dict] = []
        self._superseded: dict[str, list[str]] = {}
        self._locks: dict[str, int] = {}  # experiment -> fd holding its flock while this sweep runs

    # ------------------------------------------------------------------ server handling
    def exp_dir(self, experiment: str) -> Path:
        """Where an experiment's runs and manifest live."""
        return self.data_dir / "runs" / experiment

    def _start(self, server: EngineServer, run: RunSpec) -> None:
        """Start ``server`` (unless it was launched early) and wait until it is ready; then pause the next group's
        server, launched early, so that nothing else runs while this one is measured."""
        t = time.perf_counter()
        early = server.launched
        try:
            if not early:
                server.start()
            server.wait_ready()
        finally:
            self.servers.append({"server_key": run.server_key, "engine": run.engine.name, "argv": server.recorded_argv,
                                 "launched_by_kvlab": not server.external, "url": run.engine.url,
                                 "env": None if server.external else server.adapter.env_overrides(run.engine),
                                 "experiments": [run.experiment],
                                 "log": server.log_path.name, "started_at": datetime.now(timezone.utc).isoformat(),
                                 "ready_s": server.ready_after_s if server.ready_after_s is not None
                                 else time.perf_counter() - t,
                                 "start_overlapped": early or (self._ahead is not None and not self._ahead.paused),
                                 "paused_s": server.paused_s})
        if self._ahead is not None:
            self._ahead.pause()

    def _launch_ahead(self, run: RunSpec, nxt: RunSpec | None, log_dir: Path) -> None:
        """Launch the next group's server now, so that its start overlaps this group's (two starts on 2 cores
        took 28 s against 57 s one after the other, vLLM beside sglang-jax); it is paused once this group's
        server is ready and resumed when this group is done. A failed launch is left to its group to retry."""
        if not (self.overlap_starts and nxt is not None and starts_may_overlap(run, nxt)):
            return
        ahead = EngineServer(nxt.engine, log_dir / f"server-{nxt.server_key}-attempt1.log")
        try:
            ahead.start()
        except OSError:
            return
        self._ahead = ahead

    def _warmup(self, server: EngineServer, run: RunSpec, vocab: int) -> None:
        prompts = fixed_batch.prompts(1, 16, 2, vocab, seed=987_654)
        asyncio.run(run_requests(server.base_url, _served_name(run), prompts,
                                 api_key=server.api_key, timeout_s=300))

    # ------------------------------------------------------------------ one run
    def _measure(self, server: EngineServer, run: RunSpec,
                 prompts: list[Prompt]) -> tuple[BatchResult, dict, list[str]]:
        notes = []
        if server.external:
            notes.append(f"server at {run.engine.url} not launched by kvlab: its settings are as the experiment "
                         "file states them, unchecked")
        extra_body = None
        if run.engine.prefix_caching and server.adapter.cache_salt:
            # vLLM: every request of this run carries one new salt, which its prefix cache hashes into every
            # block: requests of the run share their prefixes, and none hits a block an earlier run left (no
            # development endpoint needed; the old blocks are evicted as any unused ones)
            extra_body = {"cache_salt": secrets.token_hex(16)}
            notes.append(f"prefix cache isolated from earlier runs by a per-run cache_salt ({server.adapter.label}): "
                         "hits are this run's own")
        elif run.engine.prefix_caching:
            flushed = server.flush_cache()
            deadline = time.monotonic() + FLUSH_WAIT_S
            while flushed is False and server.adapter.flush_refused_while_busy and time.monotonic() < deadline:  # SGLang refuses while a request finishes
                time.sleep(0.25)
                flushed = server.flush_cache()
            if not flushed:
                notes.append("prefix cache not flushed before the run (engine refused or endpoint disabled); "
                             "cache hits may include earlier runs' prompts")
        has_metrics = server.adapter.metrics_path is not None
        why_before: list[str] = []
        before = _scrape(server, why_before) if has_metrics else {}
        w = run.workload
        batch = asyncio.run(run_requests(
            server.base_url, _served_name(run), prompts,
            concurrency=w.concurrency, api_key=server.api_key, stall_s=run.engine.stall_timeout_s,
            ignore_eos=w.ignore_eos, temperature=w.temperature, seed=w.seed, keep_text=w.splits_reasoning,
            extra_body=extra_body,
        ))
        if w.splits_reasoning:
            batch, how = _split_reasoning(batch, run)
            notes.append(how)
        miscounted = [r for r in batch.records if r.status == "ok" and r.count_flag]
        if miscounted:
            notes.append(f"{len(miscounted)} request(s) reported a completion_tokens that cannot be right (first: "
                         f"{miscounted[0].count_flag}): kept in requests.parquet with its count_flag, left out of "
                         "served_output_tokens and TPOT")
        if server.adapter.cached_tokens_omitted_when_zero and run.engine.report_cached_tokens:
            batch = _zero_missing_cached(batch)
        if not has_metrics:
            return batch, metrics.counter_deltas({}, {}, server.adapter.metric_names), notes + [
                f"{server.adapter.label} serves no /metrics: server-side counters not available"]
        served = sum(r.prompt_tokens or 0 for r in batch.records)
        deadline = time.monotonic() + COUNTER_SETTLE_S
        why_after: list[str] = []
        while True:  # the server's counters trail the last streamed chunk by a scheduler step
            after = _scrape(server, why_after) if server.running() else {}
            deltas = metrics.counter_deltas(before, after, server.adapter.metric_names)
            if not after or (deltas.get("prompt_tokens") or 0) >= served or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not before:
            notes.append("server metrics unavailable before the run: no counter deltas"
                         + (f" ({why_before[-1]})" if why_before else ""))
        elif not after:
            notes.append("server metrics unavailable after the run: no counter deltas"
                         + (f" ({why_after[-1]})" if why_after else ""))
        return batch, deltas, notes

    def _run_one(self, run: RunSpec, server: EngineServer | None, log_dir: Path, vocab: int,
                 result: SweepResult) -> tuple[EngineServer | None, Path, dict | None]:
        """Measure one run with its retries; (the server, kept for the next run; the run folder; the last
        attempt when every attempt failed to start a server, else None)."""
        spec = self.specs[run.experiment]
        retry = spec.retry
        prompts = prompts_for(run, vocab)
        attempts: list[dict] = []
        batch, deltas, notes, version, failure = None, {}, [], None, None
        logs: dict[str, EngineServer] = {}  # per attempt, the server whose log the run keeps
        start_failed: list[bool] = []  # per attempt: did the server fail to start (not the run on it)?
        for n in range(1, retry.max_attempts + 1):
            t = time.perf_counter()
            failure, at_start = None, False
            try:
                if server is None or not server.running():
                    if server is not None:
                        server.stop()
                    result.server_starts += 1
                    # the server launched early for this group serves its first start; later ones are new
                    server = self._handed or EngineServer(run.engine,
                                                          log_dir / f"server-{run.server_key}-attempt{n}.log")
                    self._handed = None
                    logs[f"server-attempt{n}.log"] = server
                    self._start(server, run)
                    if spec.warmup:
                        self._warmup(server, run, vocab)
                elif run.experiment not in self.servers[-1]["experiments"]:  # a server shared across experiments
                    self.servers[-1]["experiments"].append(run.experiment)
                logs[f"server-attempt{n}.log"] = server
                version = version or server.version()
                batch, deltas, notes = self._measure(server, run, prompts)
                if not batch.ok:
                    failure = _engine_failure(server) or _hung(batch, run)
                    if failure is None:
                        first = next(r for r in batch.records if r.status != "ok")
                        n_failed = sum(r.status != "ok" for r in batch.records)
                        failure = Failure("http_error", f"{n_failed} request(s) failed; first: {first.error}")
            except ServerError as exc:
                failure = exc.failure
                server, at_start = None, True
            start_failed.append(at_start)
            elapsed = time.perf_counter() - t
            result.attempts += 1
            result.experiments[run.experiment].attempts += 1
            retrying = failure is not None and failure.cause in retry.retry_on and n < retry.max_attempts
            attempts.append(attempt_row(run, n, failure, elapsed, retry.backoff(n) if retrying else None))
            if server is not None and failure is not None and failure.cause != "http_error":
                server.stop()  # a crashed or hung engine serves no further run: the next one starts a new server
                server = None
            if failure is None or not retrying:
                break
            self.sleep(retry.backoff(n))
        status = "ok" if failure is None else "failed"
        row = run_row(run, prompts, status, len(attempts), failure.cause if failure else
                       (attempts[-2]["failure_cause"] if len(attempts) > 1 else None),
                       version, batch, deltas, "; ".join(notes))
        requests = request_rows(batch.records, run.key) if batch else None
        try:
            recorded = {name: srv.recorded_log(log_dir / f"recorded-{name}") for name, srv in logs.items()}
            files = {name: path for name, path in recorded.items() if path}
            path = store.write_run(self.exp_dir(run.experiment), run.key, row, requests, pl.DataFrame(attempts),
                                   spec=run.model_dump(mode="json") | {"key": run.key, "server_key": run.server_key,
                                                                       "argv": self.servers[-1]["argv"] if self.servers else None},
                                   files=files)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            if server is not None:
                server.stop()
            raise self._disk_full(run, exc, result) from None
        result.tally(run, status)
        self.on_run(run, status)
        # a run killed mid-way also leaves server None: only start failures stop the group's relaunches
        never_started = server is None and all(start_failed) and all(
            a["status"] == "failed" and a["failure_cause"] in STARTUP_CAUSES for a in attempts)
        return server, path, attempts[-1] | {"source_run": path.name} if never_started else None

    def _disk_full(self, run: RunSpec | None, exc: BaseException, result: SweepResult | None,
                   what: str | None = None, experiment: str | None = None) -> DiskFullError:
        """The one error a sweep stops with when the disk fills up: it names the run (or ``what`` could not be
        written), the folder and its free space; the run is counted failed with cause ``disk_full``, not stored."""
        exp_dir = self.exp_dir(run.experiment if run is not None else experiment)
        where, free = _free_near(Path(exc.filename) if getattr(exc, "filename", None) else exp_dir)
        what = what or f"run {run.experiment}/{run.key}"
        if run is not None and result is not None:
            result.tally(run, "failed")
            self.on_run(run, "failed")
        done = len(store.finished_run_keys(exp_dir)) if exp_dir.is_dir() else 0
        msg = (f"disk full while storing {what}: {free / 2**20:.1f} MiB ({free:,} bytes) free on the disk of {where} "
               f"({getattr(exc, 'strerror', None) or exc}). Nothing of it was stored (no half-written folder); "
               f"the {done} finished run(s) in {exp_dir} are intact. Free some space and sweep again: it resumes "
               "from this run.")
        return DiskFullError(msg, Failure("disk_full", str(exc)[:500]), run, free)

    def _record_not_started(self, run: RunSpec, start: dict, result: SweepResult) -> Path:
        note = (f"not launched: the same server configuration failed to start in every attempt of run "
                f"{start['source_run']} ({start['failure_cause']})")
        return self.record_unsent(run, start["failure_cause"], [], note, result)

    def record_unsent(self, run: RunSpec, cause: str, attempts: list[dict], note: str, result: SweepResult) -> Path:
        """Store ``run`` failed with ``cause`` without having sent it (its server never started, or its node
        was lost in every attempt); ``attempts`` (ATTEMPTS rows, may be empty) are stored and counted."""
        prompts = prompts_for(run, vocab_size(run))  # not sent: the row still says what they share
        row = run_row(run, prompts, "failed", len(attempts), cause, None, None, {}, note)
        try:
            path = store.write_run(self.exp_dir(run.experiment), run.key, row, None,
                                   pl.DataFrame(attempts) if attempts else None,
                                   spec=run.model_dump(mode="json") | {"key": run.key, "server_key": run.server_key})
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            raise self._disk_full(run, exc, result) from None
        result.tally(run, "failed", len(attempts))
        result.run_dirs.append(path)
        self.on_run(run, "failed")
        return path

    # ------------------------------------------------------------------ the sweep
    def pending(self) -> tuple[list[RunSpec], int]:
        """The runs still to do (every experiment, in order) and how many finished runs are reused."""
        todo, skipped = [], 0
        for spec in self.specs.values():
            t, s = self.pending_in(spec)
            todo += t
            skipped += s
        return todo, skipped

    def pending_in(self, spec: ExperimentSpec) -> tuple[list[RunSpec], int]:
        """The runs of one experiment still to do, and how many of its finished runs are reused."""
        runs = expand(spec)
        done = set() if self.fresh else store.finished_run_keys(self.exp_dir(spec.name))
        todo = [r for r in runs if r.key not in done]
        skipped = len(runs) - len(todo)
        if self.only is not None:
            todo = [r for r in todo if (r.experiment, r.key) in self.only]
        return todo, skipped

    def prepare(self) -> dict[str, list[str]]:
        """Make each experiment's folder ready before anything launches: check it is writable with room to
        spare, lock it against a second sweep (SweepError naming the holder), remove what a killed sweep left
        half-written and set aside runs its file no longer defines (see store.set_aside_superseded).

        Returns the keys set aside, by experiment; safe to call again (execute calls it)."""
        for name in self.specs:
            _check_writable(self.exp_dir(name))
        try:
            ensure_state_dir()
        except StateDirError as exc:
            raise SweepError(str(exc)) from None
        for name in self.specs:
            if name not in self._locks:
                self._locks[name] = _lock(self.exp_dir(name))
        for name, spec in self.specs.items():
            store.clean_partial(self.exp_dir(name))
            defined = {r.key for r in expand(spec.full_form())}
            self._superseded.setdefault(name, []).extend(store.set_aside_superseded(self.exp_dir(name), defined)[0])
        return self._superseded

    def execute(self) -> SweepResult:
        """Run every pending run, grouped by server; the experiments stay locked until it returns."""
        try:
            return self._execute()
        finally:
            self.release()

    def _execute(self) -> SweepResult:
        t0 = time.perf_counter()
        started = datetime.now(timezone.utc).isoformat()
        superseded = self.prepare()
        reap_orphans()
        todo, skipped = [], 0
        per: dict[str, SweepResult] = {}
        for name, spec in self.specs.items():
            t, s = self.pending_in(spec)
            todo += t
            skipped += s
            per[name] = SweepResult(name, planned=len(t) + s, skipped=s, superseded=len(superseded[name]))
        result = SweepResult(", ".join(self.specs), planned=len(todo) + skipped, skipped=skipped, experiments=per,
                             superseded=sum(map(len, superseded.values())))
        for r in todo:  # every key is set before anything launches
            try:
                read_api_key(r.engine)
            except ValueError as exc:
                raise RuntimeError(f"engine {r.engine_label}: {exc}") from None
        with tempfile.TemporaryDirectory(prefix="kvlab-logs-") as tmp:
            log_dir = Path(tmp)
            try:
                groups = [g for _, g in by_server(todo)]
                for i, group in enumerate(groups):
                    vocab = vocab_size(group[0])
                    server, start_failure = None, None
                    self._handed, self._ahead = self._ahead, None
                    if self._handed is not None:
                        self._handed.resume()
                    self._launch_ahead(group[0], groups[i + 1][0] if i + 1 < len(groups) else None, log_dir)
                    try:
                        for run in group:
                            if start_failure is not None:
                                # Same argv, same failure: record it instead of relaunching max_attempts times.
                                self._record_not_started(run, start_failure, result)
                            else:
                                server, path, start_failure = self._run_one(run, server, log_dir, vocab, result)
                                result.run_dirs.append(path)
                    finally:
                        if server is not None:
                            server.stop()
                        if self._handed is not None:  # launched early, not reached (interrupted before its start)
                            self._handed.stop()
                            self._handed = None
            finally:
                stopping = sys.exc_info()[1]  # the exception the sweep stops with, if any
                if self._ahead is not None:
                    self._ahead.stop()
                    self._ahead = None
                result.wall_s = time.perf_counter() - t0
                for name, spec in self.specs.items():
                    result.experiments[name].server_starts = sum(name in srv["experiments"] for srv in self.servers)
                    try:
                        self.write_manifest(spec, started, result.experiments[name])
                    except Exception as exc:
                        if not is_disk_full(exc):
                            raise
                        if not isinstance(stopping, DiskFullError):  # else: one message, the run's; the manifest
                            raise self._disk_full(None, exc, None,  # keeps its last sweep (written atomically)
                                                  f"the manifest of {name}", name) from None
        return result

    def release(self) -> None:
        """Release the experiment locks (the kernel does it too when the process dies, however it dies)."""
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()

    def write_manifest(self, spec: ExperimentSpec, started: str, result: SweepResult, **extra) -> None:
        """Append this sweep to the experiment's manifest: host, counts, and the servers its runs used
        (a server shared with other experiments lists them all under ``experiments``); ``extra``: more
        fields of this sweep's entry (a cluster sweep's nodes)."""
        path = self.exp_dir(spec.name) / store.MANIFEST_FILE
        old = json.loads(path.read_text()) if path.exists() else {}
        sweeps = old.get("sweeps", [])
        servers = [s for s in self.servers if spec.name in s["experiments"]]
        sweeps.append({
            **host.provenance(), "started_at": started, "ended_at": datetime.now(timezone.utc).isoformat(),
            "planned": result.planned, "skipped": result.skipped, "ok": result.ok, "failed": result.failed,
            "server_starts": result.server_starts, "attempts": result.attempts, "servers": servers,
            "swept_with": [n for n in self.specs if n != spec.name], **extra,
        })
        store.write_json_atomic(path, redact_secrets({  # env values whose names look like secrets: '***'
            "experiment": spec.name, "description": spec.description,
            "assumptions": spec.assumptions, "spec": spec.model_dump(mode="json"), "sweeps": sweeps,
        }))


def _check_writable(exp_dir: Path) -> None:
    """SweepError naming the folder when runs cannot be written there, or the disk has too little room."""
    try:
        exp_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=exp_dir, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise SweepError(f"{exp_dir}: cannot write runs there ({exc.strerror or exc}); "
                         "nothing was launched") from None
    free = shutil.disk_usage(exp_dir).free
    if free < MIN_FREE_BYTES:
        raise SweepError(f"{exp_dir}: only {free / 2**20:.0f} MiB free on its disk, a sweep needs at least "
                         f"{MIN_FREE_BYTES / 2**20:.0f} MiB; nothing was launched")


def _lock(exp_dir: Path) -> int:
    """Hold the experiment's lock for this process, or SweepError naming the sweep that holds it."""
    path = exp_dir / LOCK_FILE
    try:  # never through a link: a sweep.lock symlink would have its target truncated and written
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise SweepError(f"{path}: cannot open the sweep lock ({exc.strerror or exc}"
                         + ("; it is a symbolic link: remove it" if path.is_symlink() else "")
                         + "). Nothing was launched.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
        except ValueError:
            holder = {}
        os.close(fd)
        who = (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started_at')}: "
               f"{holder.get('command')}") if holder else "another process"
        raise SweepError(f"{exp_dir.name}: another sweep is running it ({who}); wait for it or stop it. "
                         "Nothing was launched.") from None
    me = {"pid": os.getpid(), "host": os.uname().nodename, "started_at": datetime.now(timezone.utc).isoformat(),
          "command": " ".join(sys.argv)}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)
    return fd


def sweep(specs: ExperimentSpec | list[ExperimentSpec], data_dir: Path = DATA_DIR, fresh: bool = False,
          on_run: Callable[[RunSpec, str], None] | None = None) -> SweepResult:
    """Run every unfinished run of the experiment(s) (all of them with ``fresh``) and store the results."""
    return Sweep(specs, data_dir, fresh, on_run).execute()
