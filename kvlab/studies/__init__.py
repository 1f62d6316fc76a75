"""One folder per report (``kvlab/studies/<study>/``): each study's whole answer, computed once, as a typed result.

``compute(workbook, **parameters) -> StudyResult`` holds everything a report shows: the frames behind every figure
and table, the other typed values its text quotes (a fit, a crossover), its verdicts, its **answer** (the report's
bottom line: one or two plain sentences, and where it fits a small typed table with the evidence kind of every
cell), what it read (experiments and documents) and the parameters it ran with. A notebook's code cells call
``compute`` once (:func:`notebook`) and display what it returns; run by the report build, the notebook writes the
result's JSON beside its page, and :mod:`kvlab.reports` assembles ``reports/index.json`` from those files: no study
is computed twice, and the index and the pages cannot disagree.

The registry :data:`STUDIES` maps each report's notebook stem (``05_prefix_sharing``) to its module.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import import_module
from pathlib import Path
from types import MappingProxyType
from typing import Any

import polars as pl

from kvlab import words
from kvlab.paths import DATA_DIR
from kvlab.studies.result import SCHEMA_VERSION, Answer, StudyResult
from kvlab.studies.section import Section, verdicts_and_sources  # noqa: F401  (a notebook's last cell)
from kvlab.workbook import Workbook, check_parameters, open_workbook

#: Each report's notebook stem -> the module under kvlab.studies that computes it.
STUDIES: dict[str, str] = {
    "01_context_scaling": "context_scaling",
    "02_throughput_decay": "throughput_decay",
    "03_memory_utilisation": "memory_utilisation",
    "04_whatif_model": "whatif_model",
    "05_prefix_sharing": "prefix_sharing",
    "06_engine_choice": "engine_choice",
    "07_capacity": "capacity",
}

#: The MIME type under which a notebook's answer output carries the answer as data (its HTML page puts it first).
ANSWER_MIME = "application/vnd.kvlab.answer+json"


def _answer_bundle(self, include=None, exclude=None):
    md = words.answer_markdown(self)
    return {"text/markdown": md, "text/plain": " ".join(self.sentences), ANSWER_MIME: self.to_json()}


Answer._repr_mimebundle_ = _answer_bundle


#: A measured-experiment parameter's default (reports 01, 02, 05, 07): the GPU host's counterpart of the study's CPU
#: experiment where one has measured runs under the data folder (:meth:`kvlab.workbook.Workbook.measured_experiment`),
#: else the CPU experiment itself. A name given as the parameter pins that experiment.
AUTO = "auto"


def chosen_experiment(wb, given: str, cpu_default: str) -> str:
    """The experiment a study shows: ``given``, or with :data:`AUTO` the GPU host's runs where measured, else
    ``cpu_default``."""
    return wb.measured_experiment(cpu_default) if given == AUTO else given


def module(report: str):
    """The study module of a report (its notebook stem, or the stem's number: '05')."""
    stems = [s for s in STUDIES if s == report or s.split("_", 1)[0] == report]
    if len(stems) != 1:
        raise KeyError(f"no study for report {report!r} (have: {list(STUDIES)})")
    return import_module(f"kvlab.studies.{STUDIES[stems[0]]}")


def parameters(compute, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``compute`` found in ``namespace`` (a notebook's globals after its parameters
    cell), so a notebook passes its parameters on without naming each."""
    names = [p.name for p in inspect.signature(compute).parameters.values() if p.kind is p.KEYWORD_ONLY]
    return {n: namespace[n] for n in names if n in namespace}


def run(mod, wb, namespace: Mapping[str, Any]) -> StudyResult:
    """``mod.compute`` with the parameters ``namespace`` holds; the result records every parameter it ran with,
    the defaults included (what the study's page reads, what the provenance panel lists)."""
    given = parameters(mod.compute, namespace)
    result = mod.compute(wb, **given)
    defaults = {
        p.name: p.default for p in inspect.signature(mod.compute).parameters.values() if p.kind is p.KEYWORD_ONLY
    }
    return replace(result, parameters={**defaults, **given})


def compute_report(
    report: str, data_dir: str | Path | None = None, params: Mapping[str, Any] | None = None, workbook=None
) -> StudyResult:
    """One report's result outside a notebook (what ``kvlab report`` writes to index.json): ``params`` may hold
    names of other notebooks' parameters too (ignored, as papermill does)."""
    mod = module(report)
    wb = workbook if workbook is not None else Workbook(Path(data_dir) if data_dir else DATA_DIR)
    return run(mod, wb, dict(params or {}))


#: Where a notebook run by the report builder writes its result's JSON (:func:`notebook`): set by
#: :func:`kvlab.reports.run_one` for the kernel papermill starts; unset in JupyterLab, where nothing is written.
RESULT_ENV = "KVLAB_RESULT_JSON"


def notebook(report: str, namespace: Mapping[str, Any]):
    """A report notebook's first code cell: refuse renamed parameters, open the workbook (inline figures in the
    notebook's ``fig_format`` where it has one) and compute the report's study with the notebook's parameters, once.
    Returns (workbook, result); the workbook numbers the figures the notebook shows. Run by the report builder
    (:data:`RESULT_ENV` set), it writes the result's JSON there: the index is assembled from that file."""
    check_parameters(namespace)  # a parameter under its old name fails, naming the new one
    wb = open_workbook(namespace.get("data_dir", ""), namespace.get("fig_format", "png"))
    mod = module(report)
    result = run(mod, wb, namespace)
    if target := os.environ.get(RESULT_ENV):
        write_result(result, Path(target))
    return wb, result


def open_page(report: str, namespace: Mapping[str, Any]):
    """A report notebook's one setup line: :func:`notebook` (the study computed once, its result file written where
    the report build asks) and the study's page module, whose functions the notebook's cells call. Returns (workbook,
    result, page)."""
    wb, result = notebook(report, namespace)
    return wb, result, import_module(f"{module(report).__name__}.page")


def result_class(report: str) -> type[StudyResult]:
    """The typed result class of a report (its notebook stem, or the stem's number)."""
    mod = import_module(f"{module(report).__name__}.result")
    found = [c for c in vars(mod).values() if isinstance(c, type) and issubclass(c, StudyResult) and c.report]
    if len(found) != 1:
        raise LookupError(f"{mod.__name__} declares {len(found)} result classes, not one")
    return found[0]


def frames_note(report: str) -> str:
    """The paragraph a report notebook's first cell ends with: ``r``'s class and every frame a user can explore."""
    cls = result_class(report)
    frames = ", ".join(f"`r.{n}`" for n in cls.frame_names())
    return (
        f"**To explore:** `r` is this page's typed result (`{cls.__name__}`). Its frames are polars DataFrames, "
        f"`None` where nothing was measured: {frames}. `r.answer` and `r.verdicts` hold the answer and the verdicts."
    )


def write_result(result: StudyResult, path: Path) -> Path:
    """``result.to_json()`` written to ``path`` atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_json(), default=str), encoding="utf-8")
    tmp.replace(path)
    return path


def _answer_json(answer: Mapping[str, Any]) -> dict:
    """An answer as the index shows it (sentences, and a table as columns and rows), from either stored form."""
    table = answer.get("table")
    if isinstance(table, Mapping) and "schema" in table:  # a typed result stores a frame with its schema
        columns = list(table["columns"])
        table = {"columns": columns, "rows": [list(r) for r in zip(*table["columns"].values(), strict=True)]}
    return {"sentences": list(answer["sentences"]), "table": table}


def read_summary(path: Path) -> dict:
    """What the index keeps of a report, read from its result file (:func:`write_result`): ``report``,
    ``schema_version``, ``answer`` (sentences and a columns/rows table), ``verdicts`` (dicts), ``experiments``,
    ``documents`` and ``parameters``. Refuses a file of another schema version, naming both."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{path}: result file of schema_version {data.get('schema_version')!r}; this kvlab writes "
            f"{SCHEMA_VERSION} (build the report again)"
        )
    return {
        "report": data["report"],
        "schema_version": data["schema_version"],
        "answer": _answer_json(data["answer"]),
        "verdicts": list(data["verdicts"]),
        "experiments": tuple(data.get("experiments", ())),
        "documents": tuple(data.get("documents", ())),
        "parameters": dict(data.get("parameters", {})),
    }
