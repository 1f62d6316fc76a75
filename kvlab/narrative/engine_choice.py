"""Report 06 (engine choice): the evidence rule, the decision tree and the evidence in words, the answer, captions and verdicts.

The guide's factors (:class:`kvlab.guide.Factor`) hold numbers; their findings, metrics and the basis of the data's
pick are written here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.claims import MODEL_SCOPE, modelled_claim
from kvlab.claims.choice import claim_verdicts
from kvlab.engines import SGLANG, VLLM, engine_label, registry
from kvlab.guide import CONCURRENCY_THRESHOLD, Evidence, Factor, Recommendation, UserWorkload
from kvlab.tables import experiment_words, ms, number, percent
from kvlab.units import ratio as _ratio
from kvlab.units import approx_tokens, count, k_label, measured, sig2
from kvlab.verdicts import Verdict

if TYPE_CHECKING:
    from polars import DataFrame

__all__ = ["claim_verdicts"]


def _sorted(rows, col: str, descending: bool = False) -> list[dict]:
    """``rows`` sorted by ``col`` as a frame sorts them: missing values first."""
    present = sorted((r for r in rows if r[col] is not None), key=lambda r: r[col], reverse=descending)
    return [r for r in rows if r[col] is None] + present


def _context_finding(f: Factor) -> str:
    w, (ta, tb) = f.workload, f.times
    caveat = (
        " The fit's parameters are outside physically plausible ranges (notebook 04), so read the "
        "ratio as a description of the article's figures"
        if f.fit_warnings
        else ""
    )
    if not f.dcp_divides:
        slower = f"{tb / ta:.2f}× slower, the cost of DCP alone" if tb > ta else "no slower"
        return (
            f"{w.model} at TP{w.tp} already spreads its KV over all {w.tp} GPUs, so DCP{w.dcp} divides "
            f"nothing and only adds synchronisation: at {w.context_tokens:,} tokens on {w.gpu} the model gives "
            f"SGLang TP{w.tp}+DCP{w.dcp} {number(tb)} s per batch against vLLM TP{w.tp}'s {number(ta)} s ({slower}). "
            "Without DCP the model times both engines alike, so context length does not separate the "
            f"engines for {w.model}; it only says not to turn DCP on for it{'.' + caveat if caveat else ''}"
            # no closing full stop: every caller ends the finding with its own (one read 'for it..')
        )
    faster = VLLM if ta <= tb else SGLANG
    ratio = max(ta, tb) / min(ta, tb)
    where = (
        f"the modelled crossover is {approx_tokens(f.crossover)}"
        if f.crossover
        else "the model finds no crossover up to 1M tokens"
    )
    if f.favours is None and f.held_out is not None:
        right, total, error = f.held_out
        band = (
            f"the two modelled times are within that error of each other from {k_label(f.crossover_range[0])} to "
            f"{k_label(f.crossover_range[1])} tokens{' (the largest context modelled)' if f.crossover_range[1] >= 1 << 20 else ''}, "
            "so the crossover is somewhere in that range"
            if f.crossover_range
            else "the modelled times are never that close"
        )
        where = (
            f"a margin of {ratio - 1:.1%} is {'within' if ratio - 1 <= error else 'above'} the model's {error:.0%} mean "
            f"held-out error ({right} of {total} held-out winners right), so the model "
            f"{'does not separate the engines here' if ratio - 1 <= error else 'fails its held-out test and picks no engine'}: {band}"
        )
    return (
        f"at {w.context_tokens:,} tokens on {w.gpu} TP{w.tp}, {engine_label(faster)} is {ratio:.2f}× faster "
        f"({engine_label(VLLM)} TP{w.tp} {number(ta)} s vs {engine_label(SGLANG)} TP{w.tp}+DCP{w.dcp} {number(tb)} s "
        f"per batch); {where}. Calibrated "
        f"on the B300 article's Kimi-K3 points: other models and GPUs are extrapolations.{caveat}"
    )


def _prefix_run(r: dict) -> str:
    return (
        f"{engine_label(r['engine'])} reuses {percent(r['cache_hit_rate'])} of prompt tokens at "
        f"{r['shared_fraction']:.0%} shared (ideal {r['ideal_hit_rate']:.0%}), median batch time {measured(r['batch_time_s'], r.get('n_runs'))} s"
    )


def _runs(f: Factor) -> int | None:
    """The fewest runs behind a measured factor's compared rows (None where they do not say): one run a side
    gives its ratios two significant figures."""
    ns = [r.get("n_runs") for r in f.rows if r.get("n_runs") is not None]
    return min(ns) if ns else None


#: Two ratios within this share of each other are worded as the same gap (a description of the runs, not a verdict).
_SAME_GAP = 0.05


def _undecided(f: Factor) -> str:
    """Why a measured lead does not decide, from its grade (:func:`kvlab.claims.engine_difference`)."""
    g = f.grade
    if g is None or g.outcome == "reproduced":
        return ""
    if g.outcome == "cannot be tested here":
        return (
            "it is a CPU baseline of two different engine implementations, which cannot decide which engine is "
            "faster on a GPU host"
        )
    return f"it is no decided difference ({g.reason})"


def _prefix_comparison(f: Factor) -> str:
    best, second, margin = f.rows[0]["engine"], f.rows[1]["engine"], f.margin
    text = ""
    if f.zero_ratio is not None:
        z = f.zero_ratio
        faster0, r0 = (best, z) if z >= 1 else (second, 1 / z)
        text += f". With nothing to share (0% shared) {engine_label(faster0)} is {_ratio(r0, _runs(f))}× faster"
        if abs(margin / z - 1) >= _SAME_GAP:
            text += (
                f", so sharing the prefix {'widens' if margin > z else 'narrows'} {engine_label(best)}'s lead"
                if z >= 1
                else f", so {engine_label(best)} leads only once the prefix is shared"
            )
        else:
            text += ": the gap is the engines' speed, not their caches"
    name = f"**{engine_label(best)}**" if f.favours else engine_label(best)
    text += (
        f". Shorter batch time: {name}, {_ratio(margin, _runs(f))}× shorter than {engine_label(second)} "
        f"({experiment_words(f.rows[0]['experiment'])})"
    )
    return text if f.favours else f"{text}; {_undecided(f)}"


def _concurrency_run(r: dict) -> str:
    return (
        f"{engine_label(r['engine'])} at {r['in_flight']} in flight: {r['requests_ok']}/{r['requests_sent']} "
        f"requests completed, {r['requests_failed']} failed, {measured(r['requests_per_s'], r.get('n_runs'))} requests/s"
    )


def _concurrency_comparison(f: Factor) -> str:
    best = f.rows[0]
    name = f"**{engine_label(best['engine'])}**" if f.favours else engine_label(best["engine"])
    text = (
        f". Faster: {name}, {_ratio(f.margin, _runs(f))}× the completed requests/s of "
        f"{engine_label(f.rows[1]['engine'])} ({experiment_words(best['experiment'])})"
    )
    return text if f.favours else f"{text}; {_undecided(f)}"


#: Per measured factor: what is said without runs, one run in words, and the comparison of two or more engines.
_MEASURED = {
    "prefix": ("no measured prefix-sharing runs: the tree's premise is untested here", _prefix_run, _prefix_comparison),
    "concurrency": ("no measured concurrency runs", _concurrency_run, _concurrency_comparison),
}


def factor_finding(f: Factor) -> str:
    """What a factor found, in words: the modelled batch times (context), or the measured runs on their hardware
    (prefix, concurrency) and whether they separate the engines."""
    if f.name == "context":
        return _context_finding(f)
    none, run, comparison = _MEASURED[f.name]
    if f.source == "none":
        return none
    parts = [run(r) for r in f.rows]
    text = "; ".join([f"on {', '.join(dict.fromkeys(r['hardware'] for r in f.rows))}: {parts[0]}", *parts[1:]])
    if f.n_engines < 2:
        return text + ". Only one engine measured: no measured difference to choose by"
    return text + comparison(f)


def factor_metric(f: Factor) -> str:
    """The leader's lead and on what: 'median batch time 1.87× shorter than sglang-jax (CPU)'s at 50% shared,
    each engine's prefix cache on'; '' without two engines compared. Whether the lead decides is the
    factor's ``favours``."""
    if f.margin is None or len(f.rows) < 2:
        return ""
    second = f.rows[1]["engine"]
    if f.name == "prefix":
        return (
            f"median batch time {_ratio(f.margin, _runs(f))}× shorter than {engine_label(second)}'s at "
            f"{f.rows[0]['shared_fraction']:.0%} shared, each engine's prefix cache on"
        )
    return (
        f"{_ratio(f.margin, _runs(f))}× the completed requests/s of {engine_label(second)} at {f.rows[0]['in_flight']} "
        "requests in flight"
    )


