"""Every notebook parameter reaches what it names: each report's study (kvlab.studies, what the notebook displays)
is computed with its base parameters, then once per parameter with only that parameter changed, and the typed
result (answer, verdicts, frames, values) must change. No notebook runs here: a notebook only displays its study's
result (test_notebooks executes each once); the one display-only parameter, 04's fig_format, is checked on the
inline-figure setting it makes."""

from __future__ import annotations

import shutil
from pathlib import Path

import papermill
import pytest
from notebook_data import copy_reference, write_capacity_runs, write_two_engine_runs

from kvlab import reports, studies
from kvlab.workbook import RENAMED_PARAMETERS, check_parameters

#: Parameters a study does not compute with: they change only how the notebook draws (checked apart).
DISPLAY_ONLY = {"fig_format"}

#: Per notebook: the data folder it runs on ("fixture": real measured runs of every CPU study plus document
#: variants; "two_engines": made-up long-context runs of both engines with a crossover; "capacity": SYNTHETIC
#: capacity runs with telemetry, notebook_data.CAPACITY), base parameters beside
#: data_dir (small where the notebook draws many points), and a non-default value for every other parameter.
#: data_dir's own variant is a folder without measured runs.
CASES = {
    "01": (
        "two_engines",
        {},
        {
            "published_experiment": "article_b300_alt",
            "measured_experiment": "",
            "mem_util": 0.95,
            "engine_a": "sglang",
            "engine_b": "vllm",
            "context_from": "200K",
            "context_to": "64K",
            "crossover_methods": ["linear"],
            "measured_engine_a": "sglang-jax",
            "measured_engine_b": "vllm",
        },
    ),
    "02": (
        "two_engines",
        {},
        {
            "published_experiment": "article_b300_alt",
            "measured_experiment": "",
            "mem_util": 0.95,
            "context_from": "200K",
            "context_to": "64K",
        },
    ),
    "03": (
        "two_engines",
        {},
        {
            "published_experiment": "article_b300_alt",
            "measured_experiment": "cpu_prefix_sharing",
            "gpu": "H200",
            "model": "DeepSeek-V3",
            "mem_utils": [0.9, 0.95],
            "headroom_contexts": [65536, 131072],
            "dcp": 4,
        },
    ),
    "04": (
        "fixture",
        {"max_context": 262144, "curve_points": 8, "sensitivity_batches": [8], "sensitivity_outputs": [1024]},
        {
            "published_experiment": "article_b300_alt",
            "gpu": "H200",
            "model": "DeepSeek-V3",
            "tp": 16,
            "dcp": 4,
            "gpus": ["B300", "H100"],
            "dcp_sizes": [2, 8],
            "max_context": 524288,
            "curve_points": 10,
            "batch_size": 16,
            "output_tokens": 2048,
            "sensitivity_batches": [32],
            "sensitivity_outputs": [4096],
            "mem_utils": [0.9, 0.95],
            "headroom_contexts": [65536, 131072],
            "kv_layers": 93,
            "fig_format": "svg",
        },
    ),
    "05": (
        "fixture",
        {},
        {
            "sharing_experiment": "cpu_multi_turn",
            "multi_turn_experiment": "cpu_prefix_sharing",
            "claims_experiment": "article_kv_design_alt",
            "threshold": 0.5,
            "min_gain": 0.4,
            "ideal_prompt_tokens": 2016,
            "ideal_requests": 16,
            "block_tokens": 16,
        },
    ),
    # Kimi-K3 at the base: a fit to the published table applies to that model only (another gets the uncalibrated
    # roofline), so the published experiment reaches the study only there
    "06": (
        "fixture",
        {"curve_points": 8, "max_context": 262144, "model": "Kimi-K3"},
        {
            "claims_experiment": "article_kv_design_alt",
            "published_experiment": "article_b300_alt",
            "context_low_tokens": 32768,
            "context_tokens": 131072,
            "shared_fraction": 0.4,
            "concurrency": 16,
            "model": "Llama-3.1-8B",
            "gpu": "H200",
            "tp": 16,
            "dcp": 4,
            "mixed_hardware_or_frequent_model_changes": True,
            "priority": "throughput",
            "max_context": 524288,
            "curve_points": 10,
        },
    ),
    "07": (
        "capacity",
        {},
        {
            "measured_experiment": "cpu_long_context",
            "slo_share": 0.5,
            "gpu": "H200",
            "model": "DeepSeek-V3",
            "tp": 16,
            "dcp_sizes": [2, 8],
            "mem_utils": [0.9, 0.95],
            "headroom_contexts": [65536, 131072],
            "price_per_device_hour": 2.5,
        },
    ),
}

#: What a study's answer says without measured runs (the data_dir variant: a folder without runs).
NO_RUNS = {
    "01": "No run was measured on this host.",
    "02": "No run of both engines at both contexts was measured on this host.",
    "03": "No run on this host compares two memory settings.",
    "05": "No prefix-sharing run was measured",
    "07": "No load ladder was measured on this host",
}


