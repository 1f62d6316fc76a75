"""Engine choice: document 003's decision tree as a function, beside a recommendation from measured and modelled results.

The tree encodes the document's reasoning (RadixAttention shares prefixes, PagedAttention does
not; vLLM for many concurrent requests and mixed hardware). :func:`from_evidence` answers the
same question from kvlab's own numbers: the physical model for the context length, measured
prefix-sharing runs for the shared fraction, measured concurrency runs for the load. Where the
two disagree, :func:`disagreement` says which premise of the tree the data contradicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import polars as pl

Engine = Literal["vllm", "sglang"]
PRIORITIES = ("throughput", "stability")

#: The tree's numbers, as the document states them.
FIXED_CONTEXT_THRESHOLD = 0.30
CONCURRENCY_THRESHOLD = 100


@dataclass(frozen=True)
class Recommendation:
    """An engine, why, and the answers that led there (question, answer) in order."""

    engine: Engine
    reason: str
    path: tuple[tuple[str, str], ...]
    #: "clear" when the document states a preference, "equal" for its 'about equal, vLLM easier' leaf.
    strength: str = "clear"


def decision_tree(
    shared_prefix: bool,
    fixed_context_fraction: float = 0.0,
    deepseek_family: bool = False,
    concurrency: int = 1,
    mixed_hardware_or_frequent_model_changes: bool = False,
    priority: str = "stability",
) -> Recommendation:
    """Document 003's decision tree, exactly as written (its premises are tested elsewhere, not here).

    ``fixed_context_fraction``: share of each prompt that is the repeated system prompt / document.
    ``priority``: 'throughput' or 'stability' (ecosystem stability), asked only at the last leaf.
    """
    if not 0.0 <= fixed_context_fraction <= 1.0:
        raise ValueError(f"fixed_context_fraction must be in [0, 1], got {fixed_context_fraction}")
    if priority not in PRIORITIES:
        raise ValueError(f"priority must be one of {PRIORITIES}, got {priority!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    q_shared = "Shared system prompt / document repeated across requests?"
    if shared_prefix:
        q_frac = f"Fixed context ≥ {FIXED_CONTEXT_THRESHOLD:.0%} of the prompt?"
        if fixed_context_fraction >= FIXED_CONTEXT_THRESHOLD:
            return Recommendation("sglang", "RadixAttention reuses the shared prefix across requests",
                                  ((q_shared, "yes"), (q_frac, f"yes ({fixed_context_fraction:.0%})")))
        q_ds = "DeepSeek-family model?"
        path = ((q_shared, "yes"), (q_frac, f"no ({fixed_context_fraction:.0%})"))
        if deepseek_family:
            return Recommendation("sglang", "SGLang's DeepSeek optimisations (MLA, DP attention)",
                                  (*path, (q_ds, "yes")))
        return Recommendation("vllm", "about equal; vLLM is easier to operate", (*path, (q_ds, "no")), "equal")
    q_conc = f"≥ {CONCURRENCY_THRESHOLD} concurrent requests?"
    if concurrency >= CONCURRENCY_THRESHOLD:
        return Recommendation("vllm", "PagedAttention's memory efficiency under many concurrent requests",
                              ((q_shared, "no"), (q_conc, f"yes ({concurrency})")))
    q_mixed = "Mixed GPU/TPU hardware or frequent model changes?"
    path = ((q_shared, "no"), (q_conc, f"no ({concurrency})"))
    if mixed_hardware_or_frequent_model_changes:
        return Recommendation("vllm", "broad hardware and model support", (*path, (q_mixed, "yes")))
    q_prio = "Throughput first or ecosystem stability first?"
    if priority == "throughput":
        return Recommendation("sglang", "throughput first", (*path, (q_mixed, "no"), (q_prio, "throughput")))
    return Recommendation("vllm", "ecosystem stability first", (*path, (q_mixed, "no"), (q_prio, "stability")))


# --------------------------------------------------------------------------- from kvlab's own numbers


@dataclass(frozen=True)
class UserWorkload:
    """What the user will serve: the inputs of both the tree and the evidence."""

    context_tokens: int = 8192
    shared_fraction: float = 0.0
    concurrency: int = 16
    model: str = "Llama-3.1-8B"  # catalog model name (kvlab/perfmodel catalog)
    gpu: str = "B300"
    tp: int = 8
    dcp: int = 8  # SGLang's DCP size in the modelled comparison
    mixed_hardware_or_frequent_model_changes: bool = False
    priority: str = "stability"

    @property
    def shared_prefix(self) -> bool:
        return self.shared_fraction > 0

    def deepseek_family(self) -> bool:
        """DeepSeek's architecture: MLA attention (DeepSeek-V3/R1, and Kimi, built on it), per the catalog."""
        from kvlab.perfmodel import model

        m = model(self.model)
        return m.attention_type in ("mla", "hybrid") or "deepseek" in m.model.lower()

    def tree(self) -> Recommendation:
        return decision_tree(self.shared_prefix, self.shared_fraction, self.deepseek_family(), self.concurrency,
                             self.mixed_hardware_or_frequent_model_changes, self.priority)


