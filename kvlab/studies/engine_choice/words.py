"""Report 06's sentences and captions, built only from its verdicts and typed values (the guide's factors, the
tree's answer, row dicts of its frames). A sentence that names a faster engine asks
:func:`kvlab.verdicts.decides` of the verdict (or the grade) it speaks to; where that is False it gives the
measurement with :func:`kvlab.verdicts.undecided_label`. Every modelled number carries its range."""

from __future__ import annotations

from kvlab.engines import SGLANG, VLLM, engine_label, registry
from kvlab.guide import Evidence, Factor, Recommendation, UserWorkload
from kvlab.tables import ms, number, percent
from kvlab.units import approx_tokens, count, k_label, measured, ratio, sentence_start, sig2, tokens_label
from kvlab.verdicts import Verdict, decides, undecided_label

# -- the rule, the tree ------------------------------------------------------------------------------------------------


def evidence_rule() -> str:
    """How the report weighs its evidence: the grading rules every verdict uses."""
    return (
        "Every finding is labelled **modelled** (kvlab's physical model: fitted to the B300 article's Kimi-K3 points, "
        "for any other model the uncalibrated roofline) or **measured** (real engine runs, on the hardware named). "
        "A measured difference decides only by the rules every verdict uses: never from CPU runs of two different "
        "engine implementations, and only with 3 repeats a side whose least–most ranges do not overlap. A modelled "
        "one decides only where its margin exceeds the model's held-out error. When nothing decides, the guide "
        "follows the tree and says so."
    )


def tree_caption(rec: Recommendation) -> str:
    """One sentence for the decision-tree figure: the highlighted path and where it ends (the article's answer)."""
    path = " → ".join(f"{q} {a}" for q, a in rec.path)
    return f"Highlighted, this workload's path: {path} ⇒ {engine_label(rec.engine)} ({rec.reason})."


def tree_sentence(rec: Recommendation) -> str:
    path = " → ".join(f"{q} **{a}**" for q, a in rec.path)
    return f"- decision tree: {path} ⇒ **{engine_label(rec.engine)}** ({rec.reason})."


def example_rows(
    examples: list[tuple[str, UserWorkload]], question: UserWorkload, low: int | None, asked: str
) -> list[dict]:
    """The workload asked (``asked``: how the page names it) beside the article's three examples: their tree inputs,
    the tree's answer, its path, and (for an example) the answer the article itself gives."""
    rows = []
    for name, ex in [(asked, question), *examples]:
        tree = ex.tree()
        lo = low if ex is question and low and low < ex.context_tokens else None
        doc = name.rpartition("(")[2].removesuffix(" in the document)") if name.endswith("in the document)") else None
        rows.append(
            {
                "example": name.rpartition(" (")[0] if doc else name,
                "model": ex.model.rpartition("/")[2],
                # a context under 1K reads as its tokens, never "0K" (the batch-classification example's prompts)
                "context": f"{k_label(lo)}–{k_label(ex.context_tokens)}" if lo else tokens_label(ex.context_tokens),
                "context_tokens": ex.context_tokens,
                "shared_fraction": round(ex.shared_fraction, 2),
                "in_flight": ex.concurrency,
                "tree": engine_label(tree.engine),
                "article": doc,
                "path": " → ".join(a for _, a in tree.path),
            }
        )
    return rows


# -- the modelled context factor ----------------------------------------------------------------------------------------


def crossover_words(x: float | None, x_range: tuple[float, float] | None) -> str:
    """The modelled crossover with its range over the assumption sets report 04 cannot pin (never a point alone)."""
    if x is None and x_range is None:
        return "the model finds no crossover up to 1M tokens under any assumption set"
    if x_range is None:
        return f"the modelled crossover is {approx_tokens(x)} under the default assumptions; no other set crosses"
    span = f"{k_label(x_range[0])}–{k_label(x_range[1])} tokens over the assumption sets report 04 cannot pin"
    if x is None:
        return f"the default assumptions give no crossover; the others cross at {span}"
    return f"the modelled crossover is {approx_tokens(x)}, anywhere in {span}"


def _config(r: dict) -> str:
    dcp = f"+DCP{r['dcp']}" if r["dcp"] > 1 else ""
    return f"{engine_label(r['engine'])} TP{r['tp']}{dcp}"


