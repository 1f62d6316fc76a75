"""Reader's tables for the reports: human column names with units, fixed significant figures, no dtype rows.

``table(frame)`` returns an object that Jupyter and the HTML reports render as a styled table (pandas'
``Styler``): column names from :data:`LABELS` (or derived from the name's unit suffix), numbers to three
significant figures (whole numbers from 1,000 up, with thousands separators), missing values as "–", engines
named as in every figure, hash ids left out, and a wrapper that scrolls sideways instead of overflowing the page.
"""

from __future__ import annotations

import csv
import io
from urllib.parse import quote

import html
import math
import re

import polars as pl
import pandas as pd

from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.units import minus

#: Column names as a reader sees them (units in parentheses). Columns not listed get a name derived from
#: their unit suffix (:data:`SUFFIXES`), underscores as spaces.
LABELS = {
    "context_label": "context",
    "context_tokens": "context (tokens)",
    "engine": "engine",
    "mem_util": "memory utilisation",
    "dcp": "DCP size",
    "tp": "TP size",
    "dp": "DP size",
    "dtype": "compute dtype",
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
    "hit_rate": "cache-hit rate (%)",
    "statement": "what the document says",
    "citation": "source",
    "mla_width": "cached MLA width (values/token)",
    "expert_reads": "experts read per step",
    "kv_format": "KV number format",
    "fit": "fit",
    "vllm_overhead_ms": f"c({engine_label(VLLM)}) per step (ms)",
    "sglang_overhead_ms": f"c({engine_label(SGLANG)}) per step (ms)",
    "slope_us_per_1k_tokens": "step-time slope (µs per 1,000 tokens)",
    "slope_ci_low": "slope, 95% low",
    "slope_ci_high": "slope, 95% high",
    "intercept_ms": "step time at no context (ms)",
    "intercept_ci_low": "intercept, 95% low",
    "intercept_ci_high": "intercept, 95% high",
    "r2": "R²",
    "max_abs_residual_ms": "largest residual (ms)",
    "linearity": "linear?",
    "bandwidth_efficiency_low": "bandwidth, 95% low",
    "bandwidth_efficiency_high": "bandwidth, 95% high",
    "mean_decode_context": "mean decode context (tokens)",
    "tpot_ms": "TPOT (ms)",
    "fitted_ms": "fitted (ms)",
    "residual_ms": "residual (ms)",
    "winner_64k": "faster at 64K (free fit)",
    "winner_200k": "faster at 200K (free fit)",
    "phys_crossover_tokens": "crossover, physics-only fit (tokens)",
    "phys_winner_64k": "faster at 64K (physics-only fit)",
    "phys_winner_200k": "faster at 200K (physics-only fit)",
    "phys_max_abs_residual_pct": "largest residual, physics-only fit (%)",
    "phys_bandwidth_efficiency": "decode bandwidth efficiency, physics-only fit",
    "phys_vllm_overhead_ms": f"c({engine_label(VLLM)}) per step, physics-only fit (ms)",
    "phys_sglang_overhead_ms": f"c({engine_label(SGLANG)}) per step, physics-only fit (ms)",
    "phys_dcp_layer_latency_us": "DCP collective latency, physics-only fit (µs)",
    "phys_prefill_efficiency": "prefill efficiency, physics-only fit",
    "physical": "physically plausible",
    "crossover_low_tokens": "lowest over the assumption sets (tokens)",
    "crossover_high_tokens": "highest over the assumption sets (tokens)",
    "crosses_in": "assumption sets with a crossover",
    "observed_s": "published batch time (s)",
    "modelled_s": "modelled batch time (s)",
    "residual_pct": "residual (%)",
    "loo_modelled_s": "predicted from the other points (s)",
    "loo_error_pct": "leave-one-out error (%)",
    "output_tokens_per_s": "output tokens/s",
    "prefill_efficiency": "prefill efficiency (share of peak)",
    "bandwidth_efficiency": "decode bandwidth efficiency (share of peak)",
    "dcp_layer_latency_us": "DCP latency per collective, one per layer and step (µs)",
    "max_abs_residual_pct": "largest residual (%)",
    "loo_mean_abs_pct": "mean leave-one-out error (%)",
    "crossover_tokens": "crossover (tokens)",
    "weights_fit": "weights fit in memory",
    "concurrent_seqs": "sequences at once",
    "outside_pool_gib_per_gpu": "left outside the target per GPU (GiB)",
    "outside_need_gib_per_gpu": "assumed need outside the target (GiB)",
    "under_assumed_need": "flagged: under the assumed need",
    "batch_fraction_of_bound": "share of the bound reached",
    "bandwidth_fraction_of_peak": "share of peak bandwidth",
    "bound_batch_time_s": "bound batch time (s)",
    "in_flight": "in flight",
    "requests_sent": "requests sent",
    "requests_ok": "completed",
    "requests_failed": "failed",
    "requests_per_s": "completed requests/s",
    "cache_hit_rate": "cache-hit rate (%)",
    "ideal_hit_rate": "ideal hit rate, token-exact (%)",
    "block_ideal_hit_rate": "ideal hit rate, whole blocks (%)",
    "hit_source": "hits counted from",
    "gpu": "GPU",
    "least_of_bound_pct": "least of the bound (%)",
    "median_of_bound_pct": "median of the bound (%)",
    "most_of_bound_pct": "most of the bound (%)",
    "median_of_peak_bandwidth_pct": "median of peak bandwidth (%)",
    "batches_per_s": "batches/s",
    "prompt_tokens_per_s": "prompt tokens/s",
    "batch_time_mean_s": "batch time, mean (s)",
    "batch_time_cv_pct": "batch-time spread, CV (%)",
    "e2e_mean_ms": "mean request latency (ms)",
    "t_from_s": "batch time at the short context (s)",
    "t_to_s": "batch time at the long context (s)",
}

