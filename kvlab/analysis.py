"""The studies' arithmetic as polars transforms: relative speed, throughput, decay, crossover,
a document's ratios checked against its own table, and the memory-utilisation statistics.

Every function takes frames in the :data:`kvlab.schema.RUNS` shape and returns a frame whose
column names carry their units; none of them invents a value the data does not hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

#: Columns that identify one configuration apart from the engine (what two engines are compared on).
CONFIG_KEYS = ("source", "experiment", "hardware", "context_label", "context_tokens")

#: Plausible definitions of a "throughput decay" between two contexts, each as a function of
#: (batch time, context tokens) at the two ends. Documents rarely say which one they mean.
DECAY_DEFINITIONS: dict[str, str] = {
    "batch_time_ratio": "T(to) / T(from): fall of requests/s, and of output tokens/s at a fixed output length",
    "prompt_tokens_per_s_ratio": "(C(from)/T(from)) / (C(to)/T(to)): fall of prompt (context) tokens/s",
}

#: Plausible definitions of "X is N times faster" at one context.
SPEED_DEFINITIONS: dict[str, str] = {
    "time_ratio": "T(slower) / T(faster), equal to the ratio of throughputs",
    "percent_less_time": "1 + (T(slower) - T(faster)) / T(slower): 'N× faster' read as '(N-1)·100% less time'",
}


def ok_batch_times(runs: pl.DataFrame) -> pl.DataFrame:
    """Rows that finished and carry a batch time."""
    return runs.filter((pl.col("status") == "ok") & pl.col("batch_time_s").is_not_null())


def mean_batch_times(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean, spread and count of batch time per configuration and engine (repeats folded)."""
    keys = [*CONFIG_KEYS, "engine"]
    return (
        ok_batch_times(runs)
        .group_by(keys)
        .agg(
            pl.col("batch_time_s").mean().alias("batch_time_s"),
            pl.col("batch_time_s").std().alias("batch_time_std_s"),
            pl.len().alias("n_runs"),
            pl.col("batch_size").first(),
            pl.col("output_tokens").first(),
            pl.col("prompt_tokens").first(),
            pl.col("scale_factor").first(),
        )
        .sort([*CONFIG_KEYS, "engine"])
    )


def relative_speed(runs: pl.DataFrame, engine_a: str = "vllm", engine_b: str = "sglang") -> pl.DataFrame:
    """Per configuration: both engines' batch times, which is faster, and by how much.

    ``speedup`` = T(slower) / T(faster) >= 1, the ratio the documents quote.
    """
    m = mean_batch_times(runs)
    a = m.filter(pl.col("engine") == engine_a).select(*CONFIG_KEYS, pl.col("batch_time_s").alias(f"{engine_a}_s"))
    b = m.filter(pl.col("engine") == engine_b).select(*CONFIG_KEYS, pl.col("batch_time_s").alias(f"{engine_b}_s"))
    ta, tb = pl.col(f"{engine_a}_s"), pl.col(f"{engine_b}_s")
    return (
        a.join(b, on=list(CONFIG_KEYS), how="inner")
        .with_columns(
            pl.when(ta <= tb).then(pl.lit(engine_a)).otherwise(pl.lit(engine_b)).alias("faster"),
            (pl.max_horizontal(ta, tb) / pl.min_horizontal(ta, tb)).alias("speedup"),
        )
        .sort(["source", "experiment", "context_tokens"])
    )


