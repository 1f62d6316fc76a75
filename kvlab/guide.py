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

#: The family a measured engine stands for: sglang-jax (SGLang's JAX runtime) is evidence about SGLang's family,
#: never a measurement of PyTorch SGLang, and reports name it as measured.
FAMILY: dict[str, Engine] = {"vllm": "vllm", "sglang": "sglang", "sglang-jax": "sglang"}
#: What a stand-in engine is, in the words the reports use.
STAND_IN = {"sglang-jax": "SGLang's JAX runtime, run here on CPU: it keeps SGLang's radix-tree prefix cache "
                          "(RadixAttention, page size 1, so a hit is token-exact), and its results are evidence about "
                          "the SGLang family on CPU, never SGLang on a GPU"}
#: A measured ratio closer to 1 than this is no difference (runs share 2 CPU cores with other work).
MIN_MARGIN = 1.05


def engine_label(engine: str) -> str:
    """How reports name an engine: 'vLLM', 'SGLang', 'sglang-jax (CPU)' (kvlab.engines.ENGINE_LABELS)."""
    from kvlab.engines import ENGINE_LABELS

    return ENGINE_LABELS.get(engine, engine)


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
    - shared fraction: the workload kind's ``sharing`` (multi_turn, the document's share of the longest
      prompt; shared_prefix, the spec's fraction; otherwise 0, distinct prompts);
    - concurrency: the most requests in flight any run of the matrix has;
    - model, TP: the first engine's (its model id must be a catalog name or alias); SGLang's modelled DCP = TP.
    """
    from kvlab.perfmodel import model as catalog_model

    wl = spec.workload
    in_flight = [wl.in_flight] + [c for c in spec.matrix.get("workload.concurrency", []) if c is not None]
    engine = next(iter(spec.engines.values()))
    try:
        catalog_model(engine.model)
    except KeyError as exc:
        raise KeyError(f"experiment {spec.name}: {exc.args[0]}") from None
    return UserWorkload(wl.total_tokens, wl.sharing, max(in_flight), engine.model, tp=engine.tp, dcp=engine.tp)


def document_examples(experiments_dir=None) -> list[tuple[str, UserWorkload]]:
    """Document 003's examples as (label, tree inputs), each read from its shipped experiment."""
    from kvlab.paths import EXPERIMENTS_DIR
    from kvlab.spec import ExperimentSpec

    folder = EXPERIMENTS_DIR if experiments_dir is None else experiments_dir
    return [(label, experiment_workload(ExperimentSpec.load(folder / f"{name}.yaml")))
            for label, name in DOCUMENT_EXAMPLES]


@dataclass(frozen=True)
class Factor:
    """One question answered from data: which engine family it favours (None: no measured difference) and why.

    For a measured two-engine difference, ``winner`` is the engine as measured (e.g. "sglang-jax", whose
    family is "sglang"), ``margin`` by how much (≥ 1), ``metric`` on what, ``experiment`` in which runs.
    """

    name: str  # context | prefix | concurrency
    source: str  # modelled | measured | none
    favours: Engine | None
    finding: str
    winner: str | None = None
    margin: float | None = None
    metric: str = ""
    experiment: str = ""
    n_engines: int = 0  # engines measured for this factor (two or more: a measured comparison)
    runner_up: str | None = None  # the engine the winner was measured against

    def evidence(self) -> str:
        """'prefix: vLLM, median batch time 1.87× shorter than … (cpu_prefix_sharing, CPU)'; '' without a winner."""
        if self.winner is None or self.margin is None:
            return ""
        return f"{self.name}: {engine_label(self.winner)}, {self.metric} ({self.experiment})"


@dataclass(frozen=True)
class Evidence:
    engine: Engine
    factors: tuple[Factor, ...]
    basis: str  # which factor(s) decided
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: "measured", "modelled", or "tie-break" when no factor separates the engines (the engine is then no finding)
    decided_by: str = "measured"
    #: the factor that decided (for measured factors that split, the one the tree's first question names)
    deciding: Factor | None = None


