"""One campaign: the experiments of one sweep, their folders' locks, the runs still to do, the store the runs go
into and the manifest each experiment gets. An executor runs the pending runs.

Two executors consume a campaign through one interface (:class:`Executor`): ``kvlab.runner.LocalExecutor`` starts
each server group on this host, one after the other; ``kvlab.cluster.RayExecutor`` sends each group to a node of a
Ray cluster. Whichever ran them, :meth:`Campaign.execute` prepares the folders before anything launches, reuses
finished runs (keyed by the hash of the full run spec), stores each run as one atomic folder under
``data_dir/runs/<experiment>/<run key>/`` and appends one entry to each experiment's manifest listing the
servers its runs used (:class:`ServerRecord`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

import polars as pl

from kvlab import host, search, store
from kvlab.engines.base import Failure
from kvlab.engines.spec import redact_secrets
from kvlab.paths import DATA_DIR, UnsafeFolderError, check_inside, temp_prefix
from kvlab.rows import prompts_for, run_row, vocab_size
from kvlab.units import count
from kvlab.server import StateDirError, ensure_state_dir
from kvlab.experiment import ExperimentSpec, RunSpec, expand

#: A sweep refuses to start with less free space than this where its runs go (a run folder with its logs
#: is a few MB; a full disk mid-run would lose the run in flight).
MIN_FREE_BYTES = 256 * 2**20
#: The lock file in each experiment's folder.
LOCK_FILE = "sweep.lock"


class SweepError(RuntimeError):
    """A sweep cannot start: its data folder is not writable or full, or another sweep holds an experiment."""


class UnsafeDataFolder(SweepError):
    """An experiment's folder, or a folder above it inside the data folder, is a symbolic link, not a folder, or
    owned by another user (kvlab.paths.check_inside): refused before anything is written or removed (exit 2)."""


class DiskFullError(SweepError):
    """The disk filled up while a run was being stored: the sweep stops. ``failure`` (cause ``disk_full``) says
    what failed to be written; the run is not stored, so the next sweep measures it again."""

    def __init__(self, message: str, failure: Failure, run: RunSpec | None, free_bytes: int):
        super().__init__(message)
        self.failure, self.run, self.free_bytes = failure, run, free_bytes

    def __reduce__(self):  # picklable with its fields (a Ray task's error travels to the driver pickled)
        return (type(self), (str(self), self.failure, self.run, self.free_bytes))


#: How polars and pyarrow word ENOSPC or EDQUOT where they raise no OSError carrying the errno: polars' ComputeError
#: "... (os error 28)" (from Rust's io::Error), pyarrow's "[errno 28] No space left on device", the C library's
#: strerror texts, and polars' parquet writer when the footer's write fails ("Invalid thrift: transport error": its
#: thrift serialiser reports the failed write without the errno).
DISK_FULL_TEXTS = (
    *(f"(os error {n})" for n in (errno.ENOSPC, errno.EDQUOT)),
    *(f"[errno {n}]" for n in (errno.ENOSPC, errno.EDQUOT)),
    os.strerror(errno.ENOSPC).lower(),
    os.strerror(errno.EDQUOT).lower(),
    "invalid thrift: transport error",
)


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC or EDQUOT, as an OSError or in the words polars and pyarrow report it (:data:`DISK_FULL_TEXTS`), on
    ``exc`` or on the exception it was raised from."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                return True
        elif any(t in str(exc).lower() for t in DISK_FULL_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def free_near(path: Path) -> tuple[Path, int]:
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
    #: run folders it could not reuse (unreadable: measured again; a copy of another folder's run), moved to
    #: quarantined/ with their reasons (store.set_aside_unusable)
    quarantined: list[store.SetAside] = field(default_factory=list)
    not_climbed: int = 0  # rungs of a load ladder left out: a lower rung was past saturation (kvlab.load)
    experiments: dict[str, SweepResult] = field(default_factory=dict)

    def tally(self, run: RunSpec, status: str, attempts: int = 0) -> None:
        """Count a stored run (and ``attempts`` more attempts) in these totals and in its experiment's."""
        for r in (self, self.experiments[run.experiment]):
            r.attempts += attempts
            if status == "ok":
                r.ok += 1
            else:
                r.failed += 1


