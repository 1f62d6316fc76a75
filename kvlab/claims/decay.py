"""Throughput-decay claims (report 02): each engine's stated decay factor against the document's own table, the
claims' shared shape (which engine's throughput holds up better) in the table and on this host, and the
reductions the report's sentences word (:func:`extremes`, :func:`consistency_rows`).

Inputs are :func:`kvlab.analysis.decay_factors`' and :func:`kvlab.analysis.consistency`'s frames."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvlab.claims.grading import NO_TABLE_ROW, Repeats, cpu_cross_engine, measured_difference
from kvlab.engines import engine_label
from kvlab.units import change, sig2
from kvlab.verdicts import Verdict


@dataclass(frozen=True)
class DecayExtremes:
    """Within one source, experiment and hardware: the engine whose throughput holds up best (smallest batch-time
    ratio) and the one whose falls most, as :func:`kvlab.analysis.decay_factors` rows."""

    best: dict
    worst: dict

    @property
    def tied(self) -> bool:
        return self.best["batch_time_ratio"] == self.worst["batch_time_ratio"]


def extremes(decay: pl.DataFrame) -> list[DecayExtremes]:
    """Best and worst engine per source, experiment and hardware (in the frame's order)."""
    out = []
    for _, g in decay.group_by(["source", "experiment", "hardware"], maintain_order=True):
        g = g.sort("batch_time_ratio")
        out.append(DecayExtremes(g.row(0, named=True), g.row(-1, named=True)))
    return out


def consistency_rows(check: list[dict] | None) -> dict[str, list[dict]]:
    """:func:`kvlab.analysis.consistency`'s row dicts by claim id (what the table implies under each definition)."""
    out: dict[str, list[dict]] = {}
    for r in check or []:
        out.setdefault(r["claim_id"], []).append(r)
    return out


def stand_in(engine: str, present: list[str], family: dict[str, str] | None = None) -> str | None:
    """The measured engine that stands for a claim's ``engine``: itself, the one ``family`` names, or the first
    measured engine of its family (sglang → sglang-jax)."""
    if engine in present:
        return engine
    if family and family.get(engine) in present:
        return family[engine]
    return next((e for e in present if e.startswith(engine + "-")), None)


def decay_claim_verdicts(
    claims: pl.DataFrame,
    check: pl.DataFrame,
    decay_published: pl.DataFrame,
    decay_measured: pl.DataFrame | None = None,
    engine_family: dict[str, str] | None = None,
) -> list:
    """Each throughput-decay claim against the document's own table (consistent under any definition checked), then
    the claims' shared shape — which engine's throughput holds up better — in the table and, where measured runs
    hold both engines (or their stand-ins) at the two contexts, on this host."""
    dec = claims.filter((pl.col("kind") == "throughput_decay") & pl.col("stated_value").is_not_null())
    out = []
    for c in dec.iter_rows(named=True):
        lo, hi, e = c["context_from"], c["context_to"], c["engine"]
        rows = check.filter(pl.col("claim_id") == c["claim_id"])
        pub = decay_published.filter(pl.col("engine") == e)
        if pub.is_empty() or rows.is_empty():
            out.append(
                Verdict(
                    c["statement"],
                    "cannot be tested here",
                    "published",
                    f"no table rows for {engine_label(e)} at {lo} and {hi}",
                    claim_id=c["claim_id"],
                    kind="throughput_decay",
                    scope="published table",
                    n=0,
                    limit=NO_TABLE_ROW,
                    family="consistency",
                    reason=f"the table has no {engine_label(e)} rows at both contexts",
                )
            )
            continue
        ok = bool(rows["consistent"].fill_null(False).any())
        out.append(
            Verdict(
                f"{c['statement']} — against the article's own table",
                "consistent" if ok else "inconsistent",
                "published",
                f"table: {change(pub['batch_time_ratio'][0], 'requests/s')} from {lo} to {hi} "
                f"(stated {c['stated_value']:g}×)",
                claim_id=c["claim_id"],
                kind="throughput_decay",
                value=pub["batch_time_ratio"][0],
                unit="×",
                n=2,
                scope="published table",
                family="consistency",  # its times at the two contexts
                reason=(
                    "the table gives the stated factor under "
                    if ok
                    else "the table gives the stated factor under none of "
                )
                + "the definitions checked",
            )
        )
    if dec.height < 2:
        return out
    ranked = dec.sort("stated_value")  # the claimed-flatter engine first
    better, worse = ranked["engine"][0], ranked["engine"][-1]
    lo, hi = ranked["context_from"][0], ranked["context_to"][0]
    shape = f"{engine_label(better)}'s throughput holds up better than {engine_label(worse)}'s from {lo} to {hi}"

    def factors(decay: pl.DataFrame, a: str, b: str) -> tuple[float, float] | None:
        fa, fb = (decay.filter(pl.col("engine") == x)["batch_time_ratio"] for x in (a, b))
        return (fa[0], fb[0]) if len(fa) and len(fb) else None

    f = factors(decay_published, better, worse)
    if f:
        out.append(
            Verdict(
                f"{shape} — the two claims' shape, in the article's table",
                "consistent" if f[0] < f[1] else "inconsistent",
                "published",
                f"{engine_label(better)} falls {f[0]:.2f}×, {engine_label(worse)} {f[1]:.2f}×",
                claim_id=",".join(dec["claim_id"].to_list()),
                kind="throughput_decay",
                value=f[1] / f[0],
                unit="×",
                n=4,
                scope="published table",
                family="consistency",
                reason=f"{engine_label(better)}'s factor is {'smaller' if f[0] < f[1] else 'not smaller'} "
                f"than {engine_label(worse)}'s in the table",
            )
        )
    if decay_measured is not None and not decay_measured.is_empty():
        present = decay_measured["engine"].unique(maintain_order=True).to_list()
        a, b = stand_in(better, present, engine_family), stand_in(worse, present, engine_family)
        m = factors(decay_measured, a, b) if a and b else None
        if m:
            ra, rb = (decay_measured.filter(pl.col("engine") == x).row(0, named=True) for x in (a, b))
            tokens = f"{ra['c_from']:,} → {ra['c_to']:,} tokens"
            claim = f"{shape} — on this host ({lo} → {hi} run as {tokens})"
            number = f"{engine_label(a)} falls {sig2(m[0])}×, {engine_label(b)} {sig2(m[1])}× ({tokens})"
            ns = [x.get(k) or 1 for x in (ra, rb) for k in ("n_from", "n_to")]
            grade = cpu_cross_engine(
                a,
                b,
                [ra.get("device_kind"), rb.get("device_kind")],
                baseline=rb["t_from_s"] / ra["t_from_s"],
                n=min(ns),
                baseline_at=f"the shorter context, {lo} ({ra['c_from']:,} tokens)",
                scope=f"{ra.get('hardware') or 'CPU'}, contexts scaled",
            )
            if grade is not None:
                fast = a if rb["t_from_s"] >= ra["t_from_s"] else b
                number = (
                    f"{engine_label(fast)} already {sig2(grade.value)}× faster at {lo} ({ra['c_from']:,} tokens); "
                    + number
                )
            else:  # GPU runs of both: the decay factors compared as measured differences (one value per pair)
                grade = measured_difference(
                    Repeats.summary(m[0], None, None, min(ns)),
                    Repeats.summary(m[1], None, None, min(ns)),
                    "lower",
                    what="decay factors",
                    scope=ra.get("hardware") or "",
                )
            out.append(
                grade.verdict(claim, number, claim_id=",".join(dec["claim_id"].to_list()), kind="throughput_decay")
            )
    return out


def scaled_pairs(frame: pl.DataFrame) -> tuple[float | None, list[tuple[str, int]]]:
    """A measured frame's context scale (None when unscaled) and its (label, tokens) pairs, shortest first."""
    scale = frame["scale_factor"].drop_nulls().max() if "scale_factor" in frame.columns else None
    if not scale or scale == 1:
        return None, []
    pairs = frame.select("context_label", "context_tokens").unique().sort("context_tokens")
    return scale, [tuple(p) for p in pairs.iter_rows()]
