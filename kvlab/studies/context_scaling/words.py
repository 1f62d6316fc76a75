"""Report 01's sentences, built only from its verdicts and typed values. A sentence or caption names a winner or
a direction only where the verdict of the claim it speaks to decides (:func:`kvlab.verdicts.decides`); elsewhere it
gives the measurement with :func:`kvlab.verdicts.undecided_label`. CPU contexts are named by their real token counts
(:func:`kvlab.studies.measured_frames.context_name`)."""

from __future__ import annotations

from collections.abc import Callable

from kvlab.studies.measured_frames import Crossover
from kvlab.engines import engine_label
from kvlab.studies.context_scaling.frames import ModelCrossover
from kvlab.studies.measured_frames import PoolExcess, context_name, engine_excesses, span_name
from kvlab.units import approx_tokens, count, ratio, sentence_start
from kvlab.verdicts import Verdict, decides, undecided_label

#: A relative-speed row's verdict: (the row's context label) -> the verdict of the claim at that context, or None.
VerdictAt = Callable[[str], Verdict | None]


def _n(r: dict, *cols: str) -> int | None:
    """The fewest runs behind a measured row's numbers (None for published rows, which state no count)."""
    if r.get("source") != "measured":
        return None
    ns = [r.get(c) for c in cols if r.get(c) is not None]
    return min(ns) if ns else None


def _seconds(t: float, n: int | None) -> str:
    return f"{ratio(t, n)} s" if n == 1 else f"{t:.4g} s"


def _where(r: dict) -> str:
    return context_name(r["context_label"], r["context_tokens"])


def speed_phrase(r: dict, verdict: Verdict | None) -> str:
    """One context of a relative-speed row: 'vLLM is 1.50× faster at 64K' where its verdict decides, else the two
    batch times with the verdict's label ('at 1,024 tokens (stands in for 64K): vLLM 0.43 s, sglang-jax (CPU)
    2.1 s (not decidable on this host)')."""
    n = _n(r, "n_runs", "other_n_runs")
    if decides(verdict):
        return f"{engine_label(r['faster'])} is {ratio(r['speedup'], n)}× faster at {_where(r)}"
    a, b = engine_label(r["engine"]), engine_label(r["other_engine"])
    return (
        f"at {_where(r)}: {a} {_seconds(r['batch_time_s'], n)}, {b} {_seconds(r['other_batch_time_s'], n)} "
        f"({undecided_label(verdict)})"
    )


def winner_line(rel: list[dict], change: Verdict | None) -> str:
    """Who wins where, over the contexts: said only where the crossover verdict (``change``) decides."""
    if not decides(change) or not rel:
        return ""
    winners = list(dict.fromkeys(r["faster"] for r in rel))
    if len(winners) > 1:
        return "the winner changes with context"
    return f"{engine_label(winners[0])} is faster at every context shown"


def relative_speed_sentences(rel: list[dict], label: str, verdict_at: VerdictAt, change: Verdict | None) -> str:
    """One line per context of ``rel`` (relative-speed row dicts), worded by its claim's verdict
    (:func:`speed_phrase`), then who wins where when ``change`` decides."""
    if not rel:
        return f"*{label}: no context holds runs of both engines.*"
    lines = []
    for r in rel:
        phrase = speed_phrase(r, verdict_at(r["context_label"]))
        if decides(verdict_at(r["context_label"])):
            times = {r["engine"]: r["batch_time_s"], r["other_engine"]: r["other_batch_time_s"]}
            slower = r["other_engine"] if r["faster"] == r["engine"] else r["engine"]
            n = _n(r, "n_runs", "other_n_runs")
            phrase = (
                f"**{phrase}** ({_seconds(times[r['faster']], n)} vs {_seconds(times[slower], n)} for "
                f"{engine_label(slower)})"
            )
        lines.append(f"- {label}: {phrase}.")
    if line := winner_line(rel, change):
        lines.append(f"- {sentence_start(line)}.")
    return "\n".join(lines)


def speed_caption(rel: list[dict], label: str, verdict_at: VerdictAt, change: Verdict | None) -> str:
    """A batch-time figure's caption: a sentence per context as :func:`speed_phrase` words it, then who wins where
    only when ``change`` (the crossover verdict) decides."""
    if not rel:
        return f"{label.capitalize()}: no context holds runs of both engines."
    rows = sorted(rel, key=lambda r: r["context_tokens"])
    said = [speed_phrase(r, verdict_at(r["context_label"])) for r in rows]
    tail = winner_line(rel, change)
    return _sentences(label, [*said, tail] if tail else said)


