"""Results on disk: validated polars loaders for everything under ``data/`` and atomic writers.

Layout (all paths from :mod:`kvlab.paths`):

- ``data/reference/<name>.csv`` — published figures, ``runs`` schema;
  ``data/reference/<name>_claims.csv`` — a document's stated ratios, ``claims`` schema;
  ``data/reference/documents.csv`` — the register of the documents (title, publisher, date), ``documents`` schema.
- ``data/runs/<experiment>/<run_key>/`` — one measured run: ``run.parquet`` (one ``runs``
  row), ``requests.parquet``, ``attempts.parquet``, ``spec.json``, ``server.log``, ``telemetry.json`` and, where
  the engine serves /metrics or kvlab read its scheduler's log lines, ``telemetry.csv`` (kvlab.runner.write_telemetry).
  A run folder appears by one atomic rename, so a killed sweep leaves no partial run.
- ``data/runs/<experiment>/manifest.json`` — provenance of the experiment's sweeps (and, with ``probe: true``, each
  server start's accuracy probe: :func:`load_probes`).
- ``data/runs/<experiment>/superseded/<run_key>/`` — finished runs the experiment file no longer
  defines (an earlier version of it), set aside by the next sweep so no report mixes them in.
- ``data/runs/<experiment>/quarantined/<folder>/`` and ``<folder>.reason.txt`` beside it — run folders a sweep
  found it could not reuse (unreadable, or a copy of another folder's run), set aside with the reason
  (:func:`set_aside_unusable`); the sweep measures such a run again.
- ``data/modelled/*.parquet`` — optional model predictions (``runs`` schema).

Reading is bounded: a stored file is opened only when it is a regular file (a FIFO would block, a link to
``/dev/zero`` never ends) and no larger than its cap (:data:`MAX_TABLE_BYTES`, :data:`MAX_JSON_BYTES`). A run folder
or manifest that cannot be read is quarantined (:func:`quarantined`): the loaders skip it, the report index lists it
with its reason, and every report builds from the rest. So is a run folder that holds the same run as another one
(a copy: ``cp -a <run> backup-copy``): one of them is read (:func:`duplicate_runs` says which and why), the other is
listed with both paths.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kvlab import host
from kvlab.engines.spec import redact_secrets
from kvlab.paths import (
    DATA_DIR,
    check_inside,
    publish_dir,
    remove_entry,
    remove_temp_entries,
    temp_prefix,
    write_text_atomic,
)
from kvlab.schema import ATTEMPTS, CLAIMS, DOCUMENTS, REQUESTS, RUNS, SchemaError, Table, percentiles_ms, run_rates

RUN_FILE = "run.parquet"
REQUESTS_FILE = "requests.parquet"
ATTEMPTS_FILE = "attempts.parquet"
SPEC_FILE = "spec.json"
MANIFEST_FILE = "manifest.json"
SUPERSEDED_DIR = "superseded"
#: Where a sweep sets aside the run folders it cannot reuse (:func:`set_aside_unusable`), each with its reason beside it.
QUARANTINE_DIR = "quarantined"
REASON_SUFFIX = ".reason.txt"


#: The largest table file (CSV or parquet) kvlab reads: 1 GiB, far above any run's (a run of 10,000 requests stores a
#: requests.parquet of a few MiB); a larger one is refused unread.
MAX_TABLE_BYTES = 1 << 30
#: The largest JSON file kvlab reads (a manifest, spec.json, telemetry.json): 64 MiB; a manifest of 1,000 sweeps with
#: their probes is a few MiB.
MAX_JSON_BYTES = 64 << 20


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def read_bytes_capped(path: str | Path, cap: int | None = None) -> bytes:
    """A stored file's bytes, read only when it is a regular file (links followed: a link to ``/dev/zero`` is a
    character device) of at most ``cap`` bytes; else a :class:`SchemaError` naming the file and why. Never blocks:
    the file is opened non-blocking (a FIFO swapped in after the check does not wait for a writer) and checked again
    on the open descriptor, and at most ``cap`` + 1 bytes are read. ``cap``: :data:`MAX_TABLE_BYTES` if not given."""
    path, cap = Path(path), MAX_TABLE_BYTES if cap is None else cap
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SchemaError(f"{path}: {_file_kind(st.st_mode)}, not a regular file: not read")
        if st.st_size > cap:
            raise SchemaError(f"{path}: {st.st_size:,} bytes, over the {cap:,}-byte cap for this file: not read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise SchemaError(f"{path}: over the {cap:,}-byte cap for this file (it grew while read): not read")
    return data


def read_json_capped(path: str | Path, cap: int | None = None) -> dict:
    """A stored JSON object (:func:`read_bytes_capped`: a regular file, at most ``cap`` bytes, :data:`MAX_JSON_BYTES`
    if not given); a :class:`SchemaError` naming the file where it is not one."""
    data = read_bytes_capped(path, MAX_JSON_BYTES if cap is None else cap)
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise SchemaError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise SchemaError(f"{path}: a JSON {type(obj).__name__}, not an object")
    return obj


def read_table(path: str | Path, table: Table) -> pl.DataFrame:
    """Read one CSV or parquet file and conform it to ``table``; errors name the file. The file is read through
    :func:`read_bytes_capped` (a regular file of at most :data:`MAX_TABLE_BYTES`)."""
    path = Path(path)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{path}: no such file (expected a '{table.name}' table)")
    if path.suffix not in (".csv", ".parquet"):
        raise SchemaError(f"{path}: unsupported file type '{path.suffix}' (use .csv or .parquet)")
    try:
        data = read_bytes_capped(path)
    except FileNotFoundError:  # a dangling link
        raise FileNotFoundError(f"{path}: no such file (expected a '{table.name}' table)") from None
    try:
        if path.suffix == ".csv":
            # Read every column as text first: the schema, not the CSV sniffer, decides types.
            df = pl.read_csv(io.BytesIO(data), infer_schema=False)
        else:
            df = pl.read_parquet(io.BytesIO(data))
    except Exception as exc:
        raise SchemaError(f"{path}: cannot be parsed as {path.suffix[1:]}: {exc}") from None
    if df.width == 0:
        raise SchemaError(f"{path}: file is empty")
    return table.conform(df, origin=path)


def _concat(frames: Iterable[pl.DataFrame], table: Table) -> pl.DataFrame:
    frames = list(frames)
    return pl.concat(frames, how="vertical") if frames else table.empty()


#: The register of source documents under ``reference/`` (:data:`kvlab.schema.DOCUMENTS`): not a table of figures.
DOCUMENTS_FILE = "documents.csv"


def _reference_files(data_dir: Path, claims: bool) -> list[Path]:
    files = sorted(f for f in (data_dir / "reference").glob("*.csv") if f.name != DOCUMENTS_FILE)
    return [f for f in files if f.stem.endswith("_claims") == claims]


def run_dirs(data_dir: str | Path = DATA_DIR, experiment: str | None = None) -> list[Path]:
    """Finished measured-run folders (those holding ``run.parquet``) that can be read: a quarantined one
    (:func:`check_run_dir`) is left out, and so is a copy of another folder's run (:func:`duplicate_runs`);
    :func:`quarantined` lists both."""
    root = Path(data_dir) / "runs"
    readable = [d for d in _candidate_run_dirs(root, None) if check_run_dir(d) is None]
    copies = {q.path for q in duplicate_runs(readable)}
    return [d for d in readable if d not in copies and (experiment is None or d.parent.name == experiment)]


def _candidate_run_dirs(root: Path, experiment: str | None) -> list[Path]:
    pattern = f"{experiment or '*'}/*/{RUN_FILE}"
    return sorted(p.parent for p in root.glob(pattern) if not _in_staging(p, root))


@dataclass(frozen=True)
class Quarantined:
    """A run folder or manifest kvlab does not read, and why (the first unreadable file, named); for a run folder
    that holds the same run as another (:func:`duplicate_runs`), ``kept`` is the folder read instead."""

    path: Path
    reason: str
    kept: Path | None = None


#: A run folder's JSON files, read as JSON objects by the loaders.
_RUN_JSON = ("spec.json", "telemetry.json")
#: What :func:`check_run_dir` found, by folder: the folder's file signature (names, sizes, times, kinds), the
#: reason (None: readable) and the (source, experiment, run_id) of each row of its run.parquet. A folder is read
#: through once per process while its files stay the same.
_CHECKED: dict[Path, tuple[tuple, str | None, tuple[tuple, ...]]] = {}


def _signature(d: Path) -> tuple:
    sig = []
    for name in (RUN_FILE, REQUESTS_FILE, ATTEMPTS_FILE, *_RUN_JSON, "telemetry.csv"):
        try:
            st = os.lstat(d / name)
        except FileNotFoundError:
            continue
        sig.append((name, st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sig)


def check_run_dir(d: str | Path) -> str | None:
    """Why a run folder cannot be read, or None where it can: each of its stored files (run, requests and attempts
    parquet, spec.json, telemetry.json and .csv) must be a regular file under its cap (:func:`read_bytes_capped`,
    never opened otherwise, so a FIFO does not block) that parses as its kind and conforms to its table."""
    return _check(Path(d))[0]


def _check(d: Path) -> tuple[str | None, tuple[tuple, ...]]:
    """:func:`check_run_dir`'s reason and the keys (source, experiment, run_id) of the folder's run rows."""
    sig = _signature(d)
    if d in _CHECKED and _CHECKED[d][0] == sig:
        return _CHECKED[d][1:]
    reason, keys = None, ()
    try:
        for name, _, *_ in sig:
            f = d / name
            if name in (RUN_FILE, REQUESTS_FILE, ATTEMPTS_FILE):
                df = read_table(f, {RUN_FILE: RUNS, REQUESTS_FILE: REQUESTS, ATTEMPTS_FILE: ATTEMPTS}[name])
                if name == RUN_FILE:
                    keys = tuple(df.select(*RUN_KEY).iter_rows())
            elif name in _RUN_JSON:
                read_json_capped(f)
            else:
                data = read_bytes_capped(f)
                try:
                    pl.read_csv(io.BytesIO(data), infer_schema=False)
                except Exception as exc:
                    raise SchemaError(f"{f}: cannot be parsed as csv: {exc}") from None
    except (SchemaError, OSError) as exc:
        reason, keys = " ".join(str(exc).split())[:500], ()
    _CHECKED[d] = (sig, reason, keys)
    return reason, keys


#: What names one run among all: RUNS rows are unique by these (:func:`load_runs`).
RUN_KEY = ("source", "experiment", "run_id")


def _kept_first(d: Path, keys: tuple[tuple, ...]) -> tuple:
    """The order in which run folders holding the same run are preferred: the one whose folder name is its run id,
    then the one inside its experiment's folder, then the first by path."""
    own_name = any(d.name == run_id for _, _, run_id in keys)
    own_experiment = any(d.parent.name == experiment for _, experiment, _ in keys)
    return (not own_name, not own_experiment, str(d))


