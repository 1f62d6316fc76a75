"""Report 03: memory setting 0.92 vs 0.95 — retries, run-time stability and latency measured per engine, the
model's KV headroom on the reference host, and what the setting means on this host (a configured KV budget)."""

from __future__ import annotations

import polars as pl

from kvlab import analysis, narrative
from kvlab.claims import document_claim_verdicts
from kvlab.gpu import memory_outside_kv_pool
from kvlab.perfmodel.figures import headroom_as_shown, headroom_table
from kvlab.studies import Answer, StudyResult, sourced
from kvlab.tables import span

REPORT = "03_memory_utilisation"


def budgets(measured: pl.DataFrame) -> pl.DataFrame:
    """What each memory setting configures on the host that measured it: the KV budget (bytes, MiB) the experiment
    file sets per setting, its ratio to the lowest setting's, and the KV pool in tokens the engines reported making of
    it (``pool_tokens_low``–``pool_tokens_high`` over the engines; null where none reported one). Configuration, not
    a finding."""
    pool = pl.col("kv_pool_tokens") if "kv_pool_tokens" in measured.columns else pl.lit(None, pl.Int64)
    b = (
        measured.filter(pl.col("kv_budget_bytes").is_not_null())
        .group_by("mem_util")
        .agg(
            pl.col("kv_budget_bytes").min().alias("kv_budget_bytes"),
            pl.col("kv_budget_bytes").n_unique().alias("distinct_budgets"),
            pool.min().alias("pool_tokens_low"),
            pool.max().alias("pool_tokens_high"),
        )
        .sort("mem_util")
    )
    return b.with_columns(
        (pl.col("kv_budget_bytes") / 2**20).alias("kv_budget_mib"),
        (pl.col("kv_budget_bytes") / pl.col("kv_budget_bytes").first()).alias("ratio_to_lowest"),
        pl.lit("configuration").alias("evidence"),
    )


def budget_table(b: pl.DataFrame) -> pl.DataFrame:
    """The answer's table of :func:`budgets`: per memory setting its KV budget (MiB, three significant figures, as
    every sentence gives it), the pool the engines reported in tokens (a range over the engines: '12,101–12,288'),
    and its ratio to the lowest setting's."""
    pools = [
        None if lo is None else span(lo, hi, "{:,}".format)
        for lo, hi in zip(b["pool_tokens_low"].to_list(), b["pool_tokens_high"].to_list())
    ]
    return b.select(
        pl.col("mem_util").alias("memory setting"),
        pl.col("kv_budget_mib").round_sig_figs(3).alias("KV budget (MiB)"),
        pl.Series("KV pool (tokens)", pools, dtype=pl.String),
        pl.col("ratio_to_lowest").round(2).alias("× the lowest"),
        "evidence",
    )


def compute(
    wb,
    *,
    data_dir: str = "",
    published_experiment: str = "article_b300",
    measured_experiment: str = "",
    gpu: str = "B300",
    model: str = "Kimi-K3",
    mem_utils: list = (0.92, 0.95),
    headroom_contexts: list = (65536, 204800),
    dcp: int = 8,
) -> StudyResult:
    claims = wb.claims(published_experiment, kind="memory")
    article = wb.published(published_experiment)
    measured = wb.measured(measured_experiment or analysis.memory_experiments(wb.runs))
    attempts = wb.attempts.filter(pl.col("run_id").is_in(measured["run_id"].implode()))
    stats = analysis.memory_study(measured, attempts)
    cmp = analysis.memory_comparison(stats)
    head = headroom_table(gpu, model, list(mem_utils), sorted({1, dcp}), list(headroom_contexts))
    frames = {
        "claims": claims,
        "article": article,
        "measured": measured,
        "attempts": attempts,
        "stats": stats,
        "comparison": cmp,
        "headroom": head,
        "headroom_shown": headroom_as_shown(head),  # its table: modelled capacities to three significant figures
        "budgets": budgets(measured),
        "gpu_left": memory_outside_kv_pool(wb.telemetry, measured),
    }  # NVML samples: GPU runs only, else empty
    if not measured.is_empty():
        frames["ratios"] = analysis.memory_ratios(stats)  # each engine against itself: lower setting ÷ higher
        frames["causes"] = analysis.failure_causes(attempts, measured)
    setting = narrative.memory_setting(measured)
    found = narrative.memory_claim_verdicts(claims, stats, cmp, head, setting)
    # the documents against each other on 0.95: a recommended setting another document says caused OOM retries
    found += [
        v
        for v in document_claim_verdicts(wb.all_claims().filter(pl.col("metric") == "oom_retries"), wb.all_claims())
        if v.family == "consistency"
    ]
    outside = (
        head.filter(pl.col("dcp") == 1)
        .group_by("mem_util")
        .agg(pl.col("outside_pool_gib_per_gpu").first(), pl.col("outside_need_gib_per_gpu").first())
        .sort("mem_util")
    )
    totals = {"runs": int(stats["runs"].sum() or 0), "retries": int(stats["retries"].sum() or 0)}
    answer = Answer(
        narrative.memory_answer(frames["budgets"].to_dicts(), outside.to_dicts(), totals, gpu, model),
        budget_table(frames["budgets"]) if frames["budgets"].height else None,
    )
    return sourced(
        REPORT, wb, answer, found, frames, {"gpu": gpu, "model": model, "totals": totals, "setting": setting}
    )