def point_times(points: list[dict], context: int) -> str:
    """'vLLM TP8 259 s (14–1,290 s), SGLang TP8+DCP8 251 s (…)': the modelled batch times at ``context`` with their
    band over the assumption sets (``points``: the result's ``question_points`` rows)."""
    rows = sorted((r for r in points if r["context_tokens"] == context), key=lambda r: r["dcp"])
    return ", ".join(
        f"{_config(r)} {number(r['batch_time_s'])} s ({number(r['batch_time_s_lo'])}–{number(r['batch_time_s_hi'])} s)"
        for r in rows
    )


def context_line(f: Factor, points: list[dict], x: float | None, x_range: tuple[float, float] | None) -> str:
    """The modelled context factor at one context: both batch times with their ranges; the faster engine named only
    where the factor favours it (the model passes its held-out test and its margin exceeds the error)."""
    w = f.workload
    times = point_times(points, w.context_tokens) or f"{number(f.times[0])} s against {number(f.times[1])} s"
    head = f"- {k_label(w.context_tokens)} (modelled): {times} per batch"
    if not f.dcp_divides:
        return (
            f"{head}. {w.model} at TP{w.tp} already spreads its KV over all {w.tp} GPUs, so DCP{w.dcp} divides nothing: "
            "context length does not separate the engines for it."
        )
    if f.favours:
        return f"{head}. **{engine_label(f.favours)}** is faster, past the model's held-out error; {crossover_words(x, x_range)}."
    return f"{head}; the model picks no engine here."


def model_reason(f: Factor) -> str:
    """Why the model picks no engine (said once under the context lines): its held-out test."""
    if not f.held_out or f.favours or not f.dcp_divides:
        return ""
    right, total, error = f.held_out
    fails = "it fails its held-out test: " if right < total * 0.75 else ""
    return (
        f"The model picks no engine: {fails}{right} of {total} held-out winners right, mean held-out error {error:.0%}."
    )


def curves_caption(
    model: str, gpu: str, tp: int, contexts: list[int], x: float | None, x_range, favours: list[str | None]
) -> str:
    """The modelled curves: bands over the assumption sets, the crossover with its range, and a winner only where the
    context factor decides at the contexts asked."""
    at = " and ".join(k_label(c) for c in contexts)
    who = (
        "picks no engine at " + at
        if not any(favours)
        else "; ".join(f"favours {engine_label(e)} at {k_label(c)}" for c, e in zip(contexts, favours) if e)
    )
    return (
        f"Modelled for {model} on {tp}× {gpu}: each curve is a band over the assumption sets, the line its default. "
        f"{sentence_start(crossover_words(x, x_range))}; the model {who}."
    )


# -- the measured factors -------------------------------------------------------------------------------------------------


def _runs(f: Factor) -> int | None:
    ns = [r.get("n_runs") for r in f.rows if r.get("n_runs") is not None]
    return min(ns) if ns else None


def _prefix_run(r: dict) -> str:
    return (
        f"{engine_label(r['engine'])} reuses {percent(r['cache_hit_rate'])} of prompt tokens at "
        f"{r['shared_fraction']:.0%} shared (ideal {r['ideal_hit_rate']:.0%}), median batch time "
        f"{measured(r['batch_time_s'], r.get('n_runs'))} s"
    )


def _concurrency_run(r: dict) -> str:
    return (
        f"{engine_label(r['engine'])} at {r['in_flight']} in flight: {r['requests_ok']}/{r['requests_sent']} "
        f"requests completed, {measured(r['requests_per_s'], r.get('n_runs'))} requests/s"
    )


def factor_line(f: Factor) -> str:
    """A measured factor as a list item: each engine's runs; the faster engine named only where its grade decides,
    else the grade's undecided label."""
    if f.name == "context":
        return f"- context (modelled): {'favours ' + engine_label(f.favours) if f.favours else 'picks no engine'}."
    none = {"prefix": "no measured prefix-sharing runs", "concurrency": "no measured concurrency runs"}[f.name]
    if f.source == "none":
        return f"- {f.name}: {none}."
    run = _prefix_run if f.name == "prefix" else _concurrency_run
    text = f"- {f.name} (measured): " + "; ".join(run(r) for r in f.rows)
    if f.n_engines < 2:
        return text + ". Only one engine measured: nothing to choose by."
    if f.favours:
        return text + f". Favours **{engine_label(f.favours)}** ({ratio(f.margin, _runs(f))}×)."
    return text + f". Which engine the {f.name} runs favour: {undecided_label(f.grade)}."


