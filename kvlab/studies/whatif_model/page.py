"""Report 04's sections (04_whatif_model.ipynb): one function per code cell, each returning what the cell shows.
The first figure comes right after the answer; each number is said once, its derivation in a caption or table."""

from __future__ import annotations

import html

from IPython.display import HTML, Markdown

from kvlab import tables
from kvlab.perfmodel.figures import plot_headroom, plot_step_fits
from kvlab.perfmodel.stepfit import as_shown as step_shown
from kvlab.perfmodel.stepfit import step_fit_note
from kvlab.studies.section import Section
from kvlab.studies.whatif_model import explore
from kvlab.perfmodel.figures import as_shown
from kvlab.studies.whatif_model import figures, words
from kvlab.studies.whatif_model.frames import fits_shown
from kvlab.studies.whatif_model.frames import outside as outside_frame
from kvlab.studies.whatif_model.result import WhatifModelResult

#: The verdict each figure speaks to, in order of preference (the modelled crossover, else its range).
CROSSOVER = ("crossover_modelled", "crossover_range")
#: The by-batch table's headers.
BY_BATCH = {
    "batch_size": "batch size",
    "sets": "sets",
    "crossing_sets": "sets that cross",
    "crossover_range": "crossover range (tokens)",
    "sglang_faster_200k_sets": "sets with SGLang faster at 200K",
    "loo_low_pct": "held-out error, lowest (%)",
    "loo_high_pct": "held-out error, highest (%)",
    "over_peak_sets": "sets over peak (not physical)",
}


def csv_link(frame, columns: list[str], caption: str, text: str) -> HTML:
    """A frame offered as a CSV download only (its rows are summarised on the page): ``text`` links to it."""
    t = tables.table(frame, [c for c in columns if c in frame.columns], caption=caption)
    return HTML(
        f'<p class="kvlab-fold-csv"><a download="{html.escape(t.csv_name())}" href="{t.csv_uri()}">'
        f"{html.escape(text)}</a></p>"
    )


def opening(r: WhatifModelResult, wb) -> Section:
    """The answer, then what the page models."""
    out = Section()
    out.add(r.answer)
    out.add(Markdown(words.setup(r)))
    return out


def curves(r: WhatifModelResult, wb) -> Section:
    """Batch time against context: the page's first figure."""
    v = words.verdict_of(r, *CROSSOVER)
    out = Section()
    out.add(wb.show(figures.batch_time(r, v), words.curves_caption(r, v), data=r.curves))
    cols = ["engine", "tp", "dcp", "context_tokens", "batch_time_s", "batch_time_s_lo", "batch_time_s_hi", "waves",
            "fits"]  # fmt: skip
    out.add(tables.table(r.at_max, cols, caption="Both engines at the largest context", fold=True))
    return out


def calibration(r: WhatifModelResult, wb) -> Section:
    """Calibration against the published table, and the held-out test."""
    out = Section()
    out.add(Markdown(words.calibration(r)))
    cols = ["engine", "context_tokens", "observed_s", "modelled_s", "residual_pct", "loo_modelled_s", "loo_error_pct"]
    out.add(
        tables.table(
            r.calibration,
            [c for c in cols if c in r.calibration.columns],
            caption="Published, fitted and held-out batch times",
            fold=True,
        )
    )
    return out


def physics_only(r: WhatifModelResult, wb) -> Section:
    """The physics-only fit beside the free fit."""
    out = Section()
    out.add(Markdown(words.fits(r)))
    if text := words.step_cost(r):
        out.add(Markdown(text))
    cols = ["fit", "physical", "over_peak", "prefill_efficiency", "bandwidth_efficiency", "dcp_layer_latency_us",
            "vllm_overhead_ms", "sglang_overhead_ms", "max_abs_residual_pct", "loo_mean_abs_pct", "crossover_tokens"]  # fmt: skip
    out.add(tables.table(as_shown(fits_shown(r.fits)), cols, caption="Both fits' parameters", fold=True))
    return out


def sensitivity(r: WhatifModelResult, wb) -> Section:
    """Both fits under every assumption set the article leaves open, and the fits consistent with the totals."""
    out = Section()
    out.add(Markdown(words.sensitivity(r)))
    out.add(tables.table(r.sensitivity_by_batch, BY_BATCH, caption="The assumption sets by batch size"))
    out.add(
        csv_link(
            r.sensitivity_shown,
            [
                "batch_size",
                "output_tokens",
                "expert_reads",
                "mla_width",
                "kv_format",
                "prefill_efficiency",
                "bandwidth_efficiency",
                "dcp_layer_latency_us",
                "loo_mean_abs_pct",
                "crossover_tokens",
                "physical",
                "over_peak",
                "phys_bandwidth_efficiency",
                "phys_sglang_overhead_ms",
                "phys_max_abs_residual_pct",
                "phys_crossover_tokens",
            ],  # fmt: skip
            "Both fits under every assumption set",
            f"All {r.sensitivity.height} assumption sets, both fits (CSV)",
        )
    )
    out.add(Markdown(words.consistent(r)))
    out.add(
        csv_link(
            r.consistent_fits_shown,
            [
                "batch_size",
                "output_tokens",
                "expert_reads",
                "mla_width",
                "kv_format",
                "fit",
                "prefill_efficiency",
                "bandwidth_efficiency",
                "max_abs_residual_pct",
                "within_precision",
                "physical",
                "over_peak",
                "crossover_tokens",
            ],  # fmt: skip
            "The fits consistent with the published totals",
            f"The {r.consistent.kept:,} consistent fits (CSV)",
        )
    )
    return out