#: Document 003's three worked examples and the shipped experiment that sets each up (data/experiments/).
DOCUMENT_EXAMPLES = (
    ("1 · multi-turn RAG, Llama-3.1-8B (SGLang in the document)", "gpu_multi_turn_rag"),
    ("2 · batch classification, Llama-3.1-70B (vLLM in the document)", "gpu_classification_70b"),
    ("3 · reasoning, DeepSeek-R1 (SGLang in the document)", "gpu_reasoning_r1"),
)


def experiment_workload(spec) -> UserWorkload:
    """The tree's inputs for an experiment spec (:class:`kvlab.spec.ExperimentSpec`), read from its fields.

    - context: prompt + output tokens per request (multi_turn: of the last, longest turn);
    - shared fraction: multi_turn, the document's share of the longest prompt (the history a turn
      carries is shared too, so this is the smallest share any turn has); shared_prefix, the spec's
      fraction; otherwise 0 (distinct prompts);
    - concurrency: the most requests in flight any run of the matrix has;
    - model, TP: the first engine's (its model id must be a catalog name or alias); SGLang's modelled DCP = TP.
    """
    from kvlab.perfmodel import model as catalog_model

    wl = spec.workload
    if wl.kind == "multi_turn":
        shared = wl.document_tokens / wl.prompt_len
    elif wl.kind == "shared_prefix":
        shared = wl.shared_fraction
    else:
        shared = 0.0
    in_flight = [wl.in_flight] + [c for c in spec.matrix.get("workload.concurrency", []) if c is not None]
    engine = next(iter(spec.engines.values()))
    try:
        catalog_model(engine.model)
    except KeyError as exc:
        raise KeyError(f"experiment {spec.name}: {exc.args[0]}") from None
    return UserWorkload(wl.total_tokens, shared, max(in_flight), engine.model, tp=engine.tp, dcp=engine.tp)


def document_examples(experiments_dir=None) -> list[tuple[str, UserWorkload]]:
    """Document 003's examples as (label, tree inputs), each read from its shipped experiment."""
    from kvlab.paths import EXPERIMENTS_DIR
    from kvlab.spec import ExperimentSpec

    folder = EXPERIMENTS_DIR if experiments_dir is None else experiments_dir
    return [(label, experiment_workload(ExperimentSpec.load(folder / f"{name}.yaml")))
            for label, name in DOCUMENT_EXAMPLES]


@dataclass(frozen=True)
class Factor:
    """One question answered from data: which engine it favours (None: no measured difference) and why."""

    name: str  # context | prefix | concurrency
    source: str  # modelled | measured | none
    favours: Engine | None
    finding: str


@dataclass(frozen=True)
class Evidence:
    engine: Engine
    factors: tuple[Factor, ...]
    basis: str  # which factor(s) decided
    notes: tuple[str, ...] = field(default_factory=tuple)


def context_factor(w: UserWorkload, fit) -> Factor:
    """Modelled batch times of vLLM TP (no DCP) and SGLang TP+DCP at the user's context (kvlab.perfmodel)."""
    from kvlab.perfmodel import Config, batch_time
    from kvlab.perfmodel.calibrate import crossover_from_fit

    from kvlab.perfmodel.roofline import kv_split

    a = Config.of(w.gpu, w.model, "vllm", w.tp, 1)
    b = Config.of(w.gpu, w.model, "sglang", w.tp, w.dcp)
    caveat = (" The fit's parameters are outside physically plausible ranges (notebook 04), so read the "
              "ratio as a description of the article's figures" if fit.warnings else "")
    if kv_split(a) == kv_split(b):
        # DCP divides nothing for this model (GQA heads already spread over TP): the only modelled
        # difference would be DCP's synchronisation, and without DCP the model treats both engines alike.
        return Factor("context", "modelled", None,
                      f"{w.model} at TP{w.tp} already spreads its KV over every GPU, so DCP{w.dcp} would add "
                      "synchronisation and no bandwidth; without DCP the model gives both engines the same time "
                      f"at {w.context_tokens:,} tokens: context length does not separate them")
    ta = batch_time(a, w.context_tokens, p=fit.params).batch_time_s
    tb = batch_time(b, w.context_tokens, p=fit.params).batch_time_s
    x = crossover_from_fit(fit, gpu=w.gpu, model=w.model, dcp=w.dcp, tp=w.tp)
    faster: Engine = "vllm" if ta <= tb else "sglang"
    ratio = max(ta, tb) / min(ta, tb)
    where = (f"the modelled crossover is {x:,.0f} tokens" if x else
             "the model finds no crossover up to 1M tokens")
    return Factor("context", "modelled", faster if ratio > 1.001 else None,
                  f"at {w.context_tokens:,} tokens on {w.gpu} TP{w.tp}, {faster} is {ratio:.2f}× faster "
                  f"(vLLM TP{w.tp} vs SGLang TP{w.tp}+DCP{w.dcp}); {where}. Calibrated on the B300 article's "
                  f"Kimi-K3 points: other models and GPUs are extrapolations.{caveat}")


