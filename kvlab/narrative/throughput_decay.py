"""Report 02 (throughput decay): decay factors, the article's stated ratios against its own table, captions and verdicts."""

from __future__ import annotations

from kvlab.units import sig2

import polars as pl

from kvlab.engines import engine_label
from kvlab.narrative.common import scaled_span
from kvlab.units import scaled_context


def decay_sentences(decay: pl.DataFrame, label: str) -> str:
    """Per engine: how batch time grows between the two contexts, and which way each throughput goes
    ('requests/s falls 2.94×', 'prompt tokens/s rises 1.06×'), with the real token counts of scaled contexts."""
    if decay.is_empty():
        return f"*{label}: no engine has runs at both contexts.*"
    lines = []
    for r in decay.iter_rows(named=True):
        bt = r["batch_time_ratio"]
        grows = (f"batch time grows **{bt:.2f}×** (so requests/s falls {bt:.2f}×)" if bt >= 1 else
                 f"batch time shrinks **{1 / bt:.2f}×** (so requests/s rises {1 / bt:.2f}×)")
        lines.append(
            f"- {label}, {r['engine']}: from {r['context_from']} to {r['context_to']} {grows}, while "
            f"{_change(r['prompt_tokens_per_s_ratio'], 'prompt tokens/s')}{scaled_span(r)}."
        )
    return "\n".join(lines)


def decay_comparison(decay: pl.DataFrame, label: str) -> str:
    """Which engine's throughput holds up best between the two contexts (two or more engines)."""
    if decay["engine"].n_unique() < 2:
        return ""
    lines = []
    for _, g in decay.group_by(["source", "experiment", "hardware"], maintain_order=True):
        g = g.sort("batch_time_ratio")
        best, worst = g.row(0, named=True), g.row(-1, named=True)
        if best["batch_time_ratio"] == worst["batch_time_ratio"]:
            lines.append(f"- {label}: every engine's batch time grows {best['batch_time_ratio']:.2f}× from "
                         f"{best['context_from']} to {best['context_to']}.")
            continue
        lines.append(
            f"- {label}: from {best['context_from']} to {best['context_to']}, {best['engine']}'s throughput holds up "
            f"best ({_change(best['batch_time_ratio'], 'requests/s', bold=True)}) and {worst['engine']}'s falls most "
            f"(**{worst['batch_time_ratio']:.2f}×**)."
        )
    return "\n".join(lines)


def consistency_sentences(verdicts: pl.DataFrame, check: pl.DataFrame | None = None) -> str:
    """One line per stated ratio: ✓ with the definition(s) under which the table gives it, or ✗ with what the
    table gives instead under each definition (read from ``check``, :func:`kvlab.analysis.consistency`'s rows)."""
    lines = []
    for r in verdicts.iter_rows(named=True):
        rows = check.filter(pl.col("claim_id") == r["claim_id"]) if check is not None else None
        if r["consistent_under_any"]:
            how = ", ".join(DEFINITION_NAMES.get(d, d) for d in r["consistent_definitions"])
            lines.append(f"- ✓ “{r['statement']}” — consistent with the table ({how}).")
        elif rows is not None and rows.height:
            gives = " and ".join(_implied_phrase(x) for x in rows.iter_rows(named=True))
            lines.append(f"- ✗ “{r['statement']}” — **not** what the table implies under any definition checked: "
                         f"by its batch times {gives}; the text says {r['stated_value']:g}×.")
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


def _change(factor: float | None, noun: str, bold: bool = False) -> str:
    """A decay factor (throughput at the short context ÷ at the long one) as a direction and size:
    2.94 → 'requests/s falls 2.94×', 0.94 → 'prompt tokens/s rises 1.06×'."""
    if factor is None:
        return f"{noun}: not available"
    return f"{noun} {_direction(factor, bold)}".strip()


def _direction(factor: float, bold: bool = False) -> str:
    """2.94 → 'falls 2.94×', 0.94 → 'rises 1.06×', 1.0 → 'stays the same'."""
    b = "**" if bold else ""
    if abs(factor - 1) < 0.005:
        return f"stays {b}the same{b}"
    return f"falls {b}{factor:.2f}×{b}" if factor > 1 else f"rises {b}{1 / factor:.2f}×{b}"


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


def decay_table(decay: pl.DataFrame):
    """The decay factors as a reader's table: batch time at both contexts and which way each throughput goes."""
    from kvlab import tables

    if decay.is_empty():
        return tables.table(decay.select("engine"))
    r0 = decay.row(0, named=True)
    lo, hi = r0["context_from"], r0["context_to"]
    frame = decay.select(
        "engine", "t_from_s", "t_to_s",
        pl.col("batch_time_ratio").map_elements(_direction, return_dtype=pl.String).alias("requests_per_s"),
        pl.col("prompt_tokens_per_s_ratio").map_elements(_direction, return_dtype=pl.String).alias("prompt_tokens_per_s"),
    )
    span = scaled_span(r0).strip()
    return tables.table(frame, {"engine": "engine", "t_from_s": f"batch time at {lo} (s)",
                                "t_to_s": f"batch time at {hi} (s)", "requests_per_s": f"requests/s, {lo} → {hi}",
                                "prompt_tokens_per_s": f"prompt tokens/s, {lo} → {hi}"},
                        caption=span.strip("()").capitalize() if span else None)


