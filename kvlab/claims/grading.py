"""How kvlab grades a claim: what its evidence can decide, stated once, as small pure functions.

This docstring is the statement of the rules; docs/verdicts.md repeats it for readers.
Every verdict a report shows passes through one of the functions below, and tests/test_claims.py checks each
rule on fixed frames.

Families (:data:`kvlab.verdicts.FAMILIES`, every verdict's ``family``; counted apart by the headline)
    *document*: a document's claim graded on evidence independent of that document (measured here, or modelled by
    a model that passes its held-out test). *consistency*: a document checked against its own figures (its table's
    ratios and decays, the decay "shape") or against another document (seed 000 against seed 003 on 0.95): it
    decides only as *consistent* / *inconsistent*, never *reproduced* / *contradicted*. *own*: kvlab's own
    questions and self-checks (the model's held-out test and plausibility, the capacity questions, the crossover
    ranges, multi-turn reuse): never counted as document claims.

Outcomes
    *reproduced* / *contradicted*: the evidence decides the claim, one way or the other.
    *consistent* / *inconsistent*: a consistency verdict decides (the document agrees with its own figures or not).
    *configured*: the value is set by the experiment file (a KV budget, a ceiling derived from it): shown as
    configuration, never graded (:func:`configured`).
    *inconclusive*: the evidence points somewhere but cannot decide: too few repeats, a difference within the
    spread of the repeats, signs that differ across engines or metrics, or a model that fails its held-out test.
    *cannot be tested here*: the evidence cannot exercise the claim's mechanism; the verdict quotes the number
    that shows why.
    *found*: the report's own answer to its own question (no document claim to reproduce). A measured *found* row
    that states a direction passes the same rules as a deciding outcome (:func:`finding`): rule 1 for every
    cross-engine row, then n ≥ 3 distinct repeats per side with ranges apart, else *inconclusive* with n shown. A
    modelled *found* row (the crossover range, the B300 ceiling) and the model's "plausible" self-check stand only
    while the model passes its held-out test (:func:`held_out_gate`).

Rule 1 — cross-engine speed on a CPU (:func:`cpu_cross_engine`).
    A claim about which engine is faster on a GPU host is never decided by runs of two different engine
    implementations on a CPU (``device_kind`` "cpu" in RUNS; a row with no device kind counts as CPU:
    :func:`on_cpu`; the hardware label is never read). On a CPU, vLLM's CPU build and SGLang (torch-native kernels, or sglang-jax) differ by a large factor at every setting,
    a gap of implementation, not of the mechanism the claim is about. The verdict is *cannot be tested here*,
    evidence *measured*, and its value the baseline ratio that shows the gap: the two engines' ratio where the
    claim's mechanism is absent (0% shared prefix, the shortest context, the lowest load measured).

Rule 2 — a measured difference (:func:`measured_difference`, :func:`combined`).
    A measured difference decides only when each side has at least :data:`MIN_REPEATS` repeats **and** the
    min–max ranges of the two sides do not overlap. Otherwise the verdict is *inconclusive*, with ``n`` (the
    fewer repeats of the two sides) and ``spread`` (the ratio's range over the repeats) filled in. Where a claim
    is tested on several engines or metrics, they must agree in sign; mixed signs are *inconclusive*. A share
    that can be 0 (a cache's hit share, cache on against off) is compared as a difference; a count a claim bounds
    with no second side (:func:`counted`) decides only over at least :data:`MIN_REPEATS` distinct repeats per engine
    (the fewer; engines are not summed). ``n`` counts
    repeats: distinct repeat indices (RUNS ``repeat``) of the same point. Rows that share one repeat index — the
    load steps (1, 2, 4 in flight) of one server start, each stored as a run — are one repeat, not several
    (:meth:`Repeats.per_repeat`). Repeats known only by a middle and a count, without their min and max, do not
    decide and get no spread (:meth:`Repeats.summary`: never a zero-width range). Mixed signs are read against the
    value that means "no difference": 1 for a ratio, 0 for a difference (:attr:`Grade.neutral`).

Rule 3 — modelled evidence (:func:`held_out_passes`, :func:`modelled_claim`, :func:`held_out_grade`).
    kvlab's model is fitted to the published table, so agreeing with that table is no test. A modelled verdict
    may say *reproduced* or *contradicted* only when the model passes its held-out test: the faster engine is
    predicted right in at least :data:`LOO_WINNERS_SHARE` of the leave-one-out fits (3 of 4) **and** the
    model's margin (its slower ÷ faster time − 1 where the claim is decided) exceeds the mean held-out error.
    Otherwise the row is an illustration: *inconclusive*, scope "model fitted to the published table; fails its
    held-out test", and the failed held-out test is a row of its own, *contradicted* (never a neutral *found*).

The engine-choice guide's measured factors (:func:`engine_difference`).
    Before a measured lead may favour an engine in :mod:`kvlab.guide`, it passes rules 1 and 2 as a verdict does:
    CPU runs of two implementations are a baseline that cannot decide; otherwise 3 repeats a side, ranges apart.

Rule 4 — a modelled factor in the engine-choice guide (:func:`model_factor_decides`).
    The model's engine choice counts only when the model passes its held-out test at the assumptions it runs under
    (rule 3's :func:`held_out_passes`) **and** its margin at the user's context exceeds the mean held-out error;
    otherwise the guide says the model picks no engine and gives the crossover as a range (the contexts over which
    the two modelled times are within that error of each other). The published fit gets 0 of 4 held-out winners at
    the default assumptions, so the model picks an engine nowhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kvlab.engines import engine_label
from kvlab.units import sig2
from kvlab.verdicts import Verdict


def speed_gap(fast: str, slow: str, ratio: float, word: str = "faster", already: bool = True) -> str:
    """How far ahead the faster of two engines measured, in words: 'vLLM already 1.2× faster'; a ratio that rounds
    to 1.0 names no engine ahead: 'vLLM and SGLang level (1.0×)' (never 'vLLM 1.0× faster'). ``word`` '' gives
    'vLLM 1.2×'."""
    if level(ratio):
        return f"{fast} and {slow} level (1.0×)"
    return f"{fast} {'already ' if already else ''}{sig2(ratio)}×" + (f" {word}" if word else "")


def level(ratio: float) -> bool:
    """Whether two engines' speed ratio (either way up) is 1.0 to the two figures a ratio is shown with."""
    return ratio > 0 and sig2(max(ratio, 1 / ratio)) in ("1.0", "1")


