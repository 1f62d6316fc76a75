"""Report 01 (context scaling): relative speed, batch-time growth, crossovers, their captions and verdicts."""

from __future__ import annotations

import polars as pl

from kvlab.analysis import Crossover
from kvlab.guide import engine_label
from kvlab.narrative.common import _implausible, _scaled_span
from kvlab.units import approx_tokens, k_label


def relative_speed_sentences(rel: pl.DataFrame, label: str) -> str:
    """'vllm is 1.50× faster at 64K (100.5 s vs 150.8 s)' for every context in ``rel``."""
    if rel.is_empty():
        return f"*{label}: no context holds runs of both engines.*"
    lines = []
    for r in rel.iter_rows(named=True):
        times = {r["engine"]: r["batch_time_s"], r["other_engine"]: r["other_batch_time_s"]}
        slower = r["other_engine"] if r["faster"] == r["engine"] else r["engine"]
        lines.append(
            f"- {label}: **{r['faster']} is {r['speedup']:.2f}× faster at {r['context_label']}** "
            f"({times[r['faster']]:.4g} s vs {times[slower]:.4g} s for {slower})."
        )
    winners = rel["faster"].unique().to_list()
    if len(winners) > 1:
        lines.append(f"- The winner changes with context: {', '.join(f'{w}' for w in rel['faster'])} "
                     f"at {', '.join(rel['context_label'])}.")
    else:
        lines.append(f"- {winners[0]} wins at every context shown.")
    return "\n".join(lines)


def crossover_sentence(x: Crossover, label: str) -> str:
    if x.context_tokens is None:
        return f"- {label} ({x.method}): no crossover estimate — {x.note}."
    return (
        f"- {label} ({x.method}): the engines' batch times meet at **{approx_tokens(x.context_tokens)}**; "
        f"{x.faster_below} is faster below, {x.faster_above} above. Assumption: {x.assumption}."
    )


def growth_sentences(growth: pl.DataFrame, label: str) -> str:
    """'vllm: batch time grows 2.50× from 2,048 to 6,400 tokens, about C^0.81' per engine."""
    lines = []
    for r in growth.filter(pl.col("growth").is_not_null()).iter_rows(named=True):
        k = r["exponent"]
        shape = "faster than linear" if k > 1.05 else "slower than linear" if k < 0.95 else "about linear"
        lines.append(
            f"- {label}, {r['engine']}: batch time grows **{r['growth']:.2f}×** from {r['c_from']:,} to {r['c_to']:,} "
            f"tokens ({r['context_from']} to {r['context_to']}, {r['n_contexts']} contexts), "
            f"T ∝ C^{k:.2f} ({shape} in context)."
        )
    return "\n".join(lines) or f"*{label}: no engine has runs at two contexts.*"


def model_crossover_sentence(crossover_tokens: float | None, fit, xrange: tuple[float, float] | None = None) -> str:
    """The physical model's crossover, with its range over what the data cannot pin (``xrange``), its fit
    quality and, when a fitted parameter is outside its physical range, that flag — in the sentence itself."""
    quality = (f"fit to the {fit.residuals.height} published points: max residual {fit.max_abs_residual_pct:.1f}%, "
               f"leave-one-out mean error {fit.loo_mean_abs_pct:.1f}%")
    flag = (f"; **non-physical fit** ({'; '.join(_implausible(fit, short=True))}), so read it as a description of "
            "the four points, not as physics" if _implausible(fit) else "")
    spread = (f"; **{k_label(xrange[0])}–{k_label(xrange[1])}** over the batch sizes, output lengths, expert-read "
              "models and MLA cache widths the article leaves open (report 04)" if xrange else "")
    if crossover_tokens is None:
        return f"- modelled: no crossover within the modelled range ({quality}{flag})."
    return (f"- modelled: the batch times meet at **{approx_tokens(crossover_tokens)}** under the default "
            f"assumptions{spread} ({quality}{flag}).")


def growth_comparison(measured: pl.DataFrame, published: pl.DataFrame) -> str:
    """How much batch time grows between the two contexts, measured here against the document's table."""
    if measured.is_empty():
        return "*measured: no engine has runs at both contexts.*"
    pub = {r["engine"]: r["batch_time_ratio"] for r in published.iter_rows(named=True)}
    lines = []
    for r in measured.iter_rows(named=True):
        ref = pub.get(r["engine"])
        cmp = (f"; the article's {r['engine']} grew {ref:.2f}×" if ref is not None
               else f"; the article has no {r['engine']} figure" if pub else "")
        span = _scaled_span(r).strip().removeprefix("(").removesuffix(")")
        lines.append(f"- measured: {r['engine']} batch time grows **{r['batch_time_ratio']:.2f}×** "
                     f"from {r['context_from']} to {r['context_to']} ({span or 'full-scale contexts'}){cmp}.")
    return "\n".join(lines)