#: Unit suffixes of kvlab's column names and how a header states them.
SUFFIXES = {
    "_s": "s",
    "_ms": "ms",
    "_us": "µs",
    "_gib": "GiB",
    "_gb": "GB",
    "_mib": "MiB",
    "_tokens": "tokens",
    "_pct": "%",
    "_tok_s": "tokens/s",
    "_per_s": "per s",
}

#: Columns whose values name engines: shown by their display names ('vLLM', 'sglang-jax (CPU)'), never 'vllm'.
ENGINE_COLUMNS = {
    "engine",
    "other_engine",
    "faster",
    "winner_64k",
    "winner_200k",
    "phys_winner_64k",
    "phys_winner_200k",
    "tree",
}

#: Columns of shares (0-1) shown as whole percentages, as every sentence gives them: hit rates are % everywhere.
PERCENT_COLUMNS = {"hit_rate", "cache_hit_rate", "ideal_hit_rate", "block_ideal_hit_rate"}

#: A table with more rows than this is folded into a <details> with a link to its rows as CSV (:meth:`Table.html`).
FOLD_ROWS = 12

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
    figures kept even when they are zeros (1.500498 → '1.50', 0.434768 → '0.435'); a negative one with a true
    minus sign ('−5.96')."""
    return minus(_number(v, digits))


def _number(v, digits: int) -> str:
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
    if abs(v) < 0.001:  # never scientific notation (8.90e-06): a value this small reads as a bound
        return "< 0.001" if v > 0 else "> −0.001"
    return f"{v:#.{digits}g}".rstrip(".")


def answer_cell(column: str, v) -> str:
    """One cell of a report's answer table as text, the same on the page and on the index: an engine by its name,
    a number as :func:`number` gives it (13.6, not 13.625; 12, not 12.0; '–' when missing), anything else as it
    is."""
    if column == "engine":
        return engine_label(str(v))
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return number(v)
    return str(v)


def span(lo, hi, fmt=number) -> str:
    """A range as a table cell, each end as ``fmt`` gives it (:func:`number`, or e.g. :func:`kvlab.units.ratio`):
    '1.20–1.45'; one value where the ends are equal; '–' when either end is missing."""
    if lo is None or hi is None or any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
        return "–"
    return fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"


def percent(v: float | None) -> str:
    """A share as a whole percentage ('62%'); 'not available' when missing, never 0."""
    return "not available" if v is None else f"{v:.0%}"


def ms(v: float | None) -> str:
    """Milliseconds as a reader writes them: 5,466 ms, 431 ms, 21.4 ms; 'not available' when missing."""
    return "not available" if v is None else f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"


def _cell(v, digits: int) -> str:
    if isinstance(v, (int, float)) or v is None:
        return number(v, digits)
    if isinstance(v, (list, tuple)):
        return ", ".join(_cell(x, digits) for x in v)
    return str(v)


#: A number or a range of numbers already formatted as text ('2.0', '1,829', '1.20–1.45', '−0.30'), or a dash.
_NUMBER_TEXT = re.compile(r"^(?:[−-]?[\d,.]+(?:–[−-]?[\d,.]+)?|–)$")


def _numeric_text(column: pl.Series) -> bool:
    """Whether a text column holds only numbers formatted in advance (a ratio to two significant figures, a range):
    it lines up on the right like the numbers it is."""
    values = [v for v in column.to_list() if v is not None]
    return bool(values) and all(_NUMBER_TEXT.match(v) for v in values) and any(v != "–" for v in values)


class Table:
    """A frame shown as a reader's table (see the module docstring); ``.frame`` is the data it shows."""

    def __init__(
        self,
        frame: pl.DataFrame,
        columns: dict[str, str] | None = None,
        digits: int = 3,
        caption: str | None = None,
        fold: bool | None = None,
    ):
        shown = [c for c in (columns or frame.columns) if c not in HIDDEN or (columns and c in columns)]
        missing = [c for c in shown if c not in frame.columns]
        if missing:
            raise KeyError(f"table: no column(s) {missing} in the frame (have {frame.columns})")
        self.frame = frame.select(shown)
        self.headers = [(columns or {}).get(c) or label(c) for c in shown]
        self.caption = caption
        #: folded into a <details>: None, when longer than FOLD_ROWS; True, whenever it has rows (a table whose
        #: numbers the text beside it already gives, kept one click away so the printed page stays short)
        self.fold = fold
        #: the folded table's summary line, where it is not the caption (:func:`folded`)
        self.summary: str | None = None
        rows = []
        for row in self.frame.iter_rows(named=True):
            rows.append(
                [
                    engine_label(v)
                    if c in ENGINE_COLUMNS and isinstance(v, str)
                    else f"{v:.0%}"
                    if c in PERCENT_COLUMNS and isinstance(v, float)
                    else _cell(v, digits)
                    for c, v in row.items()
                ]
            )
        self.rows = rows

    def to_pandas(self):
        return pd.DataFrame(self.rows, columns=self.headers)

    def _repr_html_(self) -> str:
        return self.html()

    def html(self) -> str:
        """The table as HTML (what a notebook shows, and what reports embed)."""
        # cells and headers are data (an engine's reported version, a reference CSV's statement, a host's name):
        # escaped here, where they become HTML (pandas' Styler does not escape by default)
        styler = (
            self.to_pandas()
            .style.hide(axis="index")
            .set_table_attributes('class="kvlab-table"')
            .format(escape="html")
            .format_index(escape="html", axis=1)
        )
        if self.caption:
            styler = styler.set_caption(html.escape(self.caption))
        styles = [
            {
                "selector": "th",
                "props": "text-align: right; padding: 2px 8px; white-space: normal; "
                "font-weight: 600; border-bottom: 1px solid #888;",
            },
            {"selector": "td", "props": "text-align: right; padding: 2px 8px;"},
            {"selector": "caption", "props": "caption-side: top; text-align: left; color: #555;"},
        ]
        for i, column in enumerate(self.frame.columns):  # text reads from the left, numbers line up on the right
            if (
                self.frame[column].dtype == pl.String and not _numeric_text(self.frame[column])
            ) or column in ENGINE_COLUMNS:
                nowrap = " white-space: nowrap;" if column in ENGINE_COLUMNS else ""
                styles += [
                    {"selector": f"td.col{i}", "props": f"text-align: left !important;{nowrap}"},
                    {"selector": f"th.col{i}", "props": "text-align: left !important;"},
                ]
        styler = styler.set_table_styles(styles)
        wrapped = f'<div class="kvlab-table-wrap" style="overflow-x: auto; max-width: 100%;">{styler.to_html()}</div>'
        if not self.rows or (len(self.rows) <= FOLD_ROWS if self.fold is None else not self.fold):
            return wrapped
        # a long table is folded: the page stays short, the rows are one click away and in a CSV beside them
        what = html.escape(self.summary or self.caption or "the table")
        return (
            f'<details class="kvlab-fold"><summary>{what}: {len(self.rows)} rows (show)</summary>{wrapped}'
            f'</details><p class="kvlab-fold-csv" style="font-size: 13px; margin: .2rem 0 1rem;">'
            f'<a download="{html.escape(self.csv_name())}" href="{self.csv_uri()}">these {len(self.rows)} rows '
            f"as CSV</a></p>"
        )

    def csv_name(self) -> str:
        """The file name the folded table's CSV link saves as: its caption as a slug, else 'table.csv'."""
        slug = re.sub(r"[^a-z0-9]+", "-", (self.caption or "table").lower()).strip("-")[:60]
        return f"{slug or 'table'}.csv"

    def csv_uri(self) -> str:
        """The shown rows and headers as a CSV in a data: URI (the page stays self-contained; works from file://)."""

        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(self.headers)
        writer.writerows(self.rows)
        return "data:text/csv;charset=utf-8," + quote(buf.getvalue(), safe="")

    def __repr__(self) -> str:
        return self.to_pandas().to_string(index=False)


