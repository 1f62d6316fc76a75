"""Report 02's sentences, built only from its verdicts and typed values. Which engine's throughput holds up
better is said only where the shape verdict decides (:func:`kvlab.verdicts.decides`); elsewhere the measurement is
shown with :func:`kvlab.verdicts.undecided_label`. Every count counts the very list it sits above."""

from __future__ import annotations

from kvlab import tables
from kvlab.engines import engine_label
from kvlab.studies.measured_frames import PoolExcess, context_name, engine_excesses, pool_sentences, span_name
from kvlab.studies.throughput_decay.frames import StatedRatio
from kvlab.units import change, count, direction, ratio
from kvlab.verdicts import Verdict, decides, undecided_label

#: The definitions a stated ratio is checked under, as a reader names them.
DEFINITION_NAMES: dict[str, str] = {
    "time_ratio": "T(slower) ÷ T(faster)",
    "percent_less_time": "1 + time saved ÷ T(slower)",
    "batch_time_ratio": "requests/s, short ÷ long context",
    "prompt_tokens_per_s_ratio": "prompt tokens/s, short ÷ long context",
}
#: The definitions whose value is a decay factor: stated with a direction.
DECAY_DEFINITIONS = ("batch_time_ratio", "prompt_tokens_per_s_ratio")


def _n(r: dict) -> int | None:
    """The fewer runs of a decay row's two contexts (None for published rows, which state no count)."""
    ns = [r.get(c) for c in ("n_from", "n_to") if r.get(c) is not None]
    return min(ns) if ns and r.get("source", "measured") != "published" else None


def decay_sentences(decay: list[dict], label: str, excesses: tuple[PoolExcess, ...] = ()) -> str:
    """Per engine (decay row dicts): how batch time grows between the two contexts (named by their real tokens)
    and which way each throughput goes; where the batch exceeded the engine's KV pool, said beside it."""
    if not decay:
        return f"*{label}: no engine has runs at both contexts.*"
    lines = []
    for r in decay:
        bt, n = r["batch_time_ratio"], _n(r)
        lo, hi = span_name(r)
        grows = (
            f"batch time grows **{ratio(bt, n)}×** (so requests/s falls {ratio(bt, n)}×)"
            if bt >= 1
            else f"batch time shrinks **{ratio(1 / bt, n)}×** (so requests/s rises {ratio(1 / bt, n)}×)"
        )
        pool = engine_excesses(excesses, r["engine"])
        tail = f" {pool_sentences(pool)}" if pool else ""
        lines.append(
            f"- {label}, {engine_label(r['engine'])}: from {lo} to {hi} {grows}, while "
            f"{change(r['prompt_tokens_per_s_ratio'], 'prompt tokens/s', n=n)}.{tail}"
        )
    return "\n".join(lines)


def decay_comparison(decay: list[dict], label: str, shape: Verdict | None) -> str:
    """Which engine's throughput holds up best between the two contexts — only where ``shape`` (the shape verdict
    on this evidence) decides; otherwise the factors with the verdict's label."""
    if len(decay) < 2:
        return ""
    d = sorted(decay, key=lambda r: r["batch_time_ratio"])
    best, worst = d[0], d[-1]
    lo, hi = span_name(best)
    if not decides(shape):
        factors = ", ".join(f"{engine_label(r['engine'])} {ratio(r['batch_time_ratio'], _n(r))}×" for r in d)
        return f"- {label}: requests/s falls {factors} from {lo} to {hi} ({undecided_label(shape)})."
    return (
        f"- {label}: from {lo} to {hi}, {engine_label(best['engine'])}'s throughput holds up best "
        f"({change(best['batch_time_ratio'], 'requests/s', bold=True, n=_n(best))}) and "
        f"{engine_label(worst['engine'])}'s falls most (**{ratio(worst['batch_time_ratio'], _n(worst))}×**)."
    )


def _implied_phrase(definition: str, v: float | None) -> str:
    """What one definition makes of the table: 'requests/s falls 2.94×', 'T(slower) ÷ T(faster) gives 1.50×'."""
    name = DEFINITION_NAMES.get(definition, definition)
    if v is None:
        return f"{name} cannot be computed"
    if definition == "batch_time_ratio":
        return change(v, "requests/s")
    if definition == "prompt_tokens_per_s_ratio":
        return change(v, "prompt tokens/s")
    return f"{name} gives {-v:.2f}× for the other engine" if v < 0 else f"{name} gives {v:.2f}×"