def _why_kept(kept: Path, copy: Path, keys: tuple[tuple, ...]) -> str:
    a, b = _kept_first(kept, keys), _kept_first(copy, keys)
    if a[0] != b[0]:
        return "its folder name is its run id"
    if a[1] != b[1]:
        return "it lies in its experiment's folder"
    return "it comes first by path"


def duplicate_runs(run_folders: Iterable[str | Path]) -> list[Quarantined]:
    """The readable run folders among ``run_folders`` that hold a run (source, experiment, run_id) another folder
    holds too (a copy: ``cp -a <run> backup-copy``), each with the folder read in its place (``kept``) and why: one
    folder of each run is read, the one whose folder name is its run id (else the one inside its experiment's
    folder, else the first by path), and each other is left out and named. By path; unreadable folders are no one's
    copy (:func:`check_run_dir`)."""
    readable = []
    for d in map(Path, run_folders):
        reason, keys = _check(d)
        if reason is None:
            readable.append((d, keys))
    claimed: dict[tuple, Path] = {}
    found = []
    for d, keys in sorted(readable, key=lambda dk: _kept_first(*dk)):
        clash = next((k for k in keys if k in claimed), None)
        if clash is None:
            claimed.update(dict.fromkeys(keys, d))
            continue
        kept = claimed[clash]
        source, experiment, run_id = clash
        found.append(
            Quarantined(
                d,
                f"holds run {run_id} of {experiment} ({source}), as {kept} does: {kept} is kept "
                f"({_why_kept(kept, d, keys)}), this copy is not read",
                kept,
            )
        )
    return sorted(found, key=lambda q: str(q.path))


