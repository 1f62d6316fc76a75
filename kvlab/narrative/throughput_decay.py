"""Report 02 (throughput decay): decay factors, the article's stated ratios against its own table, captions and verdicts."""

from __future__ import annotations

from kvlab import tables
from kvlab.claims.decay import DecayExtremes, consistency_rows, decay_claim_verdicts
from kvlab.engines import engine_label
from kvlab.narrative.common import scaled_span
from kvlab.units import change as _change
from kvlab.units import direction as _direction
from kvlab.units import ratio
from kvlab.units import scaled_context

__all__ = ["decay_claim_verdicts"]


def decay_sentences(decay: list[dict], label: str) -> str:
    """Per engine (``decay``: row dicts of :func:`kvlab.analysis.decay_factors`): how batch time grows between the
    two contexts, and which way each throughput goes ('requests/s falls 2.94×', 'prompt tokens/s rises 1.06×'),
    with the real token counts of scaled contexts."""
    if not decay:
        return f"*{label}: no engine has runs at both contexts.*"
    lines = []
    for r in decay:
        bt = r["batch_time_ratio"]
        n = _n(r)
        grows = (
            f"batch time grows **{ratio(bt, n)}×** (so requests/s falls {ratio(bt, n)}×)"
            if bt >= 1
            else f"batch time shrinks **{ratio(1 / bt, n)}×** (so requests/s rises {ratio(1 / bt, n)}×)"
        )
        lines.append(
            f"- {label}, {engine_label(r['engine'])}: from {r['context_from']} to {r['context_to']} {grows}, while "
            f"{_change(r['prompt_tokens_per_s_ratio'], 'prompt tokens/s', n=n)}{scaled_span(r)}."
        )
    return "\n".join(lines)


def _n(r: dict) -> int | None:
    """The fewer runs of a decay row's two contexts (None for published rows, which state no count)."""
    ns = [r.get(c) for c in ("n_from", "n_to") if r.get(c) is not None]
    return min(ns) if ns and r.get("source", "measured") != "published" else None


def decay_comparison(extremes: list[DecayExtremes], label: str) -> str:
    """Which engine's throughput holds up best between the two contexts (``extremes``:
    :func:`kvlab.claims.decay.extremes` of a decay frame of two or more engines; none: nothing to say)."""
    lines = []
    for x in extremes:
        best, worst = x.best, x.worst
        if x.tied:
            lines.append(
                f"- {label}: every engine's batch time grows {ratio(best['batch_time_ratio'], _n(best))}× from "
                f"{best['context_from']} to {best['context_to']}."
            )
            continue
        lines.append(
            f"- {label}: from {best['context_from']} to {best['context_to']}, {engine_label(best['engine'])}'s "
            f"throughput holds up best ({_change(best['batch_time_ratio'], 'requests/s', bold=True, n=_n(best))}) and "
            f"{engine_label(worst['engine'])}'s falls most (**{ratio(worst['batch_time_ratio'], _n(worst))}×**)."
        )
    return "\n".join(lines)


def consistency_sentences(verdicts: list[dict], check: list[dict] | None = None) -> str:
    """One line per stated ratio (``verdicts``: row dicts of :func:`kvlab.analysis.consistency_verdicts`): ✓ with
    the definition(s) under which the table gives it, or ✗ with what the table gives instead under each definition
    (read from ``check``, :func:`kvlab.analysis.consistency`'s row dicts)."""
    lines = []
    by_claim = consistency_rows(check)
    for r in verdicts:
        rows = by_claim.get(r["claim_id"])
        if r["consistent_under_any"]:
            how = ", ".join(DEFINITION_NAMES.get(d, d) for d in r["consistent_definitions"])
            lines.append(f"- ✓ “{r['statement']}” — consistent with the table ({how}).")
        elif rows:
            gives = " and ".join(_implied_phrase(x) for x in rows)
            lines.append(
                f"- ✗ “{r['statement']}” — **not** what the table implies under any definition checked: "
                f"by its batch times {gives}; the text says {r['stated_value']:g}×."
            )
        else:
            lines.append(
                f"- ✗ “{r['statement']}” — **not** what the table implies under any definition checked: "
                f"the table's batch times give {r['implied_by_time_ratio']:.2f}×, the text says {r['stated_value']:g}×."
            )
    return "\n".join(lines)


#: The definitions a stated ratio is checked under, as a reader names them.
DEFINITION_NAMES: dict[str, str] = {
    "time_ratio": "T(slower) ÷ T(faster)",
    "percent_less_time": "1 + time saved ÷ T(slower)",
    "batch_time_ratio": "requests/s, short ÷ long context",
    "prompt_tokens_per_s_ratio": "prompt tokens/s, short ÷ long context",
}


