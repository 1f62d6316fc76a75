"""Report 02's own frames: throughput relative to a reference context, the document's stated ratios beside what
its own table implies (one typed row per stated ratio), and the measured engines that stand for the claims'."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvlab.studies.measured_frames import with_context_names


def relative_to_context(frame: pl.DataFrame, y: str, context_label: str | None = None) -> pl.DataFrame:
    """``frame`` with ``{y}_rel``: each engine's ``y`` ÷ its own ``y`` at ``context_label`` (the reference = 1),
    within each source, experiment and hardware; where that engine has no row there (or none is given), at its
    shortest context. ``reference_context`` names the context each row is relative to."""
    keys = ["source", "experiment", "hardware", "engine"]
    ref = (
        frame.filter(pl.col(y).is_not_null())
        .sort("context_tokens")
        .with_columns((pl.col("context_label") == (context_label or "")).alias("_at"))
        .sort("_at", "context_tokens", descending=[True, False])
        .group_by(keys, maintain_order=True)
        .agg(
            pl.col(y).first().alias("_ref"),
            pl.col("context_label").first().alias("reference_context"),
            pl.col("context_tokens").first().alias("reference_tokens"),
        )
    )
    return (
        frame.join(ref, on=keys, how="left").with_columns((pl.col(y) / pl.col("_ref")).alias(f"{y}_rel")).drop("_ref")
    )


def measured_throughput(tp: pl.DataFrame) -> pl.DataFrame:
    """Measured throughput relative to each engine's shortest context, each context named by its real tokens."""
    return with_context_names(relative_to_context(tp, "output_tokens_per_s").sort("context_tokens", "engine"))


def consistency_verdicts(check: pl.DataFrame) -> pl.DataFrame:
    """One row per claim (its ``kind`` and ``engine`` kept): consistent under any definition, and under which."""
    return check.group_by("claim_id", "kind", "engine", "statement", "stated_value", maintain_order=True).agg(
        pl.col("consistent").any().alias("consistent_under_any"),
        pl.col("definition").filter(pl.col("consistent")).alias("consistent_definitions"),
        pl.col("implied_value")
        .filter(pl.col("definition").is_in(["time_ratio", "batch_time_ratio"]))
        .first()
        .alias("implied_by_time_ratio"),
    )


@dataclass(frozen=True)
class Implied:
    """What one definition makes of the document's table for a stated ratio (None: it cannot be computed)."""

    definition: str
    value: float | None
    consistent: bool | None


@dataclass(frozen=True)
class StatedRatio:
    """One ratio the document states, beside its own table: consistent under any definition, under which, and
    what every definition gives (the list under report 02's Figure 2; its caption counts these rows)."""

    claim_id: str
    kind: str
    engine: str
    statement: str
    stated_value: float
    consistent: bool
    definitions: tuple[str, ...]
    implied_by_time_ratio: float | None
    implied: tuple[Implied, ...]


def stated_ratios(check: pl.DataFrame) -> tuple[StatedRatio, ...]:
    """Each stated ratio of :func:`kvlab.studies.measured_frames.consistency`'s ``check`` as a :class:`StatedRatio`."""
    out = []
    for r in consistency_verdicts(check).iter_rows(named=True):
        rows = check.filter(pl.col("claim_id") == r["claim_id"])
        out.append(
            StatedRatio(
                claim_id=r["claim_id"],
                kind=r["kind"],
                engine=r["engine"],
                statement=r["statement"],
                stated_value=r["stated_value"],
                consistent=bool(r["consistent_under_any"]),
                definitions=tuple(r["consistent_definitions"] or ()),
                implied_by_time_ratio=r["implied_by_time_ratio"],
                implied=tuple(
                    Implied(x["definition"], x["implied_value"], x["consistent"]) for x in rows.iter_rows(named=True)
                ),
            )
        )
    return tuple(out)


def stand_in(engine: str, present: list[str], family: dict[str, str] | None = None) -> str | None:
    """The measured engine that stands for a claim's ``engine``: itself, the one ``family`` names, or the first
    measured engine of its family (sglang → sglang-jax)."""
    if engine in present:
        return engine
    if family and family.get(engine) in present:
        return family[engine]
    return next((e for e in present if e.startswith(engine + "-")), None)