def read_manifest(exp_dir: str | Path) -> dict:
    """An experiment's manifest (``manifest.json``) as a dict: empty where it has none or where it cannot be read
    (not a regular file, over :data:`MAX_JSON_BYTES`, not a JSON object: :func:`quarantined` lists it)."""
    path = Path(exp_dir) / MANIFEST_FILE
    if not os.path.lexists(path):
        return {}
    try:
        return read_json_capped(path)
    except (SchemaError, OSError):
        return {}


def quarantined(data_dir: str | Path = DATA_DIR) -> list[Quarantined]:
    """Every run folder and manifest under ``data_dir/runs`` that the loaders skip, with its reason, by path: the
    unreadable ones and the copies of another folder's run (:func:`duplicate_runs`, each naming the folder kept)."""
    root = Path(data_dir) / "runs"
    candidates = _candidate_run_dirs(root, None)
    found = [Quarantined(d, r) for d in candidates if (r := check_run_dir(d)) is not None]
    found += duplicate_runs(candidates)
    for m in sorted(root.glob(f"*/{MANIFEST_FILE}")):
        if _in_staging(m, root):
            continue
        try:
            read_json_capped(m)
        except (SchemaError, OSError) as exc:
            found.append(Quarantined(m, " ".join(str(exc).split())[:500]))
    return sorted(found, key=lambda q: str(q.path))


