"""What every notebook opens with: one call that resolves the data folder, sets up inline figures and
serves the stored tables, filtered by source and experiment, so no notebook repeats the loading preamble.

The workbook also records what a notebook read: the measured experiments and the documents it asked for by name.
Its last cell displays them (``display(wb.sources(...))``, naming any frame it read past the workbook's filters),
and the report builder (:mod:`kvlab.reports`) reads that record back as data (:data:`kvlab.verdicts.SOURCES_MIME`)
to build the report's provenance panel from what the report uses, not from every run under the data folder."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kvlab import figures, store
from kvlab.paths import DATA_DIR
from kvlab.verdicts import Sources
from kvlab.verdicts import add_names as _add


#: The host prefix of the reference host's experiment files (data/experiments/b300_*.yaml: 8× NVIDIA B300), whose
#: measured runs a study shows first (:meth:`Workbook.measured_experiment`).
REFERENCE_HOST = "b300"


@dataclass
class Workbook:
    """The tables under one data folder (``reference/`` and ``runs/``), read once each, on first use."""

    data: Path
    _cache: dict[str, pl.DataFrame] = field(default_factory=dict, repr=False)
    #: Numbers the figures this notebook shows, from 1.
    figures: figures.FigureNumbers = field(default_factory=figures.FigureNumbers, repr=False)
    #: The measured experiments and the documents this notebook asked for, in order (:meth:`sources`).
    read_measured: list[str] = field(default_factory=list, repr=False)
    read_documents: list[str] = field(default_factory=list, repr=False)

    def show(self, fig, caption: str, data: pl.DataFrame | None = None, alt: str | None = None) -> figures.FigureView:
        """``display(wb.show(fig, caption, data))``: a figure as the reports show it, numbered in this notebook
        (:func:`kvlab.figures.show`). A figure pyplot made (``plt.subplots()``, a re-plot in JupyterLab) is drawn once,
        by the view: it is closed in pyplot, whose inline backend would draw it again at the end of the cell."""
        _release_from_pyplot(fig)
        return figures.show(fig, caption, data, alt, self.figures)

    def _table(self, name: str, load) -> pl.DataFrame:
        if name not in self._cache:
            self._cache[name] = load(self.data)
        return self._cache[name]

    @property
    def runs(self) -> pl.DataFrame:
        """Every run row: published, measured and modelled (``store.load_runs``)."""
        return self._table("runs", store.load_runs)

    @property
    def requests(self) -> pl.DataFrame:
        """Per-request records of every measured run."""
        return self._table("requests", store.load_requests)

    @property
    def attempts(self) -> pl.DataFrame:
        """Every launch attempt of every measured run."""
        return self._table("attempts", store.load_attempts)

    @property
    def telemetry(self) -> pl.DataFrame:
        """Every measured run's telemetry samples, on the requests' time origin (``store.load_telemetry``)."""
        return self._table("telemetry", store.load_telemetry)

    @property
    def telemetry_info(self) -> pl.DataFrame:
        """What each measured run's telemetry is, or why there is none (``store.load_telemetry_info``)."""
        return self._table("telemetry_info", store.load_telemetry_info)

    def probes(self, experiment: str) -> pl.DataFrame:
        """The accuracy probes of one experiment's server starts (``store.load_probes``; empty: none recorded)."""
        _add(self.read_measured, [experiment])
        return self._table("probes", store.load_probes).filter(pl.col("experiment") == experiment)

    def published(self, experiment: str) -> pl.DataFrame:
        """The published rows of one document's experiment (e.g. ``article_b300``)."""
        _add(self.read_documents, [experiment])
        return self.runs.filter((pl.col("source") == "published") & (pl.col("experiment") == experiment))

    def measured(self, experiment: str | list[str], mem_util: float | None = None) -> pl.DataFrame:
        """The measured rows of one experiment (or several), at one memory setting when ``mem_util`` is given;
        empty for an empty name (a notebook parameter set to "" means none)."""
        names = [experiment] if isinstance(experiment, str) else list(experiment)
        _add(self.read_measured, names)
        rows = self.runs.filter((pl.col("source") == "measured") & pl.col("experiment").is_in([n for n in names if n]))
        return rows if mem_util is None else rows.filter(pl.col("mem_util") == mem_util)

    def measured_experiment(self, study_default: str) -> str:
        """The experiment a study shows measured runs of: a GPU host's counterpart of ``study_default`` where one has
        measured runs under this data folder, else ``study_default`` itself (empty stays empty: every experiment).

        Nothing in an experiment file names its study, so counterparts are matched by name: the part after the
        host prefix (``cpu_long_context`` and ``b300_long_context`` are both ``long_context``). A counterpart counts
        where its measured runs ran on GPUs (``device_kind`` gpu); the reference host's (``b300_*``) comes first,
        then any other in name order. Records nothing as read: the study's :meth:`measured` call on the name does.
        A study calls it on its default, e.g. ``wb.measured(wb.measured_experiment("cpu_long_context"))``."""
        _, sep, study = study_default.partition("_")
        if not sep or not study:
            return study_default
        runs = self.runs.filter((pl.col("source") == "measured") & (pl.col("device_kind") == "gpu"))
        names = {n for n in runs["experiment"].unique().to_list() if n and n != study_default}
        found = sorted(
            (n for n in names if n.partition("_")[2] == study), key=lambda n: (n.partition("_")[0] != REFERENCE_HOST, n)
        )
        return found[0] if found else study_default

    def claims(self, experiment: str, kind: str | None = None) -> pl.DataFrame:
        """One document's claims (``reference/*claims*``), of one kind when ``kind`` is given."""
        _add(self.read_documents, [experiment])
        rows = self._table("claims", store.load_claims).filter(pl.col("experiment") == experiment)
        return rows if kind is None else rows.filter(pl.col("kind") == kind)

    def all_claims(self) -> pl.DataFrame:
        """Every document's claims (a claim checked against another document's reads them all; not recorded as
        read: the claim's own document is)."""
        return self._table("claims", store.load_claims)

    def sources(self, *read: pl.DataFrame | str) -> Sources:
        """``display(wb.sources(...))``, a notebook's last cell: what it read through the workbook's filters
        (:meth:`measured`, :meth:`probes`, :meth:`published`, :meth:`claims`) and ``read``, what it read past them:
        a frame's experiments (its measured rows as measured experiments, its published rows as documents; every
        row counts as measured in a frame without ``source``), or a name (a document where the stored documents
        have it: published rows, claims or the register; else a measured experiment)."""
        measured, documents = list(self.read_measured), list(self.read_documents)
        runs = self.runs
        known = (
            set(runs.filter(pl.col("source") == "published")["experiment"].to_list())
            | set(self._table("claims", store.load_claims)["experiment"].to_list())
            | set(store.load_documents(self.data)["experiment"].to_list())
        )
        for item in read:
            if isinstance(item, str):
                _add(documents if item in known else measured, [item])
            elif "experiment" in item.columns:
                rows = item.filter(pl.col("experiment").is_not_null())
                if "source" in rows.columns:
                    _add(
                        measured, rows.filter(pl.col("source") == "measured")["experiment"].unique(maintain_order=True)
                    )
                    _add(
                        documents,
                        rows.filter(pl.col("source") == "published")["experiment"].unique(maintain_order=True),
                    )
                else:
                    _add(measured, rows["experiment"].unique(maintain_order=True))
        return Sources(tuple(measured), tuple(documents))


