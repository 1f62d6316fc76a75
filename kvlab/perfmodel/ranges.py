"""Every modelled number with its range over the assumption sets the published points cannot pin, as typed results
(the reports and the lead's studies print them; none of them prints a modelled figure without its range).

Each function reads a :func:`kvlab.perfmodel.calibrate.sensitivity` table made with ``physics=True`` (one row per
assumption set: its free fit and its bounded fit), so the ranges come from the same refits everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.paths import DATA_DIR
from kvlab.perfmodel.calibrate import OVERHEADS, PRIORS, held_out_winners, published_fit, refits
from kvlab.perfmodel.roofline import Assumptions, Config, Workload, batch_time

#: The assumption set the reports call the default (kvlab.perfmodel.Workload and Assumptions' own values).
DEFAULT_SET = {
    "batch_size": Workload().batch_size,
    "output_tokens": Workload().output_tokens,
    "expert_reads": Assumptions().expert_reads,
    "mla_width": 576,
    "kv_format": Assumptions().kv_format,
}


@dataclass(frozen=True)
class Span:
    """A modelled figure over the assumption sets: lowest, highest, the default set's value, and over how many sets
    (``sets``; ``counted`` of them have a value: a crossover may not exist in every set)."""

    lo: float | None
    hi: float | None
    default: float | None
    counted: int
    sets: int


def _span(values: list[float | None], default: float | None) -> Span:
    vs = [v for v in values if v is not None]
    return Span(min(vs) if vs else None, max(vs) if vs else None, default, len(vs), len(values))


def _default_index(sens: pl.DataFrame) -> int | None:
    for i, r in enumerate(sens.iter_rows(named=True)):
        if all(r.get(k) == v for k, v in DEFAULT_SET.items()):
            return i
    return None


@dataclass(frozen=True)
class EngineStepCost:
    """One engine's per-step cost in the bounded fits (ms per decode step): the fitted per-step overhead c(engine),
    inside its prior, and the unexplained per-step cost, what the table needs beyond every bounded term."""

    engine: str
    fitted_overhead_ms: Span
    unexplained_ms: Span


def per_step_costs(sens: pl.DataFrame) -> dict[str, EngineStepCost]:
    """Per engine, c(engine) and the unexplained per-step cost of every assumption set's bounded fit, with their
    ranges (``sens``: a sensitivity table with ``physics=True``)."""
    d = _default_index(sens)
    out = {}
    for engine, name in OVERHEADS.items():
        cap_ms = PRIORS[name][1] * 1e3
        total = sens[f"phys_{engine}_overhead_ms"].to_list()
        fitted = [min(t, cap_ms) for t in total]
        unexplained = sens[f"phys_{engine}_unexplained_ms"].to_list()
        out[engine] = EngineStepCost(
            engine,
            _span(fitted, fitted[d] if d is not None else None),
            _span(unexplained, unexplained[d] if d is not None else None),
        )
    return out


@dataclass(frozen=True)
class UnexplainedShare:
    """One engine's unexplained per-step cost as a share of its modelled batch time under the bounded fits (the cost
    per step × the steps a batch takes ÷ the batch time), at the published contexts: ``share`` (a fraction) and
    ``per_batch_s`` (seconds per batch), each lowest to highest over the sets and contexts, the default set's
    lowest-to-highest over the contexts in ``default_lo``/``default_hi``."""

    engine: str
    share: Span
    per_batch_s: Span
    default_lo: float | None = None
    default_hi: float | None = None


def unexplained_shares(
    sens: pl.DataFrame,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
    contexts: tuple[int, ...] = (65536, 204800),
    base: Assumptions = Assumptions(),
) -> dict[str, UnexplainedShare]:
    """Per engine (vLLM TP ``tp``, SGLang TP ``tp`` + DCP ``dcp``), :class:`UnexplainedShare` over every set of
    ``sens`` (``physics=True``): what the table needs that no bounded term explains, as a part of the batch."""
    d = _default_index(sens)
    out = {}
    for engine, dcp_e in ((VLLM, 1), (SGLANG, dcp)):
        cfg = Config.of(gpu, model, engine, tp, dcp_e, base.default_mem_util)
        shares, seconds, default = [], [], []
        for i, (w, a, p) in enumerate(refits(sens, base, physics=True)):
            per_step = sens[f"phys_{engine}_unexplained_ms"][i] / 1e3
            for c in contexts:
                pred = batch_time(cfg, c, w, p, a)
                s = per_step * w.output_tokens * pred.waves
                shares.append(s / pred.batch_time_s)
                seconds.append(s)
                if i == d:
                    default.append(s / pred.batch_time_s)
        out[engine] = UnexplainedShare(
            engine,
            _span(shares, None),
            _span(seconds, None),
            min(default) if default else None,
            max(default) if default else None,
        )
    return out


def bounded_miss(sens: pl.DataFrame) -> Span:
    """The bounded fits' largest residual against the table (%), over the sets, the default set's inside."""
    d = _default_index(sens)
    vals = sens["phys_max_abs_residual_pct"].to_list()
    return _span(vals, vals[d] if d is not None else None)


@dataclass(frozen=True)
class HeldOutBySet:
    """The leave-one-out test per assumption set: each set's free fit refitted without each published point, and
    whether the held-out fit still names that context's published winner. ``default``: (right, held out) of the
    default set; ``all_right``: the sets that get every held-out winner right; ``batch_sizes``: their batch sizes;
    ``per_set``: one row per set (``right``, ``held_out``)."""

    default: tuple[int, int]
    all_right: int
    sets: int
    batch_sizes: tuple[int, ...]
    per_set: pl.DataFrame
    #: the lowest and highest prefill efficiency (fraction of dense peak) the all-right sets' free fits need
    needs_prefill: tuple[float, float] | None = None
    #: the all-right sets whose free fit stays within peak prefill and bandwidth (``over_peak`` empty), in words
    within_peak: tuple[str, ...] = ()

    def needs(self) -> str:
        """What the all-right sets need, in words: 'needing prefill at 113–171% of dense peak: not physical', or the
        sets within peak by name; '' without any all-right set."""
        if not self.all_right or self.needs_prefill is None:
            return ""
        lo, hi = (round(100 * x) for x in self.needs_prefill)
        need = f"needing prefill at {lo}–{hi}% of dense peak"
        if not self.within_peak:
            return need + ": not physical"
        return need + f"; within peak: {', '.join(self.within_peak)}"

    def text(self) -> str:
        r, t = self.default
        return f"{r} of {t} at the default; {t} of {t} in {self.all_right} of {self.sets} sets" + (
            f", all at batch {', '.join(map(str, self.batch_sizes))}, {self.needs()}" if self.all_right else ""
        )


def held_out_by_set(
    sens: pl.DataFrame,
    data_dir: str | Path = DATA_DIR,
    experiment: str = "article_b300",
    base: Assumptions = Assumptions(),
) -> HeldOutBySet:
    """:class:`HeldOutBySet` for every set of ``sens`` (the fits are cached: the sensitivity table made them)."""
    rows = []
    for r, (w, a, _p) in zip(sens.iter_rows(named=True), refits(sens, base)):
        right, total = held_out_winners(published_fit(data_dir, w, a, experiment))
        peak = {k: r.get(k) for k in ("prefill_efficiency", "bandwidth_efficiency", "over_peak")}
        rows.append({k: r[k] for k in DEFAULT_SET} | {"right": right, "held_out": total} | peak)
    per = pl.DataFrame(rows)
    d = _default_index(sens)
    good = per.filter((pl.col("right") == pl.col("held_out")) & (pl.col("held_out") > 0))
    pre = good["prefill_efficiency"].drop_nulls()
    possible = good.filter(pl.col("over_peak") == "") if "over_peak" in good.columns else good.clear()
    return HeldOutBySet(
        (per["right"][d], per["held_out"][d]) if d is not None else (0, 0),
        good.height,
        per.height,
        tuple(sorted(set(good["batch_size"].to_list()))),
        per,
        (float(pre.min()), float(pre.max())) if pre.len() else None,
        tuple(set_words(x) for x in possible.iter_rows(named=True)),
    )


def set_words(row: dict) -> str:
    """An assumption set in words: 'batch 32, output 4,096, expert reads active, MLA width 512, KV fp8'."""
    return (
        f"batch {row['batch_size']}, output {row['output_tokens']:,}, expert reads {row['expert_reads']}, "
        f"MLA width {row['mla_width']}, KV {row['kv_format']}"
    )


@dataclass(frozen=True)
class RatioSpan:
    """T(vLLM) / T(SGLang) at one context over the sets (above 1: SGLang faster), and in how many sets SGLang is."""

    context_tokens: int
    ratio: Span
    sglang_faster: int

    @property
    def winner(self) -> str | None:
        """The engine faster in every set, or None where the sets split."""
        return VLLM if self.sglang_faster == 0 else SGLANG if self.sglang_faster == self.ratio.sets else None

    def margin(self, vllm: str | None = None, sglang: str | None = None) -> str:
        """How much faster, over the sets: '1.26–1.61× faster' for a winner in every set, else both ends
        ('vLLM up to 1.09× faster, SGLang up to 1.42× faster'); ``vllm``/``sglang``: the engines' labels."""
        lo, hi = self.ratio.lo, self.ratio.hi
        vllm, sglang = vllm or engine_label(VLLM), sglang or engine_label(SGLANG)
        if self.winner == VLLM:
            return f"{1 / hi:.2f}–{1 / lo:.2f}× faster"
        if self.winner == SGLANG:
            return f"{lo:.2f}–{hi:.2f}× faster"
        return f"{vllm} up to {1 / lo:.2f}× faster, {sglang} up to {hi:.2f}× faster"