def factor_evidence(f: Factor) -> str:
    """'prefix: vLLM, median batch time 1.87× shorter than … (shared-prefix runs)'; '' without two engines
    compared."""
    if f.margin is None or len(f.rows) < 2:
        return ""
    return f"{f.name}: {engine_label(f.rows[0]['engine'])}, {factor_metric(f)} ({experiment_words(f.rows[0]['experiment'])})"


def factor_line(factor: Factor) -> str:
    """One answered question of the engine-choice guide as a list item."""
    return f"- {factor_finding(factor)}." + (f" Favours **{engine_label(factor.favours)}**." if factor.favours else "")


def _undecided_basis(ev: Evidence) -> str:
    """Why no factor decides: each measured comparison and why it cannot (its grade), or that none compares two
    engines; and that the model does not separate the engines."""
    graded = [f for f in ev.factors if f.source == "measured" and f.grade is not None]
    cpu = [f.name for f in graded if f.grade.outcome == "cannot be tested here"]
    parts = []
    if cpu:
        many = len(cpu) > 1
        parts.append(
            f"the measured {' and '.join(cpu)} comparison{'s are' if many else ' is a'} CPU "
            f"baseline{'s' if many else ''} of two different engine implementations, which cannot decide "
            "which engine is faster on a GPU host"
        )
    parts += [
        f"the measured {f.name} comparison {_undecided(f).removeprefix('it ')}" for f in graded if f.name not in cpu
    ]
    if not graded:
        parts.append("no measurement compares two engines")
    ctx = ev.factors[0]
    if ctx.source == "modelled" and not ctx.favours:
        parts.append("the model does not separate the engines here")
    return "; ".join(parts)