@dataclass
class ServerRecord:
    """One server start, as the manifest lists it under ``servers`` (a start that failed is listed too)."""

    server_key: str
    engine: str
    argv: list[str] | None  # as recorded: the API key redacted; None for a server kvlab did not launch
    launched_by_kvlab: bool
    url: str | None
    env: dict[str, str] | None  # the engine's environment overrides; None for a server kvlab did not launch
    experiments: list[str]  # the experiments whose runs it served (several when they share its configuration)
    log: str  # the log's file name
    started_at: str
    ready_s: float  # launch to ready, time paused left out
    start_overlapped: bool  # launched beside another server's start (see plan.starts_may_overlap)
    paused_s: float
    node: str | None = None  # the Ray node that started it (a cluster campaign's)
    #: its KV pool in tokens as the engine reported it in this start's log (EngineAdapter.kv_pool_tokens); None where
    #: it reported none (a start that failed first, a server kvlab did not launch)
    kv_pool_tokens: int | None = None
    #: the accuracy probe sent after this start's warm-up (kvlab.probe.record), where an experiment it served asks
    #: for one (``probe: true``); None: not probed
    probe: dict | None = None

    def as_dict(self) -> dict:
        """The manifest's entry (``node`` only where a Ray node started it, ``probe`` only where it was probed)."""
        d = asdict(self)
        for optional in ("node", "probe"):
            if d[optional] is None:
                del d[optional]
        return d


class Executor(Protocol):
    """What runs a campaign's pending runs (:meth:`Campaign.execute` calls it): ``preflight`` may refuse before
    anything launches (no manifest entry is written then), ``run`` stores each run through the campaign
    (:meth:`Campaign.write_run`, :meth:`Campaign.stored`, :meth:`Campaign.record_unsent`) and counts its starts
    and attempts in ``result``; whatever it raised, the manifest then lists ``servers`` and
    ``manifest_extra``'s fields."""

    servers: list[ServerRecord]

    def preflight(self, campaign: Campaign, todo: list[RunSpec]) -> None: ...

    def run(self, campaign: Campaign, todo: list[RunSpec], result: SweepResult) -> None: ...

    def manifest_extra(self, experiment: str) -> dict: ...


