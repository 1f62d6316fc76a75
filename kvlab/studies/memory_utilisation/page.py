"""Report 03's sections (03_memory_utilisation.ipynb): one function per code cell, each returning what the cell
shows, read from the typed result."""

from __future__ import annotations

import polars as pl
from IPython.display import Markdown

from kvlab import tables
from kvlab import words as shared_words
from kvlab.studies.section import Section
from kvlab.perfmodel.figures import plot_headroom
from kvlab.figures import drawable
from kvlab.studies.memory_utilisation import checks, words
from kvlab.studies.memory_utilisation.figures import memory_ratio_figure
from kvlab.studies.memory_utilisation.result import MemoryUtilisationResult


def article(r: MemoryUtilisationResult, wb) -> Section:
    """What the article says (published, prose only)."""
    text = words.claims_list(r.claims.to_dicts()) + (
        "\n\nThe article gives no retry counts, run times or latencies for this study, so none are shown as published."
    )
    return Section([Markdown(text)])


#: The modelled headroom table's columns, as the page names them.
HEADROOM_COLUMNS = {
    "mem_util": "memory setting",
    "dcp": "DCP",
    "context_tokens": "context (tokens)",
    "kv_pool_gib_per_gpu": "KV pool (GiB/GPU)",
    "outside_pool_gib_per_gpu": "left outside the target (GiB/GPU)",
    "kv_capacity_tokens": "KV capacity (tokens)",
    "max_concurrent_seqs": "sequences that fit (range)",
    "fits": "fits (memory check)",
}


def modelled_headroom(r: MemoryUtilisationResult, wb) -> Section:
    """What the physical model says (modelled): the KV room at each setting, every count with its range."""
    head = r.headroom.to_dicts()
    out = Section()
    out.add(Markdown(words.headroom_intro(head, r.gpu, r.model, r.article.to_dicts())))
    out.add(wb.show(plot_headroom(r.headroom), words.headroom_caption(head), data=r.headroom))
    out.add(tables.table(r.headroom_printed, HEADROOM_COLUMNS))
    out.add(Markdown(words.fits_sentence(head)))
    return out


def _ratios(r: MemoryUtilisationResult, latency) -> object:
    """Each engine against itself: a figure with more than two points, else a table (or nothing)."""
    caption = words.memory_caption(r.ratios.to_dicts(), latency)
    if drawable(r.ratios, "batch_time_ratio"):
        return [r.ratios, memory_ratio_figure(r.ratios, latency), caption]
    settings = f"{r.ratios['mem_low'][0]:g} ÷ {r.ratios['mem_high'][0]:g}"
    columns = {
        "engine": None,
        "context_tokens": "context (tokens)",
        "context_label": "stands for",
        "batch_time_ratio": f"batch time, {settings} (×)",
        "e2e_ratio": f"mean request latency, {settings} (×)",
        "n_runs": "runs a side",
    }
    rank = pl.col("engine").map_elements(checks.engine_rank, return_dtype=pl.Int64)
    return tables.table(r.ratios.sort(rank, "context_tokens"), columns, caption=caption)


#: The memory study's table: one row per engine, context and setting (real tokens first, what they stand for beside).
STATS_COLUMNS = {
    "engine": "engine",
    "context_tokens": "context (tokens)",
    "context_label": "stands for",
    "mem_util": "memory setting",
    "runs": "runs",
    "runs_ok": "runs succeeded",
    "retries": "retries",
    "runs_failed": "runs failed",
    "batch_time_mean_s": "batch time, mean (s)",
    "batch_time_cv": "batch-time spread (CV)",
    "ttft_mean_ms": "mean TTFT (ms)",
    "e2e_mean_ms": "mean request latency (ms)",
    "preemptions": "preemptions",
}


def measured(r: MemoryUtilisationResult, wb) -> Section:
    """What kvlab measured: the study per engine, context and setting, each engine against itself, the failed
    attempts' causes, counters not reported, and the conclusion with what its verdicts allow."""
    out = Section()
    if r.measured.is_empty():
        out.add(Markdown(shared_words.no_runs_note("runs with a memory setting", wb.data, "make report")))
        return out
    latency = checks.verdict_of_kind(list(r.verdicts), r.claims, "latency")
    out.add(Markdown(shared_words.measured_engines_note(r.measured.to_dicts())))
    out.add(Markdown(words.memory_scope(r.setting, r.gpus_per_run)))
    rank = pl.col("engine").map_elements(checks.engine_rank, return_dtype=pl.Int64)
    stats = r.stats.sort(rank, "engine", "context_tokens", "mem_util")
    shown = tables.non_empty(stats, list(STATS_COLUMNS))
    out.add(tables.table(stats, {c: n for c, n in STATS_COLUMNS.items() if c in shown}))
    if r.gpu_left.height:  # NVML samples: GPU runs only
        out.add(Markdown("### GPU memory left outside the engine, per GPU (measured, NVML)"))
        cols = ["engine", "mem_util", "context_tokens", "gpu", "left_gib", "left_fraction", "samples"]
        out.add(tables.table(r.gpu_left, cols))
    if r.ratios.height:
        shown = _ratios(r, latency)
        out.add(wb.show(shown[1], shown[2], data=shown[0]) if isinstance(shown, list) else shown)
    if r.causes.height:
        out.add(Markdown("### Causes of the failed attempts"))
        out.add(tables.table(r.causes, ["engine", "mem_util", "context_tokens", "failure_cause", "failed_attempts"]))
    out.add(Markdown(words.counters_note(r.counters_missing.to_dicts())))
    conclusion = words.memory_conclusion(
        r.by_setting.to_dicts(), r.ratios.to_dicts(), r.stats.to_dicts(), r.spreads.to_dicts(), latency
    )
    out.add(Markdown(conclusion))
    return out