def prefix_caption(sharing: list[dict], verdict: Verdict | None) -> str:
    """The measured prefix-sharing figure: each engine's hit rate at the most shared fraction against its ideal; the
    median batch times there, a faster engine named only where the threshold claim's verdict decides."""
    on = [r for r in sharing if r["prefix_caching"] is not False]
    if not on:
        return "No measured run with a prefix cache on."
    top = max(r["shared_fraction"] for r in on)
    at_top = sorted((r for r in on if r["shared_fraction"] == top), key=lambda r: registry.order(r["engine"]))
    hits = []
    for r in at_top:
        block = registry.family(r["engine"]) == VLLM and r.get("block_ideal_hit_rate") is not None
        ideal = f"{'whole-block' if block else 'token-exact'} ideal {r['block_ideal_hit_rate' if block else 'ideal_hit_rate']:.0%}"
        hit = "not available" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.0%}"
        hits.append(f"{engine_label(r['engine'])} {hit} ({ideal})")
    times = ", ".join(
        f"{engine_label(r['engine'])} {measured(r['batch_time_s'], r.get('n_runs'))} s"
        for r in at_top
        if r["batch_time_s"]
    )
    text = f"Cache on, at {top:.0%} shared, prompt tokens served from the cache: {', '.join(hits)}."
    if times:
        text += f" Median batch time there: {times}."
        if not decides(verdict):
            text += f" Which engine finishes the batch first: {undecided_label(verdict)}."
    return text


def concurrency_caption(conc: list[dict], verdict: Verdict | None) -> str:
    """The measured concurrency study at its largest in-flight count: each engine's throughput and TTFT, whether every
    request completed; a faster engine named only where the concurrency claim's verdict decides."""
    if not conc:
        return "No measured concurrency run."
    top = max(r["in_flight"] for r in conc)
    d = sorted((r for r in conc if r["in_flight"] == top), key=lambda r: -(r["requests_per_s"] or 0))
    parts = [
        f"{engine_label(r['engine'])} {measured(r['requests_per_s'], r.get('n_runs'))} requests/s (mean TTFT "
        f"{ms(r['ttft_mean_ms'])})"
        for r in d
    ]
    sent, ok = (int(sum(r[c] or 0 for r in conc)) for c in ("requests_sent", "requests_ok"))
    text = f"At {top} requests in flight: {' and '.join(parts)}; {ok:,} of {sent:,} requests completed."
    if len(d) >= 2 and decides(verdict):
        text += f" {engine_label(d[0]['engine'])} has {sig2(d[0]['requests_per_s'] / d[1]['requests_per_s'])}× the throughput."
    elif len(d) >= 2:
        text += f" Which engine serves more requests/s: {undecided_label(verdict)}."
    return text


def concurrency_lines(conc: list[dict]) -> str:
    """Per engine and in-flight count: requests completed and failed over the runs, and the p99 TTFT (the mean and
    the throughput are in the caption and the table)."""
    return "\n".join(
        f"- {engine_label(r['engine'])}, {r['in_flight']} in flight: **{r['requests_ok']} of {r['requests_sent']}** "
        f"completed, {r['requests_failed']} failed over {count(r['n_runs'], 'run')}; p99 TTFT {ms(r['ttft_p99_ms'])}."
        for r in conc
    )


# -- the recommendation ---------------------------------------------------------------------------------------------------


def undecided_basis(ev: Evidence) -> str:
    """Why no factor decides: each measured comparison's grade label, and the model's."""
    parts = [
        f"the measured {f.name} comparison: {undecided_label(f.grade)}"
        for f in ev.factors
        if f.source == "measured" and f.grade is not None
    ]
    if not parts:
        parts.append("no measurement compares two engines")
    if ev.factors[0].source == "modelled" and not ev.factors[0].favours:
        parts.append("the model does not separate the engines")
    return "; ".join(parts)


