"""One module per report: each study's whole answer, computed once, as a typed result.

``compute(workbook, **parameters) -> StudyResult`` holds everything a report shows: the frames behind every figure
and table, the other typed values its text quotes (a fit, a crossover), its verdicts, its **answer** (the report's
bottom line: one or two plain sentences, and where it fits a small typed table with the evidence kind of every
cell), what it read (experiments and documents) and the parameters it ran with. A notebook's code cells call
``compute`` once and display what it returns; :mod:`kvlab.reports` writes ``reports/index.json`` (answers and
verdicts) from the same ``compute`` results, never from notebook outputs, so the index and the pages cannot
disagree.

The registry :data:`STUDIES` maps each report's notebook stem (``05_prefix_sharing``) to its module.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import import_module
from pathlib import Path
from types import MappingProxyType
from typing import Any

import polars as pl

from kvlab import narrative
from kvlab.paths import DATA_DIR
from kvlab.verdicts import Sources, Verdict
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


@dataclass(frozen=True)
class Answer:
    """A report's bottom line: ``sentences`` (plain Markdown-inline sentences, the first the answer itself) and,
    where it fits, ``table``: a small typed frame (e.g. context × memory setting → engine) whose ``evidence``
    column says the kind of every row (published, measured, modelled, configuration)."""

    sentences: tuple[str, ...]
    table: pl.DataFrame | None = None

    def __post_init__(self):
        if not self.sentences or not all(isinstance(s, str) and s.strip() for s in self.sentences):
            raise ValueError("an Answer needs at least one non-empty sentence")
        if self.table is not None and "evidence" not in self.table.columns:
            raise ValueError(f"an Answer's table needs an 'evidence' column (has {self.table.columns})")
        object.__setattr__(self, "sentences", tuple(self.sentences))

    def to_json(self) -> dict:
        """Its sentences, and its table as columns (in order: a notebook's JSON sorts an object's keys) and rows."""
        return {
            "sentences": list(self.sentences),
            "table": None
            if self.table is None
            else {"columns": self.table.columns, "rows": [list(r) for r in self.table.rows()]},
        }

    def _repr_mimebundle_(self, include=None, exclude=None):
        md = narrative.answer_markdown(self)
        return {"text/markdown": md, "text/plain": " ".join(self.sentences), ANSWER_MIME: self.to_json()}


@dataclass(frozen=True)
class StudyResult:
    """Everything one report shows (see the module docstring). ``frames`` and ``values`` are read-only mappings;
    ``result["name"]`` reads either."""

    report: str
    answer: Answer
    verdicts: tuple[Verdict, ...]
    frames: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    values: Mapping[str, Any] = field(default_factory=dict)
    experiments: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.report not in STUDIES:
            raise ValueError(f"StudyResult.report {self.report!r}: expected one of {list(STUDIES)}")
        for name in ("frames", "values", "parameters"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "verdicts", tuple(self.verdicts))
        if bad := [n for n, f in self.frames.items() if not isinstance(f, pl.DataFrame)]:
            raise TypeError(f"StudyResult {self.report}: frames {bad} are not polars DataFrames (put them in values)")
        if clash := set(self.frames) & set(self.values):
            raise ValueError(f"StudyResult {self.report}: {sorted(clash)} both a frame and a value")

    @property
    def sources(self):
        """What it read, as the report's provenance panel takes it (``display(result.sources)``)."""
        return Sources(self.experiments, self.documents)

    def __getitem__(self, name: str):
        if name in self.frames:
            return self.frames[name]
        if name in self.values:
            return self.values[name]
        raise KeyError(
            f"{self.report} has no frame or value {name!r} (frames: {sorted(self.frames)}, "
            f"values: {sorted(self.values)})"
        )

    def to_json(self) -> dict:
        """What ``reports/index.json`` keeps of it: the answer, the verdicts (with their family), what it read and
        the parameters."""
        return {
            "report": self.report,
            "answer": json.loads(json.dumps(self.answer.to_json(), default=str)),
            "verdicts": json.loads(json.dumps([asdict(v) for v in self.verdicts], default=str)),
            "experiments": list(self.experiments),
            "documents": list(self.documents),
            "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in self.parameters.items()},
        }


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
    the defaults included (what :mod:`kvlab.pages` reads, what the provenance panel lists)."""
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


def sourced(report: str, wb, answer: Answer, verdicts, frames=None, values=None, read=()) -> StudyResult:
    """A StudyResult recording what ``wb`` was asked for (its measured experiments and documents) and ``read``,
    what the study read past the workbook's filters (see :meth:`kvlab.workbook.Workbook.sources`)."""
    src = wb.sources(*read)
    return StudyResult(report, answer, tuple(verdicts), frames or {}, values or {}, src.measured, src.documents)


def notebook(report: str, namespace: Mapping[str, Any]):
    """A report notebook's first code cell: refuse renamed parameters, open the workbook (inline figures in the
    notebook's ``fig_format`` where it has one) and compute the report's study with the notebook's parameters.
    Returns (workbook, result); the workbook numbers the figures the notebook shows."""
    check_parameters(namespace)  # a parameter under its old name fails, naming the new one
    wb = open_workbook(namespace.get("data_dir", ""), namespace.get("fig_format", "png"))
    mod = module(report)
    return wb, run(mod, wb, namespace)
