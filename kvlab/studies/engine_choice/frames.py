"""Report 06's own frames: the measured concurrency study, and what a measured table's caption names."""

from __future__ import annotations

import polars as pl

from kvlab.schema import with_device_kind
from kvlab.studies.sharing_frames import STUDY_KEYS


def _sum_reported(col: str) -> pl.Expr:
    """Sum of a counter over a group; null (not 0) when no row of the group reported it."""
    return pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum()).otherwise(None)


def concurrency_study(runs: pl.DataFrame, mode: str = "classification") -> pl.DataFrame:
    """Per engine configuration and requests in flight: every request accounted for, throughput, latency.

    ``requests_sent`` = ok + failed (a request is never dropped from either count); throughput
    counts successful requests only. ``preemptions`` is null where the engine serves no counter
    (sglang-jax has no /metrics), not 0.
    """
    m = with_device_kind(runs.filter((pl.col("source") == "measured") & (pl.col("mode") == mode))).with_columns(
        (pl.col("requests_ok") + pl.col("requests_failed")).alias("requests_sent"),
        (pl.col("requests_ok") / pl.col("batch_time_s")).alias("requests_per_s"),
        (pl.col("served_output_tokens") / pl.col("batch_time_s")).alias("output_tokens_per_s"),
    )
    return (
        m.group_by([*STUDY_KEYS, pl.col("batch_size").alias("in_flight")])
        .agg(
            pl.len().alias("n_runs"),
            (pl.col("status") == "ok").sum().alias("runs_ok"),
            pl.col("requests_sent").sum(),
            pl.col("requests_ok").sum(),
            pl.col("requests_failed").sum(),
            pl.col("requests_per_s").mean(),
            pl.col("requests_per_s").min().alias("requests_per_s_min"),
            pl.col("requests_per_s").max().alias("requests_per_s_max"),
            pl.col("device_kind").drop_nulls().first(),
            pl.col("output_tokens_per_s").mean(),
            pl.col("ttft_mean_ms").mean(),
            pl.col("ttft_p99_ms").mean(),
            pl.col("e2e_mean_ms").mean(),
            _sum_reported("server_preemptions").alias("preemptions"),
        )
        .sort([*STUDY_KEYS, "in_flight"])
    )


def experiments_in(frame: pl.DataFrame) -> list[str]:
    """The experiments ``frame`` holds rows of, in the order they first appear (a measured table's caption)."""
    return frame["experiment"].unique(maintain_order=True).to_list() if "experiment" in frame.columns else []