def _in_staging(path: Path, root: Path) -> bool:
    """True for a file under a dot folder: a run still being written (``write_run``'s temporary folder).

    ``Path.glob("*")`` matches dot names, unlike a shell, so every reader of finished runs asks this.
    """
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def load_runs(data_dir: str | Path = DATA_DIR, experiment: str | None = None) -> pl.DataFrame:
    """Every run row under ``data_dir``: published, measured and modelled, validated and merged.

    Rows are unique by (source, experiment, run_id); a duplicate is an error naming both files.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"{data_dir}: data folder does not exist")
    files = _reference_files(data_dir, claims=False)
    files += [d / RUN_FILE for d in run_dirs(data_dir)]
    files += sorted((data_dir / "modelled").glob("*.parquet"))
    frames, seen, manifests = [], {}, {}
    for f in files:
        df = read_table(f, RUNS)
        if f.name == RUN_FILE:
            df = _recorded_percentiles(f, _recorded_facts(f, df, manifests))
        df = df.with_columns(pl.lit(str(f)).alias("_file"))
        for key in df.select("source", "experiment", "run_id").iter_rows():
            if key in seen:
                raise SchemaError(f"{f}: row {key} duplicates one in {seen[key]}")
            seen[key] = f
        frames.append(df.drop("_file"))
    runs = _concat(frames, RUNS)
    # a document that states its GPU count ran on GPUs (the reference tables carry no device_kind of their own)
    runs = runs.with_columns(
        device_kind=pl.when(
            pl.col("device_kind").is_null() & (pl.col("source") == "published") & (pl.col("gpu_count").fill_null(0) > 0)
        )
        .then(pl.lit("gpu"))
        .otherwise(pl.col("device_kind"))
    )
    # rates of runs stored before they were (kvlab.schema.run_rates, the definition the runner stores them by)
    derived = run_rates(runs)
    runs = runs.with_columns(pl.coalesce(pl.col(c), derived[c]).alias(c) for c in RATES)
    if experiment is not None:
        runs = runs.filter(pl.col("experiment") == experiment)
    return runs


#: RUNS' rate columns (kvlab.schema.run_rates): stored with each run since they were added, filled on reading for
#: runs stored before.
RATES = ("requests_per_s", "output_tokens_per_s", "goodput_requests_per_s")


#: RUNS columns added after runs were first stored: a run stored without them gets them from its spec.json and its
#: experiment's manifest (:func:`_recorded_facts`), as the runner records them today.
BACKFILLED = ("kv_budget_bytes", "device_kind", "accelerator")


def _recorded_facts(path: Path, df: pl.DataFrame, manifests: dict) -> pl.DataFrame:
    """A stored run row with the columns an older kvlab did not record (:data:`BACKFILLED`) filled in the way
    :func:`kvlab.rows.run_row` fills them now: the KV budget from the run's spec.json; the device kind from its
    engine spec and the host facts of the sweep that measured it, and the GPU model from those facts where it ran on
    GPUs. A run stored before the typed device (no ``accelerator`` column) whose kind none of that gives gets it
    once here, from what it stored: its spec.json's ``device``, else its hardware label (:func:`_kind_from_label`,
    the migration of old runs). Rows that recorded them are returned as read."""
    missing = [c for c in BACKFILLED if c not in pl.read_parquet_schema(path)]
    if not missing:
        return df
    spec_file = path.parent / SPEC_FILE
    spec = read_json_capped(spec_file) if spec_file.exists() else {}
    engine = spec.get("engine") or {}
    exp_dir = path.parent.parent
    if exp_dir not in manifests:
        manifests[exp_dir] = read_manifest(exp_dir)
    hosts = _sweep_hosts(manifests[exp_dir], spec.get("key") or path.parent.name, df["started_at"][0]) if spec else []
    kinds = {host.device_kind(engine, facts) for facts in hosts}
    models = {host.gpu_model(facts) for facts in hosts}
    # one answer from every host that may have run it, else not known
    kind = (host.device_kind(engine, None) or (kinds.pop() if len(kinds) == 1 else None)) if spec else None
    fill = {"kv_budget_bytes": engine.get("kv_cache_bytes"), "device_kind": kind}
    df = df.with_columns(pl.lit(fill[c], dtype=RUNS.polars_schema[c]).alias(c) for c in missing if c in fill)
    if "accelerator" not in missing:
        return df
    stated = (spec.get("device") or {}).get("kind") if isinstance(spec.get("device"), dict) else None
    kind_col = pl.coalesce(pl.col("device_kind"), pl.lit(stated, pl.String), _kind_from_label(pl.col("hardware")))
    model = models.pop() if len(models) == 1 else None
    return df.with_columns(device_kind=kind_col).with_columns(
        accelerator=pl.when((pl.col("device_kind") == "gpu") & pl.lit(kind == "gpu")).then(pl.lit(model, pl.String))
    )


def _kind_from_label(hardware: pl.Expr) -> pl.Expr:
    """The migration of runs stored before kvlab typed the device (kvlab.device), for those whose kind nothing else
    they stored gives (a server kvlab did not start; sweeps on different hosts that do not place the run): the rule
    kvlab read experiments' hardware labels by until then, a label that starts with "CPU" (or is empty) ran on a CPU
    and any other on GPUs. The one place kvlab reads a hardware label for the kind of device, once, as it reads such
    a run (tests/test_house.py holds every other module to it)."""
    label = hardware.str.strip_chars().str.to_uppercase()
    return pl.when(label.str.starts_with("CPU") | (label == "")).then(pl.lit("cpu")).otherwise(pl.lit("gpu"))


#: Latency percentiles added after runs were first stored: a run stored without them gets those of TTFT, TPOT and
#: E2E from its requests.parquet (the summary's definition, :func:`kvlab.schema.percentiles_ms`). ITL percentiles
#: need the chunk times, which requests.parquet does not keep: they stay null for such runs.
PERCENTILES_FROM_REQUESTS = ("ttft", "tpot", "e2e")


def _recorded_percentiles(path: Path, df: pl.DataFrame) -> pl.DataFrame:
    """A run stored before the percentile columns existed, with its TTFT/TPOT/E2E percentiles computed from its
    stored requests (successful ones, numpy linear interpolation); rows that recorded them are returned as read."""
    if "ttft_p50_ms" in pl.read_parquet_schema(path) or not (path.parent / REQUESTS_FILE).exists():
        return df
    reqs = read_table(path.parent / REQUESTS_FILE, REQUESTS).filter(pl.col("status") == "ok")
    fill: dict[str, float | None] = {}
    for metric in PERCENTILES_FROM_REQUESTS:
        fill |= percentiles_ms(metric, reqs[f"{metric}_ms"].drop_nulls().to_list())
    return df.with_columns(pl.lit(v, dtype=pl.Float64()).alias(k) for k, v in fill.items())


def _sweep_hosts(manifest: dict, key: str, started_at: str | None) -> list[dict]:
    """The host facts of the sweep(s) that may have measured run ``key``: the Ray node that lists it, else the
    sweeps whose time window holds its start, else every sweep of the manifest."""
    sweeps = manifest.get("sweeps") or []
    nodes = [
        n.get("host") or {} for s in sweeps for n in (s.get("ray") or {}).get("nodes", []) if key in n.get("runs", [])
    ]
    if nodes:
        return nodes
    within = [
        s
        for s in sweeps
        if started_at and s.get("started_at") and s.get("ended_at") and s["started_at"] <= started_at <= s["ended_at"]
    ]
    return [s.get("host") or {} for s in (within or sweeps)]


def load_claims(data_dir: str | Path = DATA_DIR) -> pl.DataFrame:
    """Every document claim under ``data_dir/reference``."""
    return _concat((read_table(f, CLAIMS) for f in _reference_files(Path(data_dir), claims=True)), CLAIMS)


def load_documents(data_dir: str | Path = DATA_DIR) -> pl.DataFrame:
    """The register of source documents (``reference/documents.csv``; empty where a data folder has none)."""
    path = Path(data_dir) / "reference" / DOCUMENTS_FILE
    return read_table(path, DOCUMENTS) if path.is_file() else DOCUMENTS.empty()


def _load_per_run(data_dir: str | Path, experiment: str | None, file: str, table: Table) -> pl.DataFrame:
    return _concat((read_table(d / file, table) for d in run_dirs(data_dir, experiment) if (d / file).exists()), table)


def load_requests(data_dir: str | Path = DATA_DIR, experiment: str | None = None) -> pl.DataFrame:
    """Per-request records of every measured run."""
    return _load_per_run(data_dir, experiment, REQUESTS_FILE, REQUESTS)


def load_attempts(data_dir: str | Path = DATA_DIR, experiment: str | None = None) -> pl.DataFrame:
    """Every launch attempt of every measured run (retries and their causes)."""
    return _load_per_run(data_dir, experiment, ATTEMPTS_FILE, ATTEMPTS)


#: A run folder's telemetry files (kvlab.runner.write_telemetry writes them; named here so reporting need not import
#: the runner): the samples and what they are.
TELEMETRY_FILE = "telemetry.csv"
TELEMETRY_INFO_FILE = "telemetry.json"


def load_telemetry(data_dir: str | Path = DATA_DIR, experiment: str | None = None) -> pl.DataFrame:
    """Every measured run's telemetry samples (kvlab.runner.write_telemetry), one row per sample: ``run_id``,
    ``experiment``, ``t_s`` (seconds from the run's first send, the requests' time origin), one Float64 column per
    series any run recorded (null where a run's server did not export it) and ``error`` (why a sample got nothing).
    Runs without a telemetry.csv add no row (:func:`load_telemetry_info` says why)."""
    frames = []
    for d in run_dirs(data_dir, experiment):
        f = d / TELEMETRY_FILE
        if not f.exists():
            continue
        run_id = pl.read_parquet(d / RUN_FILE, columns=["run_id"])["run_id"][0]
        df = pl.read_csv(io.BytesIO(read_bytes_capped(f)), infer_schema=False)
        frames.append(
            df.with_columns(pl.col(c).cast(pl.Float64) for c in df.columns if c != "error").with_columns(
                pl.lit(run_id).alias("run_id"), pl.lit(d.parent.name).alias("experiment")
            )
        )
    base = {"run_id": pl.String, "experiment": pl.String, "t_s": pl.Float64, "error": pl.String}
    if not frames:
        return pl.DataFrame(schema=base)
    out = pl.concat(frames, how="diagonal_relaxed")
    series = sorted(c for c in out.columns if c not in base)
    return out.select("run_id", "experiment", "t_s", *series, pl.col("error").cast(pl.String))


def load_telemetry_info(data_dir: str | Path = DATA_DIR, experiment: str | None = None) -> pl.DataFrame:
    """What each measured run's telemetry is (its telemetry.json): ``run_id``, ``experiment``, ``available`` (the
    engine exposes telemetry), ``reason`` (why not: e.g. the engine serves no /metrics), ``note`` (why an available
    telemetry holds no sample: the run ended before its first sample, or none answered), ``interval_s``,
    ``samples``, ``samples_ok``. A run stored before telemetry was recorded has no row. A telemetry.json written
    before ``note`` existed said ``available: false`` with the reason "no sample was taken" or "no sample answered
    (...)" for such a run: it is read as available, with that reason as its note."""
    rows = []
    for d in run_dirs(data_dir, experiment):
        f = d / TELEMETRY_INFO_FILE
        if not f.exists():
            continue
        info = read_json_capped(f)
        available, reason, note = bool(info.get("available")), info.get("reason"), info.get("note")
        if "note" not in info and not available and (reason or "").startswith(OLD_NO_SAMPLE):
            available, reason, note = True, None, reason
        rows.append(
            {
                "run_id": pl.read_parquet(d / RUN_FILE, columns=["run_id"])["run_id"][0],
                "experiment": d.parent.name,
                "available": available,
                "reason": reason,
                "note": note,
                "interval_s": info.get("interval_s"),
                "samples": info.get("samples"),
                "samples_ok": info.get("samples_ok"),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "run_id": pl.String,
            "experiment": pl.String,
            "available": pl.Boolean,
            "reason": pl.String,
            "note": pl.String,
            "interval_s": pl.Float64,
            "samples": pl.Int64,
            "samples_ok": pl.Int64,
        },
    )


