"""Report 01 (context scaling): relative speed, batch-time growth, crossovers, their captions and verdicts."""

from __future__ import annotations

from kvlab.analysis import Crossover
from kvlab.claims.speed import crossover_verdicts, held_out_verdict, speed_claim_verdicts
from kvlab.engines import engine_label
from kvlab.narrative.common import scaled_span
from kvlab.perfmodel.calibrate import implausible
from kvlab.units import approx_tokens, k_label, ratio

__all__ = ["crossover_verdicts", "held_out_verdict", "speed_claim_verdicts"]


def _n(r: dict, *cols: str) -> int | None:
    """The fewest runs behind a row's numbers (None where the row does not say: published)."""
    ns = [r.get(c) for c in cols if r.get(c) is not None]
    return min(ns) if ns else None


def _seconds(t: float, n: int | None) -> str:
    return f"{ratio(t, n)} s" if n == 1 else f"{t:.4g} s"


def relative_speed_sentences(rel: list[dict], label: str) -> str:
    """'vLLM is 1.50× faster at 64K (100.5 s vs 150.8 s)' for every context in ``rel`` (relative-speed row dicts,
    :func:`kvlab.analysis.relative_speed`); measured numbers of one run
    a side to two significant figures ('vLLM is 4.9× faster at 64K (0.49 s vs 2.4 s for sglang-jax (CPU))')."""
    if not rel:
        return f"*{label}: no context holds runs of both engines.*"
    lines = []
    for r in rel:
        times = {r["engine"]: r["batch_time_s"], r["other_engine"]: r["other_batch_time_s"]}
        slower = r["other_engine"] if r["faster"] == r["engine"] else r["engine"]
        n = _n(r, "n_runs", "other_n_runs") if r.get("source") == "measured" else None
        lines.append(
            f"- {label}: **{engine_label(r['faster'])} is {ratio(r['speedup'], n)}× faster at {r['context_label']}** "
            f"({_seconds(times[r['faster']], n)} vs {_seconds(times[slower], n)} for {engine_label(slower)})."
        )
    winners = list(dict.fromkeys(r["faster"] for r in rel))
    if len(winners) > 1:
        lines.append(
            "- The winner changes with context: "
            + ", ".join(f"{engine_label(r['faster'])} at {r['context_label']}" for r in rel)
            + "."
        )
    else:
        lines.append(f"- {engine_label(winners[0])} wins at every context shown.")
    return "\n".join(lines)


def crossover_sentence(x: Crossover, label: str) -> str:
    if x.context_tokens is None:
        return f"- {label} ({x.method}): no crossover estimate — {x.note}."
    return (
        f"- {label} ({x.method}): the engines' batch times meet at **{approx_tokens(x.context_tokens)}**; "
        f"{engine_label(x.faster_below)} is faster below, {engine_label(x.faster_above)} above. "
        f"Assumption: {x.assumption}."
    )


def growth_sentences(growth: list[dict], label: str) -> str:
    """'vLLM: batch time grows 2.50× from 2,048 to 6,400 tokens, about C^0.81' per engine (``growth``: row dicts of
    :func:`kvlab.analysis.batch_time_growth`)."""
    lines = []
    for r in (r for r in growth if r["growth"] is not None):
        k = r["exponent"]
        shape = "faster than linear" if k > 1.05 else "slower than linear" if k < 0.95 else "about linear"
        lines.append(
            f"- {label}, {engine_label(r['engine'])}: batch time grows "
            f"**{ratio(r['growth'], r.get('n_runs') if r.get('source') == 'measured' else None)}×** "
            f"from {r['c_from']:,} to {r['c_to']:,} "
            f"tokens ({r['context_from']} to {r['context_to']}, {r['n_contexts']} contexts), "
            f"T ∝ C^{k:.2f} ({shape} in context)."
        )
    return "\n".join(lines) or f"*{label}: no engine has runs at two contexts.*"


def model_crossover_sentence(crossover_tokens: float | None, fit, xrange: tuple[float, float] | None = None) -> str:
    """The physical model's crossover, with its range over what the data cannot pin (``xrange``), its fit
    quality and, when a fitted parameter is outside its physical range, that flag — in the sentence itself."""
    quality = (
        f"fit to the {fit.residuals.height} published points: max residual {fit.max_abs_residual_pct:.1f}%, "
        f"leave-one-out mean error {fit.loo_mean_abs_pct:.1f}%"
    )
    flag = (
        f"; **non-physical fit** ({'; '.join(implausible(fit, short=True))}), so read it as a description of "
        "the four points, not as physics"
        if implausible(fit)
        else ""
    )
    spread = (
        f"; **{k_label(xrange[0])}–{k_label(xrange[1])}** over the batch sizes, output lengths, expert-read "
        "models and MLA cache widths the article leaves open (report 04)"
        if xrange
        else ""
    )
    if crossover_tokens is None:
        return f"- modelled: no crossover within the modelled range ({quality}{flag})."
    return (
        f"- modelled: the batch times meet at **{approx_tokens(crossover_tokens)}** under the default "
        f"assumptions{spread} ({quality}{flag})."
    )


