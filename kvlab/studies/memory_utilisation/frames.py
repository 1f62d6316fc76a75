"""Report 03's own frames: the memory study (per engine, context and setting), each engine against itself at the two
settings, the causes of failed attempts, what each setting configures on this host, and the modelled headroom as its
table prints it (every modelled count with its range over the memory sets)."""

from __future__ import annotations

import polars as pl

from kvlab.schema import with_device_kind  # shared ground (several studies tag runs by device)
from kvlab.engines import engine_label
from kvlab.studies.measured_frames import context_name
from kvlab.tables import span
from kvlab.units import modelled_count


def _sum_reported(col: str) -> pl.Expr:
    """Sum of a counter over a group; null (not 0) when no row of the group reported it."""
    return pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum()).otherwise(None)


def memory_experiments(runs: pl.DataFrame) -> list[str]:
    """Measured experiments that compare memory settings (two or more distinct ``mem_util`` values)."""
    m = runs.filter((pl.col("source") == "measured") & pl.col("mem_util").is_not_null())
    return sorted(
        m.group_by("experiment")
        .agg(pl.col("mem_util").n_unique().alias("n"))
        .filter(pl.col("n") >= 2)["experiment"]
        .to_list()
    )


def memory_study(runs: pl.DataFrame, attempts: pl.DataFrame) -> pl.DataFrame:
    """Per engine and memory setting: runs, failures, retries, run-time mean and spread, latency.

    Retries are counted from ``attempts`` (every launch attempt is recorded); a run with no
    attempt rows counts its ``attempts`` column. Load points (RUNS ``load_mode`` set: report 07's ladders, whose
    batch times differ by load level, not by memory setting) are left out.
    """
    measured = runs.filter(pl.col("source") == "measured")
    if "load_mode" in measured.columns:
        measured = measured.filter(pl.col("load_mode").is_null())
    keys = ["experiment", "hardware", "engine", "mem_util", "context_tokens", "context_label"]  # label: to show
    per_run_attempts = attempts.group_by("run_id").agg(
        pl.len().alias("n_attempts"),
        (pl.col("status") == "failed").sum().alias("failed_attempts"),
    )
    joined = (
        with_device_kind(measured)
        .join(per_run_attempts, on="run_id", how="left")
        .with_columns(
            pl.coalesce("n_attempts", "attempts", pl.lit(1)).alias("n_attempts"),
        )
    )
    ok = pl.col("status") == "ok"
    return (
        joined.group_by(keys)
        .agg(
            pl.len().alias("runs"),
            ok.sum().alias("runs_ok"),
            (~ok).sum().alias("runs_failed"),
            (pl.col("n_attempts") - 1).clip(lower_bound=0).sum().alias("retries"),
            pl.col("batch_time_s").filter(ok).mean().alias("batch_time_mean_s"),
            pl.col("batch_time_s").filter(ok).std().alias("batch_time_std_s"),
            (pl.col("batch_time_s").filter(ok).std() / pl.col("batch_time_s").filter(ok).mean()).alias("batch_time_cv"),
            pl.col("ttft_mean_ms").filter(ok).mean().alias("ttft_mean_ms"),
            pl.col("e2e_mean_ms").filter(ok).mean().alias("e2e_mean_ms"),
            _sum_reported("server_preemptions").alias("preemptions"),  # null (sglang-jax: no /metrics), never 0
            # each run's value's range over the repeats: what the grading rules of kvlab.claims read
            pl.col("ttft_mean_ms").filter(ok).min().alias("ttft_min_ms"),
            pl.col("ttft_mean_ms").filter(ok).max().alias("ttft_max_ms"),
            pl.col("e2e_mean_ms").filter(ok).min().alias("e2e_min_ms"),
            pl.col("e2e_mean_ms").filter(ok).max().alias("e2e_max_ms"),
            pl.col("batch_time_s").filter(ok).min().alias("batch_time_min_s"),
            pl.col("batch_time_s").filter(ok).max().alias("batch_time_max_s"),
            pl.col("device_kind").drop_nulls().first(),
        )
        .sort(keys)
    )


