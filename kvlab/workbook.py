"""What every notebook opens with: one call that resolves the data folder, sets up inline figures and
serves the stored tables, filtered by source and experiment, so no notebook repeats the loading preamble."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kvlab import plots, store
from kvlab.paths import DATA_DIR


@dataclass
class Workbook:
    """The tables under one data folder (``reference/`` and ``runs/``), read once each, on first use."""

    data: Path
    _cache: dict[str, pl.DataFrame] = field(default_factory=dict, repr=False)
    #: Numbers the figures this notebook shows, from 1.
    figures: plots.FigureNumbers = field(default_factory=plots.FigureNumbers, repr=False)

    def show(self, fig, caption: str, data: pl.DataFrame | None = None, alt: str | None = None) -> plots.FigureView:
        """``display(wb.show(fig, caption, data))``: a figure as the reports show it, numbered in this notebook
        (:func:`kvlab.plots.show`)."""
        return plots.show(fig, caption, data, alt, self.figures)

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

    def published(self, experiment: str) -> pl.DataFrame:
        """The published rows of one document's experiment (e.g. ``article_b300``)."""
        return self.runs.filter((pl.col("source") == "published") & (pl.col("experiment") == experiment))

    def measured(self, experiment: str | list[str], mem_util: float | None = None) -> pl.DataFrame:
        """The measured rows of one experiment (or several), at one memory setting when ``mem_util`` is given;
        empty for an empty name (a notebook parameter set to "" means none)."""
        names = [experiment] if isinstance(experiment, str) else list(experiment)
        rows = self.runs.filter((pl.col("source") == "measured") & pl.col("experiment").is_in([n for n in names if n]))
        return rows if mem_util is None else rows.filter(pl.col("mem_util") == mem_util)

    def claims(self, experiment: str, kind: str | None = None) -> pl.DataFrame:
        """One document's claims (``reference/*claims*``), of one kind when ``kind`` is given."""
        rows = self._table("claims", store.load_claims).filter(pl.col("experiment") == experiment)
        return rows if kind is None else rows.filter(pl.col("kind") == kind)


def open_workbook(data_dir: str | Path = "", fig_format: str = "png") -> Workbook:
    """A notebook's first call: figures inline in ``fig_format`` (numbered from 1), tables from ``data_dir``
    (empty: the repository's ``data/``)."""
    plots.setup_notebook(fig_format)
    return Workbook(Path(data_dir) if data_dir else DATA_DIR)
