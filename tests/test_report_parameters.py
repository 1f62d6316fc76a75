"""Papermill re-runs that are safe (issue 57): `kvlab report -p` refuses a parameter no notebook declares (naming the
closest) and a value of the wrong type, hints papermill's `-p name value` form, and a re-run with other parameters
writes its own files, never over the default report."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest

from kvlab import reports
from kvlab.paths import NOTEBOOKS_DIR, ROOT

KVLAB = str(ROOT / ".venv" / "bin" / "kvlab")
NB01 = NOTEBOOKS_DIR / "01_context_scaling.ipynb"
NB02 = NOTEBOOKS_DIR / "02_throughput_decay.ipynb"


def test_an_unknown_parameter_is_refused_with_the_closest_name():
    with pytest.raises(reports.ParameterError, match=r"unknown parameter 'mem_utl' \(did you mean mem_util\?\)"):
        reports.checked_parameters([NB01], {"mem_utl": 0.95})
    with pytest.raises(reports.ParameterError, match="declare .*measured_experiment.*mem_util"):
        reports.checked_parameters([NB01], {"nothing_like_it": 1})


def test_each_notebook_gets_its_own_parameters_typed_as_its_defaults():
    got = reports.checked_parameters([NB01, NB02], {"mem_util": 1, "context_from": "48K"})
    assert got[NB01] == {"mem_util": 1.0, "context_from": "48K"} and isinstance(got[NB01]["mem_util"], float)
    assert set(got[NB02]) <= {"mem_util", "context_from"}  # only what 02 declares
    with pytest.raises(reports.ParameterError, match=r"mem_util='abc': expected float .*mem_util = 0.92"):
        reports.checked_parameters([NB01], {"mem_util": "abc"})


def test_a_variant_is_named_by_its_parameters_and_the_default_by_the_notebook():
    assert reports.variant_stem(NB01, {}) == "01_context_scaling"
    assert reports.variant_stem(NB01, {"data_dir": "/elsewhere", "mem_util": 0.92}) == "01_context_scaling"
    assert reports.variant_stem(NB01, {"mem_util": 0.95}) == "01_context_scaling--mem_util-0.95"
    both = reports.variant_stem(NB01, {"mem_util": 0.95, "engine_b": "sglang/jax"})
    assert both == "01_context_scaling--engine_b-sglang-jax--mem_util-0.95"


@pytest.mark.parametrize(
    "args, said",
    [
        (["-p", "mem_utl=0.95"], "did you mean mem_util?"),
        (["-p", "mem_util", "0.95"], "write `-p mem_util=0.95`"),
        (["-p", "mem_util=abc"], "expected float"),
    ],
)
def test_kvlab_report_refuses_a_bad_parameter_with_exit_2(args, said, tmp_path):
    """The command itself, in this process (typer's runner: the same code as the console script, without a
    process's imports; the console script's exit 2 is the first case's subprocess below)."""
    from typer.testing import CliRunner

    from kvlab import cli

    done = CliRunner().invoke(cli.app, ["report", "--out", str(tmp_path), "--only", "01", *args])
    assert done.exit_code == 2, done.output
    assert said in " ".join(done.output.split())
    assert not list(tmp_path.iterdir())  # refused before anything ran


def test_the_console_script_exits_2_on_an_unknown_parameter(tmp_path):
    done = subprocess.run(
        [KVLAB, "report", "--out", str(tmp_path), "--only", "01", "-p", "mem_utl=0.95"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "did you mean mem_util?" in " ".join((done.stdout + done.stderr).split())
    assert not list(tmp_path.iterdir())


def test_a_re_run_with_other_parameters_leaves_the_default_page_byte_for_byte(built_reports, fixture_data, tmp_path):
    out = tmp_path / "reports"
    shutil.copytree(built_reports[0], out)
    page = out / "02_throughput_decay.html"
    before = hashlib.sha256(page.read_bytes()).hexdigest()
    built = reports.build(out, ["02"], {"data_dir": str(fixture_data), "mem_util": 0.95}, workers=1)
    assert [r.html.name for r in built] == ["02_throughput_decay--mem_util-0.95.html"]
    assert hashlib.sha256(page.read_bytes()).hexdigest() == before
    assert built[0].title.endswith("(mem_util = 0.95)")
    listed = {e["html"]: e for e in reports.read_index(out / "index.json")}
    assert {"02_throughput_decay.html", "02_throughput_decay--mem_util-0.95.html"} <= set(listed)
    assert (out / "02_throughput_decay--mem_util-0.95.result.json").exists()