def throughput(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean batch times with throughput under explicit definitions.

    - ``batches_per_s`` = 1 / T: always defined, proportional to requests/s at a fixed batch size.
    - ``requests_per_s`` = batch_size / T (null when the batch size is unknown).
    - ``output_tokens_per_s`` = batch_size × output_tokens / T (null when either is unknown).
    - ``prompt_tokens_per_s`` = batch_size × context_tokens / T (null when batch size unknown);
      at full scale the context is the prompt length, on scaled CPU runs ``prompt_tokens`` is used.
    """
    m = mean_batch_times(runs)
    t = pl.col("batch_time_s")
    prompt = pl.coalesce(pl.col("prompt_tokens"), pl.col("context_tokens"))
    return m.with_columns(
        (1.0 / t).alias("batches_per_s"),
        (pl.col("batch_size") / t).alias("requests_per_s"),
        (pl.col("batch_size") * pl.col("output_tokens") / t).alias("output_tokens_per_s"),
        (pl.col("batch_size") * prompt / t).alias("prompt_tokens_per_s"),
    )


def _pair(m: pl.DataFrame, context_from: str, context_to: str) -> pl.DataFrame:
    keys = ["source", "experiment", "hardware", "engine"]
    lo = m.filter(pl.col("context_label") == context_from).select(
        *keys, pl.col("batch_time_s").alias("t_from_s"), pl.col("context_tokens").alias("c_from")
    )
    hi = m.filter(pl.col("context_label") == context_to).select(
        *keys, pl.col("batch_time_s").alias("t_to_s"), pl.col("context_tokens").alias("c_to")
    )
    return lo.join(hi, on=keys, how="inner")


def decay_factors(runs: pl.DataFrame, context_from: str = "64K", context_to: str = "200K") -> pl.DataFrame:
    """Throughput decay from ``context_from`` to ``context_to`` per engine, under each definition.

    A factor > 1 means throughput fell by that factor; < 1 means it rose.
    """
    p = _pair(mean_batch_times(runs), context_from, context_to)
    return p.with_columns(
        pl.lit(context_from).alias("context_from"),
        pl.lit(context_to).alias("context_to"),
        (pl.col("t_to_s") / pl.col("t_from_s")).alias("batch_time_ratio"),
        ((pl.col("c_from") / pl.col("t_from_s")) / (pl.col("c_to") / pl.col("t_to_s"))).alias(
            "prompt_tokens_per_s_ratio"
        ),
    ).sort(["source", "experiment", "engine"])


@dataclass(frozen=True)
class Crossover:
    """Where two engines' batch times meet, with the assumption that locates it."""

    context_tokens: float | None
    faster_below: str | None
    faster_above: str | None
    method: str
    assumption: str
    note: str

    @property
    def context_k(self) -> float | None:
        return None if self.context_tokens is None else self.context_tokens / 1024


def crossover(
    runs: pl.DataFrame,
    engine_a: str = "vllm",
    engine_b: str = "sglang",
    method: str = "linear",
) -> Crossover:
    """Estimate the context where ``engine_a`` and ``engine_b`` take equal batch time.

    ``runs`` must hold one source/experiment/hardware. ``method``:
    - ``"linear"``: batch time is linear in context between adjacent measured contexts;
    - ``"power"``: batch time follows T = a·C^k between adjacent contexts (straight in log-log).
    The estimate only interpolates: outside the measured range it says so and returns ``None``.
    """
    if method not in ("linear", "power"):
        raise ValueError(f"method must be 'linear' or 'power', not {method!r}")
    assumption = {
        "linear": "batch time grows linearly with context between adjacent measured contexts",
        "power": "batch time follows a power law of context (straight line in log-log) between adjacent measured contexts",
    }[method]
    groups = runs.select("source", "experiment", "hardware").unique()
    if groups.height > 1:
        raise ValueError(f"crossover needs one source/experiment/hardware, got {groups.height}: {groups.rows()}")
    rel = relative_speed(runs, engine_a, engine_b).sort("context_tokens")
    if rel.height < 2:
        return Crossover(None, None, None, method, assumption, "fewer than two contexts hold both engines")
    c = rel["context_tokens"].to_list()
    d = [x - y for x, y in zip(rel[f"{engine_a}_s"], rel[f"{engine_b}_s"])]  # <0: engine_a faster
    fa = lambda diff: engine_a if diff < 0 else engine_b  # noqa: E731
    for i in range(len(c) - 1):
        if d[i] == 0:
            return Crossover(float(c[i]), None, None, method, assumption, "equal batch times at a measured context")
        if d[i] * d[i + 1] < 0:
            if method == "linear":
                x = c[i] + (c[i + 1] - c[i]) * d[i] / (d[i] - d[i + 1])
            else:
                ta = [math.log(v) for v in rel[f"{engine_a}_s"][i : i + 2]]
                tb = [math.log(v) for v in rel[f"{engine_b}_s"][i : i + 2]]
                lc = [math.log(v) for v in c[i : i + 2]]
                ka, kb = (ta[1] - ta[0]) / (lc[1] - lc[0]), (tb[1] - tb[0]) / (lc[1] - lc[0])
                x = math.exp(lc[0] + (tb[0] - ta[0]) / (ka - kb))
            return Crossover(
                float(x), fa(d[i]), fa(d[i + 1]), method, assumption,
                f"between the measured contexts {c[i]:,} and {c[i + 1]:,} tokens",
            )
    return Crossover(
        None, fa(d[0]), fa(d[0]), method, assumption,
        f"{fa(d[0])} is faster at every measured context ({c[0]:,}–{c[-1]:,} tokens): no crossover inside the range",
    )


def _stated_tolerance(value: float) -> float:
    """Half a unit of the last digit the document wrote (1.5 → 0.05, 3.29 → 0.005)."""
    text = repr(float(value)).rstrip("0")
    decimals = len(text.split(".")[1]) if "." in text and not text.endswith(".") else 0
    return 0.5 * 10 ** (-decimals)


def consistency(runs: pl.DataFrame, claims: pl.DataFrame) -> pl.DataFrame:
    """Check each stated ratio in ``claims`` against what the same document's table implies.

    One row per (claim, definition): the implied value, the stated one, and ``consistent`` when
    they agree to the precision the document wrote (half a unit of its last digit).
    """
    rows = []
    numeric = claims.filter(pl.col("stated_value").is_not_null())
    for claim in numeric.iter_rows(named=True):
        table = runs.filter((pl.col("experiment") == claim["experiment"]) & (pl.col("source") == "published"))
        implied: dict[str, float] = {}
        if claim["kind"] == "relative_speed":
            rel = relative_speed(table).filter(pl.col("context_label") == claim["context_from"])
            if rel.height == 1:
                r = rel.row(0, named=True)
                slow, fast = max(r["vllm_s"], r["sglang_s"]), min(r["vllm_s"], r["sglang_s"])
                sign = 1.0 if r["faster"] == claim["engine"] else -1.0  # a claim naming the slower engine fails
                implied = {
                    "time_ratio": sign * slow / fast,
                    "percent_less_time": sign * (1 + (slow - fast) / slow),
                }
        elif claim["kind"] == "throughput_decay":
            dec = decay_factors(table, claim["context_from"], claim["context_to"]).filter(
                pl.col("engine") == claim["engine"]
            )
            if dec.height == 1:
                implied = {k: dec[k][0] for k in DECAY_DEFINITIONS}
        tol = _stated_tolerance(claim["stated_value"])
        defs = SPEED_DEFINITIONS if claim["kind"] == "relative_speed" else DECAY_DEFINITIONS
        for name, text in defs.items():
            value = implied.get(name)
            rows.append(
                {
                    "claim_id": claim["claim_id"],
                    "kind": claim["kind"],
                    "engine": claim["engine"],
                    "statement": claim["statement"],
                    "stated_value": claim["stated_value"],
                    "definition": name,
                    "definition_text": text,
                    "implied_value": value,
                    "tolerance": tol,
                    "consistent": None if value is None else abs(value - claim["stated_value"]) <= tol + 1e-12,
                }
            )
    schema = {
        "claim_id": pl.String, "kind": pl.String, "engine": pl.String, "statement": pl.String,
        "stated_value": pl.Float64, "definition": pl.String, "definition_text": pl.String,
        "implied_value": pl.Float64, "tolerance": pl.Float64, "consistent": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


def consistency_verdicts(check: pl.DataFrame) -> pl.DataFrame:
    """One row per claim: consistent under any definition, and under which."""
    return (
        check.group_by("claim_id", "statement", "stated_value", maintain_order=True)
        .agg(
            pl.col("consistent").any().alias("consistent_under_any"),
            pl.col("definition").filter(pl.col("consistent")).alias("consistent_definitions"),
            pl.col("implied_value").filter(pl.col("definition").is_in(["time_ratio", "batch_time_ratio"]))
            .first().alias("implied_by_time_ratio"),
        )
    )


def memory_study(runs: pl.DataFrame, attempts: pl.DataFrame) -> pl.DataFrame:
    """Per engine and memory setting: runs, failures, retries, run-time mean and spread, latency.

    Retries are counted from ``attempts`` (every launch attempt is recorded); a run with no
    attempt rows counts its ``attempts`` column.
    """
    measured = runs.filter(pl.col("source") == "measured")
    keys = ["experiment", "hardware", "engine", "mem_util", "context_label"]
    per_run_attempts = attempts.group_by("run_id").agg(
        pl.len().alias("n_attempts"),
        (pl.col("status") == "failed").sum().alias("failed_attempts"),
    )
    joined = measured.join(per_run_attempts, on="run_id", how="left").with_columns(
        pl.coalesce("n_attempts", "attempts", pl.lit(1)).alias("n_attempts"),
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
            (pl.col("batch_time_s").filter(ok).std() / pl.col("batch_time_s").filter(ok).mean()).alias(
                "batch_time_cv"
            ),
            pl.col("ttft_mean_ms").filter(ok).mean().alias("ttft_mean_ms"),
            pl.col("e2e_mean_ms").filter(ok).mean().alias("e2e_mean_ms"),
            pl.col("server_preemptions").sum().alias("preemptions"),
        )
        .sort(keys)
    )


def failure_causes(attempts: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Count of failed attempts by cause, per engine and memory setting."""
    cols = ["run_id", "engine", "mem_util", "context_label"]
    return (
        attempts.filter(pl.col("status") == "failed")
        .join(runs.select(cols), on="run_id", how="inner")
        .group_by("engine", "mem_util", "context_label", "failure_cause")
        .agg(pl.len().alias("failed_attempts"))
        .sort("engine", "mem_util", "context_label", "failure_cause")
    )