def decay_caption(decay: pl.DataFrame, label: str, measure: str) -> str:
    """One sentence for a throughput-against-context figure: how far each engine's ``measure`` falls between the
    decay's two contexts, which engine holds up better, and who is ahead at each end."""
    if decay.is_empty():
        return f"{label.capitalize()}: no engine has runs at both contexts."
    d = decay.sort("batch_time_ratio", descending=True)
    r0 = d.row(0, named=True)
    span = f"from {scaled_context(r0['context_from'], r0['c_from'])} to {scaled_context(r0['context_to'], r0['c_to'])}"
    parts, verb = [], None
    for r in d.iter_rows(named=True):  # 'falls 2.94× for vLLM and 1.49× for SGLang': the verb said once if shared
        text = _direction(r["batch_time_ratio"])
        word = text.split(" ")[0]
        parts.append(f"{text if word != verb else text.split(' ', 1)[1]} for {engine_label(r['engine'])}")
        verb = word
    falls = " and ".join(parts)
    text = f"{label.capitalize()}: {span}, {measure} {falls}"
    if d.height > 1:
        best = d.row(-1, named=True)["engine"]
        first = d.sort("t_from_s")["engine"][0]
        last = d.sort("t_to_s")["engine"][0]
        ahead = (f"{engine_label(first)} is ahead at both ends" if first == last else
                 f"the lines cross: {engine_label(first)} ahead at {r0['context_from']}, "
                 f"{engine_label(last)} at {r0['context_to']}")
        text += f" — {engine_label(best)}'s throughput holds up better; {ahead}"
    return text + "."


def claim_labels(check: pl.DataFrame, claims: pl.DataFrame | None = None) -> dict[str, str]:
    """A short name per stated ratio ('vLLM 1.5× faster at 64K', 'vLLM falls 3.29× 64K→200K'); the claim id when
    ``claims`` (with the contexts) is not given."""
    out = {}
    rows = {r["claim_id"]: r for r in claims.iter_rows(named=True)} if claims is not None else {}
    for cid, kind, engine, v in check.select("claim_id", "kind", "engine", "stated_value").unique(
            maintain_order=True).iter_rows():
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


def consistency_table(check: pl.DataFrame, claims: pl.DataFrame | None = None):
    """Each stated ratio beside what the table implies under each definition, as a reader's table."""
    from kvlab import tables

    names = claim_labels(check, claims)
    frame = check.select(
        pl.col("claim_id").replace_strict(names, default=pl.col("claim_id")).alias("claim"),
        pl.col("definition").replace_strict(DEFINITION_NAMES, default=pl.col("definition")),
        "stated_value", "implied_value", "consistent")
    return tables.table(frame, {"claim": "claim", "definition": "definition", "stated_value": "stated (×)",
                                "implied_value": "the table implies (×)", "consistent": "consistent"})


def claims_caption(check: pl.DataFrame, claims: pl.DataFrame | None = None) -> str:
    """One sentence for the stated-vs-implied figure: which stated ratios the table reproduces, which it does not."""
    from kvlab.analysis import consistency_verdicts

    names = claim_labels(check, claims)
    v = consistency_verdicts(check)
    ok = v.filter(pl.col("consistent_under_any"))
    bad = v.filter(~pl.col("consistent_under_any"))
    text = f"Published: {ok.height} of the article's {v.height} stated ratios match its own table"
    if ok.height:
        by_def: dict[str, list[str]] = {}
        for r in ok.iter_rows(named=True):
            how = " or ".join(DEFINITION_NAMES.get(d, d) for d in r["consistent_definitions"])
            by_def.setdefault(how, []).append(names[r["claim_id"]])
        text += " — " + "; ".join(f"{' and '.join(c)}, read as {how}" for how, c in by_def.items())
    if bad.height:
        text += (f"; {bad.height} match under no definition checked (hatched, ✗): "
                 + ", ".join(f"{names[r['claim_id']]} (table: {r['implied_by_time_ratio']:.2f}×)"
                             for r in bad.iter_rows(named=True)))
    return text + "."


def _stand_in(engine: str, present: list[str], family: dict[str, str] | None = None) -> str | None:
    """The measured engine that stands for a claim's ``engine``: itself, the one ``family`` names, or the first
    measured engine of its family (sglang → sglang-jax)."""
    if engine in present:
        return engine
    if family and family.get(engine) in present:
        return family[engine]
    return next((e for e in present if e.startswith(engine + "-")), None)