class Campaign:
    """One execution of one or more experiments, each into ``data_dir/runs/<name>/``.

    Its runs are grouped by server configuration across all the experiments given (kvlab.plan.by_server), so
    studies that need the same server (same argv and environment) share one start; each run keeps its own
    experiment's retry policy and folder, and each experiment's manifest lists the servers its runs used.
    ``only``: the (experiment, run key) pairs this campaign may run (a cluster node's share); None: all.
    ``on_run(run, status)`` is called as each run is stored.
    """

    def __init__(
        self,
        specs: ExperimentSpec | list[ExperimentSpec],
        data_dir: Path = DATA_DIR,
        fresh: bool = False,
        on_run: Callable[[RunSpec, str], None] | None = None,
        only: set[tuple[str, str]] | None = None,
    ):
        specs = [specs] if isinstance(specs, ExperimentSpec) else list(specs)
        names = [s.name for s in specs]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(
                f"{'an experiment name' if len(dupes) == 1 else 'experiment names'} given twice in one sweep: "
                f"{', '.join(dupes)} (their runs would share one folder)"
            )
        self.specs = {s.name: s for s in specs}
        self.data_dir = Path(data_dir)
        self.fresh = fresh
        self.on_run = on_run or (lambda run, status: None)
        self.only = only
        self._superseded: dict[str, list[str]] = {}
        #: run folders prepare set aside because they could not be reused, by experiment (store.set_aside_unusable)
        self.quarantined: dict[str, list[store.SetAside]] = {}
        self._locks: dict[str, int] = {}  # experiment -> fd holding its flock while this campaign runs

    def exp_dir(self, experiment: str) -> Path:
        """Where an experiment's runs and manifest live."""
        return self.data_dir / "runs" / experiment

    # ------------------------------------------------------------------ before anything launches
    def prepare(self) -> dict[str, list[str]]:
        """Make each experiment's folder ready before anything launches: check it is writable with room to
        spare, lock it against a second sweep (SweepError naming the holder), remove what a killed sweep left
        half-written, set aside the run folders it cannot reuse (unreadable ones, which it then measures again, and
        copies of another folder's run: store.set_aside_unusable, kept in :attr:`quarantined`) and runs its file no
        longer defines (see store.set_aside_superseded).

        Returns the keys set aside as superseded, by experiment; safe to call again (execute calls it)."""
        for name in self.specs:  # before anything is written or removed: no link, no other user's folder
            try:
                check_inside(self.exp_dir(name), self.data_dir)
            except UnsafeFolderError as exc:
                raise UnsafeDataFolder(str(exc)) from None
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
            defined = {r.key for r in expand(spec.full_form())}
            defined |= search.probe_keys(self.exp_dir(name), defined)  # load.search's probes: runs of their own
            store.clean_partial(self.exp_dir(name), defined)
            self.quarantined.setdefault(name, []).extend(store.set_aside_unusable(self.exp_dir(name)))
            self._superseded.setdefault(name, []).extend(store.set_aside_superseded(self.exp_dir(name), defined)[0])
        return self._superseded

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

    def release(self) -> None:
        """Release the experiment locks (the kernel does it too when the process dies, however it dies)."""
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()

    # ------------------------------------------------------------------ the campaign
    def execute(self, executor: Executor) -> SweepResult:
        """Prepare the folders, have ``executor`` run every pending run and append each experiment's manifest
        entry; the experiments stay locked until it returns."""
        try:
            return self._execute(executor)
        finally:
            self.release()

    def _execute(self, executor: Executor) -> SweepResult:
        t0 = time.perf_counter()
        started = datetime.now(timezone.utc).isoformat()
        superseded = self.prepare()
        todo, skipped = [], 0
        per: dict[str, SweepResult] = {}
        for name, spec in self.specs.items():
            t, s = self.pending_in(spec)
            todo += t
            skipped += s
            per[name] = SweepResult(
                name,
                planned=len(t) + s,
                skipped=s,
                superseded=len(superseded[name]),
                quarantined=list(self.quarantined.get(name, [])),
            )
        result = SweepResult(
            ", ".join(self.specs),
            planned=len(todo) + skipped,
            skipped=skipped,
            experiments=per,
            superseded=sum(map(len, superseded.values())),
            quarantined=[q for name in self.specs for q in self.quarantined.get(name, [])],
        )
        executor.preflight(self, todo)
        try:
            executor.run(self, todo, result)
        finally:
            stopping = sys.exc_info()[1]  # the exception the campaign stops with, if any
            result.wall_s = time.perf_counter() - t0
            servers = executor.servers
            for name, spec in self.specs.items():
                result.experiments[name].server_starts = sum(name in s.experiments for s in servers)
                try:
                    self.write_manifest(
                        spec, started, result.experiments[name], servers, **executor.manifest_extra(name)
                    )
                except Exception as exc:
                    if not is_disk_full(exc):
                        raise
                    if not isinstance(stopping, DiskFullError):  # else: one message, the run's; the manifest
                        raise self.disk_full(
                            None,
                            exc,
                            None,  # keeps its last sweep (written atomically)
                            f"the manifest of {name}",
                            name,
                        ) from None
        return result

    # ------------------------------------------------------------------ the store
    def write_run(
        self,
        run: RunSpec,
        row: pl.DataFrame,
        requests: pl.DataFrame | None = None,
        attempts: pl.DataFrame | None = None,
        files: dict[str, Path] | None = None,
        **spec_extra,
    ) -> Path:
        """Store one run as its folder (one atomic rename; see store.write_run): its RUNS row, requests and
        attempts, its spec with its keys (and ``spec_extra``) and ``files`` (e.g. server logs)."""
        return store.write_run(
            self.exp_dir(run.experiment),
            run.key,
            row,
            requests,
            attempts,
            spec=run.model_dump(mode="json") | {"key": run.key, "server_key": run.server_key, **spec_extra},
            files=files,
        )

    def disk_full(
        self,
        run: RunSpec | None,
        exc: BaseException,
        result: SweepResult | None,
        what: str | None = None,
        experiment: str | None = None,
    ) -> DiskFullError:
        """The one error a campaign stops with when the disk fills up: it names the run (or ``what`` could not be
        written), the folder and its free space; the run is counted failed with cause ``disk_full`` (and
        ``on_run`` told), not stored."""
        exp_dir = self.exp_dir(run.experiment if run is not None else experiment)
        where, free = free_near(Path(exc.filename) if getattr(exc, "filename", None) else exp_dir)
        what = what or f"run {run.experiment}/{run.key}"
        if run is not None and result is not None:
            result.tally(run, "failed")
            self.on_run(run, "failed")
        done = len(store.finished_run_keys(exp_dir)) if exp_dir.is_dir() else 0
        msg = (
            f"disk full while storing {what}: {free / 2**20:.1f} MiB ({free:,} bytes) free on the disk of {where} "
            f"({getattr(exc, 'strerror', None) or exc}). Nothing of it was stored (no half-written folder); "
            f"{count(done, 'finished run')} in {exp_dir} {'is' if done == 1 else 'are'} intact. Free some space and sweep again: it resumes "
            "from this run."
        )
        return DiskFullError(msg, Failure("disk_full", str(exc)[:500]), run, free)

    def stored(self, run: RunSpec, path: Path, status: str, result: SweepResult, attempts: int = 0) -> None:
        """A run's folder is in place: count it (and ``attempts`` more attempts) and tell ``on_run``."""
        result.tally(run, status, attempts)
        result.run_dirs.append(path)
        self.on_run(run, status)

    def leave_unclimbed(self, run: RunSpec, why: str, result: SweepResult) -> None:
        """Leave a rung of a load ladder unsent and unstored (kvlab.load.not_climbed says ``why``): counted, and
        ``on_run`` told "not climbed"; a later sweep decides it again from the stored rungs below it."""
        for r in (result, result.experiments[run.experiment]):
            r.not_climbed += 1
        self.on_run(run, "not climbed")

    def record_unsent(self, run: RunSpec, cause: str, attempts: list[dict], note: str, result: SweepResult) -> Path:
        """Store ``run`` failed with ``cause`` without having sent it (its server never started, or its node
        was lost in every attempt); ``attempts`` (ATTEMPTS rows, may be empty) are stored and counted."""
        prompts = prompts_for(run, vocab_size(run))  # not sent: the row still says what they share
        row = run_row(run, prompts, "failed", len(attempts), cause, None, None, {}, note)
        try:
            path = self.write_run(run, row, None, pl.DataFrame(attempts) if attempts else None)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            raise self.disk_full(run, exc, result) from None
        self.stored(run, path, "failed", result, len(attempts))
        return path

    def write_manifest(
        self, spec: ExperimentSpec, started: str, result: SweepResult, servers: list[ServerRecord], **extra
    ) -> None:
        """Append this campaign to the experiment's manifest: host, counts, and the servers its runs used
        (a server shared with other experiments lists them all under ``experiments``); ``extra``: more
        fields of this campaign's entry (a cluster campaign's nodes)."""
        path = self.exp_dir(spec.name) / store.MANIFEST_FILE
        old = json.loads(path.read_text()) if path.exists() else {}
        sweeps = old.get("sweeps", [])
        sweeps.append(
            {
                **host.provenance(),
                "started_at": started,
                "ended_at": datetime.now(timezone.utc).isoformat(),
                "planned": result.planned,
                "skipped": result.skipped,
                "ok": result.ok,
                "failed": result.failed,
                **({"not_climbed": result.not_climbed} if result.not_climbed else {}),
                **(
                    {
                        "quarantined": [
                            {
                                "folder": q.path.name,
                                "reason": q.reason,
                                "kept": q.kept.name if q.kept else None,
                                "moved_to": f"{store.QUARANTINE_DIR}/{q.moved_to.name}",
                            }
                            for q in result.quarantined
                        ]
                    }
                    if result.quarantined
                    else {}
                ),
                "server_starts": result.server_starts,
                "attempts": result.attempts,
                "servers": [s.as_dict() for s in servers if spec.name in s.experiments],
                "swept_with": [n for n in self.specs if n != spec.name],
                **extra,
            }
        )
        order = {"configurations": probe_order(spec)} if spec.probe else {}
        store.write_json_atomic(
            path,
            redact_secrets(
                {  # env values whose names look like secrets: '***'
                    "experiment": spec.name,
                    "description": spec.description,
                    "assumptions": spec.assumptions,
                    "spec": spec.model_dump(mode="json"),
                    "sweeps": sweeps,
                    **order,
                }
            ),
        )