def fingerprint(result: studies.StudyResult) -> list:
    """What a reader of the report is shown, as data: the answer, the verdicts, every frame and every value."""
    frames = [(name, f.shape, f.to_dicts()) for name, f in sorted(result.frames.items())]
    # its declared fields that are not frames, past what every result holds
    common = {"answer", "verdicts", "experiments", "documents", "parameters"}
    data = result.to_json()
    values = [(k, repr(v)) for k, v in sorted(data.items()) if k in result.__dataclass_fields__ and k not in common]
    values = [(k, v) for k, v in values if k not in result.frames]
    return [data["answer"], data["verdicts"], frames, values]


def _with_trace_runs(data: Path) -> Path:
    """``data`` with the real cpu_trace runs of tests/fixtures/trace (report 07's replayed traffic: its search
    results, which the device price prices)."""
    shutil.copytree(Path(__file__).parent / "fixtures" / "trace" / "runs" / "cpu_trace", data / "runs" / "cpu_trace")
    return data


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory, fixture_data):
    root = tmp_path_factory.mktemp("notebook-parameters")
    return {
        "fixture": fixture_data,
        "two_engines": write_two_engine_runs(root / "two"),
        "capacity": _with_trace_runs(write_capacity_runs(root / "capacity")),
        "no_runs": copy_reference(root / "no_runs"),
    }


def test_every_parameter_has_a_case():
    for nb in reports.notebooks():
        declared = set(papermill.inspect_notebook(str(nb))) - {"data_dir"}
        assert declared == set(CASES[nb.name[:2]][2]), f"{nb.name}: parameters without a variant or stale ones"


@pytest.mark.parametrize("prefix", sorted(CASES))
def test_each_parameter_changes_what_the_report_shows(prefix, data_dirs):
    folder, small, changes = CASES[prefix]
    nb = reports.notebooks([prefix])[0]
    defaults = reports._defaults(nb)
    base = defaults | small

    def result(data_dir, params):
        return studies.compute_report(prefix, data_dir, params)

    first = fingerprint(result(data_dirs[folder], base))
    unchanged = []
    for name, value in changes.items():
        if name in DISPLAY_ONLY:
            continue
        if fingerprint(result(data_dirs[folder], base | {name: value})) == first:
            unchanged.append(name)
    assert not unchanged, f"{prefix}: changing {unchanged} changed nothing the study computes"
    no_runs = result(data_dirs["no_runs"], base)
    assert fingerprint(no_runs) != first, f"{prefix}: data_dir changed nothing"
    if prefix in NO_RUNS:
        assert NO_RUNS[prefix] in " ".join(no_runs.answer.sentences), no_runs.answer.sentences


def test_a_display_only_parameter_reaches_the_figures(fixture_data, monkeypatch):
    """04's fig_format: the notebook's first cell (studies.notebook) sets the inline figure format from it."""
    from kvlab import figures as plots

    calls = []
    monkeypatch.setattr(plots, "setup_notebook", lambda fig_format="png", dpi=110: calls.append(fig_format))
    for fmt in ("svg", "png"):
        wb, r = studies.notebook("02", {"data_dir": str(fixture_data), "fig_format": fmt})
        assert r.report == "02_throughput_decay" and wb.data == fixture_data
    assert calls == ["svg", "png"]


def test_every_study_computes_with_the_notebooks_defaults():
    """compute()'s keyword defaults are the notebook's parameter defaults, so a study computed outside its notebook
    (kvlab report's index.json) is the one the page shows."""
    import inspect

    for nb in reports.notebooks():
        mod = studies.module(nb.stem)
        sig = {n: p.default for n, p in inspect.signature(mod.compute).parameters.items() if p.kind is p.KEYWORD_ONLY}
        defaults = reports._defaults(nb)
        assert set(defaults) - DISPLAY_ONLY == set(sig), nb.name
        assert {n: (list(v) if isinstance(v, tuple) else v) for n, v in sig.items()} == {
            n: v for n, v in defaults.items() if n not in DISPLAY_ONLY
        }, nb.name


def test_the_notebooks_share_one_vocabulary():
    """No notebook declares a parameter under a name that was retired, and each retired name's successor is a
    parameter of some notebook (where one notebook says gpu, model, dcp, mem_util, none says model_gpu …)."""
    declared = {name for nb in reports.notebooks() for name in papermill.inspect_notebook(str(nb))}
    assert not declared & set(RENAMED_PARAMETERS)
    assert set(RENAMED_PARAMETERS.values()) <= declared


def test_an_old_parameter_name_is_refused_naming_the_new_one():
    check_parameters({"gpu": "H200", "mem_util": 0.95})
    with pytest.raises(
        NameError,
        match=r"renamed notebook parameters: model_gpu is now gpu \(-p gpu=…\); "
        r"model_dcp is now dcp",
    ):
        check_parameters({"model_gpu": "H200", "model_dcp": 4, "data_dir": ""})


@pytest.mark.parametrize(
    ("prefix", "old", "new"), [("01", "measured_mem_util", "mem_util"), ("03", "model_gpu", "gpu")]
)
def test_a_notebook_given_an_old_name_fails_naming_the_new_one(prefix, old, new, data_dirs):
    """A notebook's first cell (studies.notebook) refuses a parameter under its old name, naming the new one."""
    with pytest.raises(NameError, match=f"{old} is now {new}"):
        studies.notebook(prefix, {"data_dir": str(data_dirs["no_runs"]), old: 0.95})