def _sentences(label: str, parts: list[str]) -> str:
    """A caption of one sentence per part, the first led by the figure's source label ('Measured: at 1,024 tokens
    ...: ... . At 3,200 tokens ...'): a caption over three contexts stays a run of short sentences."""
    first, *rest = parts
    return " ".join([f"{label.capitalize()}: {first}.", *(f"{sentence_start(p)}." for p in rest)])


def crossover_sentence(x: Crossover, label: str, verdict: Verdict | None, assumption: bool = True) -> str:
    """Where the engines' batch times meet under one interpolation; which engine is faster on each side only where
    ``verdict`` (the crossover question's) decides; the interpolation's assumption unless the page said it already
    (``assumption`` False)."""
    if x.context_tokens is None:
        if decides(verdict):
            return f"- {label} ({x.method}): no crossover estimate — {x.note}."
        return f"- {label} ({x.method}): the curves do not cross inside the measured contexts ({undecided_label(verdict)})."
    side = (
        f"; {engine_label(x.faster_below)} is faster below, {engine_label(x.faster_above)} above"
        if decides(verdict)
        else f" ({undecided_label(verdict)})"
    )
    return f"- {label} ({x.method}): the engines' batch times meet at **{approx_tokens(x.context_tokens)}**{side}." + (
        f" Assumption: {x.assumption}." if assumption else ""
    )


def model_crossover_sentence(m: ModelCrossover) -> str:
    """The physical model's crossover, always with its range over what the article leaves open (its value under the
    default assumptions only beside it), its fit quality and any non-physical flag."""
    quality = (
        f"Fit to the {m.points} published points: max residual {m.max_residual_pct:.1f}%, leave-one-out mean error "
        f"{m.loo_mean_pct:.1f}%."
    )
    flag = (
        f" Non-physical fit ({'; '.join(m.implausible)}): read it as a description of the four points."
        if m.implausible
        else ""
    )
    if m.tokens is None and m.range_label is None:
        return f"- modelled: no crossover within the modelled range. {quality}{flag}"
    spread = f"**{m.range_label}**" if m.range_label else "a range not computed"
    default = f" ({approx_tokens(m.tokens)} under the default assumptions)" if m.tokens is not None else ""
    return (
        f"- modelled: the batch times meet anywhere in {spread} over the batch sizes, output lengths, expert-read "
        f"models and MLA widths the article leaves open{default}. {quality}{flag}"
    )


def _contexts(excesses: tuple[PoolExcess, ...]) -> str:
    return " and ".join(dict.fromkeys(x.context for x in excesses))


def pool_wait_line(excesses: tuple[PoolExcess, ...]) -> str:
    """Beside the relative speeds: the contexts whose batch times include waiting past a KV pool ('' where none)."""
    if not excesses:
        return ""
    return f"- The batch times at {_contexts(excesses)} include waiting past the KV pool (see the growth above)."


def growth_line(r: dict, published: dict[str, float], excesses: tuple[PoolExcess, ...]) -> str:
    """One engine's measured growth between the two contexts; where its batch exceeded its KV pool, said beside
    it, and not compared with the article (the growth is then the pool's waiting, not the engine's scaling; the
    pools themselves are :func:`kvlab.studies.measured_frames.pool_note`'s, said once below the lines)."""
    name = engine_label(r["engine"])
    lo, hi = span_name(r)
    n = _n(r, "n_from", "n_to")
    text = f"- measured: {name} batch time grows **{ratio(r['batch_time_ratio'], n)}×** from {lo} to {hi}"
    mine = engine_excesses(excesses, r["engine"])
    if mine:
        return (
            f"{text}. {name}'s batch exceeded its KV pool at {_contexts(mine)}, so this growth is not {name}'s scaling."
        )
    ref = published.get(r["engine"])
    return text + (f"; the article's {name} grew {ref:.2f}×." if ref is not None else ".")


def growth_comparison(measured: list[dict], published: list[dict], excesses: tuple[PoolExcess, ...]) -> str:
    """How much batch time grows between the two contexts the measured experiment holds (``measured``, ``published``:
    decay row dicts); set beside the article's growth only where both span the same contexts."""
    if not measured:
        return "*measured: no engine has runs at two contexts.*"
    span = (measured[0]["context_from"], measured[0]["context_to"])
    same = [r for r in published if (r["context_from"], r["context_to"]) == span]
    lines = [growth_line(r, {r["engine"]: r["batch_time_ratio"] for r in same}, excesses) for r in measured]
    if published and not same:
        lo, hi = published[0]["context_from"], published[0]["context_to"]
        lines.append(f"- The article's growth, from {lo} to {hi}, spans contexts these runs do not hold: not compared.")
    return "\n".join(lines)


