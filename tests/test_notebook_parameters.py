"""Every notebook parameter reaches what it names: each notebook runs with its base parameters, then once per
parameter with only that parameter changed, and what the reader sees (text, tables, figures) must change.

The runs of one notebook share one kernel (papermill's parameter injection, nbclient's cell execution), so the
whole check costs one kernel start per notebook."""

from __future__ import annotations

import copy
import json

import papermill
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from notebook_data import copy_reference, write_capacity_runs, write_two_engine_runs
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

from kvlab import reports
from kvlab.verdicts import SOURCES_MIME
from kvlab.workbook import RENAMED_PARAMETERS, check_parameters

#: Per notebook: the data folder it runs on ("fixture": real measured runs of every CPU study plus document
#: variants; "two_engines": made-up long-context runs of both engines with a crossover; "capacity": SYNTHETIC
#: capacity runs with telemetry, notebook_data.CAPACITY), base parameters beside
#: data_dir (small where the notebook draws many points), and a non-default value for every other parameter.
#: data_dir's own variant is a folder without measured runs.
CASES = {
    "01": ("two_engines", {}, {
        "published_experiment": "article_b300_alt", "measured_experiment": "", "mem_util": 0.95,
        "engine_a": "sglang", "engine_b": "vllm", "context_from": "200K", "context_to": "64K",
        "crossover_methods": ["linear"], "measured_engine_a": "sglang-jax", "measured_engine_b": "vllm"}),
    "02": ("two_engines", {}, {
        "published_experiment": "article_b300_alt", "measured_experiment": "", "mem_util": 0.95,
        "context_from": "200K", "context_to": "64K"}),
    "03": ("two_engines", {}, {
        "published_experiment": "article_b300_alt", "measured_experiment": "cpu_prefix_sharing",
        "gpu": "H200", "model": "DeepSeek-V3", "mem_utils": [0.9, 0.95],
        "headroom_contexts": [65536, 131072], "dcp": 4}),
    "04": ("fixture", {"max_context": 262144, "curve_points": 8, "sensitivity_batches": [8],
                       "sensitivity_outputs": [1024]}, {
        "published_experiment": "article_b300_alt", "gpu": "H200", "model": "DeepSeek-V3", "tp": 16, "dcp": 4,
        "gpus": ["B300", "H100"], "dcp_sizes": [2, 8], "max_context": 524288, "curve_points": 10,
        "batch_size": 16, "output_tokens": 2048, "sensitivity_batches": [32], "sensitivity_outputs": [4096],
        "mem_utils": [0.9, 0.95], "headroom_contexts": [65536, 131072], "kv_layers": 93, "fig_format": "svg"}),
    "05": ("fixture", {}, {
        "sharing_experiment": "cpu_multi_turn", "multi_turn_experiment": "cpu_prefix_sharing",
        "claims_experiment": "article_kv_design_alt", "threshold": 0.5, "min_gain": 0.4,
        "ideal_prompt_tokens": 2016, "ideal_requests": 16, "block_tokens": 16}),
    "06": ("fixture", {"curve_points": 8, "max_context": 262144}, {
        "claims_experiment": "article_kv_design_alt", "published_experiment": "article_b300_alt",
        "context_tokens": 131072, "shared_fraction": 0.0, "concurrency": 16, "model": "Kimi-K3", "gpu": "H200",
        "tp": 16, "dcp": 4, "mixed_hardware_or_frequent_model_changes": True, "priority": "throughput",
        "max_context": 524288, "curve_points": 10}),
    "07": ("capacity", {}, {
        "measured_experiment": "cpu_long_context", "slo_share": 0.5, "gpu": "H200", "model": "DeepSeek-V3", "tp": 16,
        "dcp_sizes": [2, 8], "mem_utils": [0.9, 0.95], "headroom_contexts": [65536, 131072]}),
}

#: What a report without measured runs must say (the data_dir variant: a folder without runs), and how many figures
#: it still draws.
NO_RUNS = {
    "01": (["No measured runs"], 1),
    "03": (["No measured runs"], 1),
    "05": (["No measured runs of `cpu_prefix_sharing`", "the document's claims stay untested here"], 1),
    # the decision tree and the modelled context curves; no factor decides: the guide follows the tree, said so
    "06": (["No measured prefix-sharing runs", "No measured classification runs", "no factor decides, so the guide "
            "follows the tree"], 2),
}


