"""Report 04's own frames: the runs the model's catalog can bound, the calibration table (fitted and held-out times
side by side), the assumption sets grouped by batch size, and the consistent-fits summary typed."""

from __future__ import annotations

import polars as pl

from kvlab.engines import SGLANG, engine_label

from kvlab.catalog import model as find_model
from kvlab.catalog import row_gpu
from kvlab.studies.whatif_model.result import Consistent


def catalogued(
    runs: pl.DataFrame, sources: tuple[str, ...] = ("published", "measured")
) -> tuple[pl.DataFrame, dict[str, set[str]]]:
    """The rows of ``runs`` whose model and hardware the catalog has (``data/catalog``: what the model's bound needs),
    and what it lacks -> the experiments that lack it (empty where nothing is missing): the report shows their
    measured parts and says their modelled part is skipped (:func:`~kvlab.studies.whatif_model.words.not_catalogued`),
    instead of failing on the catalog's KeyError."""
    known: dict[tuple, str | None] = {}  # (what, name, device) -> None where catalogued, else what is missing
    keep, missing = [], {}
    device = [c for c in ("device_kind", "accelerator") if c in runs.columns]
    for r in runs.select("source", "experiment", "model", "hardware", *device).iter_rows(named=True):
        why = None
        if r["source"] in sources:
            # the hardware by its typed device (kvlab.device), named by its label for the reader
            for what, name, find in (
                ("model", r["model"], find_model),
                ("hardware", r["hardware"], lambda _, row=r: row_gpu(row)),
            ):
                if name is None:
                    continue
                seen = (what, name, r.get("device_kind"), r.get("accelerator"))
                if seen not in known:
                    try:
                        find(name)
                        known[seen] = None
                    except KeyError:
                        known[seen] = f"{what} `{name}`"
                why = why or known[seen]
        keep.append(why is None)
        if why is not None:
            missing.setdefault(why, set()).add(r["experiment"])
    return (runs.filter(keep) if missing else runs), missing


def calibration(fit) -> pl.DataFrame:
    """One row per published point: the published time, the fitted one and its residual, and the time a fit to the
    other points predicts with its error (the fit's residual and leave-one-out tables joined)."""
    keys = ["engine", "context_tokens"]
    res = fit.residuals.select(*keys, "observed_s", "modelled_s", "residual_pct")
    if not fit.loo.height:
        return res.sort("context_tokens", "engine")
    loo = fit.loo.select(*keys, "loo_modelled_s", "loo_error_pct")
    return res.join(loo, on=keys, how="left").sort("context_tokens", "engine")


def by_batch(sens: pl.DataFrame) -> pl.DataFrame:
    """The assumption sets grouped by batch size (the assumption that moves the answer most): per batch, the sets,
    the crossover's lowest and highest (whole K, as every table gives it), the sets that cross, those in which SGLang
    is faster at 200K, the held-out error's range (whole percent) and the sets whose free fit needs prefill or
    bandwidth above 100% of peak (``over_peak_sets``)."""
    from kvlab.perfmodel.figures import column_labels  # matplotlib: loaded where the frames are made

    g = (
        sens.group_by("batch_size")
        .agg(
            pl.len().alias("sets"),
            pl.col("crossover_tokens").min().alias("lo"),
            pl.col("crossover_tokens").max().alias("hi"),
            pl.col("crossover_tokens").is_not_null().sum().alias("crossing_sets"),
            (pl.col("winner_200k") == engine_label(SGLANG)).sum().alias("sglang_faster_200k_sets"),
            pl.col("loo_mean_abs_pct").cast(pl.Float64).min().round(0).alias("loo_low_pct"),
            pl.col("loo_mean_abs_pct").cast(pl.Float64).max().round(0).alias("loo_high_pct"),
            (pl.col("over_peak") != "").sum().alias("over_peak_sets"),
        )
        .sort("batch_size")
    )
    lo, hi = column_labels(g["lo"].to_list()), column_labels(g["hi"].to_list())
    crossover = [None if a is None else f"{a}–{b}" for a, b in zip(lo, hi)]
    return g.with_columns(pl.Series("crossover_range", crossover, dtype=pl.String)).select(
        "batch_size", "sets", "crossing_sets", "crossover_range", "sglang_faster_200k_sets", "loo_low_pct",
        "loo_high_pct", "over_peak_sets",
    )  # fmt: skip


def consistent(summary: dict) -> Consistent:
    """:func:`kvlab.perfmodel.report.consistent_summary`'s plain values as a typed :class:`Consistent`."""
    return Consistent(
        candidates=int(summary["candidates"]),
        kept=int(summary["kept"]),
        tolerance_pct=float(summary["tolerance_pct"]),
        batches=str(summary["batches"]),
        winners=tuple((int(c), tuple((str(w), int(n)) for w, n in counts)) for c, counts in summary["winners"]),
        crossover=None if summary["crossover"] is None else tuple(map(float, summary["crossover"])),
        over_peak=int(summary.get("over_peak", 0)),
    )


def fits_shown(fits: pl.DataFrame) -> pl.DataFrame:
    """The two fits as tabled: the held-out error in whole percent, the one rounding the page gives it."""
    return fits.with_columns(pl.col("loo_mean_abs_pct").cast(pl.Float64).round(0))


#: The verdict kinds of the model's checks against published runs and engine logs, in the order the page lists them.
OUTSIDE_KINDS = ("model_capacity", "model_prefill", "model_terms", "model_pool", "model_bound")
#: Each kind in words (the table's ``check`` column).
OUTSIDE_NAMES = {
    "model_capacity": "capacity vs published concurrency",
    "model_prefill": "prefill FLOPs vs published TTFT",
    "model_terms": "fitted terms at published conditions (hypothesis test)",
    "model_pool": "KV pool vs engine log",
    "model_bound": "throughput bound vs published figure",
}


def outside(verdicts) -> pl.DataFrame:
    """One row per check of the model against a published run or an engine log (its verdicts, kinds
    :data:`OUTSIDE_KINDS`): the check, the source (the claim after its dash), the outcome, the margin and its unit,
    and the deciding number as the verdict gives it."""
    rows = [
        {
            "check": OUTSIDE_NAMES[v.kind],
            "source": v.claim.rsplit(" — ", 1)[-1],
            "outcome": v.outcome,
            "margin": v.value,
            "unit": v.unit,
            "number": v.number,
        }
        for kind in OUTSIDE_KINDS
        for v in verdicts
        if v.kind == kind
    ]
    schema = {"check": pl.String, "source": pl.String, "outcome": pl.String, "margin": pl.Float64, "unit": pl.String,
              "number": pl.String}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)