def evidence_basis(ev: Evidence) -> str:
    """What decided the data's engine: the measured factors that favour it (and, where the measured factors split,
    what broke the tie; where its side was a stand-in engine, what that is evidence of), the modelled context
    factor, or, where no factor decides, why none does and that the guide follows the tree."""
    if ev.decided_by == "tree":
        return f"{_undecided_basis(ev)}; so the guide follows the tree"
    if ev.decided_by == "modelled":
        return "modelled: context length"
    measured = [f for f in ev.factors if f.source == "measured" and f.favours]
    votes = [f for f in measured if f.favours == ev.engine]
    basis = "measured — " + "; ".join(factor_evidence(f) for f in votes)
    if ev.split:
        other = next(f for f in measured if f.favours != ev.engine)
        how = (
            f"the {ev.deciding.name} factor, the tree's first question for this workload, decides"
            if ev.split == "first question"
            else "the larger measured margin decides"
        )
        basis += (
            f"; the measured factors split ({factor_evidence(other)} favours {engine_label(other.favours)}), so {how}"
        )
    stand_ins = sorted({e for f in votes for e in (f.winner, f.runner_up) if e and registry.is_stand_in(e)})
    if stand_ins:
        sglang = engine_label(SGLANG)
        basis += (
            f"; the {sglang} side of these measurements is {', '.join(engine_label(e) for e in stand_ins)}: "
            f"evidence about the {sglang} family on CPU, not PyTorch {sglang} on a GPU"
        )
    return basis


