"""Data folders the notebook tests run on: fixed measured runs (made up, and real ones from tests/fixtures) beside
the repository's reference tables and catalog."""

import shutil
from pathlib import Path

import polars as pl

from kvlab import store
from kvlab.paths import DATA_DIR

#: Real measured runs of the four CPU experiments (see tests/fixtures/README.md).
FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs"


def copy_reference(data: Path) -> Path:
    """``data`` with the repository's reference tables and catalog (no runs)."""
    shutil.copytree(DATA_DIR / "reference", data / "reference")
    shutil.copytree(DATA_DIR / "catalog", data / "catalog")
    return data


#: Fixed measured runs of both engines: (engine, mem_util, context tokens, batch time s, failed attempts before ok,
#: vLLM preemptions). vllm wins at 32K and 64K, sglang-jax at 200K (6 s vs 8 s): a crossover between 64K and 200K.
TWO_ENGINES = [
    ("vllm", 0.92, 1024, 1.0, 0, 0), ("vllm", 0.92, 2048, 2.0, 0, 0), ("vllm", 0.92, 6400, 8.0, 0, 2),
    ("vllm", 0.95, 6400, 6.0, 0, 0),
    ("sglang-jax", 0.92, 1024, 3.0, 0, None), ("sglang-jax", 0.92, 2048, 4.0, 0, None),
    ("sglang-jax", 0.92, 6400, 6.0, 0, None), ("sglang-jax", 0.95, 6400, 5.0, 1, None),
]
LABELS = {1024: "32K", 2048: "64K", 6400: "200K"}


def write_two_engine_runs(data):
    """A data folder with the reference tables and TWO_ENGINES as measured runs of cpu_long_context."""
    copy_reference(data)
    for i, (engine, mem, ctx, t, failed, preempt) in enumerate(TWO_ENGINES):
        run_id = f"r{i}"
        counters = {} if engine == "sglang-jax" else {  # sglang-jax serves no /metrics: every counter null
            "server_preemptions": [preempt], "server_prompt_tokens": [4 * (ctx - 64)],
            "server_generation_tokens": [256], "server_prefix_cache_queries": [4 * (ctx - 64)],
            "server_prefix_cache_hits": [0]}
        run = pl.DataFrame({
            "source": ["measured"], "experiment": ["cpu_long_context"], "run_id": [run_id],
            "hardware": ["CPU x86_64 (test)"], "model": ["tiny-llama"], "engine": [engine], "mem_util": [mem],
            "kv_budget_bytes": [8388608 if mem == 0.92 else 20971520],  # cpu_long_context's budgets, as recorded
            "context_label": [LABELS[ctx]], "context_tokens": [ctx], "scale_factor": [32.0],
            "mode": ["fixed_batch"], "batch_size": [4], "prompt_tokens": [ctx - 64], "output_tokens": [64],
            "repeat": [0], "attempts": [failed + 1], "status": ["ok"], "batch_time_s": [t],
            "ttft_mean_ms": [100.0 * t], "e2e_mean_ms": [1000.0 * t], **counters,
        })
        attempts = pl.DataFrame({
            "run_id": [run_id] * (failed + 1), "attempt": list(range(1, failed + 2)),
            "status": ["failed"] * failed + ["ok"], "failure_cause": ["runtime_oom"] * failed + [None],
        })
        store.write_run(data / "runs" / "cpu_long_context", run_id, run, attempts=attempts)
    return data


def write_fixture_data(data: Path) -> Path:
    """A data folder with the reference tables, the catalog and the real measured runs of tests/fixtures, plus
    two variants of the documents for parameters that choose one: ``article_b300_alt`` (the B300 table with
    every SGLang batch time 1.3x longer, and its claims) and ``article_kv_design_alt`` (the design article's claims
    without its last one)."""
    copy_reference(data)
    shutil.copytree(FIXTURE_RUNS, data / "runs")
    ref = data / "reference"
    table = pl.read_csv(ref / "article_b300.csv")
    table.with_columns(
        pl.lit("article_b300_alt").alias("experiment"),
        pl.col("run_id").str.replace("article_b300", "article_b300_alt"),
        pl.when(pl.col("engine") == "sglang").then(pl.col("batch_time_s") * 1.3).otherwise(pl.col("batch_time_s")),
    ).write_csv(ref / "article_b300_alt.csv")
    claims = pl.read_csv(ref / "article_b300_claims.csv")
    claims.with_columns(pl.lit("article_b300_alt").alias("experiment")).write_csv(ref / "article_b300_alt_claims.csv")
    design = pl.read_csv(ref / "article_kv_design_claims.csv")
    design.head(len(design) - 1).with_columns(pl.lit("article_kv_design_alt").alias("experiment")).write_csv(
        ref / "article_kv_design_alt_claims.csv")
    return data