#: Repeats each side of a measured difference needs before it can decide a claim.
MIN_REPEATS = 3
#: Share of leave-one-out fits that must name the published winner (3 of 4).
LOO_WINNERS_SHARE = 0.75
#: The scope of modelled rows that fail the held-out test.
ILLUSTRATION_SCOPE = "model fitted to the published table; fails its held-out test"
MODEL_SCOPE = "model fitted to the published table"

#: Why evidence cannot decide a claim, in a few words: one constant per cause, the ``limit`` of every verdict of that
#: cause (the headline groups by it; :class:`kvlab.verdicts.Verdict`).
CPU_IMPLEMENTATIONS = "CPU runs of two engine implementations cannot decide a GPU host's speed"
FEW_REPEATS = f"fewer than {MIN_REPEATS} repeats"
WITHIN_SPREAD = "a difference within the spread of the repeats"
MIXED_SIGNS = "signs mixed across engines or metrics"
FAILS_HELD_OUT = "the model fails its held-out test"
NOTHING_MEASURED = "nothing measured to test it"
NO_TABLE_ROW = "the published table has no row for it"
NO_RANGE = "the repeats' min–max range is not recorded"
CONFIGURED = "a value the experiment file sets, shown as configuration"
NOT_REUSABLE = "every request was sent before the prefix could be cached"
NO_GPU_MEMORY = "no GPU memory outside the KV pool on this host, where the claimed OOMs arise"
ASSUMED_FROM_CLAIM = "the model's memory check rests on an assumption taken from the claim itself"
UNRECORDED_DEVICE = "the runs record neither a KV budget nor their device"
UNSTATED_CONDITION = "the source does not state a condition the check needs"