def prefix_caption(sharing: list[dict]) -> str:
    """One sentence for the measured prefix-sharing figure (``sharing``: row dicts of
    :func:`kvlab.analysis.prefix_sharing`): each engine's cache-hit rate at the largest shared fraction against its
    ideal, then which engine's batch time is shorter there and with nothing to share."""
    on = [r for r in sharing if r["prefix_caching"] is not False]
    if not on:
        return "No measured run with a prefix cache on."
    top = max(r["shared_fraction"] for r in on)
    hw = ", ".join(dict.fromkeys(r["hardware"] for r in on))
    hits = []
    for r in _sorted([r for r in on if r["shared_fraction"] == top], "engine", descending=True):
        ideal = (
            r["block_ideal_hit_rate"]
            if r["engine"] == VLLM and r.get("block_ideal_hit_rate") is not None
            else r["ideal_hit_rate"]
        )
        kind = "whole-block ideal" if r["engine"] == VLLM else "token-exact ideal"
        hit = "not available" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.0%}"
        hits.append(f"{engine_label(r['engine'])} {hit} ({kind} {ideal:.0%})")
    text = (
        f"Measured on {hw}, prefix cache on, at {top:.0%} shared: prompt tokens served from the cache — "
        + ", ".join(hits)
    )
    times = []
    for f in sorted({0.0, top}):
        d = _sorted([r for r in on if r["shared_fraction"] == f], "batch_time_s")
        if len({r["engine"] for r in d}) >= 2:
            times.append((engine_label(d[0]["engine"]), d[1]["batch_time_s"] / d[0]["batch_time_s"], f))
    if len({t[0] for t in times}) == 1:  # one engine shorter at both: say so once
        tail = (
            f"{times[0][0]}'s median batch time is "
            + " and ".join(f"{r:.1f}× shorter at {f:.0%}" for _, r, f in times)
            + " shared"
        )
    else:
        tail = " and ".join(f"{e}'s median batch time is {r:.1f}× shorter at {f:.0%} shared" for e, r, f in times)
    return text + (f"; {tail}" if times else "") + "."


def concurrency_caption(conc: list[dict]) -> str:
    """One sentence for the measured concurrency figure (``conc``: row dicts of
    :func:`kvlab.analysis.concurrency_study`): at the largest in-flight count, throughput and TTFT of each engine,
    and whether every request completed."""
    if not conc:
        return "No measured concurrency run."
    top = max(r["in_flight"] for r in conc)
    d = _sorted([r for r in conc if r["in_flight"] == top], "requests_per_s", descending=True)
    parts = [
        f"{engine_label(r['engine'])} completes {measured(r['requests_per_s'], r.get('n_runs'))} requests/s (mean TTFT "
        f"{r['ttft_mean_ms']:,.0f} ms)"
        for r in d
    ]
    ratio = (
        f" — {engine_label(d[0]['engine'])} {d[0]['requests_per_s'] / d[1]['requests_per_s']:.1f}× the throughput"
        if len(d) >= 2
        else ""
    )
    sent, ok = _total(conc, "requests_sent"), _total(conc, "requests_ok")
    done = f"{ok:,} of {sent:,} requests sent completed" + (" (none failed)" if ok == sent else "")
    return (
        f"Measured on {', '.join(dict.fromkeys(r['hardware'] for r in conc))} at {top} requests in flight: "
        + " and ".join(parts)
        + ratio
        + f"; {done}."
    )


def engine_choice_verdicts(claims: DataFrame, sharing: DataFrame, conc: DataFrame, w, tree, ev) -> list:
    """Report 06's verdicts: the KV-design article's claims against the measured runs where kvlab has them
    (:func:`kvlab.claims.choice.claim_verdicts`), then the tree's answer for this workload against the data's."""
    return [*claim_verdicts(claims, sharing, conc), recommendation_verdict(w, tree, ev)]


def _cited(ev: Evidence, w: UserWorkload) -> Factor | None:
    """The measured comparison that speaks to this workload where no factor decides: the factor of the tree's first
    question (prefix for a shared prefix, else concurrency) where two engines were compared, else the other."""
    graded = [f for f in ev.factors if f.source == "measured" and f.grade is not None]
    primary = "prefix" if w.shared_prefix else "concurrency"
    return next((f for f in graded if f.name == primary), graded[0] if graded else None)


