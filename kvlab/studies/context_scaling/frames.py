"""Report 01's own frames: batch-time growth with context, the model's per-context ratios over its assumption sets,
the reference-host answer table, and the model's crossover as a typed value (always with its range)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvlab.engines import engine_label
from kvlab.perfmodel.calibrate import implausible
from kvlab.perfmodel.ranges import model_ranges
from kvlab.studies.measured_frames import mean_batch_times, with_context_names
from kvlab.units import k_label

#: The contexts of the reference-host answer table (tokens): the article's two and the one between them.
ANSWER_CONTEXTS = (65536, 131072, 204800)


@dataclass(frozen=True)
class ModelCrossover:
    """The physical model's crossover: its value under the default assumptions (``tokens``; None: no crossover in
    the modelled range) and its range over the assumption sets the article leaves open (``lo``–``hi``; None where
    no set crosses), with the fit's quality. Printed only with its range (:func:`words.model_crossover_sentence`)."""

    tokens: float | None
    lo: float | None
    hi: float | None
    points: int
    max_residual_pct: float
    loo_mean_pct: float
    implausible: tuple[str, ...] = ()

    @property
    def range_label(self) -> str | None:
        """'108K–746K' (None where no assumption set crosses)."""
        return None if self.lo is None or self.hi is None else f"{k_label(self.lo)}–{k_label(self.hi)}"


def model_crossover(tokens: float | None, xrange: tuple[float, float] | None, fit) -> ModelCrossover:
    lo, hi = xrange if xrange else (None, None)
    return ModelCrossover(
        tokens=tokens,
        lo=lo,
        hi=hi,
        points=fit.residuals.height,
        max_residual_pct=fit.max_abs_residual_pct,
        loo_mean_pct=fit.loo_mean_abs_pct,
        implausible=tuple(implausible(fit, short=True)),
    )


def batch_time_growth(runs: pl.DataFrame) -> pl.DataFrame:
    """Per engine: how batch time grows from its shortest measured context to its longest: ``growth`` =
    T(longest) ÷ T(shortest); ``exponent``: k of T ∝ C^k fitted in log-log through every context (exact through two
    points); null with fewer than two contexts. ``n_runs``: the fewest runs behind any of its contexts."""
    keys = ["source", "experiment", "hardware", "engine"]
    m = mean_batch_times(runs).filter(pl.col("batch_time_s") > 0).sort([*keys, "context_tokens"])
    lc, lt = pl.col("context_tokens").log(), pl.col("batch_time_s").log()
    cov = ((lc - lc.mean()) * (lt - lt.mean())).sum()
    var = ((lc - lc.mean()) ** 2).sum()
    return (
        m.group_by(keys, maintain_order=True)
        .agg(
            pl.len().alias("n_contexts"),
            pl.col("context_label").first().alias("context_from"),
            pl.col("context_label").last().alias("context_to"),
            pl.col("context_tokens").first().alias("c_from"),
            pl.col("context_tokens").last().alias("c_to"),
            pl.col("batch_time_s").first().alias("t_from_s"),
            pl.col("batch_time_s").last().alias("t_to_s"),
            pl.when(var > 0).then(cov / var).alias("exponent"),
            pl.col("n_runs").min().alias("n_runs"),
        )
        .with_columns(pl.when(pl.col("n_contexts") > 1).then(pl.col("t_to_s") / pl.col("t_from_s")).alias("growth"))
    )


def measured_means(pair: pl.DataFrame) -> pl.DataFrame:
    """The measured mean batch times, each context named by its real tokens (``context``)."""
    return with_context_names(mean_batch_times(pair).sort("context_tokens", "engine"))


def modelled_ratios(sens: pl.DataFrame, contexts=ANSWER_CONTEXTS) -> tuple[pl.DataFrame, list]:
    """Per context: vLLM's batch time ÷ SGLang's (DCP 8) over every assumption set of ``sens``, the lowest and
    highest ratio, and in how many sets SGLang is the faster; with the spans themselves
    (:func:`kvlab.perfmodel.ranges.model_ranges`, which report 04 reads too). Above 1: SGLang faster."""
    spans = model_ranges(sens, contexts=tuple(contexts)).ratios
    frame = pl.DataFrame(
        [
            {
                "context_tokens": r.context_tokens,
                "ratio_low": r.ratio.lo,
                "ratio_high": r.ratio.hi,
                "sets": r.ratio.sets,
                "sglang_faster_sets": r.sglang_faster,
            }
            for r in spans
        ],
        schema={
            "context_tokens": pl.Int64,
            "ratio_low": pl.Float64,
            "ratio_high": pl.Float64,
            "sets": pl.Int64,
            "sglang_faster_sets": pl.Int64,
        },
    )
    return frame, list(spans)


ANSWER_SCHEMA = {
    "context": pl.String,
    "context_tokens": pl.Int64,
    "engine": pl.String,
    "margin": pl.String,
    "evidence": pl.String,
    "basis": pl.String,
}


def answer_table(rel: pl.DataFrame, spans: list, engine_a: str, engine_b: str) -> pl.DataFrame:
    """The reference host's answer, one row per context and kind of evidence: the engine, by how much, and the
    kind (published: the article's table; modelled: every assumption set, with the range)."""
    rows = []
    for span in spans:
        ctx = span.context_tokens
        pub = rel.filter(pl.col("context_tokens") == ctx)
        if pub.height:
            p = pub.row(0, named=True)
            rows.append(
                {
                    "context": k_label(ctx),
                    "context_tokens": ctx,
                    "engine": p["faster"],
                    "margin": f"{p['speedup']:.2f}× faster",
                    "evidence": "published",
                    "basis": "the article's table, one run per cell",
                }
            )
        b = engine_label(engine_b)
        rows.append(
            {
                "context": k_label(ctx),
                "context_tokens": ctx,
                "engine": span.winner or "either",
                "margin": span.margin(engine_label(engine_a), b),
                "evidence": "modelled",
                "basis": f"{b} faster in {span.sglang_faster} of {span.ratio.sets} assumption sets; the model "
                "fails its held-out test",
            }
        )
    return pl.DataFrame(rows, schema=ANSWER_SCHEMA)
