"""Report 04's sentences, built only from its verdicts and typed values: each modelled number with its range over
the assumption sets, each held-out error in whole percent (:func:`~kvlab.studies.whatif_model.formats.pct`), and a
winner or direction named only where the verdict it speaks to decides (:func:`kvlab.verdicts.decides`)."""

from __future__ import annotations

import math

from kvlab import tables
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.words import config_name, modelled_rate, setup_phrase
from kvlab.perfmodel.calibrate import PRIORS, implausible
from kvlab.perfmodel.throughput import NON_KV_CONSTANT
from kvlab.studies.whatif_model.formats import k_span, pct, ranged
from kvlab.tables import experiment_words
from kvlab.units import k_label, sig2, tokens_label
from kvlab.verdicts import Verdict, decides, undecided_label


def verdict_of(r, *claim_ids: str) -> Verdict | None:
    """The first of ``r``'s verdicts with one of ``claim_ids`` (in that order of preference), None without."""
    for cid in claim_ids:
        for v in r.verdicts:
            if v.claim_id == cid:
                return v
    return None


def answer(r) -> tuple[str, ...]:
    """The answer: whether the model can decide anything (its held-out test, at the default assumptions and over the
    sets) and its crossover's range over the sets."""
    right, total = r.held_out_winners
    passes = total and right == total and r.held_out_error_pct <= 25
    first = (
        f"kvlab's physical model of {setup_phrase(r.model, r.gpu, r.tp)} "
        + ("passes its held-out test" if passes else "illustrates, it does not decide")
        + (
            f": held out, each published point is missed by {pct(r.held_out_error_pct)} on average and the faster "
            f"engine is named right at {right} of {total}."
            if total
            else ": nothing could be held out."
        )
    )
    h = r.held_out
    needs = h.needs()
    second = (
        f"All {total} are right in {h.all_right} of {h.sets} assumption sets, all at batch "
        f"{' or '.join(str(b) for b in h.batch_sizes)}, a batch the article does not state"
        + (f", each fit {needs}." if needs else ".")
        if h.all_right and total
        else ""
    )
    sets = r.sensitivity.height
    third = (
        f"Over the {sets} assumption sets the article leaves open, its crossover lies anywhere in "
        f"{k_span(*r.x_range)}, so it cannot say where the winner changes."
        if r.x_range
        else f"Under none of the {sets} assumption sets does the winner change."
    )
    return tuple(s for s in (first, second, unexplained(r), third) if s)


def unexplained(r) -> str:
    """The unexplained per-step cost as a share of each engine's modelled batch time under the bounded fits (the
    default set at the published contexts, then the range over every set), with the bounded fit's residual miss."""
    if not r.unexplained or r.bounded_miss is None:
        return ""

    def span(lo, hi, scale=1.0) -> str:  # '17–40%', or '' where a set's fit left no value
        return "" if lo is None or hi is None else f"{pct(scale * lo)}–{pct(scale * hi)}"

    parts = []
    for e, u in r.unexplained.items():
        default, over = span(u.default_lo, u.default_hi, 100), span(u.share.lo, u.share.hi, 100)
        if default or over:
            parts.append(
                " ".join(p for p in (default, f"({over} over the sets)" if over else "") if p)
                + f" of {engine_label(e)}'s batch time"
            )
    m = r.bounded_miss
    over = span(m.lo, m.hi)
    miss = " ".join(p for p in (pct(m.default) if m.default is not None else "", f"({over})" if over else "") if p)
    if not parts:
        return ""
    return (
        "Held to its priors, the model leaves unexplained "
        + " and ".join(parts)
        + (f"; the bounded fit still misses the table by up to {miss}." if miss else ".")
    )


