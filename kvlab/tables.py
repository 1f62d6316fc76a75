"""Reader's tables for the reports: human column names with units, fixed significant figures, no dtype rows.

``table(frame)`` returns an object that Jupyter and the HTML reports render as a styled table (pandas'
``Styler``): column names from :data:`LABELS` (or derived from the name's unit suffix), numbers to three
significant figures (whole numbers from 1,000 up, with thousands separators), missing values as "–", engines
named as in every figure, hash ids left out, and a wrapper that scrolls sideways instead of overflowing the page.
"""

from __future__ import annotations

import html
import math

import polars as pl

#: Column names as a reader sees them (units in parentheses). Columns not listed get a name derived from
#: their unit suffix (:data:`SUFFIXES`), underscores as spaces.
LABELS = {
    "context_label": "context",
    "context_tokens": "context (tokens)",
    "engine": "engine",
    "mem_util": "memory utilisation",
    "dcp": "DCP size",
    "tp": "TP size",
    "gpu_count": "GPUs",
    "n_runs": "runs",
    "runs_ok": "runs succeeded",
    "runs_failed": "runs failed",
    "speedup": "speed-up (×)",
    "faster": "faster engine",
    "scale_factor": "context scale (÷)",
    "batch_time_std_s": "batch time spread, std (s)",
    "kv_pool_gib_per_gpu": "KV pool per GPU (GiB)",
    "kv_capacity_tokens": "KV capacity (tokens)",
    "max_concurrent_seqs": "sequences that fit",
    "prefix_caching": "prefix cache",
    "shared_fraction": "shared fraction",
    "hit_rate": "cache-hit rate",
    "statement": "what the document says",
    "citation": "source",
}

#: Unit suffixes of kvlab's column names and how a header states them.
SUFFIXES = {"_s": "s", "_ms": "ms", "_us": "µs", "_gib": "GiB", "_gb": "GB", "_mib": "MiB", "_tokens": "tokens",
            "_pct": "%", "_tok_s": "tokens/s", "_per_s": "per s"}

#: Columns of hash ids: never shown (the run table links runs by what varied, not by key).
HIDDEN = {"run_id", "server_key", "key", "request_id", "attempt_id"}


def label(column: str) -> str:
    """The header for ``column``: :data:`LABELS`, else the name with its unit suffix as '(unit)'."""
    if column in LABELS:
        return LABELS[column]
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if column.endswith(suffix):
            return f"{column[: -len(suffix)].replace('_', ' ')} ({SUFFIXES[suffix]})"
    return column.replace("_", " ")


def number(v, digits: int = 3) -> str:
    """A number as a reader reads it: '–' when missing, whole with separators from 1,000 up, a value with at
    most two decimals as it is (a setting such as 0.92, a published 100.5 s), else ``digits`` significant
    figures kept even when they are zeros (1.500498 → '1.50', 0.434768 → '0.435')."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if round(v, 2) == v:
        return f"{v:g}"
    return f"{v:#.{digits}g}".rstrip(".")


def _cell(v, digits: int) -> str:
    if isinstance(v, (int, float)) or v is None:
        return number(v, digits)
    if isinstance(v, (list, tuple)):
        return ", ".join(_cell(x, digits) for x in v)
    return str(v)


class Table:
    """A frame shown as a reader's table (see the module docstring); ``.frame`` is the data it shows."""

    def __init__(self, frame: pl.DataFrame, columns: dict[str, str] | None = None, digits: int = 3,
                 caption: str | None = None):
        from kvlab.guide import engine_label

        shown = [c for c in (columns or frame.columns) if c not in HIDDEN or (columns and c in columns)]
        missing = [c for c in shown if c not in frame.columns]
        if missing:
            raise KeyError(f"table: no column(s) {missing} in the frame (have {frame.columns})")
        self.frame = frame.select(shown)
        self.headers = [(columns or {}).get(c) or label(c) for c in shown]
        self.caption = caption
        rows = []
        for row in self.frame.iter_rows(named=True):
            rows.append([engine_label(v) if c == "engine" and isinstance(v, str) else _cell(v, digits)
                         for c, v in row.items()])
        self.rows = rows

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.headers)

    def _repr_html_(self) -> str:
        styler = self.to_pandas().style.hide(axis="index").set_table_attributes('class="kvlab-table"')
        if self.caption:
            styler = styler.set_caption(html.escape(self.caption))
        styler = styler.set_table_styles([
            {"selector": "th", "props": "text-align: right; padding: 2px 8px; white-space: normal; "
                                        "font-weight: 600; border-bottom: 1px solid #888;"},
            {"selector": "td", "props": "text-align: right; padding: 2px 8px;"},
            {"selector": "caption", "props": "caption-side: top; text-align: left; color: #555;"},
        ])
        return f'<div class="kvlab-table-wrap" style="overflow-x: auto; max-width: 100%;">{styler.to_html()}</div>'

    def __repr__(self) -> str:
        return self.to_pandas().to_string(index=False)


def table(frame: pl.DataFrame, columns: dict[str, str] | list[str] | None = None, digits: int = 3,
          caption: str | None = None) -> Table:
    """``frame`` as a reader's table. ``columns``: the columns to show, in order (a dict also renames them)."""
    if isinstance(columns, list):
        columns = dict.fromkeys(columns, None)
    return Table(frame, columns, digits, caption)
