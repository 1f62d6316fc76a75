"""Engine choice: document 003's decision tree as a function, beside a recommendation from measured and modelled results.

The tree encodes the document's reasoning (RadixAttention shares prefixes, PagedAttention does
not; vLLM for many concurrent requests and mixed hardware). :func:`from_evidence` answers the
same question from kvlab's own numbers: the physical model for the context length, measured
prefix-sharing runs for the shared fraction, measured concurrency runs for the load. The sentences
that say all this (and, where the two disagree, which premise of the tree the data contradict) are in
:mod:`kvlab.narrative`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from kvlab.tables import number, percent

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


def engine_configs(w: UserWorkload):
    """The two configurations the guide compares for ``w``: vLLM TP (no DCP) and SGLang TP + DCP."""
    from kvlab.perfmodel import Config

    return Config.of(w.gpu, w.model, "vllm", w.tp, 1), Config.of(w.gpu, w.model, "sglang", w.tp, w.dcp)


def context_factor(w: UserWorkload, fit) -> Factor:
    """Modelled batch times of vLLM TP (no DCP) and SGLang TP+DCP at the user's context (kvlab.perfmodel)."""
    from kvlab.perfmodel import batch_time
    from kvlab.perfmodel.calibrate import crossover_from_fit
    from kvlab.perfmodel.roofline import kv_split

    a, b = engine_configs(w)
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


def nearest(df: pl.DataFrame, col: str, value: float) -> pl.DataFrame:
    if df.is_empty():
        return df
    return df.with_columns((pl.col(col) - value).abs().alias("_d")).filter(pl.col("_d") == pl.col("_d").min()).drop("_d")


def _two_engine_slice(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of the first experiment and hardware that hold two or more engines (all rows when none does)."""
    for _, g in df.group_by(["experiment", "hardware"], maintain_order=True):
        if g["engine"].n_unique() >= 2:
            return g
    return df


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
    near = nearest(pair, "shared_fraction", w.shared_fraction).sort("batch_time_s", nulls_last=True)
    parts = [f"{engine_label(r['engine'])} reuses {percent(r['cache_hit_rate'])} of prompt tokens at shared fraction "
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
    near = nearest(_two_engine_slice(conc), "in_flight", w.concurrency).sort("requests_per_s", descending=True,
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


def examples_frame(examples: list[tuple[str, UserWorkload]]) -> pl.DataFrame:
    """The document's examples as a table: their tree inputs, the tree's answer and its path."""
    return pl.DataFrame([{"example": name, "model": ex.model, "context_tokens": ex.context_tokens,
                          "shared_fraction": round(ex.shared_fraction, 2), "in_flight": ex.concurrency,
                          "tree": engine_label(ex.tree().engine), "path": " → ".join(a for _, a in ex.tree().path)}
                         for name, ex in examples])