def consistency_sentences(stated: tuple[StatedRatio, ...]) -> str:
    """One line per stated ratio: ✓ with the definition(s) under which the table gives it, or ✗ with what the table
    gives under each definition."""
    lines = []
    for s in stated:
        if s.consistent:
            how = ", ".join(DEFINITION_NAMES.get(d, d) for d in s.definitions)
            lines.append(f"- ✓ “{s.statement}” — consistent with the table ({how}).")
            continue
        gives = " and ".join(_implied_phrase(i.definition, i.value) for i in s.implied)
        lines.append(f"- ✗ “{s.statement}” — by its batch times {gives}; the text says {s.stated_value:g}×.")
    return "\n".join(lines)


def claim_label(s: StatedRatio, claims: dict[str, dict]) -> str:
    """A short name for a stated ratio ('vLLM 1.5× faster at 64K', 'vLLM falls 3.29× 64K→200K')."""
    c = claims.get(s.claim_id)
    if c is None:
        return s.claim_id
    if s.kind == "relative_speed":
        return f"{engine_label(s.engine)} {s.stated_value:g}× faster at {c['context_from']}"
    if s.kind == "throughput_decay":
        return f"{engine_label(s.engine)} falls {s.stated_value:g}× {c['context_from']}→{c['context_to']}"
    return s.claim_id


def claim_labels(stated: tuple[StatedRatio, ...], claims: list[dict]) -> dict[str, str]:
    """:func:`claim_label` of every stated ratio, by claim id (the figure's tick labels)."""
    rows = {r["claim_id"]: r for r in claims}
    return {s.claim_id: claim_label(s, rows) for s in stated}


def consistency_table(stated: tuple[StatedRatio, ...], claims: list[dict]):
    """Each stated ratio beside what the table implies under each definition; a decay factor with its direction."""
    names = claim_labels(stated, claims)
    frame = [
        {
            "claim": names[s.claim_id],
            "definition": DEFINITION_NAMES.get(i.definition, i.definition),
            "stated_value": s.stated_value,
            "implied_value": "–"
            if i.value is None
            else direction(i.value)
            if i.definition in DECAY_DEFINITIONS
            else tables.number(i.value),
            "consistent": i.consistent,
        }
        for s in stated
        for i in s.implied
    ]
    heads = {"claim": "claim", "definition": "definition", "stated_value": "stated (×)"}
    return tables.table(frame, heads | {"implied_value": "the table implies", "consistent": "consistent"})


def claims_caption(stated: tuple[StatedRatio, ...], claims: list[dict]) -> str:
    """One sentence for the stated-vs-implied figure, counting the very rows listed under it (``stated``)."""
    names = claim_labels(stated, claims)
    ok = [s for s in stated if s.consistent]
    bad = [s for s in stated if not s.consistent]
    text = f"Published: {len(ok)} of the article's {len(stated)} stated ratios match its own table"
    if ok:
        by_def: dict[str, list[str]] = {}
        for s in ok:
            by_def.setdefault(" or ".join(DEFINITION_NAMES.get(d, d) for d in s.definitions), []).append(
                names[s.claim_id]
            )
        text += " — " + "; ".join(f"{' and '.join(c)}, read as {how}" for how, c in by_def.items())
    if bad:
        text += f". {count(len(bad), 'ratio')} match under no definition checked (hatched, ✗): " + ", ".join(
            f"{names[s.claim_id]} (table: {s.implied_by_time_ratio:.2f}×)" for s in bad
        )
    return text + "."


def decay_table(decay: list[dict]):
    """The decay factors (row dicts) as a reader's table: batch time at both contexts, which way each throughput
    goes; the contexts named by their real tokens."""
    if not decay:
        return tables.table([], ["engine"])
    lo, hi = span_name(decay[0])
    frame = [
        {
            "engine": r["engine"],
            "t_from_s": r["t_from_s"],
            "t_to_s": r["t_to_s"],
            "requests_per_s": direction(r["batch_time_ratio"], n=_n(r)),
            "prompt_tokens_per_s": None
            if r["prompt_tokens_per_s_ratio"] is None
            else direction(r["prompt_tokens_per_s_ratio"], n=_n(r)),
        }
        for r in decay
    ]
    heads = {"engine": "engine", "t_from_s": f"batch time at {lo} (s)", "t_to_s": f"batch time at {hi} (s)"}
    heads |= {"requests_per_s": "requests/s", "prompt_tokens_per_s": "prompt tokens/s"}
    return tables.table(frame, heads)