def table(
    frame: pl.DataFrame | list[dict],
    columns: dict[str, str] | list[str] | None = None,
    digits: int = 3,
    caption: str | None = None,
    fold: bool | None = None,
) -> Table:
    """``frame`` as a reader's table. ``columns``: the columns to show, in order (a dict also renames them).
    ``frame`` may be a list of row dicts (how the narrative layer, which imports no polars, hands its rows over);
    an empty list becomes an empty frame of ``columns``."""
    if isinstance(columns, list):
        columns = dict.fromkeys(columns, None)
    if isinstance(frame, list):
        frame = (
            pl.DataFrame(frame, infer_schema_length=None)
            if frame
            else pl.DataFrame(schema=dict.fromkeys(columns or [], pl.String))
        )
    return Table(frame, columns, digits, caption, fold)


def shared_columns(rows: list[dict], names: tuple[str, ...]) -> tuple[list[dict], str | None]:
    """``rows`` without those of ``names`` whose value is the same in every row (of two or more), and a caption
    that says each once ('every row: loads measured 1, 2, 4; repeats 1'); None when no column was lifted. A table
    then repeats no cell the reader learns nothing from."""
    same = [n for n in names if len(rows) > 1 and all(n in r for r in rows) and len({str(r[n]) for r in rows}) == 1]
    if not same:
        return rows, None
    kept = [{k: v for k, v in r.items() if k not in same} for r in rows]
    return kept, "every row: " + "; ".join(f"{n} {rows[0][n]}" for n in same)


