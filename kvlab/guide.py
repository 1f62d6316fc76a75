"""Engine choice: document 003's decision tree as a function, beside a recommendation from measured and modelled results.

The tree encodes the document's reasoning (RadixAttention shares prefixes, PagedAttention does
not; vLLM for many concurrent requests and mixed hardware). :func:`from_evidence` answers the
same question from kvlab's own numbers: the physical model for the context length, measured
prefix-sharing runs for the shared fraction, measured concurrency runs for the load. It returns
facts (engines, ratios, the runs compared, what decided); the sentences that say them (and, where the
two disagree, which premise of the tree the data contradict) are in :mod:`kvlab.studies.engine_choice.words`.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kvlab.claims import (
    Grade,
    Repeats,
    engine_difference,
    held_out_error,
    held_out_passes,
    model_factor_decides,
    model_margin,
    winners_held_out,
)
from kvlab.engines import SGLANG, VLLM, engine_label, registry
from kvlab.paths import EXPERIMENTS_DIR
from kvlab.perfmodel import Config, batch_time, model as catalog_model
from kvlab.perfmodel.calibrate import crossover_from_fit, fit_for_model
from kvlab.perfmodel.roofline import kv_split
from kvlab.experiment import ExperimentSpec

#: An engine family (kvlab.engines.FAMILIES): the tree and the evidence name families, measured rows engines.
Engine = str
PRIORITIES = ("throughput", "stability")

#: The tree's numbers, as the document states them.
FIXED_CONTEXT_THRESHOLD = 0.30
CONCURRENCY_THRESHOLD = 100


def nearest(df: pl.DataFrame, col: str, value: float) -> pl.DataFrame:
    """The rows of ``df`` whose ``col`` is nearest to ``value`` (every row at that distance)."""
    if df.is_empty():
        return df
    return (
        df.with_columns((pl.col(col) - value).abs().alias("_d")).filter(pl.col("_d") == pl.col("_d").min()).drop("_d")
    )


def measured_member(family: Engine, engines) -> str:
    """The engine that stands for ``family`` among the measured ``engines``: the family's own engine where it
    ran (PyTorch SGLang), else another member (sglang-jax), else the family's own name."""
    present = set(engines)
    return next((e for e in registry.members(family) if e in present), family)


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
    """Document 003's decision tree, exactly as written (its premises are tested elsewhere, not here); each leaf's
    reason is the tree's own parenthesis, translated ("C++ 라우팅 안정성": C++ routing stability).

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
            return Recommendation(
                SGLANG,
                "RadixAttention's effect at its greatest",
                ((q_shared, "yes"), (q_frac, f"yes ({fixed_context_fraction:.0%})")),
            )
        q_ds = "DeepSeek-family model?"
        path = ((q_shared, "yes"), (q_frac, f"no ({fixed_context_fraction:.0%})"))
        if deepseek_family:
            return Recommendation(SGLANG, "dedicated optimisations built in", (*path, (q_ds, "yes")))
        return Recommendation(VLLM, "about equal; vLLM is easier to operate", (*path, (q_ds, "no")), "equal")
    q_conc = f"≥ {CONCURRENCY_THRESHOLD} concurrent requests?"
    if concurrency >= CONCURRENCY_THRESHOLD:
        return Recommendation(VLLM, "C++ routing stability", ((q_shared, "no"), (q_conc, f"yes ({concurrency})")))
    q_mixed = "Mixed GPU/TPU hardware or frequent model changes?"
    path = ((q_shared, "no"), (q_conc, f"no ({concurrency})"))
    if mixed_hardware_or_frequent_model_changes:
        return Recommendation(VLLM, "hardware and model diversity", (*path, (q_mixed, "yes")))
    q_prio = "Throughput first or ecosystem stability first?"
    if priority == "throughput":
        return Recommendation(SGLANG, "throughput first", (*path, (q_mixed, "no"), (q_prio, "throughput")))
    return Recommendation(VLLM, "ecosystem stability first", (*path, (q_mixed, "no"), (q_prio, "stability")))


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
        m = catalog_model(self.model)
        return m.attention_type in ("mla", "hybrid") or "deepseek" in m.model.lower()

    def tree(self) -> Recommendation:
        return decision_tree(
            self.shared_prefix,
            self.shared_fraction,
            self.deepseek_family(),
            self.concurrency,
            self.mixed_hardware_or_frequent_model_changes,
            self.priority,
        )


#: Document 003's three worked examples and the shipped experiment that sets each up (data/experiments/).
DOCUMENT_EXAMPLES = (
    ("1 · multi-turn RAG, Llama-3.1-8B (SGLang in the document)", "gpu_multi_turn_rag"),
    ("2 · batch classification, Llama-3.1-70B (vLLM in the document)", "gpu_classification_70b"),
    ("3 · reasoning, DeepSeek-R1 (SGLang in the document)", "gpu_reasoning_r1"),
)


def experiment_workload(spec) -> UserWorkload:
    """The tree's inputs for an experiment spec (:class:`kvlab.experiment.ExperimentSpec`), read from its fields.

    - context: prompt + output tokens per request (multi_turn: of the last, longest turn);
    - shared fraction: the workload kind's ``sharing`` (multi_turn, the document's share of the longest
      prompt; shared_prefix, the spec's fraction; otherwise 0, distinct prompts);
    - concurrency: the most requests in flight any run of the matrix has;
    - model, TP: the first engine's (its model id must be a catalog name or alias); SGLang's modelled DCP = TP.
    """
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
    folder = EXPERIMENTS_DIR if experiments_dir is None else experiments_dir
    return [
        (label, experiment_workload(ExperimentSpec.load(folder / f"{name}.yaml"))) for label, name in DOCUMENT_EXAMPLES
    ]


@dataclass(frozen=True)
class Factor:
    """One question answered from data: the facts found and which engine family they favour (None: no difference).

    ``source``: modelled | measured | none. A measured factor keeps ``rows``, the runs nearest the user's workload
    (one dict per run, best first, columns as given), and ``n_engines``, how many engines they hold. With two or
    more: ``margin``, the best engine's lead over the next (≥ 1), and ``grade``, what the grading rules of
    :mod:`kvlab.claims.grading` make of that lead (:func:`kvlab.claims.engine_difference`: CPU runs of two
    implementations cannot decide it, rule 1; otherwise at least 3 repeats a side with min–max ranges apart, rule
    2). Only when the grade is *reproduced* does the factor favour the leader: ``winner`` (the engine as measured,
    e.g. "sglang-jax", whose family is "sglang"), ``runner_up`` and ``experiment`` are then set. The prefix factor
    adds ``zero_ratio``: the next engine's batch time over the best's at shared fraction 0 (None unless both ran
    there and the nearest fraction is not 0).
    The modelled context factor keeps the ``workload``, the batch ``times`` (s) of vLLM TP and SGLang TP+DCP,
    ``held_out`` (the model's held-out test) and, when its margin is within the held-out error (it then favours
    neither engine), ``crossover_range``;
    ``crossover`` (tokens; None: none up to 1M, or DCP divides nothing), ``dcp_divides`` (DCP spreads the KV further than TP does) and
    ``fit_warnings`` (the fit's parameters are implausible).
    """

    name: str  # context | prefix | concurrency
    source: str  # modelled | measured | none
    favours: Engine | None
    rows: tuple[dict, ...] = ()
    n_engines: int = 0
    margin: float | None = None
    #: The grading rules' verdict on the measured lead (None: fewer than two engines, or a modelled factor).
    grade: Grade | None = None
    winner: str | None = None
    runner_up: str | None = None
    experiment: str = ""
    zero_ratio: float | None = None
    workload: UserWorkload | None = None
    times: tuple[float, float] | None = None
    crossover: float | None = None
    dcp_divides: bool = True
    fit_warnings: bool = False
    #: The model's held-out test (winners right, held-out points, mean held-out error as a fraction): the modelled
    #: factor decides only when its margin exceeds that error (rule 4 of :mod:`kvlab.claims.grading`).
    held_out: tuple[int, int, float] | None = None
    #: Where the margin does not exceed the error: the contexts (tokens) over which the two modelled times are
    #: within the error of each other — the crossover as a range.
    crossover_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class Evidence:
    """The data's engine, the factors, and how they decided.

    ``decided_by``: "measured", "modelled", or "tree" when no factor decides (no measured factor passes the grading
    rules and the model does not separate the engines): the engine is then the tree's, no finding of the data;
    ``deciding``: the factor that decided; ``split``: when the measured factors favour the two families equally,
    what broke the tie ("first question": the factor of the tree's first question for this workload; "larger
    margin"), else "".
    """

    engine: Engine
    factors: tuple[Factor, ...]
    decided_by: str = "measured"
    deciding: Factor | None = None
    split: str = ""


def engine_configs(w: UserWorkload):
    """The two configurations the guide compares for ``w``: vLLM TP (no DCP) and SGLang TP + DCP."""
    return Config.of(w.gpu, w.model, VLLM, w.tp, 1), Config.of(w.gpu, w.model, SGLANG, w.tp, w.dcp)


def _within_error_range(
    a, b, fit, error: float, lo: int = 4096, hi: int = 1 << 20, points: int = 81
) -> tuple[float, float] | None:
    """The contexts (log grid ``lo``..``hi``) where configurations ``a`` and ``b``'s modelled batch times are within
    ``error`` of each other (slower ÷ faster ≤ 1 + error): (first, last), or None where they never are."""
    inside = []
    for i in range(points):
        c = round(lo * (hi / lo) ** (i / (points - 1)))
        ta = batch_time(a, c, p=fit.params).batch_time_s
        tb = batch_time(b, c, p=fit.params).batch_time_s
        if max(ta, tb) / min(ta, tb) <= 1 + error:
            inside.append(c)
    return (float(min(inside)), float(max(inside))) if inside else None


def context_factor(w: UserWorkload, fit) -> Factor:
    """Modelled batch times of vLLM TP (no DCP) and SGLang TP+DCP at the user's context (kvlab.perfmodel).

    Where DCP divides nothing (the model's KV heads already spread over TP) the model times the engines alike
    but for DCP's synchronisation, and the factor favours neither. Otherwise the faster engine is favoured only
    when the model passes its held-out test at these assumptions (:func:`kvlab.claims.held_out_passes`: 3 of 4
    held-out winners right, margin above the mean held-out error) **and** its margin here exceeds that error (rule 4
    of :mod:`kvlab.claims.grading`); otherwise the factor favours neither (the model picks no engine anywhere while it
    fails its held-out test) and keeps the crossover as a range (``crossover_range``).
    A fit made on another model's points is never applied: for another model the uncalibrated roofline at its
    priors' centre (:func:`kvlab.perfmodel.calibrate.fit_for_model`).
    """
    fit = fit_for_model(fit, w.model)
    a, b = engine_configs(w)
    ta = batch_time(a, w.context_tokens, p=fit.params).batch_time_s
    tb = batch_time(b, w.context_tokens, p=fit.params).batch_time_s
    error = held_out_error(fit)
    facts = dict(workload=w, times=(ta, tb), fit_warnings=bool(fit.warnings), held_out=(*winners_held_out(fit), error))
    if kv_split(a) == kv_split(b):
        return Factor("context", "modelled", None, dcp_divides=False, **facts)
    x = crossover_from_fit(fit, gpu=w.gpu, model=w.model, dcp=w.dcp, tp=w.tp)
    faster: Engine = VLLM if ta <= tb else SGLANG
    ratio = max(ta, tb) / min(ta, tb)
    contexts = sorted(fit.residuals["context_tokens"].unique().to_list())
    passes = held_out_passes(*winners_held_out(fit), model_margin(fit, contexts) or 0.0, error)
    if not passes or not model_factor_decides(ratio, max(error, 0.001)):
        return Factor(
            "context",
            "modelled",
            None,
            crossover=x,
            crossover_range=_within_error_range(a, b, fit, max(error, 0.001)),
            **facts,
        )
    return Factor("context", "modelled", faster, crossover=x, **facts)


def _two_engine_slice(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of the first experiment and hardware that hold two or more engines (all rows when none does)."""
    for _, g in df.group_by(["experiment", "hardware"], maintain_order=True):
        if g["engine"].n_unique() >= 2:
            return g
    return df


def _graded(
    name: str,
    rows: tuple[dict, ...],
    n: int,
    margin: float,
    metric: str,
    better: str,
    baseline: float | None,
    baseline_at: str,
    **extra,
) -> Factor:
    """A measured factor of two or more engines, its lead graded as the verdicts grade a cross-engine difference
    (:func:`kvlab.claims.engine_difference`); it favours the leader's family only when the grade is *reproduced*."""
    best, second = rows[0], rows[1]
    grade = engine_difference(
        best["engine"],
        second["engine"],
        [r.get("device_kind") for r in (best, second)],
        Repeats.of_row(best, metric),
        Repeats.of_row(second, metric),
        better,
        baseline=baseline,
        baseline_at=baseline_at,
        scope=best.get("hardware") or "",
        what=f"{engine_label(best['engine'])} against {engine_label(second['engine'])}",
    )
    if grade.outcome != "reproduced":
        return Factor(name, "measured", None, rows, n, margin, grade, **extra)
    return Factor(
        name,
        "measured",
        registry.family(best["engine"]),
        rows,
        n,
        margin,
        grade,
        best["engine"],
        second["engine"],
        best["experiment"],
        **extra,
    )


def prefix_factor(w: UserWorkload, sharing: pl.DataFrame) -> Factor:
    """Measured runs at the shared fraction nearest the user's, each engine with its prefix cache on.

    The engines are compared on median batch time (the work done, with each engine's own cache), graded by the
    rules every verdict uses: the baseline of rule 1 is the same comparison at shared fraction 0 (nothing to
    share), kept beside it (``zero_ratio``) so a reader sees how much of the gap is the cache's.
    """
    on = sharing.filter(pl.col("prefix_caching").fill_null(True))
    if on.is_empty():
        return Factor("prefix", "none", None)
    pair = _two_engine_slice(on)
    near = nearest(pair, "shared_fraction", w.shared_fraction).sort("batch_time_s", nulls_last=True)
    rows, n = tuple(near.iter_rows(named=True)), near["engine"].n_unique()
    if n < 2:
        return Factor("prefix", "measured", None, rows, n)
    best, second = rows[0], rows[1]
    margin = second["batch_time_s"] / best["batch_time_s"]
    zero = pair.filter((pl.col("shared_fraction") == 0) & pl.col("engine").is_in([best["engine"], second["engine"]]))
    zero_ratio = None
    if best["shared_fraction"] != 0 and zero["engine"].n_unique() == 2:
        z = {r["engine"]: r["batch_time_s"] for r in zero.iter_rows(named=True)}
        zero_ratio = z[second["engine"]] / z[best["engine"]]  # > 1: the same engine is faster with nothing to share
    baseline = margin if best["shared_fraction"] == 0 else zero_ratio
    return _graded(
        "prefix",
        rows,
        n,
        margin,
        "batch_time_s",
        "lower",
        baseline,
        "0% shared (nothing to reuse)" if baseline is not None else "no run of both engines at 0% shared",
        zero_ratio=zero_ratio,
    )


def concurrency_factor(w: UserWorkload, conc: pl.DataFrame) -> Factor:
    """Measured runs at the in-flight count nearest the user's: completions, failures, completed requests/s.

    The engines are compared on completed requests per second (mean over runs), graded by the rules every verdict
    uses; rule 1's baseline is their ratio at the lowest load both measured below the compared one (none: no
    baseline).
    """
    if conc.is_empty():
        return Factor("concurrency", "none", None)
    pair = _two_engine_slice(conc)
    near = nearest(pair, "in_flight", w.concurrency).sort("requests_per_s", descending=True, nulls_last=True)
    rows, n = tuple(near.iter_rows(named=True)), near["engine"].n_unique()
    if n < 2:
        return Factor("concurrency", "measured", None, rows, n)
    best, second = rows[0], rows[1]
    margin = best["requests_per_s"] / second["requests_per_s"]
    lower = pair.filter(
        pl.col("engine").is_in([best["engine"], second["engine"]]) & (pl.col("in_flight") < best["in_flight"])
    )
    baseline, at = None, f"no load below {best['in_flight']} in flight measured with both engines"
    if not lower.is_empty():
        low = lower.filter(pl.col("in_flight") == lower["in_flight"].min())
        r = {x["engine"]: x["requests_per_s"] for x in low.iter_rows(named=True)}
        if len(r) == 2:
            baseline, at = r[best["engine"]] / r[second["engine"]], f"{low['in_flight'][0]} in flight"
    return _graded("concurrency", rows, n, margin, "requests_per_s", "higher", baseline, at)


def from_evidence(w: UserWorkload, fit, sharing: pl.DataFrame, conc: pl.DataFrame) -> Evidence:
    """A recommendation from data: measured two-engine differences first, then the modelled context factor, else
    the tree.

    A measured factor whose lead passes the grading rules (:class:`Factor` ``grade``) outranks the model; factors
    that do not (one engine measured, none, CPU runs of two implementations, too few repeats, ranges that overlap)
    inform but do not decide. Measured factors vote by engine family (sglang-jax counts for the SGLang family);
    when they split evenly the factor of the tree's first question decides (prefix for a shared prefix, else
    concurrency; ``split`` records it). When no factor decides, the guide falls back to the tree (``decided_by``
    "tree").
    """
    factors = (context_factor(w, fit), prefix_factor(w, sharing), concurrency_factor(w, conc))
    measured = [f for f in factors if f.source == "measured" and f.favours]
    if measured:
        votes = {e: [f for f in measured if f.favours == e] for e in (VLLM, SGLANG)}
        primary = "prefix" if w.shared_prefix else "concurrency"
        if len(votes[VLLM]) != len(votes[SGLANG]):
            engine: Engine = max(votes, key=lambda e: len(votes[e]))
            deciding = next((f for f in votes[engine] if f.name == primary), votes[engine][0])
            return Evidence(engine, factors, "measured", deciding)
        # The tree's own first question says which factor is this workload's: shared prefix, else the load.
        top = next((f for f in measured if f.name == primary), None)
        split = "first question"
        if top is None:
            top, split = max(measured, key=lambda f: f.margin or 0.0), "larger margin"
        return Evidence(top.favours, factors, "measured", top, split)
    if factors[0].favours:
        return Evidence(factors[0].favours, factors, "modelled", factors[0])
    return Evidence(w.tree().engine, factors, "tree")