def _falls(d: list[dict]) -> str:
    """'falls 2.94× for vLLM and 1.49× for SGLang': the verb said once where shared."""
    parts, verb = [], None
    for r in d:
        text = direction(r["batch_time_ratio"], n=_n(r))
        word = text.split(" ")[0]
        parts.append(f"{text if word != verb else text.split(' ', 1)[1]} for {engine_label(r['engine'])}")
        verb = word
    return " and ".join(parts)


def decay_caption(decay: list[dict], label: str, measure: str, shape: Verdict | None) -> str:
    """One sentence for a throughput-against-context figure: how far each engine's ``measure`` falls; which engine
    holds up better and who is ahead at each end only where ``shape`` (the shape verdict) decides."""
    if not decay:
        return f"{label.capitalize()}: no engine has runs at both contexts."
    d = sorted(decay, key=lambda r: -r["batch_time_ratio"])
    lo, hi = span_name(d[0])
    text = f"{label.capitalize()}: from {lo} to {hi}, {measure} {_falls(d)}"
    if len(d) < 2:
        return text + "."
    if not decides(shape):
        return text + f" ({undecided_label(shape)})."
    first = min(d, key=lambda r: r["t_from_s"])["engine"]
    last = min(d, key=lambda r: r["t_to_s"])["engine"]
    ahead = (
        f"{engine_label(first)} is ahead at both ends (left)"
        if first == last
        else f"the absolute lines cross (left): {engine_label(first)} ahead at {lo}, {engine_label(last)} at {hi}"
    )
    return text + f" — {engine_label(d[-1]['engine'])}'s throughput holds up better; {ahead}."


def measured_table_caption(mem_util: float, scale: float | None, contexts: list[tuple[str, int]]) -> str:
    """'memory utilisation 0.92; contexts scaled ÷64: 1,024 tokens (stands in for 64K), …'."""
    parts = [f"memory utilisation {mem_util:g}"]
    if scale and scale != 1:
        parts.append(f"contexts scaled ÷{scale:g}: " + ", ".join(context_name(lab, tok) for lab, tok in contexts))
    return "; ".join(parts)


def decay_answer(
    decay_verdicts: list[Verdict],
    stated: tuple[StatedRatio, ...],
    shape: Verdict | None,
    measured: Verdict | None,
    own: list[dict] = (),
    claimed: tuple[str, str] = ("64K", "200K"),
) -> tuple[str, ...]:
    """Report 02's answer from its verdicts: the stated decay factors against the article's own table (``stated``
    names each claim's engine and stated value), the shape (said only where its verdict decides) and what this
    host's shape verdict (``measured``) can say; where there is none because the runs hold their decay (``own``,
    measured decay row dicts) between other contexts than the claims' (``claimed``), which contexts those are."""
    if not decay_verdicts:
        return ("The article states no decay factor this report can check.",)
    off = [v for v in decay_verdicts if v.outcome == "inconsistent"]
    by_id = {s.claim_id: s for s in stated}
    said = "; ".join(
        f"{engine_label(by_id[v.claim_id].engine)} {v.value:.2f}× against the stated {by_id[v.claim_id].stated_value:g}×"
        if v.claim_id in by_id and v.value is not None
        else v.number
        for v in decay_verdicts
    )
    first = (
        f"The article's own table does not give {count(len(off), 'decay factor')} it states under any definition "
        f"checked: its batch times give {said}."
        if off
        else f"The article's decay factors follow from its own table ({said})."
    )
    out = [first]
    if shape is not None:
        claim = shape.claim.split(" — ")[0]
        out.append(
            f"The table agrees with the claims' shape: {claim} (published, one run per cell)."
            if decides(shape) and shape.outcome == "consistent"
            else f"The table does not bear out the claims' shape ({undecided_label(shape) if not decides(shape) else 'inconsistent'})."
        )
    if measured is None and own and (own[0]["context_from"], own[0]["context_to"]) != tuple(claimed):
        lo, hi = span_name(own[0])
        out.append(
            f"This host's runs are not at {claimed[0]} and {claimed[1]}, so they test no decay claim; their own "
            f"decay, from {lo} to {hi}, is shown under Measured here."
        )
    elif measured is None:
        out.append("No run of both engines at both contexts was measured on this host.")
    elif not decides(measured):
        out.append(
            f"The decay measured on this host cannot test the B300 figures: {measured.limit or undecided_label(measured)}."
        )
    return tuple(out)
