"""Report 04's sections (04_whatif_model.ipynb): one function per code cell, each returning what the cell shows."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import explore, narrative, tables
from kvlab.perfmodel.figures import plot_crossover, plot_curves, plot_headroom, plot_step_fits
from kvlab.perfmodel.report import consistent_text, physics_markdown
from kvlab.perfmodel.stepfit import as_shown, step_fit_caption, step_fit_note
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


def opening(r: StudyResult, wb) -> Section:
    """The answer, then what the report says before its first section."""
    gpu = r.parameters["gpu"]
    model = r.parameters["model"]
    tp = r.parameters["tp"]
    dcp = r.parameters["dcp"]
    fit = r["fit"]
    workload = r["workload"]
    out = Section()
    out.add(r.answer)
    out.add(
        Markdown(
            narrative.whatif_setup(
                fit, workload, gpu=gpu, model=model, tp=tp, dcp=dcp, published=r["published"].to_dicts()
            )
        )
    )
    # per engine, what the table needs beyond every bounded term (the same refits as the sensitivity section's)
    out.add(Markdown(narrative.step_cost_bullet(r["sensitivity"], fit).removeprefix("- ")))
    return out


def calibration(r: StudyResult, wb) -> Section:
    """Calibration against the published table."""
    fit = r["fit"]
    workload = r["workload"]
    out = Section()
    out.add(Markdown(narrative.fit_sentence(fit, workload)))
    out.add(
        tables.table(
            r["residuals"],
            ["engine", "context_tokens", "observed_s", "modelled_s", "residual_pct"],
            caption="Published and modelled batch times",
            fold=True,
        )
    )
    out.add(Markdown(narrative.citation_note(r["published"].to_dicts())))
    out.add(Markdown(narrative.loo_sentence(fit)))
    out.add(
        tables.table(
            r["loo"],
            ["engine", "context_tokens", "observed_s", "loo_modelled_s", "loo_error_pct"],
            caption="Each published point predicted from the other points",
            fold=True,
        )
    )
    return out


def physics_only(r: StudyResult, wb) -> Section:
    """The physics-only fit beside the free fit."""
    fit = r["fit"]
    workload = r["workload"]
    assume = r["assumptions"]
    out = Section()
    out.add(Markdown(physics_markdown(fit, r["phys"], workload, assume)))
    out.add(tables.table(r["fits"], caption="Both fits' parameters", fold=True))
    return out


def sensitivity(r: StudyResult, wb) -> Section:
    """Both fits under every assumption set the article leaves open."""
    out = Section()
    out.add(
        tables.table(
            r["sensitivity_shown"],
            [
                "batch_size",
                "output_tokens",
                "expert_reads",
                "mla_width",
                "kv_format",
                "bandwidth_efficiency",
                "dcp_layer_latency_us",
                "loo_mean_abs_pct",
                "crossover_tokens",
                "winner_200k",
                "physical",
                "phys_bandwidth_efficiency",
                "phys_sglang_overhead_ms",
                "phys_max_abs_residual_pct",
                "phys_crossover_tokens",
                "phys_winner_200k",
            ],
            caption="Both fits under every assumption set",
        )
    )
    out.add(Markdown(narrative.sensitivity_sentence(r["sensitivity"].to_dicts())))
    return out


def consistent_fits(r: StudyResult, wb) -> Section:
    """Where four totals are under-determined: the set of fits consistent with them."""
    out = Section()
    text = consistent_text(r["consistent_fits"])
    out.add(Markdown("- **Under-determined:** " + text[0].upper() + text[1:]))
    out.add(
        tables.table(
            r["consistent_fits_shown"],
            [
                "batch_size",
                "output_tokens",
                "expert_reads",
                "mla_width",
                "kv_format",
                "fit",
                "bandwidth_efficiency",
                "dcp_layer_latency_us",
                "vllm_overhead_ms",
                "sglang_overhead_ms",
                "max_abs_residual_pct",
                "within_precision",
                "physical",
                "crossover_tokens",
                "winner_64k",
                "winner_200k",
            ],
            caption="The fits consistent with the published totals",
        )
    )
    return out


def curves(r: StudyResult, wb) -> Section:
    """Batch time and throughput against context."""
    gpu = r.parameters["gpu"]
    model = r.parameters["model"]
    tp = r.parameters["tp"]
    workload = r["workload"]
    out = Section()
    model_df, x_range, title = r["curves"], r["x_range"], narrative.model_title(model, gpu, tp)
    out.add(
        wb.show(
            plot_curves(model_df, r["published"], title=title, band=x_range),
            narrative.curves_caption(model_df.to_dicts(), r["crossover"], r["calibrated"], x_range)
            + " "
            + narrative.band_sentence(model_df.to_dicts()),
            data=model_df,
        )
    )
    out.add(
        wb.show(
            plot_curves(
                model_df,
                r["published_throughput"],
                y="output_tokens_per_s",
                ylabel="output tokens/s",
                title=title,
                band=x_range,
            ),
            narrative.throughput_caption(model_df.to_dicts(), workload)
            + " "
            + narrative.band_sentence(
                model_df.to_dicts(), "output_tokens_per_s", "tokens/s", tokens_per_batch=r["tokens_per_batch"]
            ),
            data=model_df,
        )
    )
    out.add(
        tables.table(
            r["at_max"],
            [
                "engine",
                "tp",
                "dcp",
                "context_tokens",
                "batch_time_s",
                "batch_time_s_lo",
                "batch_time_s_hi",
                "output_tokens_per_s",
                "output_tokens_per_s_lo",
                "output_tokens_per_s_hi",
                "concurrent_seqs",
                "waves",
                "fits",
            ],
            caption="Both engines at the largest context",
            fold=True,
        )
    )
    out.add(
        Markdown(narrative.at_max_sentence(r["at_max"].to_dicts(), max(r["published_contexts"]), r["at_max_range"]))
    )
    return out


def crossovers(r: StudyResult, wb) -> Section:
    """Crossover context by GPU and DCP size."""
    out = Section()
    xo = r["crossovers"]
    if r["crossovers_found"]:
        out.add(wb.show(plot_crossover(xo), narrative.crossover_caption(xo.to_dicts()), data=xo))
    else:
        out.add(Markdown(narrative.crossover_caption(xo.to_dicts())))
    out.add(
        tables.table(
            r["crossovers_shown"],
            [
                "gpu",
                "dcp",
                "crossover_tokens",
                "crossover_low_tokens",
                "crossover_high_tokens",
                "crosses_in",
                "weights_fit",
            ],
            caption="Crossover by GPU and DCP size",
            fold=True,
        )
    )
    return out


def headroom(r: StudyResult, wb) -> Section:
    """KV headroom at two memory targets."""
    assume = r["assumptions"]
    out = Section()
    head = r["headroom"]
    out.add(
        wb.show(plot_headroom(head), narrative.whatif_headroom_caption(head.to_dicts(), r["headroom_flags"]), data=head)
    )
    # each 'range at' column: the sequences that fit over the KV number formats (BF16, FP8, packed FP8 MLA) and cached
    # MLA widths (576, 512) the article does not state; InferenceX's Kimi-K3 recipes default to FP8 KV
    out.add(tables.table(r["headroom_summary"], caption="KV headroom by memory target", fold=True))
    out.add(Markdown(narrative.oom_flag_note(head.to_dicts(), assume)))
    return out


def against_the_limit(r: StudyResult, wb) -> Section:
    """Against the limit: how much of the model's bound each run reached."""
    out = Section()
    if r["not_catalogued"]:  # a model or GPU the catalog lacks: said, its runs left out of the bound
        out.add(Markdown(r["not_catalogued"]))
    out.add(Markdown(narrative.bound_sentence(r["fraction"].to_dicts())))
    out.add(
        tables.table(
            r["bound_summary"],
            [
                "source",
                "experiment",
                "engine",
                "runs",
                "least_of_bound_pct",
                "median_of_bound_pct",
                "most_of_bound_pct",
                "median_of_peak_bandwidth_pct",
            ],
            caption="Share of the model's bound by source and engine",
            fold=True,
        )
    )
    return out