@dataclass(frozen=True)
class Repeats:
    """The values one side of a comparison took over its repeats (runs)."""

    values: tuple[float, ...]
    #: Known only by a middle and a count (an aggregated row without its min and max): ``n`` is right, but the range
    #: is not known, so no difference on it decides (:func:`measured_difference`) and its spread is not invented.
    unranged: bool = False

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Repeats:
        return cls(tuple(float(v) for v in values if v is not None and not math.isnan(v)))

    @classmethod
    def summary(cls, mid: float | None, lo: float | None, hi: float | None, n: int | None) -> Repeats:
        """Repeats known only by their median/mean ``mid``, min ``lo``, max ``hi`` and count ``n`` (an aggregated
        frame): enough for every rule here, which reads only n, the range and the middle. Where ``n`` > 1 but the
        min or max is missing, the range is unknown: the repeats are marked ``unranged`` (never a zero-width range)."""
        if mid is None or not n:
            return cls(())
        if n > 1 and (lo is None or hi is None):
            return cls((float(mid),) * n, unranged=True)
        lo, hi = (mid if lo is None else lo), (mid if hi is None else hi)
        return cls((lo,) + (mid,) * max(n - 2, 0) + ((hi,) if n > 1 else ()))

    @classmethod
    def per_repeat(cls, values: Iterable[float | None], repeats: Iterable[int | None]) -> Repeats:
        """One value per distinct repeat index (rule 2's ``n``): ``values[i]`` was measured in repeat
        ``repeats[i]``; rows of one repeat (e.g. the load steps of one server start) are folded by their median,
        so three rows of repeat 0 are one repeat, not three. A row without a repeat index counts as its own."""
        groups: dict[object, list[float]] = {}
        for i, (v, r) in enumerate(zip(values, repeats, strict=True)):
            if v is None or math.isnan(v):
                continue
            groups.setdefault(("row", i) if r is None else r, []).append(float(v))
        return cls(tuple(cls(tuple(g)).mid for _, g in sorted(groups.items(), key=lambda kv: str(kv[0]))))

    @classmethod
    def of_row(cls, r: dict, metric: str) -> Repeats:
        """A study row's repeats (one point, repeats folded): its ``metric``, the range the study keeps beside it
        (``batch_time_s`` → ``batch_time_min_s``/``batch_time_max_s``; otherwise ``<metric>_min``/``_max``) and
        ``n_runs`` (1 where the row does not say)."""
        stem = metric.removesuffix("_s")
        lo, hi = (
            (f"{stem}_min_s", f"{stem}_max_s")
            if metric.endswith("_s") and f"{stem}_min_s" in r
            else (f"{metric}_min", f"{metric}_max")
        )
        return cls.summary(r.get(metric), r.get(lo), r.get(hi), r.get("n_runs") or 1)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def lo(self) -> float:
        return min(self.values)

    @property
    def hi(self) -> float:
        return max(self.values)

    @property
    def mid(self) -> float:
        v = sorted(self.values)
        k = len(v) // 2
        return v[k] if len(v) % 2 else (v[k - 1] + v[k]) / 2


@dataclass(frozen=True)
class Grade:
    """What the rules decided for one claim: everything of a verdict but its wording."""

    outcome: str
    evidence: str
    reason: str
    value: float | None = None
    unit: str = ""
    n: int | None = None
    spread: tuple[float, float] | None = None
    scope: str = ""
    #: Why the evidence cannot decide (a cause constant above); "" where it decides.
    limit: str = ""
    #: The verdict family (:data:`kvlab.verdicts.FAMILIES`); "" lets the verdict derive it from its id and evidence.
    family: str = ""

    @property
    def neutral(self) -> float:
        """The value that says "no difference": 1 for a ratio (unit "×"), 0 for a difference."""
        return 1.0 if self.unit == "×" else 0.0

    def verdict(self, claim: str, number: str, claim_id: str = "", kind: str = "", family: str = ""):
        """The :class:`kvlab.verdicts.Verdict` of this grade, with the narrative's wording."""
        return Verdict(
            claim,
            self.outcome,
            self.evidence,
            number,
            claim_id=claim_id,
            kind=kind,
            value=self.value,
            unit=self.unit,
            n=self.n,
            spread=self.spread,
            scope=self.scope,
            reason=self.reason,
            limit=self.limit,
            family=family or self.family,
        )


# --------------------------------------------------------------------------- rule 1: CPU runs of two engines


def on_cpu(device_kind: str | None) -> bool:
    """Whether a run counts as computed on a CPU: its RUNS ``device_kind`` (kvlab.device), typed when it was measured
    or, for a run stored before, when it was read (kvlab.store). No kind (a hand-built frame): CPU, the reading
    under which no CPU run decides a claim about GPUs."""
    return device_kind is None or device_kind.lower() == "cpu"