@dataclass(frozen=True)
class ModelRanges:
    """The modelled answers with their ranges: the speed ratios at each context, the free fits' crossover (with how
    many sets cross) and the bounded fits' ("physics-only") crossover."""

    ratios: tuple[RatioSpan, ...]
    crossover: Span
    physics_crossover: Span


def model_ranges(
    sens: pl.DataFrame,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
    contexts: tuple[int, ...] = (65536, 204800),
    base: Assumptions = Assumptions(),
) -> ModelRanges:
    """:class:`ModelRanges` over every set of ``sens`` (vLLM TP ``tp`` against SGLang TP ``tp`` + DCP ``dcp``)."""
    d = _default_index(sens)
    ratios = []
    for c in contexts:
        vals = []
        for w, a, p in refits(sens, base):
            cv = Config.of(gpu, model, VLLM, tp, 1, a.default_mem_util)
            cs = Config.of(gpu, model, SGLANG, tp, dcp, a.default_mem_util)
            vals.append(batch_time(cv, c, w, p, a).batch_time_s / batch_time(cs, c, w, p, a).batch_time_s)
        ratios.append(RatioSpan(c, _span(vals, vals[d] if d is not None else None), sum(v > 1 for v in vals)))
    xs = sens["crossover_tokens"].to_list()
    px = sens["phys_crossover_tokens"].to_list() if "phys_crossover_tokens" in sens.columns else [None] * len(xs)
    return ModelRanges(
        tuple(ratios), _span(xs, xs[d] if d is not None else None), _span(px, px[d] if d is not None else None)
    )


def faster_label(ratio: float) -> str:
    return engine_label(SGLANG) if ratio > 1 else engine_label(VLLM)


__all__ = [
    "DEFAULT_SET",
    "EngineStepCost",
    "HeldOutBySet",
    "ModelRanges",
    "RatioSpan",
    "Span",
    "faster_label",
    "held_out_by_set",
    "model_ranges",
    "per_step_costs",
    "set_words",
    "UnexplainedShare",
    "bounded_miss",
    "unexplained_shares",
]