def context_factor(w: UserWorkload, fit) -> Factor:
    """Modelled batch times of vLLM TP (no DCP) and SGLang TP+DCP at the user's context (kvlab.perfmodel)."""
    from kvlab.perfmodel import Config, batch_time
    from kvlab.perfmodel.calibrate import crossover_from_fit

    from kvlab.perfmodel.roofline import kv_split
    from kvlab.tables import number

    a = Config.of(w.gpu, w.model, "vllm", w.tp, 1)
    b = Config.of(w.gpu, w.model, "sglang", w.tp, w.dcp)
    caveat = (" The fit's parameters are outside physically plausible ranges (notebook 04), so read the "
              "ratio as a description of the article's figures" if fit.warnings else "")
    ta = batch_time(a, w.context_tokens, p=fit.params).batch_time_s
    tb = batch_time(b, w.context_tokens, p=fit.params).batch_time_s
    if kv_split(a) == kv_split(b):
        # DCP divides nothing for this model (GQA heads already spread over TP): the only modelled difference is
        # DCP's synchronisation, and without DCP the model times both engines alike.
        slower = (f"{tb / ta:.2f}× slower, the cost of DCP alone" if tb > ta else "no slower")
        return Factor("context", "modelled", None,
                      f"{w.model} at TP{w.tp} already spreads its KV over all {w.tp} GPUs, so DCP{w.dcp} divides "
                      f"nothing and only adds synchronisation: at {w.context_tokens:,} tokens on {w.gpu} the model gives "
                      f"SGLang TP{w.tp}+DCP{w.dcp} {number(tb)} s per batch against vLLM TP{w.tp}'s {number(ta)} s ({slower}). "
                      "Without DCP the model times both engines alike, so context length does not separate the "
                      f"engines for {w.model}; it only says not to turn DCP on for it.{caveat}")
    x = crossover_from_fit(fit, gpu=w.gpu, model=w.model, dcp=w.dcp, tp=w.tp)
    faster: Engine = "vllm" if ta <= tb else "sglang"
    ratio = max(ta, tb) / min(ta, tb)
    where = (f"the modelled crossover is {x:,.0f} tokens" if x else
             "the model finds no crossover up to 1M tokens")
    return Factor("context", "modelled", faster if ratio > 1.001 else None,
                  f"at {w.context_tokens:,} tokens on {w.gpu} TP{w.tp}, {engine_label(faster)} is {ratio:.2f}× faster "
                  f"(vLLM TP{w.tp} {number(ta)} s vs SGLang TP{w.tp}+DCP{w.dcp} {number(tb)} s per batch); {where}. Calibrated "
                  f"on the B300 article's Kimi-K3 points: other models and GPUs are extrapolations.{caveat}")


def _nearest(df: pl.DataFrame, col: str, value: float) -> pl.DataFrame:
    if df.is_empty():
        return df
    return df.with_columns((pl.col(col) - value).abs().alias("_d")).filter(pl.col("_d") == pl.col("_d").min()).drop("_d")