def failure_causes(attempts: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Count of failed attempts by cause, per experiment, engine and memory setting."""
    keys = ["experiment", "engine", "mem_util", "context_tokens", "context_label"]  # the label only to show
    return (
        attempts.filter(pl.col("status") == "failed")
        .join(runs.select("run_id", *keys), on="run_id", how="inner")
        .group_by(*keys, "failure_cause")
        .agg(pl.len().alias("failed_attempts"))
        .sort(*keys, "failure_cause")
    )


def memory_comparison(stats: pl.DataFrame, low: float | None = None, high: float | None = None) -> pl.DataFrame:
    """Per experiment, engine and context measured at both settings: ``high`` against ``low``.

    ``stats`` is :func:`memory_study`'s frame; ``low``/``high`` default to its smallest and largest
    ``mem_util``. ``time_ratio`` = mean batch time at ``high`` / at ``low`` (< 1: the higher setting
    finished sooner; null when either setting has no successful run). Empty with fewer than two settings.
    """
    keys = ["experiment", "hardware", "engine", "context_tokens"]  # contexts joined on tokens, the label shown
    cols = ["runs", "runs_ok", "runs_failed", "retries", "batch_time_mean_s", "preemptions"]
    low = stats["mem_util"].min() if low is None else low
    high = stats["mem_util"].max() if high is None else high
    if low is None or high is None or low == high:
        return pl.DataFrame(
            schema={
                **{k: stats.schema[k] for k in (*keys, "context_label")},
                "mem_low": pl.Float64,
                "mem_high": pl.Float64,
                **{f"{c}_{s}": stats.schema[c] for s in ("low", "high") for c in cols},
                "time_ratio": pl.Float64,
            }
        )
    lo = stats.filter(pl.col("mem_util") == low).select(
        *keys, "context_label", *[pl.col(c).alias(f"{c}_low") for c in cols]
    )
    hi = stats.filter(pl.col("mem_util") == high).select(*keys, *[pl.col(c).alias(f"{c}_high") for c in cols])
    return (
        lo.join(hi, on=keys, how="inner")
        .with_columns(
            pl.lit(low).alias("mem_low"),
            pl.lit(high).alias("mem_high"),
            (pl.col("batch_time_mean_s_high") / pl.col("batch_time_mean_s_low")).alias("time_ratio"),
        )
        .select(
            *keys,
            "context_label",
            "mem_low",
            "mem_high",
            *[f"{c}_{s}" for s in ("low", "high") for c in cols],
            "time_ratio",
        )
        .sort(keys)
    )


def memory_ratios(stats: pl.DataFrame, low: float | None = None, high: float | None = None) -> pl.DataFrame:
    """Per experiment, engine and context measured at both settings: the lower setting ÷ the higher, within one
    engine (what the 0.92-vs-0.95 claims are about; never one engine against another).

    ``batch_time_ratio`` = mean batch time at ``low`` ÷ at ``high``, ``e2e_ratio`` the same for mean request
    latency (> 1: the lower setting is slower). ``*_ratio_min``/``*_ratio_max``: the range the ratio takes over the
    repeats (least at ``low`` ÷ most at ``high``, most ÷ least); equal to the ratio with one run a side. ``n_runs``:
    the fewer successful runs of the two sides. Empty with fewer than two settings."""
    keys = ["experiment", "hardware", "engine", "context_tokens"]
    cols = [
        "runs_ok",
        "batch_time_mean_s",
        "batch_time_min_s",
        "batch_time_max_s",
        "e2e_mean_ms",
        "e2e_min_ms",
        "e2e_max_ms",
    ]
    low = stats["mem_util"].min() if low is None else low
    high = stats["mem_util"].max() if high is None else high
    ratios = [
        "batch_time_ratio",
        "batch_time_ratio_min",
        "batch_time_ratio_max",
        "e2e_ratio",
        "e2e_ratio_min",
        "e2e_ratio_max",
    ]
    schema = {
        **{k: stats.schema[k] for k in (*keys, "context_label")},
        "mem_low": pl.Float64,
        "mem_high": pl.Float64,
        "n_runs": pl.UInt32,
        **dict.fromkeys(ratios, pl.Float64),
    }
    if low is None or high is None or low == high:
        return pl.DataFrame(schema=schema)
    lo = stats.filter(pl.col("mem_util") == low).select(
        *keys, "context_label", *[pl.col(c).alias(f"{c}_lo") for c in cols]
    )
    hi = stats.filter(pl.col("mem_util") == high).select(*keys, *[pl.col(c).alias(f"{c}_hi") for c in cols])
    return (
        lo.join(hi, on=keys, how="inner")
        .with_columns(
            pl.lit(low, pl.Float64).alias("mem_low"),
            pl.lit(high, pl.Float64).alias("mem_high"),
            pl.min_horizontal("runs_ok_lo", "runs_ok_hi").cast(pl.UInt32).alias("n_runs"),
            (pl.col("batch_time_mean_s_lo") / pl.col("batch_time_mean_s_hi")).alias("batch_time_ratio"),
            (pl.col("batch_time_min_s_lo") / pl.col("batch_time_max_s_hi")).alias("batch_time_ratio_min"),
            (pl.col("batch_time_max_s_lo") / pl.col("batch_time_min_s_hi")).alias("batch_time_ratio_max"),
            (pl.col("e2e_mean_ms_lo") / pl.col("e2e_mean_ms_hi")).alias("e2e_ratio"),
            (pl.col("e2e_min_ms_lo") / pl.col("e2e_max_ms_hi")).alias("e2e_ratio_min"),
            (pl.col("e2e_max_ms_lo") / pl.col("e2e_min_ms_hi")).alias("e2e_ratio_max"),
        )
        .select(*schema)
        .sort(keys)
    )


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


def with_range(value, lo, hi, fmt=lambda v: f"{v:,}") -> str | None:
    """A modelled number with its range over the memory sets: '11 (11–25)'; the value alone where the sets agree."""
    if value is None:
        return None
    if lo is None or hi is None or lo == hi:
        return fmt(value)
    return f"{fmt(value)} ({fmt(lo)}–{fmt(hi)})"


def headroom_printed(head: pl.DataFrame) -> pl.DataFrame:
    """The modelled headroom as 03's table prints it: per memory setting, DCP size and context the KV pool and what
    is left outside the target (GiB per GPU: the same in every memory set), the KV capacity (millions of tokens, three
    significant figures) and the sequences that fit, each with its range over the memory sets ('11 (11–25)'), and
    the model's memory check (``fits``)."""
    ranged = "max_concurrent_seqs_lo" in head.columns

    def col(name: str, fmt) -> pl.Series:
        lo = head[f"{name}_lo"].to_list() if ranged else [None] * head.height
        hi = head[f"{name}_hi"].to_list() if ranged else [None] * head.height
        return pl.Series(
            name, [with_range(v, a, b, fmt) for v, a, b in zip(head[name].to_list(), lo, hi)], dtype=pl.String
        )

    def cap(v) -> str:
        return f"{modelled_count(v) / 1e6:#.3g}M"

    return head.select(
        "mem_util",
        "dcp",
        "context_tokens",
        pl.col("kv_pool_gib_per_gpu").round(1),
        pl.col("outside_pool_gib_per_gpu").round(1),
    ).with_columns(
        col("kv_capacity_tokens", cap),
        col("max_concurrent_seqs", lambda v: f"{v:,}"),
        head["fits"],
    )


def outside_target(head: pl.DataFrame) -> pl.DataFrame:
    """Per memory setting, for the configuration without DCP (vLLM's): the KV pool, the memory left outside the
    target and the need the model assumes there (GiB per GPU, modelled; the same in every memory set)."""
    return (
        head.filter(pl.col("dcp") == 1)
        .group_by("mem_util")
        .agg(pl.col("kv_pool_gib_per_gpu", "outside_pool_gib_per_gpu", "outside_need_gib_per_gpu").first())
        .sort("mem_util")
    )


def retries_by_setting(stats: pl.DataFrame) -> pl.DataFrame:
    """Per memory setting: runs, retries and failed runs over every engine and context, and where the retries were
    (``retried``: 'engine at context' per row that retried, its real tokens first)."""
    where = [
        f"{engine_label(r['engine'])} at {context_name(r['context_label'], r['context_tokens'])}"
        if (r["retries"] or 0) > 0
        else None
        for r in stats.iter_rows(named=True)
    ]
    return (
        stats.with_columns(pl.Series("where", where, dtype=pl.String))
        .group_by("mem_util")
        .agg(
            pl.col("runs").sum().cast(pl.Int64),
            pl.col("retries").sum().cast(pl.Int64),
            pl.col("runs_failed").sum().cast(pl.Int64),
            pl.col("where").drop_nulls().alias("retried"),
        )
        .sort("mem_util")
    )


def spreads(stats: pl.DataFrame, cmp: pl.DataFrame) -> pl.DataFrame:
    """Per engine and context with more than one successful run at both settings: the batch-time spread (CV) at the
    lower setting (``cv_low``) and at the higher (``cv_high``)."""
    keys = ["experiment", "engine", "context_tokens"]
    side = stats.filter(pl.col("runs_ok") > 1).select(*keys, "mem_util", "batch_time_cv")
    lo = cmp.select(*keys, "context_label", "mem_low").join(
        side.rename({"mem_util": "mem_low", "batch_time_cv": "cv_low"}), on=[*keys, "mem_low"]
    )
    hi = cmp.select(*keys, "mem_high").join(
        side.rename({"mem_util": "mem_high", "batch_time_cv": "cv_high"}), on=[*keys, "mem_high"]
    )
    return lo.join(hi, on=keys).select(*keys, "context_label", "cv_low", "cv_high").sort(keys)


def counters_missing(measured: pl.DataFrame) -> pl.DataFrame:
    """Per engine whose server counters are missing in every measured run: its runs, the counters missing, and
    whether that is every counter (tables show them empty, never 0)."""
    m = measured.filter(pl.col("source") == "measured") if "source" in measured.columns else measured
    cols = [c for c in m.columns if c.startswith("server_")]
    rows = []
    for (engine,), g in m.group_by(["engine"], maintain_order=True):
        missing = [c for c in cols if g[c].null_count() == g.height]
        if missing:
            rows.append({"engine": engine, "runs": g.height, "missing": missing, "every": len(missing) == len(cols)})
    schema = {"engine": pl.String, "runs": pl.Int64, "missing": pl.List(pl.String), "every": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)