def implementations_differ(engine_a: str, engine_b: str) -> bool:
    """Two engine names are two implementations (sglang-jax is not SGLang, vLLM's CPU build is not SGLang)."""
    return engine_a != engine_b


def cpu_cross_engine(
    engine_a: str,
    engine_b: str,
    device_kinds: Iterable[str | None],
    *,
    baseline: float | None,
    baseline_at: str,
    n: int | None = None,
    spread: tuple[float, float] | None = None,
    scope: str = "",
) -> Grade | None:
    """Rule 1: a *cannot be tested here* grade when ``engine_a`` and ``engine_b`` are different implementations
    and any of their runs (``device_kinds``) ran on a CPU; None when the rule does not apply (same engine, or
    GPU runs), so the caller grades the difference by rule 2.

    ``baseline``: ``engine_b``'s time over ``engine_a``'s where the claim's mechanism is absent (``baseline_at``,
    e.g. "0% shared", "the shortest context 64K (1,024 tokens)"); the grade's value is that ratio as
    slower ÷ faster (≥ 1), with the faster engine named in the reason. ``baseline`` None: no setting without the
    mechanism was measured (``baseline_at`` says which was missing); the grade is still *cannot be tested here*,
    its value null and its reason saying that no baseline was measured."""
    kinds = list(device_kinds)
    if not implementations_differ(engine_a, engine_b) or not any(on_cpu(k) for k in kinds or [None]):
        return None
    if baseline is None:
        return Grade(
            "cannot be tested here",
            "measured",
            f"{engine_label(engine_a)} and {engine_label(engine_b)} are different implementations run on a CPU, and "
            f"no baseline was measured ({baseline_at}), so nothing separates their implementations' gap from the "
            "claim's mechanism; their speed here says nothing about the claim on a GPU host",
            value=None,
            unit="×",
            n=n,
            scope=scope or "CPU runs of two different engine implementations",
            limit=CPU_IMPLEMENTATIONS,
        )
    faster, slower = (engine_a, engine_b) if baseline >= 1 else (engine_b, engine_a)
    ratio = baseline if baseline >= 1 else 1 / baseline
    if spread is not None:
        lo, hi = sorted(x if baseline >= 1 else 1 / x for x in spread)
        spread = (lo, hi)
    return Grade(
        "cannot be tested here",
        "measured",
        f"{engine_label(faster)} and {engine_label(slower)} are different implementations run on a CPU: "
        + (
            f"they are level ({sig2(ratio)}×)"
            if level(ratio)
            else f"{engine_label(faster)} is already {sig2(ratio)}× faster"
        )
        + f" at {baseline_at}, where the claim's mechanism plays no part, so their speed here says nothing about the "
        "claim on a GPU host",
        value=ratio,
        unit="×",
        n=n,
        spread=spread,
        scope=scope or "CPU runs of two different engine implementations",
        limit=CPU_IMPLEMENTATIONS,
    )


# --------------------------------------------------------------------------- rule 2: a measured difference


def measured_difference(
    first: Repeats,
    second: Repeats,
    claimed: str,
    *,
    scope: str = "",
    what: str = "",
    difference: bool = False,
    unit: str = "",
) -> Grade:
    """Rule 2 for one comparison: the claim says ``first`` is ``claimed`` ("higher" or "lower") than ``second``.

    value = first ÷ second (middles), spread = its range over the repeats (first.lo ÷ second.hi …
    first.hi ÷ second.lo), n = the fewer repeats. Decides only with n ≥ :data:`MIN_REPEATS` on each side and
    non-overlapping min–max ranges; else *inconclusive*. ``what`` names the comparison in the reason.
    ``difference``: value = first − second (and its range), for shares that can be 0 (a cache-hit share), in
    ``unit`` (the unit of the values compared); otherwise the ratio's unit, "×"."""
    if claimed not in ("higher", "lower"):
        raise ValueError(f"claimed must be 'higher' or 'lower', got {claimed!r}")
    if not first.n or not second.n:
        return Grade(
            "cannot be tested here",
            "measured",
            f"{what or 'the comparison'}: no measured value on one side",
            n=min(first.n, second.n),
            scope=scope,
            limit=NOTHING_MEASURED,
        )
    value, spread, unit = _compared(first, second, difference, unit)
    n = min(first.n, second.n)
    label = f"{what}: " if what else ""
    undecided = _undecided(first, second, n, label)
    if undecided is not None:
        reason, limit = undecided
        # an unranged side has no spread (_compared), so a NO_RANGE grade carries none
        return Grade(
            "inconclusive", "measured", reason, value=value, unit=unit, n=n, spread=spread, scope=scope, limit=limit
        )
    observed = "higher" if first.lo > second.hi else "lower"
    return Grade(
        "reproduced" if observed == claimed else "contradicted",
        "measured",
        f"{label}{observed} in every one of ≥{n} repeats per side (ranges do not overlap)",
        value=value,
        unit=unit,
        n=n,
        spread=spread,
        scope=scope,
    )