def recommendation_verdict(w, tree, ev):
    """The tree's answer for this workload against the data's. Where no factor decides (the guide follows the tree),
    the verdict is the grade of the measured comparison that speaks to this workload (:func:`_cited`: CPU runs of two
    engines, *cannot be tested here* with the baseline ratio; too few repeats, *inconclusive*), or *cannot be tested
    here* when nothing compares two engines; a measured factor decides by the grading rules (its lead passed them);
    a modelled one only past the model's held-out test (rule 3: otherwise an illustration, inconclusive)."""
    claim = (
        f"For this workload ({w.context_tokens:,}-token context, {w.shared_fraction:.0%} shared, {w.concurrency} "
        f"in flight, {w.model}) the decision tree says {engine_label(tree.engine)}: do kvlab's data here agree?"
    )
    common = dict(claim_id="engine_choice_recommendation", kind="engine_choice")
    if ev.decided_by == "tree":
        f = _cited(ev, w)
        if f is not None:
            g = f.grade
            base = (
                f"already {sig2(g.value)}× apart where the mechanism plays no part"
                if g.value is not None and g.outcome == "cannot be tested here"
                else ""
            )
            number = (
                f"no factor decides; data: {engine_label(f.rows[0]['engine'])}, {factor_metric(f).split(', each')[0]} "
                f"({experiment_words(f.rows[0]['experiment'])})" + (f"; {base}" if base else "")
            )
            return g.verdict(claim, number, **common)
        measured = any(f.source == "measured" for f in ev.factors)
        why = "no measurement compares two engines and the model does not separate them"
        return Verdict(
            claim,
            "cannot be tested here",
            "measured" if measured else "modelled",
            f"nothing measured or modelled here separates the engines; the guide follows the tree "
            f"({engine_label(ev.engine)})",
            n=0 if measured else (ev.factors[0].held_out[1] if ev.factors[0].held_out else None),
            scope="measured runs and model" if measured else MODEL_SCOPE,
            reason=why,
            **common,
        )
    f = ev.deciding
    if ev.decided_by == "measured" and f is not None and f.winner:
        number = (
            f"data: {engine_label(f.winner)}, {factor_metric(f).split(', each')[0]} ({experiment_words(f.experiment)})"
        )
        return Verdict(
            claim,
            "reproduced" if ev.engine == tree.engine else "contradicted",
            "measured",
            number,
            value=f.margin,
            unit="×",
            n=f.grade.n if f.grade else None,
            spread=f.grade.spread if f.grade else None,
            scope=f.rows[0].get("hardware") or "",
            reason=f"the {f.name} factor decides by {f.margin:.2f}× ({f.grade.reason if f.grade else ''})",
            **common,
        )
    number = (
        f"{engine_label(ev.engine)}: {factor_finding(f).split(';')[0]}" if f is not None else engine_label(ev.engine)
    )
    if f is not None and f.held_out is not None:
        right, total, error = f.held_out
        ratio = max(f.times) / min(f.times)
        grade = modelled_claim(ev.engine == tree.engine, right, total, ratio - 1, error, value=ratio, unit="×")
        return grade.verdict(claim, number, **common)
    return Verdict(
        claim,
        "reproduced" if ev.engine == tree.engine else "contradicted",
        ev.decided_by,
        number,
        n=f.held_out[1] if f is not None and f.held_out else None,
        scope=MODEL_SCOPE,
        reason="decided by the modelled context factor",
        **common,
    )


def evidence_rule() -> str:
    """How the report weighs its evidence: the grading rules every verdict uses."""
    return (
        "Every finding is labelled **modelled** (kvlab's physical model, calibrated on the B300 article's published "
        "points for Kimi-K3, its model; for any other model the uncalibrated roofline at the centre of its priors, "
        "never a Kimi-K3 fit) or **measured** (real engine runs, with the hardware they ran on). A measured factor decides only "
        "by the rules every verdict uses: never from CPU runs of two different engine implementations (a CPU "
        "baseline cannot decide which engine is faster on a GPU host), and only with at least 3 repeats a side "
        "whose least–most ranges do not overlap; the recommendation then names the engine, the margin, the metric "
        "and the experiment. A modelled factor decides only where its margin exceeds the model's held-out error. "
        "When no factor decides, the guide follows the tree and says so."
    )


def tree_caption(rec: Recommendation) -> str:
    """One sentence for the decision-tree figure: the highlighted path and where it ends."""
    path = " → ".join(f"{q} {a}" for q, a in rec.path)
    return f"Highlighted, this workload's path: {path} ⇒ {engine_label(rec.engine)} ({rec.reason})."


def tree_sentence(rec: Recommendation) -> str:
    path = " → ".join(f"{q} **{a}**" for q, a in rec.path)
    return f"- decision tree: {path} ⇒ **{engine_label(rec.engine)}** ({rec.reason})."


