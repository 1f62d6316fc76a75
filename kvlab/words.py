"""The words' shared ground: what several reports say alike (the measured engines and what stands in for what,
unavailable counters, citations, the modelled set-up, model curves and their bands). Each study's own sentences are in
``kvlab/studies/<study>/words.py``, built from its verdicts and typed values."""

from __future__ import annotations

from kvlab.engines import VLLM, VLLM_CPU_BLOCK_TOKENS, engine_label, registry
from kvlab.tables import answer_cell
from kvlab.units import approx_tokens, k_label, sig2, tokens_label


def measured_engines_note(runs: list[dict]) -> str:
    """Which engines the measured rows (``runs``: row dicts) hold, said once per report: 'Measured on CPU x86_64
    (…): vLLM and SGLang.', then, one paragraph each, what a stand-in engine is (never one long sentence)."""
    m = [r for r in runs if r["source"] == "measured"]
    if not m:
        return ""
    engines = sorted({r["engine"] for r in m}, key=lambda e: (registry.order(e), e))
    hw = ", ".join(dict.fromkeys(r["hardware"] for r in m))
    head = f"Measured on {hw}: " + " and ".join(engine_label(e) for e in engines) + "."
    return "\n\n".join([head, *(f"{engine_label(e)}: {registry.note(e)}." for e in engines if registry.note(e))])


def citation_note(published: list[dict]) -> str:
    """Where published rows (row dicts) come from, said once under their table instead of on every row."""
    cites = list(dict.fromkeys(r["citation"] for r in published if r.get("citation") is not None))
    return "Source: " + "; ".join(cites) + "." if cites else "*No citation recorded for these rows.*"


def setup_phrase(model: str, gpu: str, tp: int) -> str:
    """'Kimi-K3 on 8× B300': a configuration named by its values."""
    return f"{model} on {tp}× {gpu}"


def model_title(model: str, gpu: str, tp: int) -> str:
    """The title of a modelled figure: 'modelled: Kimi-K3 on 8× B300'."""
    return f"modelled: {setup_phrase(model, gpu, tp)}"


def no_runs_note(what: str, data_dir, command: str) -> str:
    """Said where a measured section has no runs: what is missing, where kvlab looked, the command that measures it."""
    return f"*No measured {what} under `{data_dir}/runs`: run `{command}` to measure them.*"


def config_name(label: str) -> str:
    """A curve's configuration as reports name it: 'vllm TP8' → 'vLLM TP8', 'sglang TP8+DCP8' → 'SGLang TP8+DCP8'."""
    engine, _, rest = label.partition(" ")
    return f"{engine_label(engine)} {rest}".strip()


def _ratio_at(model_rows: list[dict], context: int, y: str = "batch_time_s") -> tuple[str, float] | None:
    """(faster configuration, slower ÷ faster) at ``context`` when ``model_rows`` hold exactly two curves there."""
    d = sorted((r for r in model_rows if r["context_tokens"] == context), key=lambda r: r[y])
    if len(d) != 2:
        return None
    return d[0]["config"], d[1][y] / d[0][y]


def curves_caption(
    model_rows: list[dict],
    crossover: float | None,
    ranges: dict[str, tuple[int, int]],
    xrange: tuple[float, float] | None = None,
) -> str:
    """One sentence for the modelled batch-time curves (``model_rows``: the curves' row dicts): who is faster at
    each end, where they cross (and the shaded range of the crossover over the unpinned assumptions, ``xrange``),
    which parts are extrapolations (``ranges``: per curve, the published contexts the fit rests on,
    :func:`kvlab.perfmodel.figures.calibrated_ranges`)."""
    first = model_rows[0]
    who = setup_phrase(first["model"], first["gpu"], first["tp"])
    lo, hi = min(r["context_tokens"] for r in model_rows), max(r["context_tokens"] for r in model_rows)
    ends, winners = [], set()
    for c in (lo, hi):
        r = _ratio_at(model_rows, c)
        if r:
            ends.append(f"{config_name(r[0])} is {r[1]:.2f}× faster at {tokens_label(c)}")
            winners.add(r[0])
    band = (
        f" (shaded: {k_label(xrange[0])}–{k_label(xrange[1])} over the assumptions the data cannot pin)"
        if xrange
        else ""
    )
    cross = (
        f"the curves cross at {approx_tokens(crossover)}{band}"
        if crossover is not None and lo <= crossover <= hi
        else f"the curves cross between {tokens_label(lo)} and {tokens_label(hi)}"
        if len(winners) > 1
        else f"the curves do not cross between {tokens_label(lo)} and {tokens_label(hi)}"
    )
    if ranges:
        spans = ", ".join(sorted({f"{tokens_label(a)}–{tokens_label(b)}" for a, b in ranges.values()}))
        lines = (
            f"solid lines span the published {spans} the fit rests on (circles: the article's times), dashed "
            "lines are extrapolations"
        )
    else:
        lines = "every line is dashed: no published point for this configuration, so all of it is an extrapolation"
    body = "; ".join(ends[:1] + [cross] + ends[1:])
    misfits = []
    per_config: dict[str, list[dict]] = {}
    for r in model_rows:
        per_config.setdefault(r["config"], []).append(r)
    for cfg, g in per_config.items():
        bad = [r for r in g if r["fits"] is False]
        if bad:
            misfits.append(
                f"{config_name(cfg)} "
                + (
                    "at every context"
                    if len(bad) == len(g)
                    else f"from {tokens_label(min(r['context_tokens'] for r in bad))}"
                )
            )
    flags = f"; crosses: does not fit in memory ({', '.join(misfits)})" if misfits else ""
    return f"Modelled for {who}: {body}; {lines}{flags}."