def _compared(
    first: Repeats, second: Repeats, difference: bool, unit: str
) -> tuple[float, tuple[float, float] | None, str]:
    """(value, spread, unit) of ``first`` against ``second`` (both measured), as :func:`measured_difference` states
    them: their difference in ``unit``, or their ratio in "×"; no spread where either side is unranged."""
    if difference:
        value, spread = first.mid - second.mid, (first.lo - second.hi, first.hi - second.lo)
    else:
        value = first.mid / second.mid if second.mid else math.inf
        spread = (first.lo / second.hi, first.hi / second.lo) if second.lo > 0 else None
        unit = "×"
    if first.unranged or second.unranged:
        spread = None
    return value, spread, unit


def _undecided(first: Repeats, second: Repeats, n: int, label: str) -> tuple[str, str] | None:
    """Why rule 2 cannot decide between ``first`` and ``second`` (``n``: the fewer repeats; ``label``: the reason's
    lead), as (reason, limit): too few repeats, a range not recorded, ranges that overlap; None when it decides."""
    if n < MIN_REPEATS:
        return (
            f"{label}n={n} on the smaller side, fewer than the {MIN_REPEATS} repeats a measured difference needs",
            FEW_REPEATS,
        )
    if first.unranged or second.unranged:
        return (
            f"{label}n={n}, but the min–max range of the repeats is not recorded, so nothing shows the ranges apart",
            NO_RANGE,
        )
    if first.lo <= second.hi and second.lo <= first.hi:
        return (
            f"{label}the min–max ranges of the {n}+ repeats of each side overlap: the difference is within the spread",
            WITHIN_SPREAD,
        )
    return None


def combined(grades: Sequence[Grade]) -> Grade:
    """Rule 2 across engines or metrics testing one claim: their observed directions (value above or below the
    neutral value: 1 for a ratio, 0 for a difference, :attr:`Grade.neutral`) must agree, else *inconclusive* (signs
    mixed); when they agree, any *inconclusive* part makes the whole inconclusive; otherwise their common outcome.
    value and spread: the first part's (a min–max of that one value over its repeats, in its unit; the parts' values,
    which may be other engines or metrics, go into the reason, never into the spread); n: the fewest repeats of any
    part."""
    if not grades:
        raise ValueError("combined() needs at least one grade")
    signs = {g.value > g.neutral for g in grades if g.value is not None and g.value != g.neutral}
    ns = [g.n for g in grades if g.n is not None]
    n = min(ns) if ns else None
    base = replace(grades[0], n=n)
    if len(signs) > 1:
        few = f"; n={n}" if n is not None and n < MIN_REPEATS else ""
        values = ", ".join(f"{g.value:.3g}{g.unit if g.unit == '×' else ''}" for g in grades if g.value is not None)
        return replace(
            base,
            outcome="inconclusive",
            reason=f"signs mixed across engines or metrics ({values}){few}",
            limit=MIXED_SIGNS,
        )
    for g in grades:
        if g.outcome in ("inconclusive", "cannot be tested here"):
            return replace(base, outcome=g.outcome, reason=g.reason, limit=g.limit)
    outcomes = {g.outcome for g in grades}
    if len(outcomes) > 1:
        return replace(
            base,
            outcome="inconclusive",
            reason="the parts disagree: " + "; ".join(g.reason for g in grades),
            limit=MIXED_SIGNS,
        )
    return base