def seen(nb) -> list[str]:
    """What a reader sees of an executed notebook: every output's data, in order (errors raise before this); not
    the notebook's record of what it read (``wb.sources``), which the report builder takes off the page."""
    return [json.dumps(o.get("data") or o.get("text"), sort_keys=True) for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if (o.get("output_type") != "stream" or o.get("name") == "stdout")
            and SOURCES_MIME not in (o.get("data") or {})]


def run_variants(path, variants: list[dict]) -> list[list[str]]:
    """Execute the notebook at ``path`` once per parameter set, in one kernel; what each run shows (a string
    naming the error where a cell failed)."""
    template = load_notebook_node(str(path))
    client = NotebookClient(copy.deepcopy(template), timeout=600, kernel_name="python3", config=reports.kernel_config(),
                            resources={"metadata": {"path": str(path.parent)}})
    shown = []
    with client.setup_kernel():
        for params in variants:
            nb = parameterize_notebook(copy.deepcopy(template), params)
            client.nb = nb
            try:
                for i, cell in enumerate(nb.cells):
                    client.execute_cell(cell, i)
            except CellExecutionError as e:
                shown.append(f"error: {e.ename}: {e.evalue}")
                continue
            shown.append(seen(nb))
    return shown


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory, fixture_data):
    root = tmp_path_factory.mktemp("notebook-parameters")
    return {"fixture": fixture_data, "two_engines": write_two_engine_runs(root / "two"),
            "capacity": write_capacity_runs(root / "capacity"),
            "no_runs": copy_reference(root / "no_runs")}


def test_every_parameter_has_a_case():
    for nb in reports.notebooks():
        declared = set(papermill.inspect_notebook(str(nb))) - {"data_dir"}
        assert declared == set(CASES[nb.name[:2]][2]), f"{nb.name}: parameters without a variant or stale ones"


@pytest.mark.parametrize("prefix", sorted(CASES))
def test_each_parameter_changes_what_the_report_shows(prefix, data_dirs, monkeypatch):
    monkeypatch.setenv(reports.STATIC_ENV, "1")  # a built report: no JupyterLab controls
    folder, small, changes = CASES[prefix]
    base = {"data_dir": str(data_dirs[folder])} | small
    names = ["data_dir", *changes]
    variants = [base, base | {"data_dir": str(data_dirs["no_runs"])}] + [base | {k: v} for k, v in changes.items()]
    first, *others = run_variants(reports.notebooks([prefix])[0], variants)
    assert isinstance(first, list) and first, f"{prefix}: the base run failed or showed nothing: {first}"
    failed = {name: shown for name, shown in zip(names, others) if isinstance(shown, str)}
    assert not failed, f"{prefix}: a cell failed when one parameter changed: {failed}"
    unchanged = [name for name, shown in zip(names, others) if shown == first]
    assert not unchanged, f"{prefix}: changing {unchanged} changed nothing a reader sees"
    if prefix in NO_RUNS:  # the data_dir variant: no measured runs, said so, and the model still drawn
        texts, figures = NO_RUNS[prefix]
        shown = "\n".join(others[0])
        assert [t for t in texts if t not in shown] == [], f"{prefix} without runs: {shown[:3000]}"
        assert sum(o.count("<figure ") for o in others[0]) >= figures, f"{prefix} without runs: too few figures"


def test_the_notebooks_share_one_vocabulary():
    """No notebook declares a parameter under a name that was retired, and each retired name's successor is a
    parameter of some notebook (where one notebook says gpu, model, dcp, mem_util, none says model_gpu …)."""
    declared = {name for nb in reports.notebooks() for name in papermill.inspect_notebook(str(nb))}
    assert not declared & set(RENAMED_PARAMETERS)
    assert set(RENAMED_PARAMETERS.values()) <= declared


def test_an_old_parameter_name_is_refused_naming_the_new_one():
    check_parameters({"gpu": "H200", "mem_util": 0.95})
    with pytest.raises(NameError, match=r"renamed notebook parameters: model_gpu is now gpu \(-p gpu=…\); "
                                        r"model_dcp is now dcp"):
        check_parameters({"model_gpu": "H200", "model_dcp": 4, "data_dir": ""})


@pytest.mark.parametrize(("prefix", "old", "new"), [("01", "measured_mem_util", "mem_util"), ("03", "model_gpu", "gpu")])
def test_a_notebook_given_an_old_name_fails_naming_the_new_one(prefix, old, new, data_dirs, monkeypatch):
    monkeypatch.setenv(reports.STATIC_ENV, "1")
    shown, = run_variants(reports.notebooks([prefix])[0], [{"data_dir": str(data_dirs["no_runs"]), old: 0.95}])
    assert isinstance(shown, str) and f"{old} is now {new}" in shown, shown