def evidence_sentences(ev: Evidence) -> str:
    """Each factor in one short line, then what the data say (the explore view and the recommendation)."""
    lines = [factor_line(f) for f in ev.factors]
    if ev.decided_by == "tree":
        lines.append(f"- from the data: nothing decides ({undecided_basis(ev)}).")
    else:
        lines.append(f"- from the data: **{engine_label(ev.engine)}**, on {ev.decided_by} evidence.")
    return "\n".join(lines)


def premises(w: UserWorkload, tree: Recommendation, sharing: list[dict], share_verdict: Verdict | None) -> list[str]:
    """The tree's premises the data speak to: vLLM's measured prefix cache against the shared-prefix branch, said
    as a contradiction only where the claim's verdict decides."""
    on_vllm = [
        r
        for r in sharing
        if r["engine"] == VLLM and r["prefix_caching"] is not False and r["cache_hit_rate"] is not None
    ]
    if not (w.shared_prefix and tree.engine == SGLANG and on_vllm):
        return []
    near = min(on_vllm, key=lambda r: abs(r["shared_fraction"] - w.shared_fraction))
    said = (
        f"The tree's shared-prefix branch assumes vLLM shares no prefixes; measured, vLLM's automatic prefix caching "
        f"reused {near['cache_hit_rate']:.0%} of prompt tokens at {near['shared_fraction']:.0%} shared"
    )
    if decides(share_verdict):
        return [f"{said}: that claim is {share_verdict.outcome} here."]
    return [f"{said} ({undecided_label(share_verdict)})."]


def recommendation_sentence(
    w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: list[dict], share_verdict: Verdict | None = None
) -> str:
    """The tree against the data in one paragraph: they disagree, agree, or no factor decides (and why)."""
    if ev.decided_by == "tree":
        head = f"**The tree says {engine_label(tree.engine)}; the data here can neither confirm nor contradict it.**"
    elif ev.engine == tree.engine:
        head = f"**They agree: {engine_label(tree.engine)}**, on {ev.decided_by} evidence."
    else:
        head = (
            f"**They disagree**: the tree says {engine_label(tree.engine)} ({tree.reason}), the {ev.decided_by} "
            f"data {engine_label(ev.engine)}."
        )
    return " ".join([head, *premises(w, tree, sharing, share_verdict)])


def gap_sentence(ev: Evidence) -> str | None:
    """What would let the data decide: GPU runs with repeats; None where a measured factor already decides."""
    measured_ = [f for f in ev.factors if f.source == "measured"]
    if any(f.favours for f in measured_):
        return None
    if not any(f.n_engines >= 2 for f in measured_):
        return "No measurement here compares two engines on the same hardware: run the GPU experiments (`data/experiments/gpu_*.yaml`)."
    return "For a measured answer, run the GPU experiments (`data/experiments/gpu_*.yaml`) with 3 repeats."


# -- the answer -------------------------------------------------------------------------------------------------------------


def _example_answer(r: dict) -> str:
    what = r["example"].split(", ")[0].split("· ")[-1]
    differs = f", where the article says {r['article']}" if r["article"] and r["article"] != r["tree"] else ""
    return f"{r['tree']} ({what}{differs})"


def answer(
    asked: str, tree: Recommendation, examples: list[dict], ctx: list[Factor], x, x_range, rec: Verdict
) -> tuple[str, ...]:
    """Report 06's answer: first, which engine the article's tree names for the workload asked and for each of its
    three examples (each answer with its workload); then what the model says at the contexts asked (the crossover
    with its range); then whether the data here confirm the tree (the recommendation verdict)."""
    ex = ", ".join(_example_answer(r) for r in examples)
    first = f"For {asked} the article's decision tree says {engine_label(tree.engine)}; for its three examples it gives {ex}."
    at = " or ".join(k_label(f.workload.context_tokens) for f in ctx)
    picks = [f for f in ctx if f.favours]
    model = (
        "; ".join(f"the model favours {engine_label(f.favours)} at {k_label(f.workload.context_tokens)}" for f in picks)
        if picks
        else f"the model picks no engine at {at}"
    )
    cross = crossover_words(x, x_range)
    second = f"{sentence_start(cross)}; {model}."
    third = (
        f"The data here {'confirm' if rec.outcome == 'reproduced' else 'contradict'} the tree."
        if decides(rec)
        else f"Whether the data here agree with the tree: {undecided_label(rec)}."
    )
    return (first, second, third)