def _nearest(df: pl.DataFrame, col: str, value: float) -> pl.DataFrame:
    if df.is_empty():
        return df
    return df.with_columns((pl.col(col) - value).abs().alias("_d")).filter(pl.col("_d") == pl.col("_d").min()).drop("_d")


def prefix_factor(w: UserWorkload, sharing: pl.DataFrame) -> Factor:
    """Measured prefix-cache reuse at the shared fraction nearest the user's, per engine with caching on."""
    on = sharing.filter(pl.col("prefix_caching").fill_null(True))
    if on.is_empty():
        return Factor("prefix", "none", None, "no measured prefix-sharing runs: the tree's premise is untested here")
    near = _nearest(on, "shared_fraction", w.shared_fraction)
    parts = [f"{r['engine']} reuses {r['cache_hit_rate']:.0%} of prompt tokens at shared fraction "
             f"{r['shared_fraction']:g} (ideal {r['ideal_hit_rate']:.0%}; {r['hardware']})" for r in near.iter_rows(named=True)]
    engines = near["engine"].unique().to_list()
    if len(engines) < 2:
        return Factor("prefix", "measured", None,
                      "; ".join(parts) + ". Only one engine measured: no measured difference to choose by")
    best = near.sort("batch_time_s").row(0, named=True)
    return Factor("prefix", "measured", best["engine"],
                  "; ".join(parts) + f". Shortest batch time: {best['engine']} ({best['batch_time_s']:.3g} s)")


def concurrency_factor(w: UserWorkload, conc: pl.DataFrame) -> Factor:
    """Measured runs at the in-flight count nearest the user's: completions, failures, requests/s."""
    if conc.is_empty():
        return Factor("concurrency", "none", None, "no measured concurrency runs")
    near = _nearest(conc, "in_flight", w.concurrency)
    parts = [f"{r['engine']} at {r['in_flight']} in flight: {r['requests_ok']}/{r['requests_sent']} requests "
             f"completed, {r['requests_failed']} failed, {r['requests_per_s']:.3g} requests/s ({r['hardware']})"
             for r in near.iter_rows(named=True)]
    if near["engine"].n_unique() < 2:
        return Factor("concurrency", "measured", None,
                      "; ".join(parts) + ". Only one engine measured: no measured difference to choose by")
    best = near.sort("requests_per_s", descending=True).row(0, named=True)
    return Factor("concurrency", "measured", best["engine"], "; ".join(parts) + f". Faster: {best['engine']}")


def from_evidence(w: UserWorkload, fit, sharing: pl.DataFrame, conc: pl.DataFrame) -> Evidence:
    """A recommendation from data: measured two-engine differences first, then the modelled context factor.

    A factor with a measured difference between the engines outranks the model; factors with
    no measured difference (one engine measured, or none) inform but do not decide.
    """
    factors = (context_factor(w, fit), prefix_factor(w, sharing), concurrency_factor(w, conc))
    measured = [f for f in factors if f.source == "measured" and f.favours]
    if measured:
        votes = {e: sum(f.favours == e for f in measured) for e in ("vllm", "sglang")}
        engine: Engine = max(votes, key=lambda e: (votes[e], e == factors[0].favours))
        basis = "measured: " + ", ".join(f.name for f in measured if f.favours == engine)
    elif factors[0].favours:
        engine, basis = factors[0].favours, "modelled: context length"
    else:
        engine, basis = "vllm", "no factor separates the engines; vLLM as the tree's tie-break (easier to operate)"
    return Evidence(engine, factors, basis)