def probe_order(spec: ExperimentSpec) -> list[str]:
    """The server configurations of a probed experiment (their server keys) in the order its file gives them (the
    full form's runs, first appearance): the accuracy probe's reference per engine and model is the first of them
    that was probed (kvlab.probe.probe_summary). The manifest keeps it as ``configurations``."""
    seen: dict[str, None] = {}
    for r in expand(spec.full_form()):
        seen.setdefault(r.server_key, None)
    return list(seen)


def _check_writable(exp_dir: Path) -> None:
    """SweepError naming the folder when runs cannot be written there, or the disk has too little room."""
    try:
        exp_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=exp_dir, prefix=temp_prefix("write-check")):
            pass
    except OSError as exc:
        raise SweepError(f"{exp_dir}: cannot write runs there ({exc.strerror or exc}); nothing was launched") from None
    free = shutil.disk_usage(exp_dir).free
    if free < MIN_FREE_BYTES:
        raise SweepError(
            f"{exp_dir}: only {free / 2**20:.0f} MiB free on its disk, a sweep needs at least "
            f"{MIN_FREE_BYTES / 2**20:.0f} MiB; nothing was launched"
        )


def _lock(exp_dir: Path) -> int:
    """Hold the experiment's lock for this process, or SweepError naming the sweep that holds it."""
    path = exp_dir / LOCK_FILE
    try:  # never through a link: a sweep.lock symlink would have its target truncated and written
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise SweepError(
            f"{path}: cannot open the sweep lock ({exc.strerror or exc}"
            + ("; it is a symbolic link: remove it" if path.is_symlink() else "")
            + "). Nothing was launched."
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
        except ValueError:
            holder = {}
        os.close(fd)
        who = (
            (
                f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started_at')}: "
                f"{holder.get('command')}"
            )
            if holder
            else "another process"
        )
        raise SweepError(
            f"{exp_dir.name}: another sweep is running it ({who}); wait for it or stop it. Nothing was launched."
        ) from None
    me = {
        "pid": os.getpid(),
        "host": os.uname().nodename,
        "started_at": datetime.now(timezone.utc).isoformat(),
        "command": " ".join(sys.argv),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)
    return fd