def evidence_sentences(ev: Evidence) -> str:
    lines = [
        f"- {f.name} ({f.source}): {factor_finding(f)}."
        + (
            f" Favours **{engine_label(f.favours)}**"
            + (f" (measured on {engine_label(f.winner)})" if f.winner and f.winner != f.favours else "")
            + "."
            if f.favours
            else ""
        )
        for f in ev.factors
    ]
    if ev.decided_by == "tree":
        lines.append(
            f"- from the data: no factor decides, so the guide follows the tree: **{engine_label(ev.engine)}** "
            f"({_undecided_basis(ev)})."
        )
    else:
        lines.append(f"- from the data: **{engine_label(ev.engine)}** (decided by {evidence_basis(ev)}).")
    return "\n".join(lines)


def evidence_gap_sentence(ev: Evidence) -> str | None:
    """What the measured evidence cannot say: no two-engine comparison, or one within the noise margin; else None."""
    measured = [f for f in ev.factors if f.source == "measured"]
    if not any(f.n_engines >= 2 for f in measured):
        return (
            "No measurement here compares two engines on the same hardware; the data-backed pick rests on the "
            "model, or else on the tree. Run the GPU experiments (`data/experiments/gpu_*.yaml`) for a "
            "measured comparison."
        )
    if not any(f.favours for f in measured):
        compared = ", ".join(f.name for f in measured if f.n_engines >= 2)
        if any(f.grade is not None and f.grade.outcome == "cannot be tested here" for f in measured):
            return (
                f"Two engines were measured ({compared}), but on a CPU: runs of two different engine "
                "implementations there are a baseline that cannot decide which engine is faster on a GPU host. "
                "Run the GPU experiments (`data/experiments/gpu_*.yaml`), with 3 repeats, for a measured "
                "comparison."
            )
        return (
            f"Two engines were measured ({compared}), but no measured difference passes the grading rules (at "
            "least 3 repeats a side, least–most ranges apart): the measurements do not separate them."
        )
    return None


def disagreement(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: list[dict]) -> str | None:
    """Why the tree and the evidence differ, naming the premise the data contradicts; None when they agree."""
    if tree.engine == ev.engine:
        return None
    decided = factor_evidence(ev.deciding) if ev.deciding is not None and ev.deciding.winner else evidence_basis(ev)
    why = [
        f"The tree says **{engine_label(tree.engine)}** ({tree.reason}); the {ev.decided_by} data say "
        f"**{engine_label(ev.engine)}** ({decided})."
    ]
    return " ".join([*why, *premises(w, tree, ev, sharing)])


def premises(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: list[dict]) -> list[str]:
    """The tree's premises the data speak to, a sentence each: vLLM's measured prefix cache against the
    shared-prefix branch (a within-engine measurement); the deciding measured concurrency factor against the
    high-concurrency branch; the deciding modelled context factor, a question the tree never asks."""
    why = []
    on = [r for r in sharing if r["prefix_caching"] is not False and r["cache_hit_rate"] is not None]
    on_vllm = [r for r in on if r["engine"] == VLLM]
    if w.shared_prefix and tree.engine == SGLANG and on_vllm:
        near = min(on_vllm, key=lambda r: abs(r["shared_fraction"] - w.shared_fraction))  # the first nearest
        radix = [r for r in on if r["engine"] != VLLM and r["shared_fraction"] == near["shared_fraction"]]
        beside = "".join(f" ({engine_label(r['engine'])}'s radix cache: {r['cache_hit_rate']:.0%})" for r in radix)
        why.append(
            f"The tree's shared-prefix branch assumes vLLM shares no prefixes; measured, vLLM's automatic "
            f"prefix caching reused {near['cache_hit_rate']:.0%} of prompt tokens at "
            f"{near['shared_fraction']:.0%} shared{beside}, so a shared prefix alone does not separate the engines."
        )
    conc = ev.factors[2]
    if (
        not w.shared_prefix
        and w.concurrency >= CONCURRENCY_THRESHOLD
        and tree.engine == VLLM
        and conc.favours == ev.engine
    ):
        why.append(
            f"The tree's high-concurrency branch assumes vLLM's {tree.reason} wins with "
            f"≥ {CONCURRENCY_THRESHOLD} requests in flight; measured, {factor_evidence(conc)}."
        )
    ctx = ev.factors[0]
    if ctx.favours and ctx.favours != tree.engine:
        why.append(f"The tree never asks the context length; the model does: {factor_finding(ctx)}.")
    return why