def step_time(r: StudyResult, wb) -> Section:
    """Step time against context, from measured runs."""
    out = Section()
    step, step_points = r["step"], r["step_points"]
    out.add(Markdown(step_fit_note(wb.runs, step)))
    if step.height:
        out.add(wb.show(plot_step_fits(step, step_points), step_fit_caption(step), data=step_points))
        # measured, one run per context: two significant figures
        out.add(
            tables.table(
                as_shown(step),
                [
                    "experiment",
                    "engine",
                    "batch_size",
                    "contexts",
                    "runs",
                    "slope_us_per_1k_tokens",
                    "slope_ci_low",
                    "slope_ci_high",
                    "intercept_ms",
                    "r2",
                    "max_abs_residual_ms",
                    "linearity",
                    "bandwidth_efficiency",
                ],
                caption="Step-time fits",
                fold=True,
            )
        )
        out.add(
            tables.table(
                as_shown(step_points),
                ["engine", "context_tokens", "mean_decode_context", "tpot_ms", "fitted_ms", "residual_ms"],
                caption="Step-time points",
                fold=True,
            )
        )
    return out


def conclusions(r: StudyResult, wb) -> Section:
    """Conclusions (computed from the results above)."""
    gpu = r.parameters["gpu"]
    tp = r.parameters["tp"]
    dcp = r.parameters["dcp"]
    fit = r["fit"]
    workload = r["workload"]
    out = Section()
    text = narrative.model_conclusions(
        fit,
        r["sensitivity"],
        r["crossover"],
        r["at_max"].to_dicts(),
        r["headroom"].to_dicts(),
        workload,
        gpu=gpu,
        tp=tp,
        dcp=dcp,
        published_contexts=r["published_contexts"],
        ratio_range=r["at_max_range"],
        consistent=r["consistent"],
        held_out=r["held_out"],
    )
    # the page says each finding once: the step cost, fit, plausibility, crossover, consistent fits and largest
    # context are said in the sections above; what only the conclusions add is shown here
    said_above = ("- **Unexplained", "- **Fit:", "- **Plausibility:", "- **Crossover", "- **Consistent", "- At ")
    kept = [line for line in text.splitlines() if line.strip() and not line.startswith(said_above)]
    out.add(
        Markdown(
            "\n".join(
                kept
                + [
                    "",
                    "The per-step cost, the fit, its plausibility, the crossover, the fits "
                    "consistent with the totals and the largest context are stated in their "
                    "sections above.",
                ]
            )
        )
    )
    return out


def interactive(r: StudyResult, wb) -> Section:
    """Explore (JupyterLab)."""
    gpu = r.parameters["gpu"]
    model = r.parameters["model"]
    tp = r.parameters["tp"]
    dcp = r.parameters["dcp"]
    max_context = r.parameters["max_context"]
    curve_points = r.parameters["curve_points"]
    fit = r["fit"]
    workload = r["workload"]
    assume = r["assumptions"]
    out = Section()
    controls = explore.whatif(
        fit,
        r["published"],
        workload,
        assume,
        gpu=gpu,
        model=model,
        tp=tp,
        dcp=dcp,
        max_context=max_context,
        points=curve_points,
        sens=r["sensitivity"],
    )  # bands, computed once
    if controls is not None:
        out.add(controls)
    return out