def _two_engine_slice(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of the first experiment and hardware that hold two or more engines (all rows when none does)."""
    for _, g in df.group_by(["experiment", "hardware"], maintain_order=True):
        if g["engine"].n_unique() >= 2:
            return g
    return df


def _pct(v: float | None) -> str:
    return "not available" if v is None else f"{v:.0%}"


def _ms(v: float | None) -> str:
    """Milliseconds as a reader writes them: 5,466 ms, 431 ms, 21.4 ms."""
    return "not available" if v is None else f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"


def prefix_factor(w: UserWorkload, sharing: pl.DataFrame, min_margin: float = MIN_MARGIN) -> Factor:
    """Measured runs at the shared fraction nearest the user's, each engine with its prefix cache on.

    The engines are compared on median batch time (the work done, with each engine's own cache); a
    ratio under ``min_margin`` is no measured difference. The same comparison at shared fraction 0
    (nothing to share) is quoted beside it, so a reader sees how much of the gap is the cache's.
    """
    on = sharing.filter(pl.col("prefix_caching").fill_null(True))
    if on.is_empty():
        return Factor("prefix", "none", None, "no measured prefix-sharing runs: the tree's premise is untested here")
    pair = _two_engine_slice(on)
    near = _nearest(pair, "shared_fraction", w.shared_fraction).sort("batch_time_s", nulls_last=True)
    parts = [f"{engine_label(r['engine'])} reuses {_pct(r['cache_hit_rate'])} of prompt tokens at shared fraction "
             f"{r['shared_fraction']:g} (ideal {r['ideal_hit_rate']:.0%}), median batch time "
             f"{r['batch_time_s']:.3g} s" for r in near.iter_rows(named=True)]
    parts[0] = f"on {', '.join(near['hardware'].unique(maintain_order=True))}: {parts[0]}"
    if near["engine"].n_unique() < 2:
        return Factor("prefix", "measured", None,
                      "; ".join(parts) + ". Only one engine measured: no measured difference to choose by", n_engines=1)
    best, second = near.row(0, named=True), near.row(1, named=True)
    margin = second["batch_time_s"] / best["batch_time_s"]
    frac = best["shared_fraction"]
    metric = (f"median batch time {margin:.2f}× shorter than {engine_label(second['engine'])}'s at shared fraction "
              f"{frac:g}, each engine's prefix cache on")
    text = "; ".join(parts)
    zero = pair.filter((pl.col("shared_fraction") == 0) & pl.col("engine").is_in([best["engine"], second["engine"]]))
    if frac != 0 and zero["engine"].n_unique() == 2:
        z = {r["engine"]: r["batch_time_s"] for r in zero.iter_rows(named=True)}
        z_ratio = z[second["engine"]] / z[best["engine"]]  # > 1: the same engine is faster with nothing to share
        faster0, r0 = (best["engine"], z_ratio) if z_ratio >= 1 else (second["engine"], 1 / z_ratio)
        text += f". With nothing to share (shared fraction 0) {engine_label(faster0)} is {r0:.2f}× faster"
        if margin < min_margin:
            pass
        elif abs(margin / z_ratio - 1) >= min_margin - 1:
            text += (f", so sharing the prefix {'widens' if margin > z_ratio else 'narrows'} "
                     f"{engine_label(best['engine'])}'s lead" if z_ratio >= 1 else
                     f", so {engine_label(best['engine'])} leads only once the prefix is shared")
        else:
            text += ": the gap is the engines' speed, not their caches"
    if margin < min_margin:
        return Factor("prefix", "measured", None,
                      text + f". Batch times within {min_margin - 1:.0%} ({margin:.2f}×): no measured difference",
                      n_engines=near["engine"].n_unique())
    return Factor("prefix", "measured", FAMILY.get(best["engine"]),
                  text + f". Shorter batch time: **{engine_label(best['engine'])}**, {margin:.2f}× shorter than "
                  f"{engine_label(second['engine'])} ({best['experiment']})",
                  best["engine"], margin, metric, best["experiment"], near["engine"].n_unique(), second["engine"])


def concurrency_factor(w: UserWorkload, conc: pl.DataFrame, min_margin: float = MIN_MARGIN) -> Factor:
    """Measured runs at the in-flight count nearest the user's: completions, failures, completed requests/s.

    The engines are compared on completed requests per second (mean over runs); a ratio under
    ``min_margin`` is no measured difference.
    """
    if conc.is_empty():
        return Factor("concurrency", "none", None, "no measured concurrency runs")
    near = _nearest(_two_engine_slice(conc), "in_flight", w.concurrency).sort("requests_per_s", descending=True,
                                                                               nulls_last=True)
    parts = [f"{engine_label(r['engine'])} at {r['in_flight']} in flight: {r['requests_ok']}/{r['requests_sent']} "
             f"requests completed, {r['requests_failed']} failed, {r['requests_per_s']:.3g} requests/s"
             for r in near.iter_rows(named=True)]
    parts[0] = f"on {', '.join(near['hardware'].unique(maintain_order=True))}: {parts[0]}"
    if near["engine"].n_unique() < 2:
        return Factor("concurrency", "measured", None,
                      "; ".join(parts) + ". Only one engine measured: no measured difference to choose by", n_engines=1)
    best, second = near.row(0, named=True), near.row(1, named=True)
    margin = best["requests_per_s"] / second["requests_per_s"]
    if margin < min_margin:
        return Factor("concurrency", "measured", None, "; ".join(parts) +
                      f". Throughputs within {min_margin - 1:.0%} ({margin:.2f}×): no measured difference",
                      n_engines=near["engine"].n_unique())
    metric = (f"{margin:.2f}× the completed requests/s of {engine_label(second['engine'])} at {best['in_flight']} "
              "requests in flight")
    return Factor("concurrency", "measured", FAMILY.get(best["engine"]),
                  "; ".join(parts) + f". Faster: **{engine_label(best['engine'])}**, {margin:.2f}× the completed "
                  f"requests/s of {engine_label(second['engine'])} ({best['experiment']})",
                  best["engine"], margin, metric, best["experiment"], near["engine"].n_unique(), second["engine"])


def from_evidence(w: UserWorkload, fit, sharing: pl.DataFrame, conc: pl.DataFrame) -> Evidence:
    """A recommendation from data: measured two-engine differences first, then the modelled context factor.

    A factor with a measured difference between the engines outranks the model; factors with
    no measured difference (one engine measured, none, or a margin under :data:`MIN_MARGIN`)
    inform but do not decide. Measured factors vote by engine family (sglang-jax counts for the
    SGLang family, and the basis says it was sglang-jax); when they split evenly the factor of the
    tree's first question decides (prefix for a shared prefix, else concurrency), and the basis says so.
    """
    factors = (context_factor(w, fit), prefix_factor(w, sharing), concurrency_factor(w, conc))
    measured = [f for f in factors if f.source == "measured" and f.favours]
    if measured:
        votes = {e: [f for f in measured if f.favours == e] for e in ("vllm", "sglang")}
        if len(votes["vllm"]) != len(votes["sglang"]):
            engine: Engine = max(votes, key=lambda e: len(votes[e]))
            split = ""
            primary = "prefix" if w.shared_prefix else "concurrency"
            deciding = next((f for f in votes[engine] if f.name == primary), votes[engine][0])
        else:
            # The tree's own first question says which factor is this workload's: shared prefix, else the load.
            primary = "prefix" if w.shared_prefix else "concurrency"
            top = next((f for f in measured if f.name == primary), None)
            how = f"the {primary} factor, the tree's first question for this workload, decides"
            if top is None:
                top, how = max(measured, key=lambda f: f.margin or 0.0), "the larger measured margin decides"
            engine = top.favours
            other = next(f for f in measured if f.favours != engine)
            deciding = top
            split = f"; the measured factors split ({other.evidence()} favours {other.favours}), so {how}"
        basis = "measured — " + "; ".join(f.evidence() for f in votes[engine]) + split
        stand_ins = sorted({e for f in votes[engine] for e in (f.winner, f.runner_up) if e and FAMILY.get(e, e) != e})
        if stand_ins:
            basis += (f"; the SGLang side of these measurements is {', '.join(engine_label(e) for e in stand_ins)}: "
                      "evidence about the SGLang family on CPU, not PyTorch SGLang on a GPU")
        return Evidence(engine, factors, basis, decided_by="measured", deciding=deciding)
    if factors[0].favours:
        return Evidence(factors[0].favours, factors, "modelled: context length", decided_by="modelled",
                        deciding=factors[0])
    return Evidence("vllm", factors, "no factor separates the engines; vLLM as the tree's tie-break (easier to operate)",
                    decided_by="tie-break")


def disagreement(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: pl.DataFrame) -> str | None:
    """Why the tree and the evidence differ, naming the premise the data contradicts; None when they agree."""
    if tree.engine == ev.engine:
        return None
    if ev.decided_by == "tie-break":
        why = [f"The tree says **{tree.engine}** ({tree.reason}); nothing measured or modelled here separates the "
               f"engines, so the data's **{ev.engine}** is only a tie-break (vLLM, easier to operate), not a finding."]
    else:
        decided = ev.deciding.evidence() if ev.deciding is not None and ev.deciding.winner else ev.basis
        why = [f"The tree says **{tree.engine}** ({tree.reason}); the {ev.decided_by} data say **{ev.engine}** "
               f"({decided})."]
    on = sharing.filter(pl.col("prefix_caching").fill_null(True) & pl.col("cache_hit_rate").is_not_null())
    on_vllm = on.filter(pl.col("engine") == "vllm")
    if w.shared_prefix and tree.engine == "sglang" and not on_vllm.is_empty():
        near = _nearest(on_vllm, "shared_fraction", w.shared_fraction).row(0, named=True)
        radix = on.filter((pl.col("engine") != "vllm") & (pl.col("shared_fraction") == near["shared_fraction"]))
        beside = "".join(f" ({engine_label(r['engine'])}'s radix cache: {r['cache_hit_rate']:.0%})"
                         for r in radix.iter_rows(named=True))
        why.append(f"The tree's shared-prefix branch assumes vLLM shares no prefixes; measured, vLLM's automatic "
                   f"prefix caching reused {near['cache_hit_rate']:.0%} of prompt tokens at shared fraction "
                   f"{near['shared_fraction']:g}{beside}, so a shared prefix alone does not separate the engines.")
    conc = ev.factors[2]
    if (not w.shared_prefix and w.concurrency >= CONCURRENCY_THRESHOLD and tree.engine == "vllm"
            and conc.favours == ev.engine):
        why.append(f"The tree's high-concurrency branch assumes PagedAttention's memory efficiency wins with "
                   f"≥ {CONCURRENCY_THRESHOLD} requests in flight; measured, {conc.evidence()}.")
    ctx = ev.factors[0]
    if ctx.favours and ctx.favours != tree.engine:
        why.append(f"The tree never asks the context length; the model does: {ctx.finding}.")
    return " ".join(why)


def tree_sentence(rec: Recommendation) -> str:
    path = " → ".join(f"{q} **{a}**" for q, a in rec.path)
    return f"- decision tree: {path} ⇒ **{rec.engine}** ({rec.reason})."


def evidence_sentences(ev: Evidence) -> str:
    lines = [f"- {f.name} ({f.source}): {f.finding}." + (
        f" Favours **{f.favours}**" + (f" (measured on {engine_label(f.winner)})" if f.winner and f.winner != f.favours else "") + "."
        if f.favours else "") for f in ev.factors]
    if ev.decided_by == "tie-break":
        lines.append(f"- from the data: **{ev.engine}**, but only as a tie-break: {ev.basis}.")
    else:
        lines.append(f"- from the data: **{ev.engine}** (decided by {ev.basis}).")
    lines += [f"- {n}" for n in ev.notes]
    return "\n".join(lines)


def evidence_gap_sentence(ev: Evidence) -> str | None:
    """What the measured evidence cannot say: no two-engine comparison, or one within the noise margin; else None."""
    measured = [f for f in ev.factors if f.source == "measured"]
    if not any(f.n_engines >= 2 for f in measured):
        return ("No measurement here compares two engines on the same hardware; the data-backed pick rests on the "
                "model and on the tree's tie-break. Run the GPU experiments (`data/experiments/gpu_*.yaml`) for a "
                "measured comparison.")
    if not any(f.favours for f in measured):
        compared = ", ".join(f.name for f in measured if f.n_engines >= 2)
        return (f"Two engines were measured ({compared}), but every measured difference is under "
                f"{MIN_MARGIN - 1:.0%}: the measurements do not separate them.")
    return None


# --------------------------------------------------------------------------- sentences computed from the studies


def stand_in_note(*frames: pl.DataFrame, block_tokens: int = 128) -> str | None:
    """Says, once and plainly, what sglang-jax is, when any of ``frames`` holds its runs; None otherwise."""
    if not any(not f.is_empty() and "engine" in f.columns and (f["engine"] == "sglang-jax").any() for f in frames):
        return None
    return (f"**{engine_label('sglang-jax')} is not PyTorch SGLang.** It is {STAND_IN['sglang-jax']}. vLLM's CPU "
            f"backend caches whole {block_tokens}-token blocks. sglang-jax serves no /metrics: its cache hits are its "
            "requests' usage `cached_tokens`, and server counters it lacks show as not available, never as 0.")


def prefix_claim_verdict(sharing: pl.DataFrame, engine: str = "vllm") -> str:
    """Does ``engine`` share prefixes? Hit rates with its prefix cache on vs off at the largest shared fraction."""
    e = sharing.filter((pl.col("engine") == engine) & pl.col("cache_hit_rate").is_not_null())
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
    return (f"- measured ({top['hardware']}): at shared fraction {top['shared_fraction']:g}, {engine_label(engine)} with its prefix "
            f"cache on served **{top['cache_hit_rate']:.0%}** of prompt tokens from the cache (ideal "
            f"{top['ideal_hit_rate']:.0%}){off_txt}.\n- {verdict}")


def _sources(g: pl.DataFrame) -> str:
    src = g["hit_source"].drop_nulls().unique(maintain_order=True).to_list() if "hit_source" in g.columns else []
    return f" (counted from its {' and '.join(src)})" if src else ""


def hit_rate_sentence(sharing: pl.DataFrame) -> str:
    """Hit rate by shared fraction per configuration, as one line each, saying which count it comes from."""
    lines = []
    for (engine, caching), g in sharing.sort("shared_fraction").group_by(["engine", "prefix_caching"], maintain_order=True):
        pts = ", ".join(f"{r['shared_fraction']:g} → {_pct(r['cache_hit_rate'])}" for r in g.iter_rows(named=True))
        lines.append(f"- {engine_label(engine)}, prefix cache {'on' if caching else 'off'}: cache-hit rate by shared "
                     f"fraction {pts}{_sources(g)}.")
    return "\n".join(lines)


def radix_vs_paged_sentence(sharing: pl.DataFrame, block_tokens: int = 128) -> str:
    """SGLang-family radix cache against vLLM's paged blocks, cache on, at every shared fraction both measured.

    Each line: both hit rates beside the token-exact ideal (``ideal_hit_rate``) and the whole-block
    ideal (``block_ideal_hit_rate``), then TTFT and batch time; a last line names the largest hit-rate gap.
    """
    on = sharing.filter(pl.col("prefix_caching"))
    paged = on.filter(pl.col("engine") == "vllm")
    radix_engines = [e for e in on["engine"].unique(maintain_order=True).to_list() if FAMILY.get(e) == "sglang"]
    if paged.is_empty() or not radix_engines:
        return "*Radix vs paged: no shared fraction was measured with both vLLM and an SGLang-family engine, cache on.*"
    radix_engine = radix_engines[0]
    cols = ["shared_fraction", "shared_prefix_tokens", "cache_hit_rate", "ideal_hit_rate", "block_ideal_hit_rate",
            "ttft_mean_ms", "batch_time_s"]
    both = paged.select(cols).join(on.filter(pl.col("engine") == radix_engine).select(cols), on="shared_fraction",
                                   suffix="_r").sort("shared_fraction")
    if both.is_empty():
        return "*Radix vs paged: no shared fraction holds both engines with the cache on.*"
    lr, lp = engine_label(radix_engine), engine_label("vllm")
    lines = []
    for r in both.iter_rows(named=True):
        lines.append(
            f"- shared fraction {r['shared_fraction']:g} ({r['shared_prefix_tokens']:,} prefix tokens): {lr} served "
            f"**{_pct(r['cache_hit_rate_r'])}** of prompt tokens from its radix cache (token-exact ideal "
            f"{r['ideal_hit_rate']:.0%}), {lp} **{_pct(r['cache_hit_rate'])}** from its paged cache (whole "
            f"{block_tokens}-token-block ideal {r['block_ideal_hit_rate']:.0%}); mean TTFT {_ms(r['ttft_mean_ms_r'])} "
            f"vs {_ms(r['ttft_mean_ms'])}, median batch time {r['batch_time_s_r']:.3g} s vs {r['batch_time_s']:.3g} s.")
    gaps = both.filter(pl.col("cache_hit_rate").is_not_null() & pl.col("cache_hit_rate_r").is_not_null()).with_columns(
        (pl.col("cache_hit_rate_r") - pl.col("cache_hit_rate")).alias("gap"))
    if gaps.height:
        g = gaps.sort(pl.col("gap").abs(), descending=True).row(0, named=True)
        more, less = (lr, lp) if g["gap"] >= 0 else (lp, lr)
        lines.append(f"- Largest hit-rate gap: at shared fraction {g['shared_fraction']:g}, {more} served "
                     f"**{abs(g['gap']) * 100:.1f} percentage points** more of the prompt from its cache than {less}.")
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
    if th.verdict == "inconclusive":
        say = (f"**The threshold test is inconclusive on these runs**: at shared fraction 0 nothing is reused, yet the "
               f"runs with the cache on took {abs(th.gain_at_zero):.0%} {'less' if th.gain_at_zero > 0 else 'more'} batch "
               f"time than with it off, a difference the "
               f"prefix cache cannot explain and as large as the {th.min_gain:.0%} saving the test looks for. More "
               "repeats per point (the full sweep) are needed to test it.")
    elif th.verdict == "smooth":
        say = (f"**No jump at {th.at:.0%} shows in these runs**: past the break-even the saving grows steadily with the "
               f"shared fraction, so {th.at:.0%} reads as a rule of thumb for 'enough sharing to matter', not a property "
               "of the cache.")
    else:
        g = gain.filter(pl.col("time_saved").is_not_null()).sort("shared_fraction")
        lo, hi = g.filter(pl.col("shared_fraction") < th.at), g.filter(pl.col("shared_fraction") >= th.at)
        say = (f"**The saving jumps between shared fractions {lo['shared_fraction'][-1]:g} and "
               f"{hi['shared_fraction'][0]:g}** ({lo['time_saved'][-1]:+.0%} → {hi['time_saved'][0]:+.0%}), where the "
               f"tree puts its {th.at:.0%} threshold; the measured fractions cannot place the jump more closely."
               if lo.height and hi.height else f"**The saving jumps near {th.at:.0%}**, as the tree's threshold suggests.")
    return f"- batch time saved by the prefix cache, by shared fraction: {pts}.\n- {first}; {slopes}.\n{even}\n- {say}"


def prefix_conclusions(sharing: pl.DataFrame, thresholds: dict, by_turn: pl.DataFrame, threshold: float,
                       min_gain: float) -> str:
    """The prefix-sharing report's conclusions: the vLLM claim, radix vs paged, each engine's threshold test,
    multi-turn reuse per engine.

    ``thresholds``: engine -> :class:`kvlab.analysis.Threshold` (``analysis.sharing_thresholds``).
    """
    lines = []
    if sharing.is_empty():
        lines.append("- No measured prefix-sharing runs: only the modelled ideal above is shown; the document's "
                     "claims stay untested here.")
    else:
        lines.append(prefix_claim_verdict(sharing))
        gap = [ln for ln in radix_vs_paged_sentence(sharing).splitlines() if ln.startswith("- Largest hit-rate gap")]
        lines += gap
        for engine, th in thresholds.items():
            lines.append(f"- {engine_label(engine)}: threshold test at {threshold:.0%} → **{th.verdict}**" + (
                f" (at shared fraction 0, with nothing to reuse, cache on vs off already differ by "
                f"{th.gain_at_zero:+.0%} of batch time)." if th.verdict == "inconclusive" else
                f"; the cache first saves ≥{min_gain:.0%} of batch time at shared fraction "
                f"{th.first_fraction:g}." if th.first_fraction is not None else "."))
    for engine, g in (by_turn.filter(pl.col("prefix_caching")).sort("turn").group_by("engine", maintain_order=True)
                      if not by_turn.is_empty() else []):
        share = g["cached_share"][-1]
        lines.append(f"- Multi-turn, {engine_label(engine[0])}: with the cache on, the last turn found "
                     + (f"{share:.0%} of its prompt cached." if share is not None else
                        "no cached-token count reported (not available, not 0)."))
    return "\n".join(lines)


def multi_turn_sentence(by_turn: pl.DataFrame) -> str:
    """Turn by turn, per engine and cache setting; then, per engine, the last turn with the cache on against off."""
    def cached(r):
        if r["cached_tokens"] is None:
            return f"cached tokens not reported of {r['prompt_tokens']:,.0f}"
        return f"{r['cached_tokens']:,.0f} of {r['prompt_tokens']:,.0f} tokens cached"

    lines = []
    for (engine, caching), g in by_turn.sort("turn").group_by(["engine", "prefix_caching"], maintain_order=True):
        pts = "; ".join(f"turn {r['turn']}: {cached(r)}, TTFT {_ms(r['ttft_mean_ms'])}" for r in g.iter_rows(named=True))
        lines.append(f"- {engine_label(engine)}, prefix cache {'on' if caching else 'off'}: {pts}.")
    for (engine,), g in by_turn.group_by(["engine"], maintain_order=True):
        on = g.filter(pl.col("prefix_caching")).sort("turn")
        off = g.filter(~pl.col("prefix_caching")).sort("turn")
        if on.height > 1 and off.height == on.height:
            last_on, last_off = on.row(-1, named=True), off.row(-1, named=True)
            share = ("its share of the prompt served from the cache is not reported" if last_on["cached_share"] is None
                     else f"the cache serves **{last_on['cached_share']:.0%}** of the prompt")
            lines.append(f"- {engine_label(engine)}, last turn (turn {last_on['turn']}): {share} and TTFT is "
                         f"**{last_off['ttft_mean_ms'] / last_on['ttft_mean_ms']:.2f}×** shorter than without it "
                         f"({_ms(last_on['ttft_mean_ms'])} vs {_ms(last_off['ttft_mean_ms'])}).")
    lines += _turns_radix_vs_paged(by_turn)
    return "\n".join(lines)


def _turns_radix_vs_paged(by_turn: pl.DataFrame) -> list[str]:
    """Cache on: the turns where an SGLang-family radix cache and vLLM's blocks cached different amounts per request."""
    on = by_turn.filter(pl.col("prefix_caching") & pl.col("cached_tokens").is_not_null())
    radix = [e for e in on["engine"].unique(maintain_order=True).to_list() if FAMILY.get(e) == "sglang"]
    if not radix or on.filter(pl.col("engine") == "vllm").is_empty():
        return []
    both = (on.filter(pl.col("engine") == "vllm").select("turn", "cached_tokens")
            .join(on.filter(pl.col("engine") == radix[0]).select("turn", pl.col("cached_tokens").alias("radix")),
                  on="turn").with_columns((pl.col("radix") - pl.col("cached_tokens")).alias("d")).sort("turn"))
    lr, diff = engine_label(radix[0]), both.filter(pl.col("d") != 0)
    if diff.is_empty():
        return [f"- Radix vs paged, turn by turn: {lr} and vLLM cached the same tokens per request at every turn."]
    parts = ", ".join(f"turn {r['turn']}: {r['radix']:,.0f} vs {r['cached_tokens']:,.0f}" for r in diff.iter_rows(named=True))
    same = both.filter(pl.col("d") == 0)["turn"].to_list()
    return [f"- Radix vs paged, turn by turn (cache on, mean cached tokens per request, {lr} vs vLLM): {parts}"
            + (f"; the same at turn{'s' if len(same) > 1 else ''} {', '.join(map(str, same))}" if same else "") + "."]


def concurrency_sentence(conc: pl.DataFrame) -> str:
    lines = []
    for r in conc.iter_rows(named=True):
        lines.append(f"- {engine_label(r['engine'])}, {r['in_flight']} in flight ({r['hardware']}): **{r['requests_ok']} of "
                     f"{r['requests_sent']}** requests completed, {r['requests_failed']} failed over {r['n_runs']} run(s); "
                     f"{r['requests_per_s']:.3g} requests/s, mean TTFT {_ms(r['ttft_mean_ms'])} (p99 {_ms(r['ttft_p99_ms'])}).")
    all_ok = conc.height and int(conc["requests_failed"].sum()) == 0
    if all_ok:
        lines.append(f"- Every one of the {int(conc['requests_sent'].sum()):,} requests sent is accounted for and none failed.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- report 06: rule, examples, captions, answer


def evidence_rule() -> str:
    """How the report weighs its evidence, with the margin as a value."""
    return ("Every finding is labelled **modelled** (kvlab's physical model, calibrated on the B300 article's published "
            "points) or **measured** (real engine runs, with the hardware they ran on). A measured factor decides only "
            f"where two engines were measured on the same hardware and differ by more than {MIN_MARGIN - 1:.0%}; the "
            "recommendation then names the engine, the margin, the metric and the experiment. When nothing separates "
            "the engines, the report says its pick is a tie-break.")


def examples_frame(examples: list[tuple[str, UserWorkload]]) -> pl.DataFrame:
    """The document's examples as a table: their tree inputs, the tree's answer and its path."""
    return pl.DataFrame([{"example": name, "model": ex.model, "context_tokens": ex.context_tokens,
                          "shared_fraction": round(ex.shared_fraction, 2), "in_flight": ex.concurrency,
                          "tree": engine_label(ex.tree().engine), "path": " → ".join(a for _, a in ex.tree().path)}
                         for name, ex in examples])


def tree_caption(rec: Recommendation) -> str:
    """One sentence for the decision-tree figure: the highlighted path and where it ends."""
    path = " → ".join(f"{q} {a}" for q, a in rec.path)
    return f"Highlighted, this workload's path: {path} ⇒ {engine_label(rec.engine)} ({rec.reason})."


def recommendation_sentence(w: UserWorkload, tree: Recommendation, ev: Evidence, sharing: pl.DataFrame) -> str:
    """The report's answer in one paragraph: they disagree (and why), they agree (and on what), or the data's
    engine is only the tie-break."""
    why = disagreement(w, tree, ev, sharing)
    if why:
        return f"**They disagree.** {why}"
    if ev.decided_by == "tie-break":
        return (f"**The tree says {engine_label(tree.engine)}; the data cannot confirm it**: nothing measured or "
                f"modelled here separates the engines, and {engine_label(ev.engine)} is only the tie-break.")
    f = ev.deciding
    on = (f" ({engine_label(f.winner)}: {f.metric}, {f.experiment})" if f is not None and f.winner else
          f" ({f.finding.split(';')[0]})" if f is not None else "")
    return f"**They agree: {engine_label(tree.engine)}**, on {ev.decided_by} evidence{on}."