#: How an older telemetry.json began the reason it gave an engine's telemetry that got no sample (load_telemetry_info).
OLD_NO_SAMPLE = ("no sample was taken", "no sample answered")


#: The configuration fields a probe record names (kvlab.probe.configuration), as RUNS names them.
PROBE_CONFIG_FIELDS = (
    "engine",
    "engine_label",
    "model",
    "tp",
    "dcp",
    "dp",
    "mem_util",
    "kv_budget_bytes",
    "prefix_caching",
)
#: The accuracy probe's frame (:func:`load_probes`): one row per prompt of each probed configuration.
PROBE_SCHEMA = {
    "experiment": pl.String,
    "server_key": pl.String,
    "order": pl.Int64,
    "started_at": pl.String,
    "engine": pl.String,
    "engine_label": pl.String,
    "model": pl.String,
    "tp": pl.Int64,
    "dcp": pl.Int64,
    "dp": pl.Int64,
    "mem_util": pl.Float64,
    "kv_budget_bytes": pl.Int64,
    "prefix_caching": pl.Boolean,
    "k": pl.Int64,
    "prompt": pl.Int64,
    "tokens": pl.List(pl.String),
    "margins": pl.List(pl.Float64),
    "error": pl.String,
}


def load_probes(data_dir: str | Path = DATA_DIR, experiment: str | None = None) -> pl.DataFrame:
    """The accuracy probes of each experiment's server starts, as its manifest keeps them (the server entries'
    ``probe``, kvlab.probe.record): one row per probe prompt with the configuration (RUNS' names), ``server_key``,
    ``order`` (its place among the experiment's configurations, the manifest's ``configurations``; null where the
    manifest lists none), the start's ``started_at``, ``k``, the prompt's ``tokens``, ``margins`` and ``error``.
    Where one configuration was started and probed more than once, its latest start counts. Experiments without a
    manifest or a probed start add no row (a report says "not probed")."""
    root = Path(data_dir) / "runs"
    rows = []
    for m in sorted(root.glob(f"{experiment or '*'}/{MANIFEST_FILE}")):
        if _in_staging(m, root):
            continue
        manifest = read_manifest(m.parent)  # empty where quarantined (:func:`quarantined` lists it)
        order = {key: i for i, key in enumerate(manifest.get("configurations") or [])}
        latest: dict[str, dict] = {}
        for sweep in manifest.get("sweeps") or []:
            for server in sweep.get("servers") or []:
                if server.get("probe") and (
                    server["server_key"] not in latest
                    or (server.get("started_at") or "") >= (latest[server["server_key"]].get("started_at") or "")
                ):
                    latest[server["server_key"]] = server
        for key, server in latest.items():
            rec = server["probe"]
            config = rec.get("configuration") or {}
            outputs = rec.get("outputs") or []
            if rec.get("error") and not outputs:  # the probe failed as a whole: every prompt failed with it
                outputs = [
                    {"prompt": i, "tokens": [], "margins": [], "error": rec["error"]}
                    for i in range(len(rec.get("prompts") or []))
                ]
            for o in outputs:
                rows.append(
                    {
                        "experiment": m.parent.name,
                        "server_key": key,
                        "order": order.get(key),
                        "started_at": server.get("started_at"),
                        **{c: config.get(c) for c in PROBE_CONFIG_FIELDS},
                        "k": rec.get("k"),
                        "prompt": o["prompt"],
                        "tokens": list(o.get("tokens") or []),
                        "margins": [None if v is None else float(v) for v in o.get("margins") or []],
                        "error": o.get("error"),
                    }
                )
    return pl.DataFrame(rows, schema=PROBE_SCHEMA)