def _implied_phrase(row: dict) -> str:
    """What one definition makes of the table: 'requests/s falls 2.94×', 'T(slower) ÷ T(faster) gives 1.50×'."""
    d, v = row["definition"], row["implied_value"]
    if v is None:
        return f"{DEFINITION_NAMES.get(d, d)} cannot be computed"
    if d == "batch_time_ratio":
        return _change(v, "requests/s")
    if d == "prompt_tokens_per_s_ratio":
        return _change(v, "prompt tokens/s")
    if v < 0:
        return f"{DEFINITION_NAMES.get(d, d)} gives {-v:.2f}× for the other engine"
    return f"{DEFINITION_NAMES.get(d, d)} gives {v:.2f}×"


def decay_table(decay: list[dict]):
    """The decay factors (row dicts) as a reader's table: batch time at both contexts and which way each
    throughput goes."""
    if not decay:
        return tables.table([], ["engine"])
    r0 = decay[0]
    lo, hi = r0["context_from"], r0["context_to"]
    frame = [
        {
            "engine": r["engine"],
            "t_from_s": r["t_from_s"],
            "t_to_s": r["t_to_s"],
            "requests_per_s": None if r["batch_time_ratio"] is None else _direction(r["batch_time_ratio"], n=_n(r)),
            "prompt_tokens_per_s": None
            if r["prompt_tokens_per_s_ratio"] is None
            else _direction(r["prompt_tokens_per_s_ratio"], n=_n(r)),
        }
        for r in decay
    ]
    span = scaled_span(r0).strip()
    return tables.table(
        frame,
        {
            "engine": "engine",
            "t_from_s": f"batch time at {lo} (s)",
            "t_to_s": f"batch time at {hi} (s)",
            "requests_per_s": f"requests/s, {lo} → {hi}",
            "prompt_tokens_per_s": f"prompt tokens/s, {lo} → {hi}",
        },
        caption=span.strip("()").capitalize() if span else None,
    )


def decay_caption(decay: list[dict], label: str, measure: str) -> str:
    """One sentence for a throughput-against-context figure (absolute throughput left, relative right): how far
    each engine's ``measure`` falls between the decay's two contexts, which engine holds up better, and who is ahead
    at each end (in the absolute panel: the relative lines all start at 1 and never cross)."""
    if not decay:
        return f"{label.capitalize()}: no engine has runs at both contexts."
    d = sorted(decay, key=lambda r: -r["batch_time_ratio"])
    r0 = d[0]
    span = f"from {scaled_context(r0['context_from'], r0['c_from'])} to {scaled_context(r0['context_to'], r0['c_to'])}"
    parts, verb = [], None
    for r in d:  # 'falls 2.94× for vLLM and 1.49× for SGLang': the verb said once if shared
        text = _direction(r["batch_time_ratio"], n=_n(r))
        word = text.split(" ")[0]
        parts.append(f"{text if word != verb else text.split(' ', 1)[1]} for {engine_label(r['engine'])}")
        verb = word
    falls = " and ".join(parts)
    text = f"{label.capitalize()}: {span}, {measure} {falls}"
    if len(d) > 1:
        best = d[-1]["engine"]
        first = min(d, key=lambda r: r["t_from_s"])["engine"]
        last = min(d, key=lambda r: r["t_to_s"])["engine"]
        ahead = (
            f"in absolute throughput (left) {engine_label(first)} is ahead at both ends"
            if first == last
            else f"in absolute throughput (left) the lines cross: {engine_label(first)} ahead at "
            f"{r0['context_from']}, {engine_label(last)} at {r0['context_to']}"
        )
        text += (
            f" — {engine_label(best)}'s throughput holds up better; {ahead}; relative to its own value at "
            f"{r0['context_from']} (right) each engine's line starts at 1, so those lines never cross"
        )
    return text + "."


def claim_labels(check: list[dict], claims: list[dict] | None = None) -> dict[str, str]:
    """A short name per stated ratio of ``check`` (row dicts of :func:`kvlab.analysis.consistency`) ('vLLM 1.5×
    faster at 64K', 'vLLM falls 3.29× 64K→200K'); the claim id when ``claims`` (row dicts, with the contexts) is
    not given."""
    out = {}
    rows = {r["claim_id"]: r for r in claims} if claims is not None else {}
    for cid, kind, engine, v in dict.fromkeys(
        (r["claim_id"], r["kind"], r["engine"], r["stated_value"]) for r in check
    ):
        c = rows.get(cid)
        if c is None:
            out[cid] = cid
        elif kind == "relative_speed":
            out[cid] = f"{engine_label(engine)} {v:g}× faster at {c['context_from']}"
        elif kind == "throughput_decay":
            out[cid] = f"{engine_label(engine)} falls {v:g}× {c['context_from']}→{c['context_to']}"
        else:
            out[cid] = cid
    return out