def disagreement(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: pl.DataFrame) -> str | None:
    """Why the tree and the evidence differ, naming the premise the data contradicts; None when they agree."""
    if tree.engine == ev.engine:
        return None
    why = [f"The tree says **{tree.engine}** ({tree.reason}); the data say **{ev.engine}** ({ev.basis})."]
    on_vllm = sharing.filter((pl.col("engine") == "vllm") & pl.col("prefix_caching").fill_null(True))
    if w.shared_prefix and tree.engine == "sglang" and not on_vllm.is_empty():
        near = _nearest(on_vllm, "shared_fraction", w.shared_fraction).row(0, named=True)
        why.append(f"The tree's shared-prefix branch assumes vLLM shares no prefixes; measured, vLLM's automatic "
                   f"prefix caching reused {near['cache_hit_rate']:.0%} of prompt tokens at shared fraction "
                   f"{near['shared_fraction']:g}, so a shared prefix alone does not separate the engines.")
    ctx = ev.factors[0]
    if ctx.favours and ctx.favours != tree.engine:
        why.append(f"The tree never asks the context length; the model does: {ctx.finding}.")
    return " ".join(why)


def tree_sentence(rec: Recommendation) -> str:
    path = " → ".join(f"{q} **{a}**" for q, a in rec.path)
    return f"- decision tree: {path} ⇒ **{rec.engine}** ({rec.reason})."


def evidence_sentences(ev: Evidence) -> str:
    lines = [f"- {f.name} ({f.source}): {f.finding}." + (f" Favours **{f.favours}**." if f.favours else "")
             for f in ev.factors]
    lines.append(f"- from the data: **{ev.engine}** (decided by {ev.basis}).")
    return "\n".join(lines)


# --------------------------------------------------------------------------- sentences computed from the studies


def prefix_claim_verdict(sharing: pl.DataFrame, engine: str = "vllm") -> str:
    """Does ``engine`` share prefixes? Hit rates with its prefix cache on vs off at the largest shared fraction."""
    e = sharing.filter(pl.col("engine") == engine)
    on, off = e.filter(pl.col("prefix_caching")), e.filter(~pl.col("prefix_caching"))
    if on.is_empty():
        return f"*No measured {engine} runs with its prefix cache on: the claim is untested here.*"
    top = on.sort("shared_fraction").row(-1, named=True)
    off_top = off.filter(pl.col("shared_fraction") == top["shared_fraction"])
    off_txt = (f"; with it off (`--no-enable-prefix-caching`, what the document describes) "
               f"{off_top['cache_hit_rate'][0]:.0%}" if off_top.height else "")
    shares = top["cache_hit_rate"] > 0
    verdict = ("**The claim does not hold for current vLLM**: with automatic prefix caching (on by default) requests "
               "do share the common prefix's KV blocks." if shares else
               "**The data agree with the claim**: no prompt token came from the cache.")
    return (f"- measured ({top['hardware']}): at shared fraction {top['shared_fraction']:g}, {engine} with its prefix "
            f"cache on served **{top['cache_hit_rate']:.0%}** of prompt tokens from the cache (ideal "
            f"{top['ideal_hit_rate']:.0%}){off_txt}.\n- {verdict}")


def hit_rate_sentence(sharing: pl.DataFrame) -> str:
    """Hit rate by shared fraction per configuration, as one line each."""
    lines = []
    for (engine, caching), g in sharing.sort("shared_fraction").group_by(["engine", "prefix_caching"], maintain_order=True):
        pts = ", ".join(f"{r['shared_fraction']:g} → {r['cache_hit_rate']:.0%}" for r in g.iter_rows(named=True))
        lines.append(f"- {engine}, prefix cache {'on' if caching else 'off'}: cache-hit rate by shared fraction {pts}.")
    return "\n".join(lines)