# --------------------------------------------------------------------------- writers


#: What a spreadsheet reads as the start of a formula: a CSV cell (or header) starting with one of these is written
#: with a leading apostrophe (:func:`neutralise`), as the OWASP Foundation's "CSV Injection" page recommends.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _neutral(text: str) -> str:
    return f"'{text}" if text.startswith(FORMULA_START) else text


def neutralise(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` safe to open in a spreadsheet: every text cell (String, Categorical or Enum column) and column name
    that starts with :data:`FORMULA_START` gets a leading apostrophe, so ``=HYPERLINK(...)`` from a server's version
    string stays text. Numbers are left as they are (a negative number stays a number); so is text that does not
    start so."""
    text = [c for c, t in frame.schema.items() if t == pl.String or isinstance(t, (pl.Categorical, pl.Enum))]
    pattern = "^[" + "".join(re.escape(c) for c in FORMULA_START) + "]"
    out = frame.with_columns(
        pl.when(pl.col(c).cast(pl.String).str.contains(pattern))
        .then(pl.lit("'") + pl.col(c).cast(pl.String))
        .otherwise(pl.col(c).cast(pl.String))
        .alias(c)
        for c in text
    )
    return out.rename({c: _neutral(c) for c in out.columns if _neutral(c) != c})


def write_csv(frame: pl.DataFrame, path: str | Path) -> None:
    """Write ``frame`` as CSV, its formula-like text neutralised (:func:`neutralise`): how kvlab writes every CSV."""
    neutralise(frame).write_csv(path)


def write_json_atomic(path: str | Path, obj) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def write_run(
    exp_dir: str | Path,
    run_key: str,
    run: pl.DataFrame,
    requests: pl.DataFrame | None = None,
    attempts: pl.DataFrame | None = None,
    spec: dict | None = None,
    files: dict[str, Path] | None = None,
) -> Path:
    """Write one measured run as a folder that appears in a single atomic rename.

    ``files`` maps names in the run folder to existing files to move in (e.g. server logs).
    An existing folder for the same key is replaced.
    """
    exp_dir = Path(exp_dir)
    check_inside(exp_dir, exp_dir.parent)  # the experiment folder itself: never a link (Campaign.prepare checks above)
    exp_dir.mkdir(parents=True, exist_ok=True)
    final = exp_dir / run_key
    tmp = Path(tempfile.mkdtemp(dir=exp_dir, prefix=temp_prefix(run_key)))
    try:
        RUNS.conform(run, origin=f"run {run_key}").write_parquet(tmp / RUN_FILE)
        if requests is not None:
            REQUESTS.conform(requests, origin=f"requests of {run_key}").write_parquet(tmp / REQUESTS_FILE)
        if attempts is not None:
            ATTEMPTS.conform(attempts, origin=f"attempts of {run_key}").write_parquet(tmp / ATTEMPTS_FILE)
        if spec is not None:
            (tmp / SPEC_FILE).write_text(json.dumps(redact_secrets(spec), indent=2, sort_keys=True, default=str))
        for name, src in (files or {}).items():
            if Path(src).exists():
                shutil.copy2(src, tmp / name)
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        publish_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def clean_partial(exp_dir: str | Path, run_keys: set[str] | frozenset[str] = frozenset()) -> list[Path]:
    """Remove the temporary entries a killed sweep left behind in ``exp_dir``; return what was removed.

    Only kvlab's own temporary names go (kvlab.paths.TEMP_NAME) and, for ``run_keys`` (the runs the experiment
    defines), the exact names kvlab made before it had its own prefix (``.<run key>.<8 random characters>`` folders and
    ``.manifest.json.<8>.tmp`` files). Every other entry, a user's dot files included, stays; a link is unlinked,
    never followed."""
    exp_dir = Path(exp_dir)
    if not exp_dir.is_dir():
        return []
    names = "|".join(re.escape(k) for k in sorted(run_keys)) or "(?!)"
    legacy = re.compile(rf"\.(?:(?:{names})\.[a-z0-9_]{{8}}|{re.escape(MANIFEST_FILE)}\.[a-z0-9_]{{8}}\.tmp)")
    return remove_temp_entries(exp_dir, legacy)


def finished_run_keys(exp_dir: str | Path) -> set[str]:
    """Keys of runs already stored under ``exp_dir`` (what a resumed sweep skips)."""
    exp_dir = Path(exp_dir)
    return {p.parent.name for p in exp_dir.glob(f"*/{RUN_FILE}") if not _in_staging(p, exp_dir)}


def set_aside_superseded(exp_dir: str | Path, defined: set[str]) -> tuple[list[str], list[str]]:
    """Move finished runs whose key the experiment no longer defines into ``exp_dir/superseded/`` (reports
    read only the runs directly under ``exp_dir``) and bring back set-aside runs it defines again (those that can
    be read: :func:`check_run_dir`).

    Returns (keys set aside, keys brought back). Each move is one rename: nothing is deleted.
    """
    exp_dir = Path(exp_dir)
    aside = exp_dir / SUPERSEDED_DIR
    check_inside(aside, exp_dir)  # a link there would have older copies removed from the folder it points to
    moved, restored = [], []
    for key in sorted(finished_run_keys(exp_dir) - defined):
        aside.mkdir(exist_ok=True)
        target = aside / key
        remove_entry(target)  # an older copy of the same run: the newer one wins
        os.replace(exp_dir / key, target)
        moved.append(key)
    for key in sorted(finished_run_keys(aside) & defined if aside.is_dir() else set()):
        # one that cannot be read stays there: the sweep measures it again
        if not (exp_dir / key).exists() and check_run_dir(aside / key) is None:
            os.replace(aside / key, exp_dir / key)
            restored.append(key)
    return moved, restored


@dataclass(frozen=True)
class SetAside:
    """A run folder a sweep did not reuse (:func:`set_aside_unusable`): where it was, why, the folder kept in its
    place where it was a copy of another's run, and where it went."""

    path: Path
    reason: str
    kept: Path | None
    moved_to: Path


def set_aside_unusable(exp_dir: str | Path) -> list[SetAside]:
    """Move the finished-run folders of ``exp_dir`` that a sweep must not reuse into ``exp_dir/quarantined/``, each
    with ``<folder>.reason.txt`` beside it saying why, and return them: those that cannot be read
    (:func:`check_run_dir`: a corrupt or truncated file, a FIFO...), which the sweep then measures again, and the
    copies of another of its folders' run (:func:`duplicate_runs`: the folder kept is named). Each move is one rename:
    nothing is deleted; a name already taken there gets a numbered suffix."""
    exp_dir = Path(exp_dir)
    aside = exp_dir / QUARANTINE_DIR
    check_inside(aside, exp_dir)  # a link there would have the folders moved out of the data folder
    candidates = [exp_dir / k for k in sorted(finished_run_keys(exp_dir))]
    found = [Quarantined(d, r) for d in candidates if (r := check_run_dir(d)) is not None]
    found += duplicate_runs(candidates)
    out = []
    for q in sorted(found, key=lambda q: str(q.path)):
        aside.mkdir(exist_ok=True)
        target, n = aside / q.path.name, 1
        while os.path.lexists(target) or os.path.lexists(f"{target}{REASON_SUFFIX}"):
            n += 1
            target = aside / f"{q.path.name}.{n}"
        os.replace(q.path, target)
        kept = f"\nkept instead: {q.kept}" if q.kept else ""
        write_text_atomic(Path(f"{target}{REASON_SUFFIX}"), f"set aside from: {q.path}\nreason: {q.reason}{kept}\n")
        out.append(SetAside(q.path, q.reason, q.kept, target))
    return out