def decay_claim_verdicts(claims: pl.DataFrame, check: pl.DataFrame, decay_published: pl.DataFrame,
                         decay_measured: pl.DataFrame | None = None, engine_family: dict[str, str] | None = None) -> list:
    """Each throughput-decay claim against the document's own table (consistent under any definition checked), then
    the claims' shared shape — which engine's throughput holds up better — in the table and, where measured runs
    hold both engines (or their stand-ins) at the two contexts, on this host."""
    from kvlab.verdicts import Verdict

    dec = claims.filter((pl.col("kind") == "throughput_decay") & pl.col("stated_value").is_not_null())
    out = []
    for c in dec.iter_rows(named=True):
        lo, hi, e = c["context_from"], c["context_to"], c["engine"]
        rows = check.filter(pl.col("claim_id") == c["claim_id"])
        pub = decay_published.filter(pl.col("engine") == e)
        if pub.is_empty() or rows.is_empty():
            out.append(Verdict(c["statement"], "cannot be tested here", "published",
                               f"no table rows for {engine_label(e)} at {lo} and {hi}", claim_id=c["claim_id"],
                               kind="throughput_decay", scope="published table",
                               reason=f"the table has no {engine_label(e)} rows at both contexts"))
            continue
        ok = bool(rows["consistent"].fill_null(False).any())
        out.append(Verdict(f"{c['statement']} (the article's own table)", "reproduced" if ok else "contradicted",
                           "published", f"table: {_change(pub['batch_time_ratio'][0], 'requests/s')} from {lo} to {hi} "
                                        f"(stated {c['stated_value']:g}×)", claim_id=c["claim_id"],
                           kind="throughput_decay", value=pub["batch_time_ratio"][0], unit="×",
                           scope="published table",
                           reason=("the table gives the stated factor under " if ok else
                                   "the table gives the stated factor under none of ")
                           + "the definitions checked"))
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
        out.append(Verdict(f"{shape} — the two claims' shape, in the article's table",
                           "reproduced" if f[0] < f[1] else "contradicted", "published",
                           f"{engine_label(better)} falls {f[0]:.2f}×, {engine_label(worse)} {f[1]:.2f}×",
                           claim_id=",".join(dec["claim_id"].to_list()), kind="throughput_decay",
                           value=f[1] / f[0], unit="×", scope="published table",
                           reason=f"{engine_label(better)}'s factor is {'smaller' if f[0] < f[1] else 'not smaller'} "
                                  f"than {engine_label(worse)}'s in the table"))
    if decay_measured is not None and not decay_measured.is_empty():
        from kvlab.claims import Repeats, cpu_cross_engine, measured_difference

        present = decay_measured["engine"].unique(maintain_order=True).to_list()
        a, b = _stand_in(better, present, engine_family), _stand_in(worse, present, engine_family)
        m = factors(decay_measured, a, b) if a and b else None
        if m:
            ra, rb = (decay_measured.filter(pl.col("engine") == x).row(0, named=True) for x in (a, b))
            tokens = f"{ra['c_from']:,} → {ra['c_to']:,} tokens"
            claim = f"{shape} — on this host ({lo} → {hi} run as {tokens})"
            number = f"{engine_label(a)} falls {sig2(m[0])}×, {engine_label(b)} {sig2(m[1])}× ({tokens})"
            ns = [x.get(k) or 1 for x in (ra, rb) for k in ("n_from", "n_to")]
            grade = cpu_cross_engine(a, b, [ra.get("device_kind"), rb.get("device_kind")],
                                     baseline=rb["t_from_s"] / ra["t_from_s"], hardware=ra.get("hardware"), n=min(ns),
                                     baseline_at=f"the shorter context, {lo} ({ra['c_from']:,} tokens)",
                                     scope=f"{ra.get('hardware') or 'CPU'}, contexts scaled")
            if grade is not None:
                fast = a if rb["t_from_s"] >= ra["t_from_s"] else b
                number = (f"{engine_label(fast)} already {sig2(grade.value)}× faster at {lo} ({ra['c_from']:,} tokens); "
                          + number)
            else:  # GPU runs of both: the decay factors compared as measured differences (one value per pair)
                grade = measured_difference(Repeats.summary(m[0], None, None, min(ns)),
                                            Repeats.summary(m[1], None, None, min(ns)), "lower",
                                            what="decay factors", scope=ra.get("hardware") or "")
            out.append(grade.verdict(claim, number, claim_id=",".join(dec["claim_id"].to_list()),
                                     kind="throughput_decay"))
    return out


def measured_table_caption(frame: pl.DataFrame, mem_util: float | None = None) -> str:
    """'memory utilisation 0.92; contexts scaled ÷64: 64K = 1,024 tokens, 200K = 3,200 tokens' for a measured table."""
    parts = [f"memory utilisation {mem_util:g}"] if mem_util is not None else []
    scale = frame["scale_factor"].drop_nulls().max() if "scale_factor" in frame.columns else None
    if scale and scale != 1:
        pairs = frame.select("context_label", "context_tokens").unique().sort("context_tokens")
        parts.append(f"contexts scaled ÷{scale:g}: " + ", ".join(f"{lab} = {tok:,} tokens" for lab, tok in pairs.iter_rows()))
    return "; ".join(parts)
