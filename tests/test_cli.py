"""The `kvlab` command keeps the conventions of the field (issue 57, item 4): `-h` beside `--help`, `--version` from
the package metadata, a bare `kvlab` that prints its help and succeeds, option types a person can read (metavars,
not Python types), experiment-file errors that name the YAML line and the field meant, a sweep whose failed runs a
script can see (exit status 3), and a help that loads none of the heavy stacks."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from kvlab import cli
from kvlab.engines import FAMILIES
from kvlab.experiment import ExperimentSpec, SpecError
from kvlab.paths import ROOT

EXPERIMENTS = ROOT / "data" / "experiments"


def _run(*args: str):
    return CliRunner().invoke(cli.app, list(args))


def test_short_and_long_help_and_a_bare_kvlab_succeed():
    long_, short, bare = _run("--help"), _run("-h"), _run()
    assert (long_.exit_code, short.exit_code, bare.exit_code) == (0, 0, 0), bare.output
    for res in (long_, short, bare):
        assert "Usage: " in res.output and "sweep" in res.output and "report" in res.output
    sub = _run("sweep", "-h")
    assert sub.exit_code == 0 and "sweep [OPTIONS] {FILE.yaml}" in sub.output


def test_version_comes_from_the_package_metadata():
    res = _run("--version")
    assert res.exit_code == 0 and res.output.strip() == f"kvlab {version('kvlab')}"


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("report", ["NAME=VALUE", "PREFIX", "DIR", " N "]),
        ("sweep", ["FILE.yaml", "DIR", "ADDRESS", "NAME"]),
        ("check", ["FILE.yaml", "DIR"]),
        ("model", ["NAME", "FAMILY", "TOKENS", "FRACTION", " or ".join(FAMILIES)]),
        ("make-model", ["DIR"]),
        ("lab", ["PORT", "DIR"]),
    ],
)
def test_help_shows_readable_value_types(command, shown):
    """Each option says what its value is (a metavar), never a Python type; a flag shows none."""
    res = _run(command, "--help")
    assert res.exit_code == 0, res.output
    for python_type in ("<list[", "<bool>", "<str>", "<int>", "<float>", "<path>", "<Path>"):
        assert python_type not in res.output, (python_type, res.output)
    for metavar in shown:
        assert metavar in res.output, (metavar, res.output)


def _typo(tmp_path, source: str, old: str, new: str):
    text = (EXPERIMENTS / source).read_text()
    assert old in text
    path = tmp_path / source
    path.write_text(text.replace(old, new, 1))
    return path, text[: text.index(old) + 1].count("\n") + 1  # the line the key starts on


@pytest.mark.parametrize(
    ("old", "new", "field", "meant"),
    [
        ("\nrepeats: 3\n", "\nrepeat: 3\n", "repeat", "repeats"),  # the top level
        ("\n    dcp: 1\n", "\n    dcpp: 1\n", "engines.vllm.dcpp", "dcp"),  # an engine's field
        ("\n  batch_size: 4\n", "\n  batch_sise: 4\n", "workload.batch_sise", "batch_size"),  # the workload's kind
        ("\n  backoff_s: 2\n", "\n  backof_s: 2\n", "retry.backof_s", "backoff_s"),
    ],
)
def test_an_unknown_field_names_its_yaml_line_and_the_field_meant(tmp_path, old, new, field, meant):
    path, line = _typo(tmp_path, "cpu_long_context.yaml", old, new)
    with pytest.raises(SpecError) as err:
        ExperimentSpec.load(path)
    msg = str(err.value)
    assert f"{path}: {field}: unknown field" in msg and f"at line {line};" in msg, msg
    assert f"did you mean '{meant}'?" in msg, msg
    res = _run("sweep", "--dry-run", str(path))  # the command says the same, with its exit status 2
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and f"at line {line}; did you mean '{meant}'?" in out, res.output


def test_other_yaml_errors_name_their_line_too(tmp_path):
    """A bad value names its key's line; a missing field the block it is missing from; a field with no close name
    lists the known ones; an error inside a matrix point still suggests the field meant."""
    data = yaml.safe_load((EXPERIMENTS / "cpu_long_context.yaml").read_text())
    data["engines"]["vllm"]["tp"] = 0
    del data["workload"]["batch_size"]
    data["colour"] = "blue"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    lines = path.read_text().splitlines()
    with pytest.raises(SpecError) as err:
        ExperimentSpec.read(path)
    msg = str(err.value)
    tp_line = next(i for i, t in enumerate(lines, 1) if t.strip() == "tp: 0")
    workload_line = next(i for i, t in enumerate(lines, 1) if t == "workload:")
    assert f"engines.vllm.tp: Input should be greater than or equal to 1 (got 0) at line {tp_line}" in msg, msg
    assert f"workload.batch_size: Field required in the block at line {workload_line}" in msg, msg
    assert "colour: unknown field (got 'blue') at line" in msg and "known fields: assumptions, description" in msg
    data = yaml.safe_load((EXPERIMENTS / "cpu_long_context.yaml").read_text())
    data["matrix"] = {"engine.mem_utl": [0.9]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError, match=r"engines\.vllm\.mem_utl: unknown field \(got 0\.9\); did you mean 'mem_util'"):
        ExperimentSpec.load(path)


def test_a_sweep_with_a_failed_run_exits_3_with_the_count(tmp_path, monkeypatch):
    """Failed runs are results (kept, shown in the reports), and a script still learns of them: exit status 3,
    neither 0 (all ran) nor 2 (a refused file)."""
    spec = SimpleNamespace(name="t", quick_form=lambda: spec, check_environment=lambda *a, **k: None)
    monkeypatch.setattr("kvlab.plan.load", lambda path: spec)
    monkeypatch.setattr(cli, "_preflight", lambda pairs, data_dir: None)
    for failed, status in ((2, cli.EXIT_RUNS_FAILED), (0, 0)):
        monkeypatch.setattr(cli, "_sweep", lambda *a, failed=failed, **k: SimpleNamespace(failed=failed))
        res = _run("sweep", str(tmp_path / "t.yaml"), "--data-dir", str(tmp_path))
        assert res.exit_code == status, res.output
        if failed:
            assert "2 runs failed" in " ".join(res.output.split()) and "exit status 3" in res.output
    assert cli.EXIT_RUNS_FAILED == 3
    assert "Exit status 3" in " ".join(_run("sweep", "--help").output.split())


def test_the_help_loads_no_engine_adapter_http_or_report_stack():
    """`kvlab --help` imports only what the help needs (issue 57: aiohttp through kvlab.engines.base cost half of
    its start-up): the adapters, pydantic, aiohttp, psutil, NVML, YAML, polars and the report stack stay unloaded."""
    code = (
        "import sys, json\n"
        "sys.argv = ['kvlab', '--help']\n"
        "from kvlab.cli import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "heavy = ['aiohttp', 'pydantic', 'psutil', 'pynvml', 'yaml', 'polars', 'papermill', 'matplotlib',\n"
        "         'kvlab.engines.registry', 'kvlab.engines.base', 'kvlab.experiment']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_engine_package_loads_its_names_on_first_use():
    """kvlab.engines' names are the same objects as before, loaded when first read."""
    code = (
        "import sys\n"
        "import kvlab.engines as e\n"
        "assert 'kvlab.engines.registry' not in sys.modules and 'aiohttp' not in sys.modules\n"
        "from kvlab.engines import FAMILIES, EngineSpec, get_adapter, registry\n"
        "from kvlab.engines.spec import EngineSpec as S\n"
        "assert EngineSpec is S and registry.FAMILIES == FAMILIES and get_adapter is registry.get_adapter\n"
        "assert set(e.__all__) <= set(dir(e))\n"
        "assert 'aiohttp' not in sys.modules  # the HTTP stack loads with the first request\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
