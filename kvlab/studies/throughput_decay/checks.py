"""Report 02's checks: each throughput-decay claim against the document's own table (one function per claim kind,
dispatched through :data:`CHECKERS`), then the claims' shared shape — which engine's throughput holds up better —
in the table and on this host. Verdicts are built by the constructors of :mod:`kvlab.claims.grading`."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvlab.claims.grading import NO_TABLE_ROW, Repeats, cpu_cross_engine, measured_difference, speed_gap
from kvlab.engines import engine_label
from kvlab.studies.measured_frames import context_name
from kvlab.studies.throughput_decay.frames import stand_in
from kvlab.units import change, sig2
from kvlab.verdicts import Verdict


@dataclass(frozen=True)
class Inputs:
    """What the checks read: the document's claims, the consistency check of its stated ratios, the decay factors
    of its table and (None: nothing measured) of this host's runs, and which measured engine stands for which."""

    claims: pl.DataFrame
    check: pl.DataFrame
    decay_published: pl.DataFrame
    decay_measured: pl.DataFrame | None = None
    family: dict[str, str] | None = None


def check_decay(c: dict, x: Inputs) -> Verdict:
    """Kind ``throughput_decay``: the stated factor against the table, consistent under any definition checked."""
    lo, hi, e = c["context_from"], c["context_to"], c["engine"]
    rows = x.check.filter(pl.col("claim_id") == c["claim_id"])
    pub = x.decay_published.filter(pl.col("engine") == e)
    if pub.is_empty() or rows.is_empty():
        return Verdict(
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
    ok = bool(rows["consistent"].fill_null(False).any())
    factor = pub["batch_time_ratio"][0]
    return Verdict(
        f"{c['statement']} — against the article's own table",
        "consistent" if ok else "inconsistent",
        "published",
        f"table: {change(factor, 'requests/s')} from {lo} to {hi} (stated {c['stated_value']:g}×)",
        claim_id=c["claim_id"],
        kind="throughput_decay",
        value=factor,
        unit="×",
        n=2,
        scope="published table",
        family="consistency",
        reason=(
            "the table gives the stated factor under " if ok else "the table gives the stated factor under none of "
        )
        + "the definitions checked",
    )


#: One checker per claim kind this report tests, each taking one claim row.
CHECKERS = {"throughput_decay": check_decay}


def decay_claims(claims: pl.DataFrame) -> pl.DataFrame:
    """The claims this report checks: those of a kind in :data:`CHECKERS` with a stated value."""
    return claims.filter(pl.col("kind").is_in(list(CHECKERS)) & pl.col("stated_value").is_not_null())


def _factors(decay: pl.DataFrame, a: str, b: str) -> tuple[float, float] | None:
    fa, fb = (decay.filter(pl.col("engine") == e)["batch_time_ratio"] for e in (a, b))
    return (fa[0], fb[0]) if len(fa) and len(fb) else None


@dataclass(frozen=True)
class Shape:
    """The claims' shared shape: ``better``'s throughput holds up better than ``worse``'s from ``lo`` to ``hi``."""

    better: str
    worse: str
    lo: str
    hi: str
    claim_id: str

    @property
    def words(self) -> str:
        b, w = engine_label(self.better), engine_label(self.worse)
        return f"{b}'s throughput holds up better than {w}'s from {self.lo} to {self.hi}"


def shape_of(dec: pl.DataFrame) -> Shape | None:
    """The shape two or more decay claims state together (the claimed-flatter engine first); None for fewer."""
    if dec.height < 2:
        return None
    ranked = dec.sort("stated_value")
    return Shape(
        ranked["engine"][0],
        ranked["engine"][-1],
        ranked["context_from"][0],
        ranked["context_to"][0],
        ",".join(dec["claim_id"].to_list()),
    )


def shape_in_table(s: Shape, decay_published: pl.DataFrame) -> Verdict | None:
    """The shape in the article's table: consistent where the claimed-flatter engine's factor is the smaller."""
    f = _factors(decay_published, s.better, s.worse)
    if not f:
        return None
    b, w = engine_label(s.better), engine_label(s.worse)
    return Verdict(
        f"{s.words} — the two claims' shape, in the article's table",
        "consistent" if f[0] < f[1] else "inconsistent",
        "published",
        f"{b} falls {f[0]:.2f}×, {w} {f[1]:.2f}×",
        claim_id=s.claim_id,
        kind="throughput_decay",
        value=f[1] / f[0],
        unit="×",
        n=4,
        scope="published table",
        family="consistency",
        reason=f"{b}'s factor is {'smaller' if f[0] < f[1] else 'not smaller'} than {w}'s in the table",
    )


def shape_on_this_host(s: Shape, decay: pl.DataFrame, family: dict[str, str] | None) -> Verdict | None:
    """The shape on this host's runs (the claims' engines or their stand-ins at both contexts): CPU runs of two
    engines cannot decide it (rule 1); GPU runs compare the two factors as measured differences."""
    present = decay["engine"].unique(maintain_order=True).to_list()
    a, b = stand_in(s.better, present, family), stand_in(s.worse, present, family)
    m = _factors(decay, a, b) if a and b else None
    if not m:
        return None
    ra, rb = (decay.filter(pl.col("engine") == e).row(0, named=True) for e in (a, b))
    lo = context_name(s.lo, ra["c_from"])
    number = f"{engine_label(a)} falls {sig2(m[0])}×, {engine_label(b)} {sig2(m[1])}× ({ra['c_from']:,} → {ra['c_to']:,} tokens)"
    n = min(r.get(k) or 1 for r in (ra, rb) for k in ("n_from", "n_to"))
    grade = cpu_cross_engine(
        a,
        b,
        [ra.get("device_kind"), rb.get("device_kind")],
        baseline=rb["t_from_s"] / ra["t_from_s"],
        n=n,
        baseline_at=f"the shorter context, {lo}",
        scope=f"{ra.get('hardware') or 'CPU'}, contexts scaled",
    )
    if grade is not None:
        fast, slow = (a, b) if rb["t_from_s"] >= ra["t_from_s"] else (b, a)
        number = f"{speed_gap(engine_label(fast), engine_label(slow), grade.value)} at {lo}; " + number
    else:  # GPU runs of both: the decay factors compared as measured differences (one value per pair)
        first, second = Repeats.summary(m[0], None, None, n), Repeats.summary(m[1], None, None, n)
        grade = measured_difference(first, second, "lower", what="decay factors", scope=ra.get("hardware") or "")
    claim = f"{s.words} — on this host ({s.lo} → {s.hi} run as {ra['c_from']:,} → {ra['c_to']:,} tokens)"
    return grade.verdict(claim, number, claim_id=s.claim_id, kind="throughput_decay")


def verdicts(x: Inputs) -> list[Verdict]:
    """Each decay claim through its kind's checker, then the shape in the table and on this host."""
    dec = decay_claims(x.claims)
    out = [CHECKERS[c["kind"]](c, x) for c in dec.iter_rows(named=True)]
    s = shape_of(dec)
    if s is None:
        return out
    out += [v for v in (shape_in_table(s, x.decay_published),) if v]
    if x.decay_measured is not None and not x.decay_measured.is_empty():
        out += [v for v in (shape_on_this_host(s, x.decay_measured, x.family),) if v]
    return out