def recommendation_sentence(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: list[dict]) -> str:
    """The report's answer in one paragraph: they disagree (and why), they agree (and on what), or no factor decides
    (and why, with the premises of the tree the measurements speak to; ``sharing``: the prefix-sharing row dicts)."""
    why = disagreement(w, tree, ev, sharing)
    if why:
        return f"**They disagree.** {why}"
    if ev.decided_by == "tree":
        return " ".join(
            [
                f"**The tree says {engine_label(tree.engine)}; the data here can neither confirm nor "
                f"contradict it**: {_undecided_basis(ev)}.",
                *premises(w, tree, ev, sharing),
            ]
        )
    f = ev.deciding
    on = (
        f" ({engine_label(f.winner)}: {factor_metric(f)}, {experiment_words(f.experiment)})"
        if f is not None and f.winner
        else f" ({factor_finding(f).split(';')[0]})"
        if f is not None
        else ""
    )
    return f"**They agree: {engine_label(tree.engine)}**, on {ev.decided_by} evidence{on}."


def _total(rows: list[dict], col: str) -> int:
    """The sum of ``col`` over ``rows``, nulls left out."""
    return int(sum(r[col] for r in rows if r[col] is not None))


def concurrency_sentence(conc: list[dict]) -> str:
    """Per engine and in-flight count (``conc``: row dicts of :func:`kvlab.analysis.concurrency_study`): how many
    requests completed, the throughput and the TTFT."""
    hosts = list(dict.fromkeys(r["hardware"] for r in conc))
    lines = [f"Measured on {hosts[0]}:\n"] if len(hosts) == 1 else []  # one host: said once, not on every line
    for r in conc:
        where = "" if len(hosts) == 1 else f" ({r['hardware']})"
        lines.append(
            f"- {engine_label(r['engine'])}, {r['in_flight']} in flight{where}: **{r['requests_ok']} of "
            f"{r['requests_sent']}** requests completed, {r['requests_failed']} failed over {count(r['n_runs'], 'run')}; "
            f"{measured(r['requests_per_s'], r.get('n_runs'))} requests/s, mean TTFT {ms(r['ttft_mean_ms'])} (p99 {ms(r['ttft_p99_ms'])})."
        )
    all_ok = len(conc) and _total(conc, "requests_failed") == 0
    if all_ok:
        lines.append(
            f"- Every one of the {_total(conc, 'requests_sent'):,} requests sent is accounted for and none failed."
        )
    return "\n".join(lines)


def examples_frame(examples: list[tuple[str, UserWorkload]]) -> list[dict]:
    """The document's examples as a table's rows (for :func:`kvlab.tables.table`): their tree inputs, the tree's
    answer and its path."""
    return [
        {
            "example": name,
            "model": ex.model,
            "context_tokens": ex.context_tokens,
            "shared_fraction": round(ex.shared_fraction, 2),
            "in_flight": ex.concurrency,
            "tree": engine_label(ex.tree().engine),
            "path": " → ".join(a for _, a in ex.tree().path),
        }
        for name, ex in examples
    ]


def choice_answer(w: UserWorkload, tree: Recommendation, ev: Evidence) -> tuple[str, ...]:
    """Report 06's answer: the engine the article's tree names for this workload and whether the data here confirm
    it, contradict it or cannot say (and why)."""
    first = (
        f"For your workload ({w.context_tokens:,}-token context, {w.shared_fraction:.0%} shared prefix, "
        f"{w.concurrency} in flight, {w.model}) the KV-cache design article's decision tree says "
        f"{engine_label(tree.engine)} ({tree.reason})."
    )
    if ev.decided_by == "tree":
        second = f"The data here can neither confirm nor contradict it: {_undecided_basis(ev)}."
    elif ev.engine == tree.engine:
        second = f"The {ev.decided_by} evidence agrees: {engine_label(ev.engine)}."
    else:
        second = (
            f"The {ev.decided_by} evidence points to {engine_label(ev.engine)} instead; the report says which "
            "premise of the tree the data contradict."
        )
    return (first, second)