def consistency_table(check: list[dict], claims: list[dict] | None = None):
    """Each stated ratio beside what the table implies under each definition, as a reader's table; a decay factor
    (a throughput at the short context ÷ at the long one) with its direction ('rises 1.06×', never 0.940)."""
    names = claim_labels(check, claims)
    frame = [
        {
            "claim": names.get(r["claim_id"], r["claim_id"]),
            "definition": DEFINITION_NAMES.get(r["definition"], r["definition"]),
            "stated_value": r["stated_value"],
            "implied_value": _implied_cell(r["definition"], r["implied_value"]),
            "consistent": r["consistent"],
        }
        for r in check
    ]
    return tables.table(
        frame,
        {
            "claim": "claim",
            "definition": "definition",
            "stated_value": "stated (×)",
            "implied_value": "the table implies",
            "consistent": "consistent",
        },
    )


#: The definitions whose value is a decay factor: stated with a direction.
DECAY_DEFINITIONS = ("batch_time_ratio", "prompt_tokens_per_s_ratio")


def _implied_cell(definition: str, value: float | None) -> str:
    if value is None:
        return "–"
    return _direction(value) if definition in DECAY_DEFINITIONS else tables.number(value)


def claims_caption(check: list[dict], verdicts: list[dict], claims: list[dict] | None = None) -> str:
    """One sentence for the stated-vs-implied figure: which stated ratios the table reproduces, which it does not
    (``verdicts``: row dicts of :func:`kvlab.analysis.consistency_verdicts` of ``check``)."""
    names = claim_labels(check, claims)
    ok = [r for r in verdicts if r["consistent_under_any"]]
    bad = [r for r in verdicts if not r["consistent_under_any"]]
    text = f"Published: {len(ok)} of the article's {len(ok) + len(bad)} stated ratios match its own table"
    if ok:
        by_def: dict[str, list[str]] = {}
        for r in ok:
            how = " or ".join(DEFINITION_NAMES.get(d, d) for d in r["consistent_definitions"])
            by_def.setdefault(how, []).append(names[r["claim_id"]])
        text += " — " + "; ".join(f"{' and '.join(c)}, read as {how}" for how, c in by_def.items())
    if bad:
        text += f"; {len(bad)} match under no definition checked (hatched, ✗): " + ", ".join(
            f"{names[r['claim_id']]} (table: {r['implied_by_time_ratio']:.2f}×)" for r in bad
        )
    return text + "."


def measured_table_caption(scaled: tuple[float | None, list[tuple[str, int]]], mem_util: float | None = None) -> str:
    """'memory utilisation 0.92; contexts scaled ÷64: 64K = 1,024 tokens, 200K = 3,200 tokens' for a measured table
    (``scaled``: its context scale and (label, tokens) pairs, :func:`kvlab.claims.decay.scaled_pairs`)."""
    parts = [f"memory utilisation {mem_util:g}"] if mem_util is not None else []
    scale, pairs = scaled
    if scale:
        parts.append(f"contexts scaled ÷{scale:g}: " + ", ".join(f"{lab} = {tok:,} tokens" for lab, tok in pairs))
    return "; ".join(parts)


def decay_answer(stated: list[dict], context_from: str, context_to: str, nothing_measured: bool) -> tuple[str, ...]:
    """Report 02's answer: each engine's decay as the article states it against what its own table gives (a
    consistency check of the document with itself), the shape both agree on, and what this host adds. ``stated``:
    per engine its ``stated_value``, the table's ``batch_time_ratio`` and ``consistent_under_any`` (the stated value
    follows from the table under one of the definitions checked)."""
    if not stated:
        return ("The article states no decay factor this report can check.",)
    pairs = [
        f"{engine_label(r['engine'])} {r['batch_time_ratio']:.2f}× (stated {r['stated_value']:g}×)" for r in stated
    ]
    off = [r for r in stated if not r.get("consistent_under_any")]
    first = (
        f"The article's own table does not give the decay factors it states from {context_from} to "
        f"{context_to} under any definition checked: its batch times give "
        + " and ".join(pairs)
        + ", so the text and the table are inconsistent."
        if off
        else f"The article's decay factors follow from its own table ({'; '.join(pairs)})."
    )
    flatter = min(stated, key=lambda r: r["batch_time_ratio"])
    second = (
        (
            f"Both agree on the shape: {engine_label(flatter['engine'])}'s throughput holds up better as the "
            "context grows (published, one run per cell)."
        )
        if len(stated) > 1
        else ""
    )
    third = (
        "No run was measured on this host."
        if nothing_measured
        else "The decay measured on this CPU host compares two different CPU implementations on a tiny model "
        "and cannot test the B300 figures."
    )
    return tuple(s for s in (first, second, third) if s)