def threshold_sentence(th, gain: pl.DataFrame) -> str:
    """Whether the tree's threshold shows in the caching gain, in words, with the numbers that decide it."""
    if th.verdict == "no data":
        return "*Fewer than three shared fractions with the cache both on and off: the threshold cannot be tested.*"
    pts = ", ".join(f"{r['shared_fraction']:g} → {r['time_saved']:+.0%}" for r in gain.sort("shared_fraction").iter_rows(named=True))
    first = (f"the smallest measured fraction saving at least {th.min_gain:.0%} of batch time is "
             f"**{th.first_fraction:g}**" if th.first_fraction is not None else
             f"no measured fraction saves {th.min_gain:.0%} of batch time")
    slopes = (f"fitted slope below {th.at:g}: {th.slope_below:.2f}, from {th.at:g} up: {th.slope_above:.2f} "
              f"(time saved per unit of shared fraction); one straight line through all points has R² {th.r2_linear:.2f}")
    losses = ""
    if th.losses:
        losses = ("; below it the cache did not pay: " + ", ".join(f"{f:g} → {v:+.0%}" for f, v in th.losses)
                  + " (the cache cost more batch time than it saved)")
    even = (f"- the cache saves time at every measured fraction from **{th.break_even:g}** up{losses}."
            if th.break_even is not None else "- no range of measured fractions where the cache always saves time.")
    if th.verdict == "smooth":
        say = (f"**No jump at {th.at:.0%} shows in these runs**: past the break-even the saving grows steadily with the "
               f"shared fraction, so {th.at:.0%} reads as a rule of thumb for 'enough sharing to matter', not a property "
               "of the cache.")
    else:
        say = f"**The saving jumps near {th.at:.0%}**, as the tree's threshold suggests."
    return f"- batch time saved by the prefix cache, by shared fraction: {pts}.\n- {first}; {slopes}.\n{even}\n- {say}"


def prefix_conclusions(sharing: pl.DataFrame, thresholds: dict, by_turn: pl.DataFrame, threshold: float,
                       min_gain: float) -> str:
    """The prefix-sharing report's conclusions: the vLLM claim, each engine's threshold test, multi-turn reuse.

    ``thresholds``: engine -> :class:`kvlab.analysis.Threshold` (``analysis.sharing_thresholds``).
    """
    lines = []
    if sharing.is_empty():
        lines.append("- No measured prefix-sharing runs: only the modelled ideal above is shown; the document's "
                     "claims stay untested here.")
    else:
        lines.append(prefix_claim_verdict(sharing))
        for engine, th in thresholds.items():
            lines.append(f"- {engine}: threshold test at {threshold:.0%} → **{th.verdict}**" +
                         (f"; the cache first saves ≥{min_gain:.0%} of batch time at shared fraction "
                          f"{th.first_fraction:g}." if th.first_fraction is not None else "."))
    on = by_turn.filter(pl.col("prefix_caching")).sort("turn") if not by_turn.is_empty() else by_turn
    if on.height:
        lines.append(f"- Multi-turn: with the cache on, the last turn found {on['cached_share'][-1]:.0%} of its "
                     "prompt cached.")
    return "\n".join(lines)


def multi_turn_sentence(by_turn: pl.DataFrame) -> str:
    lines = []
    for (engine, caching), g in by_turn.sort("turn").group_by(["engine", "prefix_caching"], maintain_order=True):
        pts = ", ".join(f"turn {r['turn']}: {r['cached_tokens'] or 0:,.0f} of {r['prompt_tokens']:,.0f} tokens cached, "
                        f"TTFT {r['ttft_mean_ms']:.3g} ms" for r in g.iter_rows(named=True))
        lines.append(f"- {engine}, prefix cache {'on' if caching else 'off'}: {pts}.")
    on = by_turn.filter(pl.col("prefix_caching")).sort("turn")
    off = by_turn.filter(~pl.col("prefix_caching")).sort("turn")
    if on.height > 1 and off.height == on.height:
        last_on, last_off = on.row(-1, named=True), off.row(-1, named=True)
        lines.append(f"- At the last turn the cache serves **{last_on['cached_share']:.0%}** of the prompt and TTFT is "
                     f"**{last_off['ttft_mean_ms'] / last_on['ttft_mean_ms']:.2f}×** shorter than without it: each turn "
                     "reuses the history the previous turn computed.")
    return "\n".join(lines)


def concurrency_sentence(conc: pl.DataFrame) -> str:
    lines = []
    for r in conc.iter_rows(named=True):
        lines.append(f"- {r['engine']} ({r['hardware']}), {r['in_flight']} in flight: **{r['requests_ok']} of "
                     f"{r['requests_sent']}** requests completed, {r['requests_failed']} failed over {r['n_runs']} run(s); "
                     f"{r['requests_per_s']:.3g} requests/s, mean TTFT {r['ttft_mean_ms']:.3g} ms (p99 {r['ttft_p99_ms']:.3g} ms).")
    all_ok = conc.height and int(conc["requests_failed"].sum()) == 0
    if all_ok:
        lines.append(f"- Every one of the {int(conc['requests_sent'].sum()):,} requests sent is accounted for and none failed.")
    return "\n".join(lines)