def engine_difference(
    engine_a: str,
    engine_b: str,
    device_kinds: Iterable[str | None],
    a: Repeats,
    b: Repeats,
    claimed: str,
    *,
    baseline: float | None,
    baseline_at: str,
    scope: str = "",
    what: str = "",
) -> Grade:
    """Rules 1 and 2 together, for which of two engines does better (``a``: ``engine_a``'s repeats, claimed
    ``claimed`` than ``engine_b``'s ``b``): CPU runs of two implementations cannot decide it (:func:`cpu_cross_engine`,
    ``baseline`` as there); otherwise :func:`measured_difference`. The engine-choice guide reads this before a
    measured factor may favour an engine, as the verdicts do."""
    g = cpu_cross_engine(
        engine_a, engine_b, device_kinds, baseline=baseline, baseline_at=baseline_at, n=min(a.n, b.n), scope=scope
    )
    return g if g is not None else measured_difference(a, b, claimed, scope=scope, what=what)


# --------------------------------------------------------------------------- rule 3: modelled evidence


def winners_needed(total: int) -> int:
    """Leave-one-out fits that must name the published winner: 3 of 4 (:data:`LOO_WINNERS_SHARE`)."""
    return math.ceil(LOO_WINNERS_SHARE * total)


def held_out_passes(right: int, total: int, margin: float, error: float) -> bool:
    """Rule 3: the model may decide when it names the winner in at least 3 of 4 held-out fits (``right`` of
    ``total``) **and** its ``margin`` (slower ÷ faster − 1) exceeds its mean held-out ``error`` (both fractions)."""
    return total > 0 and right >= winners_needed(total) and margin > error


def held_out_grade(right: int, total: int, margin: float, error: float) -> Grade:
    """The held-out test as a verdict of its own: *reproduced* when the model passes it, else *contradicted*
    (red, never a neutral *found*). value: the winners right; n: the leave-one-out fits (``total``); no spread (one
    count; the margin and the error are in the reason, as fractions)."""
    ok = held_out_passes(right, total, margin, error)
    need = winners_needed(total) if total else 0
    parts = [
        f"winner right in {right} of {total} leave-one-out fits (needs {need})",
        f"margin {margin:.1%} {'above' if margin > error else 'within'} the {error:.1%} mean held-out error",
    ]
    return Grade(
        "reproduced" if ok else "contradicted",
        "modelled",
        ("passes its held-out test: " if ok else "fails its held-out test: ") + "; ".join(parts),
        value=float(right),
        unit=f"of {total} winners",
        n=total,
        scope=MODEL_SCOPE,
        family="own",
    )


def modelled_claim(
    agrees: bool,
    right: int,
    total: int,
    margin: float,
    error: float,
    *,
    value: float | None = None,
    unit: str = "",
    n: int | None = None,
) -> Grade:
    """Rule 3 for a claim the model speaks to (``agrees``: the fitted model says what the claim says): decided
    only when :func:`held_out_passes`; otherwise an illustration, *inconclusive*. ``n``: the published points the
    model was fitted to (default ``total``, the points each held out once)."""
    n = total if n is None else n
    if held_out_passes(right, total, margin, error):
        return Grade(
            "reproduced" if agrees else "contradicted",
            "modelled",
            f"the model passes its held-out test ({right} of {total} winners, margin {margin:.1%} above "
            f"the {error:.1%} held-out error)",
            value=value,
            unit=unit,
            n=n,
            scope=MODEL_SCOPE,
        )
    return Grade(
        "inconclusive",
        "modelled",
        f"an illustration, not a test: the model {'agrees' if agrees else 'disagrees'} with the claim but "
        f"fails its held-out test ({right} of {total} winners right, margin {margin:.1%} against a "
        f"{error:.1%} mean held-out error)",
        value=value,
        unit=unit,
        n=n,
        scope=ILLUSTRATION_SCOPE,
        limit=FAILS_HELD_OUT,
    )


# --------------------------------------------------------------------------- rule 4: the guide's modelled factor


def model_factor_decides(ratio: float, error: float) -> bool:
    """Rule 4: a modelled engine choice counts when slower ÷ faster − 1 exceeds the model's mean held-out
    ``error`` (a fraction)."""
    return ratio - 1 > error