def capacity_caption(r) -> str:
    """The capacity-limited throughput figure: what it draws and, per configuration at the middle TPOT target, the
    pool's sequences and the rate with its range."""
    t = r.capacity_limited
    if not t.height:
        return ""
    mid = sorted(set(t["tpot_ms"].to_list()))[len(set(t["tpot_ms"].to_list())) // 2]
    row0 = t.row(0, named=True)
    parts = []
    for x in t.filter(t["tpot_ms"] == mid).iter_rows(named=True):
        rate = f"{modelled_rate(x)} tokens/s per GPU"
        parts.append(f"{config_name(x['config'])} {ranged(x['seqs'], x['seqs_lo'], x['seqs_hi'])} sequences, {rate}")
    return (
        f"Modelled rate at the largest batch the pool and TPOT target allow ({tokens_label(row0['context_tokens'])}); "
        f"whiskers: every set. At {mid:g} ms: " + "; ".join(parts) + "."
    )


def setup(r) -> str:
    """What the page models and what the fit rests on."""
    pub = r.published.filter(r.published["source"] == "published") if "source" in r.published.columns else r.published
    ref_model = pub["model"][0] if pub.height else "?"
    ref_gpus = int(pub["gpu_count"][0]) if pub.height and "gpu_count" in pub.columns else r.tp
    ref, shown = setup_phrase(ref_model, r.fit.hardware, ref_gpus), setup_phrase(r.model, r.gpu, r.tp)
    text = (
        f"Shown: **{shown}**, vLLM TP{r.tp} (no DCP) against SGLang TP{r.tp}+DCP{r.dcp}. The fit rests on the "
        f"article's {r.fit.residuals.height} published batch times ({ref}) under an assumed batch of "
        f"**{r.workload.batch_size} × {r.workload.output_tokens:,} output tokens**; the article states neither."
    )
    if (r.model, r.gpu) != (ref_model, r.fit.hardware):
        text += f" {shown} is not what the article measured: every curve for it extrapolates the fit on {ref}."
    return text


def step_cost(r) -> str:
    """Per engine, what the article's table needs per decode step beyond every term held to its prior, with its
    range over the sets."""
    if not r.step_costs:
        return ""
    cap = PRIORS["sglang_step_overhead_s"][1] * 1e3
    parts = []
    for e, c in r.step_costs.items():
        u = c.unexplained_ms
        parts.append(f"{engine_label(e)} {ranged(u.lo if u.default is None else u.default, u.lo, u.hi, '{:.1f}')} ms")
    return (
        f"**Unexplained per-step cost:** held to its priors (per-step overhead ≤ {cap:g} ms, DCP ≤ 100 µs, decode "
        "bandwidth ≥ 30% of peak), the model needs a per-step cost it does not explain to match the table. At the "
        f"default set (range over the {r.sensitivity.height} sets): " + ", ".join(parts) + "."
    )


def calibration(r) -> str:
    """The fit's residuals and its held-out test, in two bullets (the table holds every point)."""
    fit = r.fit
    right, total = r.held_out_winners
    worst = max(abs(x) for x in fit.loo["loo_error_pct"].to_list()) if fit.loo.height else math.nan
    lines = [
        f"- Fitted, the model reproduces the {fit.residuals.height} published times within "
        f"**{fit.max_abs_residual_pct:.1f}%**.",
        f"- Held out in turn, each point is predicted from the other {max(fit.loo.height - 1, 0)} with a mean error "
        f"of **{pct(r.held_out_error_pct)}** (worst {pct(worst)}), and the winner at its context is right in "
        f"{right} of {total}: with {len(fit.free)} parameters and {fit.loo.height} points, this is what the model "
        "predicts.",
    ]
    return "\n".join(lines)


def fits(r) -> str:
    """The free fit beside the physics-only fit: each one's crossover with its range over the sets, and what the
    physics-only fit cannot explain."""
    free, phys = r.fit, r.phys
    bad = implausible(free, short=True)
    xo, pxo = r.sensitivity["crossover_tokens"].drop_nulls(), r.sensitivity["phys_crossover_tokens"].drop_nulls()
    free_x = r.fits["crossover_tokens"][0]
    phys_x = r.fits["crossover_tokens"][1]

    def crossing(x, s) -> str:
        if x is None:
            return "no crossover up to 1M tokens"
        return f"crossover {k_span(x)}" + (f" ({k_span(s.min(), s.max())} over the sets)" if s.len() else "")

    return "\n".join(
        [
            f"- **Free fit** ({'non-physical: ' + '; '.join(bad) if bad else 'inside every prior'}): "
            f"{crossing(free_x, xo)}.",
            f"- **Physics-only fit** (every parameter inside its prior; residuals up to "
            f"{phys.max_abs_residual_pct:.1f}%): {crossing(phys_x, pxo)}.",
            "- Four totals cannot tell the engines' per-step overheads from the DCP latency; the B300 step-fit plan "
            "(data/experiments/b300_step_fit.yaml) names the runs that would.",
        ]
    )


def sensitivity(r) -> str:
    """How what the article does not state moves the fits: one refit per combination."""
    sens = r.sensitivity
    axes = [("batch", "batch_size"), ("output", "output_tokens"), ("expert reads", "expert_reads"),
            ("MLA width", "mla_width"), ("KV format", "kv_format")]  # fmt: skip
    varied = []
    for name, col in axes:
        values = list(dict.fromkeys(sens[col].to_list()))
        if len(values) > 1:
            shown = [tables.kv_format_words(v) if col == "kv_format" else f"{v:,}" if isinstance(v, int) else v
                     for v in values]  # fmt: skip
            varied.append(f"{name} {{{', '.join(map(str, shown))}}}")
    bw, pre, loo = sens["bandwidth_efficiency"], sens["prefill_efficiency"], sens["loo_mean_abs_pct"]
    physical = int(sens["physical"].sum())
    over = int((sens["over_peak"] != "").sum()) if "over_peak" in sens.columns else 0
    return (
        f"Refitting under every combination of {' × '.join(varied) or 'the assumed workload'} gives "
        f"{sens.height} fits, of which {physical} are physically plausible and {over} over peak (not physical). Over "
        f"them prefill efficiency spans "
        f"{pre.min():.1%}–{pre.max():.1%} of dense peak, decode bandwidth efficiency {bw.min():.1%}–{bw.max():.1%} "
        f"of peak and the held-out error {pct(loo.min())}–{pct(loo.max())}; the table groups them by batch size."
    )


def consistent(r) -> str:
    """The fits consistent with the published totals: the rule, how many it keeps, their batch and crossover."""
    c = r.consistent
    head = (
        f"Of {c.candidates:,} candidate fits (each set's free fit, physics-only fit and fixed decode bandwidths), "
        f"{c.over_peak:,} over peak are never counted. Of the rest, "
        f"{c.kept:,} keep their largest residual within {c.tolerance_pct:g} points of the best"
    )
    if not c.kept:
        return head + "."
    xo = f"cross at {k_span(*c.crossover)}" if c.crossover else "none crosses up to 1M tokens"
    return head + f"; they assume batch {c.batches} and {xo}."


def curves_caption(r, v: Verdict | None) -> str:
    """The batch-time figure: the crossover with its range, the largest context's ratio with its range, and the
    winner named only where ``v`` (the modelled crossover's verdict) decides."""
    cfgs = [config_name(c) for c in r.curves["config"].unique(maintain_order=True).to_list()]
    spans = list(r.calibrated.values())
    span = f"{tokens_label(min(a for a, _ in spans))}–{tokens_label(max(b for _, b in spans))}" if spans else ""
    text = (
        f"Modelled batch time of {' and '.join(cfgs)} for {setup_phrase(r.model, r.gpu, r.tp)}; bands span the "
        f"{r.sensitivity.height} assumption sets."
    )
    if r.crossover:
        text += f" The curves cross at {k_span(r.crossover)}" + (
            f" ({k_span(*r.x_range)} over the sets, shaded)." if r.x_range else "."
        )
    if span:
        text += f" Solid lines span the published {span} (circles: the article's times); dashed lines extrapolate."
    return text + " " + winner_words(r, v)


def winner_words(r, v: Verdict | None) -> str:
    """Which configuration the model has faster at the largest context, with its range: named only where ``v``
    decides; else the ratio with ``v``'s label."""
    d = r.at_max.sort("batch_time_s")
    if d.height < 2:
        return ""
    c = int(d["context_tokens"][0])
    times = {e: t for e, t in zip(d["engine"].to_list(), d["batch_time_s"].to_list())}
    ratio = times.get(VLLM, math.nan) / times.get(SGLANG, math.nan)
    rng = f" ({r.at_max_range[0]:.2f}–{r.at_max_range[1]:.2f} over the sets)" if r.at_max_range else ""
    if decides(v):
        return (
            f"At {tokens_label(c)} the model has {config_name(d['config'][0])} faster: vLLM ÷ SGLang time "
            f"{ratio:.2f}{rng}."
        )
    return (
        f"At {tokens_label(c)}, vLLM ÷ SGLang modelled time is {ratio:.2f}{rng}; which is faster: {undecided_label(v)}."
    )


def _crossing(g: str, d) -> tuple[bool, str]:
    """One GPU's crossing (``d``: its rows) at its largest DCP size that crosses, the range over the sets beside it
    ('H200 at DCP 8 at ≈830K (219K–888K tokens in 64 of 96 sets)'), and whether the default set crosses; where it does
    not, how many other sets do, and where."""
    at = d.drop_nulls("crossover_tokens").sort("dcp")
    if at.height:
        b = at.row(-1, named=True)
        rng = (
            f" ({k_span(b['crossover_low_tokens'], b['crossover_high_tokens'])} in {b['crosses_in']} sets)"
            if b.get("crossover_low_tokens") is not None
            else ""
        )
        return True, f"{g} at DCP {b['dcp']} at ≈{k_label(b['crossover_tokens'])}{rng}"
    some = d.filter(d["crossover_low_tokens"].is_not_null()).sort("dcp")
    if not some.height:
        return False, f"On {g} they do not cross up to 1M tokens in any set"
    b = some.row(-1, named=True)
    return False, (
        f"On {g} they do not cross up to 1M tokens at the default set; at DCP {b['dcp']}, {b['crosses_in']} sets cross "
        f"at {k_span(b['crossover_low_tokens'], b['crossover_high_tokens'])}"
    )


def crossover_caption(r, v: Verdict | None) -> str:
    """The crossover-by-GPU figure: per GPU its crossover at the largest DCP size with the range over the sets (those
    whose weights do not fit together, as hypothetical); no trend or winner is named unless ``v`` decides."""
    xo = r.crossovers
    if not xo.height:
        return "No GPU and DCP size was modelled."
    said, hypothetical, apart = [], [], []
    for g in xo["gpu"].unique(maintain_order=True).to_list():
        d = xo.filter(xo["gpu"] == g)
        crosses, text = _crossing(g, d)
        fits = bool(d["weights_fit"].all())
        if not crosses:
            apart.append(f"{text}." if fits else f"Hypothetical too, {text[0].lower()}{text[1:]}.")
        else:
            (said if fits else hypothetical).append(text)
    text = f"Modelled context where vLLM TP{xo['tp'][0]} and SGLang TP{xo['tp'][0]}+DCP cross for {r.model}."
    text += "".join(f" They cross on {t}." for t in said)
    if hypothetical:
        text += f" Where the weights do not fit (hypothetical): {'; '.join(hypothetical)}."
    text += "".join(f" {t}" for t in apart)
    return text + f" Which engine is faster past it: {undecided_label(v) if not decides(v) else 'see the verdicts'}."


def headroom_caption(r, v: Verdict | None) -> str:
    """The KV-headroom figure: sequences that fit at 200K per memory target and DCP size, each with its range over
    KV format × MLA width; whether the higher target runs out of memory is ``v``'s to say."""
    head = r.headroom
    ctxs = sorted(set(head["context_tokens"].to_list()))
    c = 204800 if 204800 in ctxs else ctxs[0]
    at = head.filter(head["context_tokens"] == c).sort("mem_util", "dcp")
    parts = []
    for u in sorted(set(at["mem_util"].to_list())):
        cells = [
            f"{ranged(x['max_concurrent_seqs'], x['max_concurrent_seqs_lo'], x['max_concurrent_seqs_hi'])} with "
            f"DCP {x['dcp']}"
            if "max_concurrent_seqs_lo" in x
            else f"{x['max_concurrent_seqs']} with DCP {x['dcp']}"
            for x in at.filter(at["mem_util"] == u).iter_rows(named=True)
        ]
        parts.append(f"At {u:g}: " + " and ".join(cells) + ".")
    text = (
        f"Modelled sequences of {tokens_label(c)} that fit on {setup_phrase(r.model, r.gpu, r.tp)}, with ranges "
        "over KV format × MLA width. " + " ".join(parts)
    )
    if r.headroom_flags:
        text += " Crosses mark what the memory check flags: " + "; ".join(
            k.replace("\n", " ") for k in r.headroom_flags
        ) + "."  # fmt: skip
    if v is not None:
        text += f" Whether {v.claim.split(' runs out')[0]} runs out of memory: {undecided_label(v)}."
    return text


def memory_note(r) -> str:
    """What the model's memory check rests on: an assumed need outside the pool, taken from the article."""
    a = r.assumptions
    text = (
        f"The memory check assumes the process needs {a.outside_pool_fraction:.1%} of each GPU's memory outside the "
        "target, the middle of the window the article implies, so a flag restates the article's claim rather than "
        "predicting an out-of-memory; report 03 measures it."
    )
    mc = r.memory_constants
    v = mc.filter(mc["constant"] == NON_KV_CONSTANT) if mc.height else mc
    if v.height == 2:
        (lo, hi), (c_lo, c_hi) = v["value"].to_list(), v["ceiling_seqs"].to_list()
        text += (
            f" The {NON_KV_CONSTANT}: {lo} assumed, {hi} logged; {c_lo} or {c_hi} sequences at "
            f"{tokens_label(int(v['context_tokens'][0]))}."
        )
    return text


def bound(frac) -> str:
    """How close published and measured runs (``frac``: each run's share of the bound) came to the model's bound
    (peak compute and bandwidth, no latency)."""
    rows = frac.to_dicts()

    def of(source: str, col: str) -> list:
        return [x[col] for x in rows if x["source"] == source and x.get(col) is not None]

    lines = []
    f = of("published", "batch_fraction_of_bound")
    if f:
        b = of("published", "bandwidth_fraction_of_peak")
        lines.append(
            f"- Published: the article's runs reached {min(f):.1%}–{max(f):.1%} of the model's bound"
            + (f"; decode read memory at {min(b):.1%}–{max(b):.1%} of peak bandwidth" if b else "")
            + "."
        )
    m = of("measured", "batch_fraction_of_bound")
    if m:  # each share rests on one run: two significant figures
        lines.append(
            f"- Measured on this host ({len(m)} runs): {sig2(100 * min(m))}%–{sig2(100 * max(m))}% of a bound "
            "from the catalog's nominal CPU figures. Compare these runs with each other, not with a GPU."
        )
    return "\n".join(lines) or "*No run with a batch time to set against the bound.*"


def not_catalogued(missing: dict[str, set[str]]) -> str:
    """What the model's catalog lacks and the experiments it holds back ('' where nothing is)."""
    if not missing:
        return ""
    parts = "; ".join(
        f"{why} (experiment{'s' if len(exps) > 1 else ''} {', '.join(f'`{e}`' for e in sorted(exps))})"
        for why, exps in sorted(missing.items())
    )
    return f"*Not in the model's catalog: {parts}. Their modelled bound is skipped; what was measured is shown.*"


def step_fits(step) -> str:
    """Per engine, the measured slope of step time against context with its 95% interval, in two sentences."""
    lines = []
    for x in step.iter_rows(named=True):
        ms, lo, hi = (x[k] / 1000 for k in ("slope_us_per_1k_tokens", "slope_ci_low", "slope_ci_high"))
        sign = "includes" if lo <= 0 <= hi else "excludes"
        bw = x["bandwidth_efficiency"]
        lines.append(
            f"- **{engine_label(x['engine'])}** ({experiment_words(x['experiment'])}, batch {x['batch_size']}, "
            f"{x['contexts']} contexts, {x['runs']} runs): {sig2(ms)} ms per 1,000 tokens of context (95% interval "
            f"{sig2(lo)} to {sig2(hi)}, which {sign} zero). R² {x['r2']:.2f}, largest residual "
            f"{sig2(x['max_abs_residual_ms'])} ms, {x['linearity']}"
            + (f"; the slope implies {sig2(bw)}× the catalog's nominal bandwidth." if math.isfinite(bw) else ".")
        )
    return "\n".join(lines)


def step_caption(step) -> str:
    """The step-fit figure: what it draws, then whether each engine's slope's 95% interval excludes zero (engines
    that say the same, said once)."""
    said: dict[str, list[str]] = {}
    for x in step.iter_rows(named=True):
        lo, hi = x["slope_ci_low"], x["slope_ci_high"]
        if not (math.isfinite(lo) and math.isfinite(hi)):
            what = "two contexts give no interval"
        elif lo <= 0 <= hi:
            what = "the 95% interval includes zero, so these runs do not show step time changing with context"
        else:
            what = "step time " + ("grows" if lo > 0 else "falls") + " with context, the 95% interval excluding zero"
        said.setdefault(what, []).append(engine_label(x["engine"]))
    parts = [f"For {' and '.join(engines)}, {what}." for what, engines in said.items()]
    return (
        "Measured on this host: each run's mean decode step time (TPOT) against its mean context, a least-squares "
        "line per engine (left) and what the line leaves (right). " + " ".join(parts)
    )


def outside(table) -> str:
    """The checks that can fail, counted by outcome, with every contradiction named (``table``:
    :func:`kvlab.studies.whatif_model.frames.outside`)."""
    if not table.height:
        return "*No published run or engine log to check the model against.*"
    counts = table["outcome"].value_counts(sort=True).rows()
    said = ", ".join(f"{n} {o}" for o, n in counts)
    text = (
        f"**Checked where it can fail:** {table.height} checks ({said}), each read the way hardest to fail; each "
        "check's margin is its row in the verdict box."
    )
    bad = table.filter(table["outcome"] == "contradicted")
    for r in bad.iter_rows(named=True):
        text += f" **Contradicted:** {r['check']} ({r['number']})."
    return text