def stand_in_note(engines, block_tokens: int = VLLM_CPU_BLOCK_TOKENS) -> str | None:
    """Says, once and plainly, what a stand-in engine (sglang-jax) is, when ``engines`` (the engines a report's
    measured frames hold, :func:`kvlab.studies.sharing_frames.engines_in`) include one; None otherwise."""
    present = registry.ordered(engines)
    stand_ins = [e for e in present if registry.is_stand_in(e)]
    if not stand_ins:
        return None
    e = stand_ins[0]
    metrics = (
        ""
        if registry.adapter_class(e).serves_metrics()
        else " It serves no /metrics: its cache hits are its requests' usage `cached_tokens`, and server counters "
        "it lacks show as not available, never as 0."
    )
    return (
        f"**{engine_label(e)} is not PyTorch {engine_label(registry.family(e))}.** It is {registry.stand_in(e)}. "
        f"The CPU backend of {engine_label(VLLM)} caches whole {block_tokens}-token blocks.{metrics}"
    )


def answer_markdown(answer) -> str:
    """A report's answer (:class:`kvlab.studies.Answer`) as the page shows it first: its sentences after a bold
    'Answer', then its table, if any, with the evidence kind of every row."""
    text = "**Answer.** " + " ".join(answer.sentences)
    rows = [] if answer.table is None else answer.table.to_dicts()
    if not rows:
        return text
    cols = [c for c in rows[0] if not c.endswith("_tokens")]
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)
    body = "\n".join("| " + " | ".join(answer_cell(c, r[c]) for c in cols) + " |" for r in rows)
    return f"{text}\n\n{head}\n{body}"


def band_sentence(
    model_df: list[dict],
    y: str = "batch_time_s",
    unit: str = "s",
    context: int | None = None,
    tokens_per_batch: tuple[int, int] | None = None,
) -> str:
    """What a figure's bands (``model_df``: the curves' row dicts) are and how wide, read at ``context`` (default: 200K when drawn, else the largest
    context): each configuration's value under the default assumptions with its lowest-highest over the assumption
    sets. ``tokens_per_batch`` (a throughput figure): the sets' lowest and highest batch x output tokens, which
    scale a throughput by themselves."""
    cols = model_df[0] if model_df else {}
    if f"{y}_lo" not in cols:
        return ""
    ctxs = sorted({r["context_tokens"] for r in model_df})
    c = context if context in ctxs else (204800 if 204800 in ctxs else ctxs[-1])
    n = max(r["assumption_sets"] for r in model_df) if "assumption_sets" in cols else None
    few = min(r["assumption_sets"] for r in model_df) if "assumption_sets" in cols else n
    first_full = min((r["context_tokens"] for r in model_df if r.get("assumption_sets") == n), default=None)
    parts = []
    for r in model_df:
        if r["context_tokens"] == c:
            parts.append(
                f"{config_name(r['config'])} {r[y]:,.3g} {unit} ({r[y + '_lo']:,.3g}–{r[y + '_hi']:,.3g} {unit})"
            )
    if any(r.get("uncalibrated") for r in model_df):
        text = (
            f"Bands: uncalibrated (no published point of this model was fitted, and a fit to another model's is "
            f"never applied): the lowest to highest over the priors' centre, fast end and slow end under each "
            f"assumption set ({n or ''} in all), the line inside being the priors' centre; at {tokens_label(c)} "
            + ", ".join(parts)
            + "."
        )
    else:
        text = (
            f"Bands: the lowest to highest over the {n or ''} assumption sets the published points cannot choose "
            f"among (each refitted to them), the line inside being the default set's; at {tokens_label(c)} "
            + ", ".join(parts)
            + "."
        ).replace("the  assumption", "the assumption")
    if few != n and first_full:
        text += (
            f" Below {tokens_label(first_full)} tokens only {few} of the sets count: the others' output is as long as "
            "the context, leaving no prompt."
        )
    if tokens_per_batch:
        lo, hi = tokens_per_batch
        text += (
            f" Most of a throughput band's width is the unstated batch: the sets' batches hold {lo:,}–{hi:,} "
            f"output tokens ({hi / lo:.0f}×), and tokens/s scales with them; the published circles' bars are the "
            "article's own times under the same sets. Which engine is faster is read in the batch-time figure."
        )
    return text


def modelled_rate(r: dict) -> str:
    """A configuration's modelled capacity-limited rate in output tokens/s per GPU (reports 04 and 07 alike), to the
    two figures a model that misses its held-out points supports, with its range over the sets: '110 (70–260)';
    where not one sequence meets the TPOT target at the default set, that, with the best of the other sets."""
    lo, hi = sig2(r["tokens_per_s_per_gpu_lo"]), sig2(r["tokens_per_s_per_gpu_hi"])
    if not r["batch"]:
        return f"out of reach at the default set (up to {hi} over the others)"
    return f"{sig2(r['tokens_per_s_per_gpu'])} ({lo}–{hi})"