def negated(grade: Grade) -> Grade:
    """The grade of a claim that says the opposite of the one graded (e.g. "vLLM does not share prefixes" from
    "vLLM's cache on serves more than off"): reproduced and contradicted swap, the rest stays."""
    swap = {"reproduced": "contradicted", "contradicted": "reproduced"}
    return replace(grade, outcome=swap.get(grade.outcome, grade.outcome))


def counted(holds: bool, n: int, *, reason: str, value: float | None = None, unit: str = "", scope: str = "") -> Grade:
    """Rule 2 for a measured count or share that the claim bounds (no second side): it decides only over at least
    :data:`MIN_REPEATS` runs; with fewer it is *inconclusive*, whatever it shows."""
    if n < MIN_REPEATS:
        return Grade(
            "inconclusive",
            "measured",
            f"n={n} run{'' if n == 1 else 's'}, fewer than the {MIN_REPEATS} "
            f"repeats a measured verdict needs ({reason})",
            value=value,
            unit=unit,
            n=n,
            scope=scope,
            limit=FEW_REPEATS,
        )
    return Grade(
        "reproduced" if holds else "contradicted",
        "measured",
        f"{reason}, over {n} runs",
        value=value,
        unit=unit,
        n=n,
        scope=scope,
    )


# --------------------------------------------------------------------------- findings and configured values


def finding(
    n: int | None,
    *,
    engines: tuple[str | None, str | None] | None = None,
    cross_engine: bool | None = None,
    device_kinds: Iterable[str | None] = (),
    apart: bool | None = None,
) -> tuple[str, str, str]:
    """The one rule for a measured *found* row that states a direction (who is faster, where curves cross, how much
    a cache saves): (outcome, why, limit). A row comparing two different implementations (``engines``, or
    ``cross_engine`` True where the engines are not named) with any run counting as CPU (:func:`on_cpu`: no device
    kind counts as CPU) cannot be tested here (rule 1); otherwise it is a finding only over at least
    :data:`MIN_REPEATS` distinct repeats per side (``n``, the fewer) with min–max ranges apart (``apart``; None: not
    a comparison of two sides); else *inconclusive* with n shown. ``why`` is "" for a finding."""
    if cross_engine is None:
        cross_engine = engines is not None and None not in engines and implementations_differ(*engines)
    if cross_engine and any(on_cpu(k) for k in (list(device_kinds) or [None])):
        who = (
            f"{engine_label(engines[0])} and {engine_label(engines[1])}"
            if engines and None not in engines
            else "the two engines"
        )
        return (
            "cannot be tested here",
            f"{who} are different implementations run on a CPU, so which is faster "
            "here says nothing of the engines on a GPU host",
            CPU_IMPLEMENTATIONS,
        )
    if n is None or n < MIN_REPEATS:
        return (
            "inconclusive",
            f"n={n if n is not None else 'unknown'} repeat{'' if n == 1 else 's'} on the smaller "
            f"side, fewer than the {MIN_REPEATS} a measured finding needs",
            FEW_REPEATS,
        )
    if apart is False:
        return "inconclusive", f"n={n}, but the min–max ranges of the two sides overlap", WITHIN_SPREAD
    return "found", "", ""


def configured(
    value: float | None,
    unit: str,
    *,
    reason: str,
    n: int | None = None,
    spread: tuple[float, float] | None = None,
    scope: str = "",
) -> Grade:
    """A value the experiment file sets (a KV budget, a ceiling derived from it): shown as configuration, outcome
    *configured*, never graded — more repeats cannot change it."""
    return Grade(
        "configured", "measured", reason, value=value, unit=unit, n=n, spread=spread, scope=scope, limit=CONFIGURED
    )


def held_out_gate(outcome: str, right: int, total: int, margin: float, error: float) -> tuple[str, str, str]:
    """Rule 3 on a modelled row that would decide or answer (*found*, *reproduced*): it stands only when the model
    passes its held-out test (:func:`held_out_passes`); otherwise *inconclusive*, an illustration. Returns (outcome,
    why, limit); why and limit are "" when the row stands."""
    if outcome not in ("found", "reproduced", "contradicted") or held_out_passes(right, total, margin, error):
        return outcome, "", ""
    return (
        "inconclusive",
        f"an illustration: the model fails its held-out test ({right} of {total} winners right, "
        f"margin {margin:.1%} against a {error:.1%} mean held-out error)",
        FAILS_HELD_OUT,
    )