def growth_comparison(measured: list[dict], published: list[dict]) -> str:
    """How much batch time grows between the two contexts, measured here against the document's table (row dicts
    of :func:`kvlab.analysis.decay_factors`)."""
    if not measured:
        return "*measured: no engine has runs at both contexts.*"
    pub = {r["engine"]: r["batch_time_ratio"] for r in published}
    lines = []
    for r in measured:
        ref = pub.get(r["engine"])
        name = engine_label(r["engine"])
        cmp = (
            f"; the article's {name} grew {ref:.2f}×"
            if ref is not None
            else f"; the article has no {name} figure"
            if pub
            else ""
        )
        span = scaled_span(r).strip().removeprefix("(").removesuffix(")")
        n = _n(r, "n_from", "n_to") if r.get("source") == "measured" else None
        lines.append(
            f"- measured: {name} batch time grows **{ratio(r['batch_time_ratio'], n)}×** "
            f"from {r['context_from']} to {r['context_to']} ({span or 'full-scale contexts'}){cmp}."
        )
    return "\n".join(lines)


def speed_caption(rel: list[dict], label: str) -> str:
    """One sentence for a batch-time figure: who is faster at each context (``rel``: relative-speed row dicts), by
    how much."""
    if not rel:
        return f"{label}: no context holds runs of both engines."
    parts = [  # measured numbers of one run a side to two significant figures, as the sentences and verdicts give them
        f"{engine_label(r['faster'])} is "
        f"{ratio(r['speedup'], _n(r, 'n_runs', 'other_n_runs') if r.get('source') == 'measured' else None)}× "
        f"faster at {r['context_label']}"
        for r in sorted(rel, key=lambda r: r["context_tokens"])
    ]
    winners = list(dict.fromkeys(r["faster"] for r in rel))
    tail = (
        "the winner changes with context" if len(winners) > 1 else f"{engine_label(winners[0])} wins at every context"
    )
    return f"{label.capitalize()}: {'; '.join(parts)} — {tail}."


def growth_caption(growth: list[dict], label: str) -> str:
    """One sentence for a batch-time-against-context figure: how much each engine's batch time (``growth``: row
    dicts of :func:`kvlab.analysis.batch_time_growth`) grows."""
    g = sorted((r for r in growth if r["growth"] is not None), key=lambda r: -r["growth"])
    if not g:
        return f"{label.capitalize()}: no engine has runs at two contexts."
    parts = [
        f"{engine_label(r['engine'])}'s batch time grows "
        f"{ratio(r['growth'], r.get('n_runs') if r.get('source') == 'measured' else None)}× from {r['context_from']} "
        f"to {r['context_to']}"
        for r in g
    ]
    return f"{label.capitalize()}: {'; '.join(parts)} — the steeper line is the engine whose speed falls most with context."


def context_answer(
    published: list[dict], modelled: list[dict], x_range: tuple[float, float] | None, nothing_measured: bool
) -> tuple[str, ...]:
    """Report 01's answer: the article's winner at each of its contexts (``published``: its relative-speed rows),
    where the model puts the change of winner (modelled, with its range; ``modelled``: the answer table's modelled
    rows; the model fails its held-out test, so it illustrates), and what this host can add."""
    pub = [
        f"{engine_label(r['faster'])} at {r['context_label']} ({r['speedup']:.2f}× faster)"
        for r in published
        if r["faster"]
    ]
    first = (
        (
            "On the reference host (Kimi-K3 on 8× B300) the article's table has "
            + " and ".join(pub)
            + ": published, one run per cell, no repeats."
        )
        if pub
        else "The article's table gives no winner."
    )
    either = [r for r in modelled if r["engine"] == "either"]
    second = (
        (
            f"Where the winner changes is not pinned: the physical model puts it anywhere from "
            f"{k_label(x_range[0])} to {k_label(x_range[1])} tokens over what the article leaves open"
            if x_range
            else "The physical model finds no change of winner"
        )
        + (
            f"; at {' and '.join(r['context'] for r in either)} it names no winner over those assumptions"
            if either
            else ""
        )
        + "; it fails its held-out test, so it illustrates, it does not decide."
    )
    third = (
        "No run was measured on this host."
        if nothing_measured
        else "This CPU host cannot test either speed claim: its runs compare two different CPU implementations of "
        "the engines on a tiny model, which tests mechanisms, not B300 speed."
    )
    return (first, second, third)