#: Notebook parameters that were renamed to the one vocabulary of notebooks 01–07 (gpu, model, tp, dcp, mem_util,
#: mem_utils, headroom_contexts, curve_points, …): old name → new name.
RENAMED_PARAMETERS: dict[str, str] = {
    "measured_mem_util": "mem_util",  # 01, 02
    "model_gpu": "gpu",  # 03
    "model_name": "model",  # 03
    "model_dcp": "dcp",  # 03
    "model_contexts": "headroom_contexts",  # 03 (as 04 names them)
    "grid_points": "curve_points",  # 04 (as 06 names them)
}


def _release_from_pyplot(fig) -> None:
    """Close ``fig`` in pyplot when pyplot manages it (the figure itself stays whole and can still be saved); a
    plain ``Figure`` (every figure kvlab draws) is left as it is, and pyplot is never imported here."""
    pyplot = sys.modules.get("matplotlib.pyplot")  # a figure pyplot manages was made after pyplot was imported
    if pyplot is not None and getattr(getattr(fig, "canvas", None), "manager", None) is not None:
        pyplot.close(fig)


def check_parameters(namespace: Mapping[str, object]) -> None:
    """Refuse a parameter given under its old name (:data:`RENAMED_PARAMETERS`), naming the new one: papermill sets
    whatever ``-p`` names, so an old name would otherwise change nothing, silently. A notebook's first code cell
    calls it with ``globals()``."""
    old = [name for name in RENAMED_PARAMETERS if name in namespace]
    if old:
        raise NameError(
            "renamed notebook parameter"
            + ("s" if len(old) > 1 else "")
            + ": "
            + "; ".join(f"{name} is now {RENAMED_PARAMETERS[name]} (-p {RENAMED_PARAMETERS[name]}=…)" for name in old)
        )


def open_workbook(data_dir: str | Path = "", fig_format: str = "png") -> Workbook:
    """A notebook's first call: figures inline in ``fig_format`` (numbered from 1), tables from ``data_dir``
    (empty: the repository's ``data/``)."""
    figures.setup_notebook(fig_format)
    return Workbook(Path(data_dir) if data_dir else DATA_DIR)