def growth_sentences(
    growth: list[dict],
    label: str,
    excesses: tuple[PoolExcess, ...],
    said: frozenset[tuple[str, str, str]] = frozenset(),
) -> str:
    """Over every measured context, per engine: the growth and its power-law exponent; where the batch exceeded the
    pool at any context, no exponent (it would describe the waiting, not the engine), and nothing at all where
    ``said`` (engine, context_from, context_to) already holds that span: the line would repeat it."""
    lines = []
    for r in (r for r in growth if r["growth"] is not None):
        lo, hi = span_name(r)
        n = r.get("n_runs") if r.get("source") == "measured" else None
        text = (
            f"- {label}, {engine_label(r['engine'])}: batch time grows **{ratio(r['growth'], n)}×** from {lo} to {hi}"
        )
        if mine := engine_excesses(excesses, r["engine"]):
            if (r["engine"], r["context_from"], r["context_to"]) not in said:
                lines.append(f"{text}, its batch over its KV pool at {_contexts(mine)} (no power law fitted).")
            continue
        k = r["exponent"]
        shape = "faster than linear" if k > 1.05 else "slower than linear" if k < 0.95 else "about linear"
        lines.append(text + f" over {r['n_contexts']} contexts, T ∝ C^{k:.2f} ({shape} in context).")
    return "\n".join(lines)


def growth_caption(growth: list[dict], label: str, excesses: tuple[PoolExcess, ...]) -> str:
    """The batch-time-against-context figure's caption: a sentence per engine's measured growth, saying where a batch
    exceeded its KV pool (the growth there is not the engine's scaling)."""
    g = sorted((r for r in growth if r["growth"] is not None), key=lambda r: -r["growth"])
    if not g:
        return f"{label.capitalize()}: no engine has runs at two contexts."
    parts = []
    for r in g:
        lo, hi = span_name(r)
        n = r.get("n_runs") if r.get("source") == "measured" else None
        over = " (batch over its KV pool at the long end)" if engine_excesses(excesses, r["engine"]) else ""
        parts.append(f"{engine_label(r['engine'])}'s batch time grows {ratio(r['growth'], n)}× from {lo} to {hi}{over}")
    return _sentences(label, parts)


def context_answer(
    published: list[dict],
    modelled: list[dict],
    model: ModelCrossover,
    held_out: Verdict | None,
    measured_speed: list[Verdict],
    measured_contexts: list[str] | None,
) -> tuple[str, ...]:
    """Report 01's answer: the article's winner at each of its contexts, where the model puts the change of winner
    (always as its range), whether the model passed its held-out test (``held_out``) and what this host's speed
    verdicts (``measured_speed``) can say; where none, because the runs (at ``measured_contexts``, named by
    :func:`context_name`; None: nothing measured) are at none of the article's contexts, that."""
    pub = [f"{engine_label(r['faster'])} at {r['context_label']} ({r['speedup']:.2f}× faster)" for r in published]
    first = (
        "On the reference host (Kimi-K3 on 8× B300) the article's table has "
        + " and ".join(pub)
        + ": published, one run per cell, no repeats."
        if pub
        else "The article's table gives no winner."
    )
    either = [r["context"] for r in modelled if r["engine"] == "either"]
    second = (
        f"Where the winner changes is not pinned: over what the article leaves open, the physical model puts it "
        f"anywhere in {model.range_label} tokens"
        if model.range_label
        else "The physical model finds no change of winner"
    ) + (f", and names no winner at {' and '.join(either)}." if either else ".")
    passed = held_out is not None and held_out.outcome == "reproduced"
    third = (
        "The model passes its held-out test, but it is fitted to the same four points."
        if passed
        else "The model fails its held-out test, so it illustrates; it does not decide."
    )
    open_ = [v for v in measured_speed if not decides(v)]
    if measured_contexts is None:
        fourth = "No run was measured on this host."
    elif not measured_speed:
        at = " and ".join(measured_contexts) if len(measured_contexts) < 3 else ", ".join(measured_contexts)
        fourth = f"This host's runs, at {at}, include no context of a speed claim measured with both engines: they test none."
    elif open_:
        fourth = f"This host cannot decide {count(len(open_), 'speed claim')}: {open_[0].limit or undecided_label(open_[0])}."
    else:
        fourth = f"This host's runs decide {count(len(measured_speed), 'speed claim')} (see the verdicts)."
    return (first, second, third, fourth)