def speed_caption(rel: pl.DataFrame, label: str) -> str:
    """One sentence for a batch-time figure: who is faster at each context, by how much."""
    if rel.is_empty():
        return f"{label}: no context holds runs of both engines."
    parts = [f"{engine_label(r['faster'])} is {r['speedup']:.2f}× faster at {r['context_label']}"
             for r in rel.sort("context_tokens").iter_rows(named=True)]
    winners = rel["faster"].unique().to_list()
    tail = "the winner changes with context" if len(winners) > 1 else f"{engine_label(winners[0])} wins at every context"
    return f"{label.capitalize()}: {'; '.join(parts)} — {tail}."


def growth_caption(growth: pl.DataFrame, label: str) -> str:
    """One sentence for a batch-time-against-context figure: how much each engine's batch time grows."""
    g = growth.filter(pl.col("growth").is_not_null())
    if g.is_empty():
        return f"{label.capitalize()}: no engine has runs at two contexts."
    parts = [f"{engine_label(r['engine'])}'s batch time grows {r['growth']:.2f}× from {r['context_from']} to "
             f"{r['context_to']}" for r in g.sort("growth", descending=True).iter_rows(named=True)]
    return f"{label.capitalize()}: {'; '.join(parts)} — the steeper line is the engine whose speed falls most with context."


def _claim_row(rel: pl.DataFrame, context_label: str) -> dict | None:
    hit = rel.filter(pl.col("context_label") == context_label)
    return hit.row(0, named=True) if hit.height else None


def speed_claim_verdicts(claims: pl.DataFrame, rel_published: pl.DataFrame, rel_measured: pl.DataFrame | None,
                         engine_family: dict[str, str] | None = None) -> list:
    """Each relative-speed claim checked against the document's own table (winner and stated ratio, to the
    claim's last digit) and, where measured runs exist at the same (scaled) context, its shape on this host:
    does the same engine family win there? ``engine_family`` maps a claim's engine to the measured engine that
    stands for it (e.g. sglang → sglang-jax)."""
    from kvlab.analysis import _stated_tolerance
    from kvlab.verdicts import Verdict

    family = engine_family or {}
    out = []
    for c in claims.filter(pl.col("kind") == "relative_speed").iter_rows(named=True):
        ctx, claimed = c["context_from"], c["engine"]
        r = _claim_row(rel_published, ctx)
        if r is None:
            out.append(Verdict(c["statement"], "cannot be tested here", "published", f"no table row at {ctx}"))
        else:
            ok = r["faster"] == claimed and abs(r["speedup"] - c["stated_value"]) <= _stated_tolerance(c["stated_value"])
            out.append(Verdict(f"{c['statement']} (the article's own table)", "reproduced" if ok else "contradicted",
                               "published", f"{engine_label(r['faster'])} {r['speedup']:.2f}× faster at {ctx}"))
        m = _claim_row(rel_measured, ctx) if rel_measured is not None and not rel_measured.is_empty() else None
        if m is None:
            continue
        stands_for = family.get(claimed, claimed)
        tokens = f"{m['context_tokens']:,} tokens"
        out.append(Verdict(
            f"{engine_label(stands_for)} wins at {ctx} — the claim's direction on this host ({ctx} scaled to {tokens})",
            "reproduced" if m["faster"] == stands_for else "contradicted", "measured",
            f"{engine_label(m['faster'])} {m['speedup']:.2f}× faster at {ctx} ({tokens})"))
    return out


def crossover_verdicts(estimates: list, model_tokens: float | None, measured: list | None,
                       model_range: tuple[float, float] | None = None) -> list:
    """Where the winner changes: the article's table interpolated, the calibrated model, and the measured
    contexts (found, never reproduced: the article states no crossover)."""
    from kvlab.verdicts import Verdict

    out = []
    found = [x for x in estimates if x.context_tokens is not None]
    if found:
        lo, hi = min(x.context_tokens for x in found), max(x.context_tokens for x in found)
        out.append(Verdict("The winner changes between 64K and 200K (the article's table, interpolated)", "found",
                           "published", f"{k_label(lo)}–{k_label(hi)} tokens ({', '.join(x.method for x in found)})"))
    if model_tokens is not None:
        out.append(Verdict("Where the winner changes, from kvlab's physical model calibrated on the same four points",
                           "found", "modelled", f"≈{k_label(model_tokens)} tokens" + (
                               f", {k_label(model_range[0])}–{k_label(model_range[1])} over the assumptions the "
                               "article leaves open" if model_range else "") + " (not an independent check)"))
    if measured:
        x = next((m for m in measured if m.context_tokens is not None), None)
        m = measured[0]
        out.append(Verdict("Do the measured curves cross inside the measured contexts?", "found", "measured",
                           f"yes, at ≈{x.context_tokens:,.0f} tokens ({x.method})" if x else
                           f"no: {engine_label(m.faster_below)} faster at every measured context" if m.faster_below
                           else f"no: {m.note}"))
    return out