def crossovers(r: WhatifModelResult, wb) -> Section:
    """Crossover context by GPU and DCP size."""
    v = words.verdict_of(r, *CROSSOVER)
    xo = r.crossovers
    out = Section()
    if xo["crossover_tokens"].is_not_null().any():
        out.add(wb.show(figures.crossover(xo, v), words.crossover_caption(r, v), data=xo))
    else:
        out.add(Markdown(words.crossover_caption(r, v)))
    cols = ["gpu", "dcp", "crossover_tokens", "crossover_low_tokens", "crossover_high_tokens", "crosses_in",
            "weights_fit"]  # fmt: skip
    out.add(tables.table(r.crossovers_shown, cols, caption="Crossover by GPU and DCP size", fold=True))
    return out


def headroom(r: WhatifModelResult, wb) -> Section:
    """KV headroom at two memory targets."""
    v = next((x for x in r.verdicts if x.kind == "memory_setting"), None)
    out = Section()
    out.add(wb.show(plot_headroom(r.headroom), words.headroom_caption(r, v), data=r.headroom))
    out.add(tables.table(r.headroom_summary, caption="KV headroom by memory target", fold=True))
    out.add(Markdown(words.memory_note(r)))
    cols = ["constant", "value", "source", "config", "ceiling_seqs", "limited_by", "fits"]
    out.add(tables.table(r.memory_constants, cols, caption="Memory constants and the ceiling each gives", fold=True))
    if r.capacity_limited.height:  # the rate the pools allow at a TPOT target (modelled)
        out.add(wb.show(figures.capacity_limited(r.capacity_limited), words.capacity_caption(r),
                        data=r.capacity_limited))  # fmt: skip
    return out


def against_the_limit(r: WhatifModelResult, wb) -> Section:
    """The model checked where it can fail (published concurrency, TTFT, fitted terms, engine logs), then how much of
    its bound each run reached."""
    out = Section()
    checked = outside_frame(r.verdicts)
    out.add(Markdown(words.outside(checked)))  # each check's margin is its row in the verdict box
    if r.not_catalogued:  # a model or GPU the catalog lacks: said, its runs left out of the bound
        out.add(Markdown(r.not_catalogued))
    out.add(Markdown(words.bound(r.fraction)))
    cols = ["source", "experiment", "engine", "runs", "least_of_bound_pct", "median_of_bound_pct",
            "most_of_bound_pct", "median_of_peak_bandwidth_pct"]  # fmt: skip
    out.add(  # the two sentences above give its ranges: the rows are a download
        csv_link(
            r.bound_summary,
            cols,
            "Share of the model's bound by source and engine",
            "Each source and engine's share of the bound as CSV",
        )
    )
    return out


def step_time(r: WhatifModelResult, wb) -> Section:
    """Step time against context, from measured runs."""
    out = Section()
    step, points = r.step, r.step_points
    if not step.height:
        out.add(Markdown(step_fit_note(wb.runs, step)))
        return out
    out.add(Markdown(words.step_fits(step)))
    out.add(wb.show(plot_step_fits(step, points), words.step_caption(step), data=points))
    cols = ["experiment", "engine", "batch_size", "contexts", "runs", "slope_us_per_1k_tokens", "slope_ci_low",
            "slope_ci_high", "intercept_ms", "r2", "max_abs_residual_ms", "bandwidth_efficiency"]  # fmt: skip
    out.add(tables.table(step_shown(step), cols, caption="Step-time fits", fold=True))
    return out


def interactive(r: WhatifModelResult, wb) -> Section:
    """Explore (JupyterLab)."""
    p = r.parameters
    out = Section()
    controls = explore.whatif(
        r.fit,
        r.published,
        r.workload,
        r.assumptions,
        gpu=r.gpu,
        model=r.model,
        tp=r.tp,
        dcp=r.dcp,
        max_context=p.get("max_context", 1048576),
        points=p.get("curve_points", 40),
        sens=r.sensitivity,
    )  # bands, computed once
    if controls is not None:
        out.add(controls)
    return out