def folded(shown: Table, summary: str) -> Table:
    """``shown`` folded into a <details> whatever its length (its rows also said in the sentences or the figure
    beside it), its summary line ``summary``."""
    shown.fold = True
    shown.summary = summary
    return shown


def non_empty(frame: pl.DataFrame, columns: list[str]) -> list[str]:
    """The ``columns`` (in order) that hold at least one value in ``frame``: a table shows no column of dashes."""
    return [c for c in columns if c in frame.columns and frame[c].drop_nulls().len()]


#: Experiments and published tables named in words where a reader sees them (panel titles); others by
#: :func:`experiment_words`' rule.
EXPERIMENT_WORDS = {
    "article_b300": "the B300 article's table",
    "cpu_long_context": "long-context runs",
    "cpu_capacity": "load-ladder runs",
    "cpu_prefix_sharing": "shared-prefix runs",
    "cpu_multi_turn": "multi-turn runs",
    "cpu_classification": "classification runs",
}


#: The KV cache's number formats the model compares, named as the pages name them.
KV_FORMAT_WORDS = {"bf16": "BF16", "fp8": "FP8", "fp8_packed_mla": "packed FP8 MLA"}


def kv_format_words(kv_format) -> str:
    """A KV number format's id in words ('fp8_packed_mla' → 'packed FP8 MLA'); an unknown one as it is."""
    return KV_FORMAT_WORDS.get(kv_format, str(kv_format))


def experiment_words(experiment: str) -> str:
    """An experiment's or published table's id in words ('cpu_long_context' → 'long-context runs'): the
    :data:`EXPERIMENT_WORDS` name, else the id with its underscores as spaces. The file name stays in the provenance
    panel."""
    return EXPERIMENT_WORDS.get(experiment) or experiment.replace("_", " ")
