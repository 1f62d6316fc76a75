"""Workbook.measured_experiment: the experiment whose measured runs a study shows, the GPU host's counterpart of its
CPU default where one is stored (b300_long_context for cpu_long_context), else the default itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl

from kvlab.workbook import Workbook

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "cpu_long_context"


def _stored(data: Path, experiment: str, gpu: bool) -> Path:
    """The fixture's cpu_long_context runs stored again as ``experiment``; ``gpu``: as a B300 host records them."""
    folder = data / "runs" / experiment
    shutil.copytree(FIXTURE, folder)
    manifest = folder / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"experiment": experiment}))
    for run in folder.glob("*/run.parquet"):
        df = pl.read_parquet(run).with_columns(experiment=pl.lit(experiment))
        if gpu:
            df = df.with_columns(
                hardware=pl.lit("NVIDIA B300 x8"),
                gpu_count=pl.lit(8, df.schema["gpu_count"]),
                device_kind=pl.lit("gpu"),
                accelerator=pl.lit("B300"),
            )
        df.write_parquet(run)
    return folder


def test_a_study_reads_the_gpu_hosts_runs_where_they_are_stored(tmp_path):
    (tmp_path / "runs").mkdir()
    assert Workbook(tmp_path).measured_experiment("cpu_long_context") == "cpu_long_context"  # nothing stored
    _stored(tmp_path, "cpu_long_context", gpu=False)
    assert Workbook(tmp_path).measured_experiment("cpu_long_context") == "cpu_long_context"  # this host's only
    _stored(tmp_path, "b300_long_context", gpu=True)
    wb = Workbook(tmp_path)
    assert wb.measured_experiment("cpu_long_context") == "b300_long_context"
    assert wb.read_measured == []  # choosing reads nothing: the study's wb.measured(name) records what it shows
    assert wb.measured(wb.measured_experiment("cpu_long_context"))["device_kind"].unique().to_list() == ["gpu"]
    assert wb.read_measured == ["b300_long_context"]
    # another study's default, a name with no host prefix and the empty name (every experiment) stay as given
    assert [wb.measured_experiment(n) for n in ("cpu_capacity", "single", "")] == ["cpu_capacity", "single", ""]
    # a GPU name that is another study (its stem differs) is no counterpart; the reference host comes first
    _stored(tmp_path, "b300_long_context_fp8", gpu=True)
    _stored(tmp_path, "h200_long_context", gpu=True)
    assert Workbook(tmp_path).measured_experiment("cpu_long_context") == "b300_long_context"


def test_a_counterpart_measured_on_a_cpu_is_not_the_gpu_hosts(tmp_path):
    _stored(tmp_path, "cpu_long_context", gpu=False)
    _stored(tmp_path, "b300_long_context", gpu=False)  # the b300 file's name, run on this CPU machine's engines
    assert Workbook(tmp_path).measured_experiment("cpu_long_context") == "cpu_long_context"
    _stored(tmp_path, "h200_long_context", gpu=True)  # another GPU host's counterpart, when the reference's is absent
    assert Workbook(tmp_path).measured_experiment("cpu_long_context") == "h200_long_context"


def test_reports_01_and_02_show_the_gpu_hosts_runs_without_a_parameter(tmp_path):
    """Issue 57: with a GPU host's runs stored beside this host's, reports 01 and 02 show the GPU host's by default
    (their measured_experiment parameter is "auto"), and a name given as the parameter still pins one."""
    from kvlab import studies
    from kvlab.paths import DATA_DIR

    shutil.copytree(DATA_DIR / "reference", tmp_path / "reference")
    shutil.copytree(DATA_DIR / "catalog", tmp_path / "catalog") if (DATA_DIR / "catalog").exists() else None
    _stored(tmp_path, "cpu_long_context", gpu=False)
    _stored(tmp_path, "b300_long_context", gpu=True)
    for report in ("01", "02"):
        shown = studies.compute_report(report, tmp_path)
        assert shown.measured_experiment == "b300_long_context", report
        assert "b300_long_context" in shown.experiments and "cpu_long_context" not in shown.experiments
        assert set(shown.measured["device_kind"].unique().to_list()) == {"gpu"}
        pinned = studies.compute_report(report, tmp_path, {"measured_experiment": "cpu_long_context"})
        assert pinned.measured_experiment == "cpu_long_context" and "b300_long_context" not in pinned.experiments
