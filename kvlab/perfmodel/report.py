"""Text reports of the model for the CLI (`kvlab model`): predictions for a spec, the calibration, the crossover."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl

from kvlab import plan
from kvlab.tables import kv_format_words
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.engines.registry import FAMILY_OF
from kvlab.paths import DATA_DIR
from kvlab.perfmodel.calibrate import (
    BANDWIDTH_GRID,
    PUBLISHED_PRECISION_S,
    PRIOR_SOURCES,
    PRIORS,
    UNPINNED_AXES,
    Fit,
    calibrate,
    PRIOR_CENTRE,
    PRIOR_FAST,
    PRIOR_SLOW,
    UNCALIBRATED_NOTE,
    consistent_fits,
    crossover_from_fit,
    crossover_range,
    fit_for_model,
    forecast,
    implausible,
    physics_check,
    published_fit,
    refits,
)
from kvlab.catalog import CatalogError, device_gpu, gpu as find_gpu, model as find_model, row_gpu
from kvlab.perfmodel.ranges import held_out_by_set, per_step_costs
from kvlab.perfmodel.reference import bound_checks
from kvlab.perfmodel.throughput import capacity_limited, capacity_limited_lines
from kvlab.perfmodel.roofline import GIB, Assumptions, Config, Params, Workload, batch_time, crossover_context
from kvlab.experiment import expand
from kvlab.store import load_runs
from kvlab.units import approx_tokens, context_label, k_label, token_range

DEFAULT_CONTEXTS = (65536, 204800)


def params_for(
    gpu_key: str,
    data_dir: str | Path = DATA_DIR,
    workload: Workload = Workload(),
    assumptions: Assumptions = Assumptions(),
    model: str | None = None,
) -> tuple[Params, str, Fit | None]:
    """Parameters to predict ``model`` with on ``gpu_key`` and where they come from.

    Measured runs on that hardware, when present, are fitted (with any published rows of it); otherwise the
    fit to the B300 article is used (efficiencies are fractions of each GPU's own peaks, so they carry over,
    as an assumption); otherwise the defaults of :class:`Params`. A fit is never applied to another model than the
    one it was fitted on: for another, the uncalibrated roofline at the priors' centre (:func:`fit_for_model`).
    """
    params, where, fit = _params_for(gpu_key, data_dir, workload, assumptions)
    if fit is not None and model is not None and fit_for_model(fit, model).kind == "uncalibrated":
        return PRIOR_CENTRE, UNCALIBRATED_NOTE + f" (the available fit is {fit.model}'s)", None
    return params, where, fit


def _params_for(
    gpu_key: str,
    data_dir: str | Path,
    workload: Workload,
    assumptions: Assumptions,
) -> tuple[Params, str, Fit | None]:
    try:
        runs = load_runs(data_dir)
    except FileNotFoundError:
        runs = None
    if runs is not None and runs.height:
        on_it = pl.Series([_gpu_key(r) == gpu_key for r in runs.iter_rows(named=True)], dtype=pl.Boolean)
        if runs.filter(on_it & (runs["source"] == "measured")).height:
            fits = calibrate(runs.filter(on_it), workload, assumptions)
            if gpu_key in fits:
                return fits[gpu_key].params, f"fitted to measured runs on {gpu_key}", fits[gpu_key]
    if gpu_key == "CPU":
        return Params(), "uncalibrated defaults: no measured CPU runs; CPU catalog figures are nominal", None
    try:
        # the article's own workload assumption, whatever workload is being predicted
        fit = published_fit(data_dir, Workload(), Assumptions(kv_layers=assumptions.kv_layers))
    except (FileNotFoundError, ValueError):
        return Params(), "uncalibrated defaults", None
    where = "fitted to the B300 article's published batch times"
    return fit.params, where if gpu_key == fit.hardware else f"{where} (efficiencies carried over to {gpu_key})", fit


def _gpu_key(row: dict) -> str | None:
    """The catalog key of the device a results row ran on (its ``device_kind`` and ``accelerator``); None where the
    catalog does not hold it."""
    try:
        return row_gpu(row).gpu
    except KeyError:
        return None


def describe(
    configs: Iterable[Config],
    contexts: Iterable[int],
    workload: Workload = Workload(),
    params: Params = Params(),
    assumptions: Assumptions = Assumptions(),
) -> str:
    """One line per configuration x context: memory, concurrency, prefill/decode/batch time, throughput."""
    head = (
        f"{'config':<18}{'context':>9}{'fits':>6}{'seqs':>6}{'waves':>6}{'KV tokens':>12}{'w/GPU GiB':>10}"
        f"{'prefill s':>10}{'decode s':>10}{'batch s':>9}{'out tok/s':>10}{'step ms':>9}{'KV ms':>7}{'comm ms':>8}"
    )
    lines = [head, "-" * len(head)]
    for cfg in configs:
        for c in contexts:
            pr = batch_time(cfg, int(c), workload, params, assumptions)
            st = pr.step_first
            kv_ms = 1e3 * st.kv_bytes / (cfg.gpu.mem_bandwidth_bytes_per_s * params.bandwidth_efficiency)
            cap = pr.memory.kv_capacity_tokens
            lines.append(
                f"{cfg.label():<18}{context_label(int(c)):>9}{'yes' if pr.fits else 'NO':>6}{pr.concurrent_seqs:>6}"
                f"{pr.waves:>6}{(f'{cap:,}' if cap < 2**61 else '-'):>12}{pr.memory.weights_bytes_per_gpu / GIB:>10.1f}"
                f"{pr.prefill_s:>10.1f}{pr.decode_s:>10.1f}{pr.batch_time_s:>9.1f}{pr.output_tokens_per_s:>10.1f}"
                f"{st.total_s * 1e3:>9.2f}{kv_ms:>7.2f}{(st.tp_comm_s + st.dcp_comm_s) * 1e3:>8.2f}"
            )
            if not pr.fits:
                lines.append(f"{'':<18}  -> {pr.memory.reason}")
    return "\n".join(lines)


def spec_configs(target: str | Path, a: Assumptions = Assumptions()) -> tuple[list[tuple[Config, int, Workload]], str]:
    """Every distinct (configuration, prompt length, workload) of an experiment file, via kvlab.experiment."""
    spec = plan.load(target)  # as a sweep would plan it: kvlab's tiny model made when the spec names it
    g = device_gpu(spec.device.kind, spec.device.accelerator, spec.hardware)
    seen, out = set(), []
    for run in expand(spec, origin=target):
        e, w = run.engine, run.workload
        mem_util = None if g.gpu == "CPU" else e.mem_util
        key = (e.name, e.model, e.tp, e.dcp, mem_util, e.kv_cache_bytes, w.prompt_len, w.batch_size, w.output_tokens)
        if key in seen:
            continue
        seen.add(key)
        cfg = Config(g, find_model(e.served_model_name if _known(e.served_model_name) else e.model),
                     e.name, e.tp, e.dcp, mem_util, e.kv_cache_bytes)  # fmt: skip
        out.append((cfg, w.prompt_len, Workload(w.batch_size, w.output_tokens)))
    return out, spec.name


def _known(name: str | None) -> bool:
    if not name:
        return False
    try:
        find_model(name)
        return True
    except KeyError:
        return False


def model_command(
    target: str | None = None,
    *,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    engine: str | None = None,
    tp: int = 8,
    dcp: int | None = None,
    context_tokens: int | list[int] | None = None,
    batch_size: int | None = None,
    output_tokens: int | None = None,
    mem_util: float = 0.92,
    kv_layers: int | None = None,
    data_dir: str | Path = DATA_DIR,
    tpot_ms: float | None = None,
) -> str:
    """The text `kvlab model` prints.

    With no engine, compares vLLM TP (no DCP) against SGLang TP+DCP (dcp defaults to tp), as the article
    did. ``target`` may be an experiment file; explicit arguments override it. With ``tpot_ms``, it prints the
    capacity-limited throughput at each context first (:mod:`kvlab.perfmodel.throughput`): the model's main answer.
    """
    if target:
        return _model_command_spec(target, kv_layers, data_dir)
    defaults = Workload()
    w = Workload(int(batch_size or defaults.batch_size), int(output_tokens or defaults.output_tokens))
    a = Assumptions(kv_layers=kv_layers, default_mem_util=mem_util)
    contexts = [context_tokens] if isinstance(context_tokens, int) else list(context_tokens or DEFAULT_CONTEXTS)
    engines = [(engine, tp, dcp or 1)] if engine else [(VLLM, tp, 1), (SGLANG, tp, dcp or tp)]
    g = find_gpu(gpu)
    is_cpu = g.gpu == "CPU"
    configs = [Config.of(gpu, model, e, t, d, None if is_cpu else mem_util) for e, t, d in engines]
    params, provenance, fit = params_for(g.gpu, data_dir, w, a, configs[0].model.model)
    out = [
        f"kvlab model: {configs[0].model.model} on {g.gpu} ({g.name}), mem_util {mem_util if not is_cpu else 'n/a'}",
        K_NOTE,
        *_capacity_limited_lines(tpot_ms, data_dir, a, engines, contexts, gpu=gpu, model=model, mem_util=mem_util),
        f"workload: batch_size {w.batch_size}, output_tokens {w.output_tokens}"
        + ("" if (batch_size and output_tokens) else " (assumed where not given: kvlab.perfmodel.Workload)"),
        f"params ({provenance}): prefill_efficiency {params.prefill_efficiency:.3f}, "
        f"bandwidth_efficiency {params.bandwidth_efficiency:.3f}, "
        f"dcp_layer_latency {params.dcp_layer_latency_s * 1e6:.0f} us",
        "",
        describe(configs, contexts, w, params, a),
    ]
    if params is PRIOR_CENTRE:  # uncalibrated: the priors' range beside the centre
        out += _prior_range_lines(configs, contexts, w, a)
    if fit is not None:
        out += ["", fit.summary()]
        if fit.hardware == g.gpu and any(d > 1 for *_, d in engines):
            out += _crossover_lines(fit, provenance, data_dir, contexts, w, a, configs[0],
                                    gpu=gpu, model=model, tp=tp, dcp=dcp or tp, mem_util=mem_util)  # fmt: skip
    return "\n".join(out)


def _capacity_limited_lines(
    tpot_ms: float | None, data_dir, a: Assumptions, engines, contexts, *, gpu: str, model: str, mem_util: float
) -> list[str]:
    """`kvlab model --tpot-ms`: the capacity-limited throughput per configuration at each context, then a blank line
    ([] without a TPOT target)."""
    if tpot_ms is None:
        return []
    tp = engines[0][1]
    sens, _ = crossover_range(data_dir, a, gpu=gpu, model=model, tp=tp, dcp=max(d for *_, d in engines), physics=True)
    cfgs = tuple((e, d) for e, _t, d in engines)
    out = []
    for c in contexts:
        table = capacity_limited(sens, gpu, model, int(c), tpot_ms, mem_util, cfgs, tp, a)
        out += capacity_limited_lines(table)
    return out + [""]


def _prior_range_lines(configs: list[Config], contexts: list[int], w: Workload, a: Assumptions) -> list[str]:
    """Uncalibrated: each configuration's batch time at each context at the priors' fast and slow ends."""
    return [
        "batch time over the priors' range (fast end - slow end), uncalibrated:",
        *(
            f"  {cfg.label()} at {context_label(int(c))}: "
            f"{batch_time(cfg, int(c), w, PRIOR_FAST, a).batch_time_s:,.1f}-"
            f"{batch_time(cfg, int(c), w, PRIOR_SLOW, a).batch_time_s:,.1f} s"
            for cfg in configs
            for c in contexts
        ),
    ]


def _crossover_lines(
    fit: Fit, provenance: str, data_dir: str | Path, contexts: list[int], w: Workload, a: Assumptions,
    first: Config, *, gpu: str, model: str, tp: int, dcp: int, mem_util: float,
) -> list[str]:  # fmt: skip
    """A fit of this GPU, with DCP compared: where vLLM TP``tp`` and SGLang TP``tp``+DCP``dcp`` cross, what the
    physics says of a free fit to the published points, the per-step costs and the crossover's range over the
    assumption sets (from ``first``, the first configuration compared); and, for a fit to the published points,
    the checks against them."""
    hardware, name = fit.hardware, first.model.model
    x = crossover_from_fit(fit, gpu=hardware, model=name, tp=tp, dcp=dcp, workload=w, assumptions=a)
    out = [
        f"  crossover vLLM TP{tp} vs SGLang TP{tp}+DCP{dcp}: "
        + (approx_tokens(x) if x else "none up to 1M tokens")
        + " under the assumptions above"
    ]
    if fit.kind == "free" and "published" in provenance:
        out += ["", *physics_lines(fit, data_dir, tuple(int(c) for c in contexts), w, a, hardware, name, tp, dcp)]
    sens, _ = crossover_range(data_dir, a, physics=True)
    out += step_cost_lines(sens)
    out.append(crossover_range_line(first, Config.of(gpu, model, SGLANG, tp, dcp, mem_util), data_dir, a, sens))
    if "published" in provenance:
        out.append(
            "  held-out winners (each published point left out in turn, per assumption set): "
            + held_out_by_set(sens, data_dir, base=a).text()
        )
        out += bound_lines(data_dir)
        cons = consistent_fits(sens, data_dir, gpu=hardware, model=name, tp=tp, dcp=dcp, base=a)
        out.append("  " + consistent_text(cons))
    return out


#: Every page that abbreviates a context says what K is (`kvlab model` prints it under its first line).
K_NOTE = "contexts in K are K = 1,024 tokens: 64K = 65,536, 200K = 204,800, 1,024K = 1M = 1,048,576"


def consistent_summary(cons) -> dict:
    """What the fits consistent with the published totals share, as plain values (for the reports' prose):
    candidates, kept, those over the hardware's peak (never kept), tolerance, the batch sizes they assume, their
    winners per context and crossover range."""
    k = cons.filter(cons["consistent"])
    xo = k["crossover_tokens"].drop_nulls()
    winners = [
        (int(col[7:-1]) * 1024, k[col].value_counts(sort=True).rows())
        for col in cons.columns
        if col.startswith("winner_")
    ]
    possible = cons.filter(cons["over_peak"] == "")["max_abs_residual_pct"] if "over_peak" in cons.columns else None
    best = float((possible if possible is not None and possible.len() else cons["max_abs_residual_pct"]).min())
    return {
        "candidates": cons.height,
        "kept": k.height,
        "over_peak": int((cons["over_peak"] != "").sum()) if "over_peak" in cons.columns else 0,
        "tolerance_pct": round(float(cons["threshold_pct"][0] - best), 9),
        "batches": "/".join(str(b) for b in sorted(k["batch_size"].unique().to_list())),
        "winners": winners,
        "crossover": (float(xo.min()), float(xo.max())) if xo.len() else None,
    }


def consistent_text(cons) -> str:
    """Where the published totals are under-determined, in one paragraph: the rule, how many of the candidate fits
    (:func:`~kvlab.perfmodel.calibrate.consistent_fits`) it keeps, what they assume and what they predict."""
    k = cons.filter(cons["consistent"])
    sets = cons.select("batch_size", "output_tokens", "expert_reads", "mla_width", "kv_format").n_unique()
    summary = consistent_summary(cons)
    thr = float(cons["threshold_pct"][0])
    tol = summary["tolerance_pct"]
    over = cons.filter(cons["over_peak"] != "")
    exact = int(k["within_precision"].sum())
    head = (
        f"fits consistent with the published totals (rule: within the hardware's peak, and largest residual within "
        f"{tol:g} points of the best such fit's {thr - tol:.1f}%, i.e. at most {thr:.1f}%): {k.height:,} of "
        f"{cons.height:,} candidates ({sets} assumption sets × the free fit, the physics-only fit and "
        f"{len(BANDWIDTH_GRID)} fixed decode bandwidths {BANDWIDTH_GRID[0]:g}–{BANDWIDTH_GRID[-1]:g} of peak); "
        f"{over.height:,} candidates need prefill or bandwidth above 100% of peak and are excluded (not physical)"
        + (f", the closest of them missing a total by {over['max_abs_residual_pct'].min():.1f}%" if over.height else "")
        + f"; {exact} of the consistent meet every total within its stated precision (±{PUBLISHED_PRECISION_S:g} s)"
    )
    if not k.height:
        return head + "."

    def vals(col: str, fmt=str) -> str:
        return "/".join(fmt(v) for v in sorted(k[col].unique().to_list(), key=lambda v: (v is None, v)))

    phys = k.filter(k["physical"] & (k["fit"] == "physics-only"))
    xo = k["crossover_tokens"].drop_nulls()
    wins = []
    for col in [c for c in k.columns if c.startswith("winner_")]:
        counts = k[col].value_counts(sort=True).rows()
        wins.append(" and ".join(f"{w} faster at {col[7:].upper()} in {n} of {k.height}" for w, n in counts))
    text = (
        head + f". They assume batch {vals('batch_size')}, output {vals('output_tokens', lambda v: f'{v:,}')}, "
        f"expert reads {vals('expert_reads')}, KV format {vals('kv_format', kv_format_words)}, MLA width {vals('mla_width')}; "
        f"prefill {k['prefill_efficiency'].min():.1%}–{k['prefill_efficiency'].max():.1%} and decode bandwidth "
        f"{k['bandwidth_efficiency'].min():.1%}–{k['bandwidth_efficiency'].max():.1%} of peak. "
        f"{'; '.join(wins)}; crossover "
        + (token_range(xo.min(), xo.max()) if xo.len() else "none up to 1M tokens")
        + (f" (crossing in {xo.len()} of {k.height})" if 0 < xo.len() < k.height else "")
        + "."
    )
    if phys.height:
        text += (
            f" {phys.height} of them are physics-only fits with every parameter inside its prior, but they need "
            f"c(SGLang) {phys['sglang_overhead_ms'].min():.0f}-{phys['sglang_overhead_ms'].max():.0f} ms and "
            f"c(vLLM) {phys['vllm_overhead_ms'].min():.0f}-{phys['vllm_overhead_ms'].max():.0f} ms per decode "
            "step, which no prior bounds."
        )
    else:
        text += " None of them is a physics-only fit: no fit inside every prior reproduces the totals this closely."
    return text


def physics_lines(
    free_fit: Fit,
    data_dir: str | Path,
    contexts: tuple[int, ...],
    w: Workload,
    a: Assumptions,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp: int = 8,
) -> list[str]:
    """The physics-only fit (every parameter inside its prior) beside the free fit, each with its winners at
    ``contexts`` and its crossover, and the priors with their sources."""
    phys = published_fit(data_dir, Workload(), Assumptions(kv_layers=a.kv_layers), physics=True)
    priors = []
    for name, (lo, hi) in PRIORS.items():
        if name == "dcp_layer_latency_s":
            rng = f"{lo * 1e6:g}-{hi * 1e6:g} us"
        elif name.endswith("_overhead_s"):
            rng = f"{lo * 1e3:g}-{hi * 1e3:g} ms per step (beyond it: the unexplained per-step cost)"
        else:
            rng = f"{lo:g}-{hi:g}"
        priors.append(f"    {name}: {rng} ({PRIOR_SOURCES[name]})")
    return [
        phys.summary(),
        "  priors:",
        *priors,
        f"  free fit beside physics-only fit (vLLM TP{tp} vs SGLang TP{tp}+DCP{dcp}):",
        physics_check(free_fit, phys, contexts, w, a),
    ]


def step_cost_lines(sens) -> list[str]:
    """Per engine, the fitted per-step overhead and the unexplained per-step cost of the bounded fits, with their
    ranges over the assumption sets (:func:`kvlab.perfmodel.ranges.per_step_costs`)."""
    out = [
        f"  per-step cost per engine (bounded fits, every named term inside its prior; {sens.height} assumption sets):"
    ]
    for e, c in per_step_costs(sens).items():
        f, u = c.fitted_overhead_ms, c.unexplained_ms
        out.append(
            f"    {engine_label(e)}: fitted per-step overhead {f.default:.2f} ms (range {f.lo:.2f}-{f.hi:.2f}); "
            f"unexplained per-step cost {u.default:.1f} ms (range {u.lo:.1f}-{u.hi:.1f}) that nothing in the "
            "model explains"
        )
    return out


def bound_lines(data_dir: str | Path = DATA_DIR) -> list[str]:
    """The model's throughput bound against each published measured GPU run (data/reference/published_gpu_runs.yaml)."""
    try:
        checks = bound_checks(data_dir)
    except CatalogError as exc:
        return [f"  published GPU runs: {exc}"]
    out = ["  bound vs published measured GPU runs (a published figure above the bound contradicts the model):"]
    for c in checks:
        r = c.run
        out.append(
            f"    {r.run_id}: {r.model} on {r.gpu}, {r.input_tokens:,} in: bound {c.bound:,.0f} >= published "
            f"{r.value:,g} tok/s/GPU, margin {c.margin:.2f}x"
            if c.consistent
            else f"    {r.run_id}: CONTRADICTED — bound {c.bound:,.0f} < published {r.value:,g} tok/s/GPU "
            f"(margin {c.margin:.2f}x): {c.wrong_term()}"
        )
        if r.concurrency_per_gpu:
            out[-1] += f"; KV capacity {c.capacity_per_gpu:,.1f} sequences/GPU for {r.concurrency_per_gpu:g} published"
        out.append(f"      source: {r.citation()}")
    return out


def crossover_range_line(vllm: Config, sglang: Config, data_dir: str | Path, a: Assumptions, sens=None) -> str:
    """The crossover of ``vllm`` and ``sglang`` over every assumption set the published points cannot pin
    (:func:`~kvlab.perfmodel.calibrate.crossover_range`, or ``sens`` when the caller has it, with ``physics``),
    with how many of those fits are physically plausible, and the same range under each set's physics-only fit."""
    if sens is None:
        sens, _ = crossover_range(data_dir, a, physics=True)

    def span(physics: bool) -> str:
        xs = [
            v
            for v in (crossover_context(vllm, sglang, w, p, ai) for w, ai, p in refits(sens, a, physics))
            if v is not None
        ]
        return (
            f"{token_range(min(xs), max(xs))}, crossing in {len(xs)} of {sens.height}"
            if xs
            else f"no crossover up to 1M tokens in any of the {sens.height}"
        )

    plausible = int(sens["physical"].sum())
    w200 = sens["winner_200k"].to_list()
    p200 = sens["phys_winner_200k"].to_list()
    return (
        f"  crossover range over what the published points cannot pin ({UNPINNED_AXES}, {sens.height} refits): "
        f"free fits {span(False)}; {engine_label(SGLANG)} wins at 200K in {w200.count(engine_label(SGLANG))} of "
        f"{sens.height}; "
        f"{plausible} of {sens.height} free fits physically plausible"
        + ("" if plausible else ": read the model as an illustration, not a forecast")
        + "\n"
        f"  physics-only fits over the same {sens.height} sets: {span(True)}; {engine_label(SGLANG)} wins at 200K in "
        f"{p200.count(engine_label(SGLANG))} of {sens.height}; residuals up to "
        f"{sens['phys_max_abs_residual_pct'].max():.0f}%"
    )


def _model_command_spec(target: str, kv_layers: int | None, data_dir: str | Path) -> str:
    a = Assumptions(kv_layers=kv_layers)
    items, name = spec_configs(target, a)
    g = items[0][0].gpu
    params, provenance, fit = params_for(g.gpu, data_dir, Workload(), a, items[0][0].model.model)
    out = [
        f"kvlab model: experiment '{name}' ({target}) on {g.gpu} ({g.name})",
        K_NOTE,
        f"params ({provenance}): prefill_efficiency {params.prefill_efficiency:.3f}, "
        f"bandwidth_efficiency {params.bandwidth_efficiency:.3f}, dcp_layer_latency {params.dcp_layer_latency_s * 1e6:.0f} us",
    ]
    groups: dict[tuple, list] = {}
    for cfg, prompt, w in items:
        groups.setdefault((w, cfg.mem_util, cfg.kv_cache_bytes), []).append((cfg, prompt))
    for (w, util, kvb), members in groups.items():
        cfgs = list(dict.fromkeys(c for c, _ in members))
        prompts = sorted({p for _, p in members})
        budget = f", KV budget {kvb:,.0f} B" if kvb else ""
        out += [
            "",
            f"batch_size {w.batch_size}, output_tokens {w.output_tokens}, mem_util {util}{budget}; prompt tokens {prompts}",
        ]
        out.append(describe(cfgs, prompts, w, params, a))
    if fit is not None:
        out += ["", fit.summary()]
    est = gpu_minutes_line(plan.load(target), data_dir)
    if est:
        out += ["", est.removeprefix("# ")]
    pins = run_pins(target)
    if pins:
        out += ["", "which of the model's parameters each run pins:", *pins]
    return "\n".join(out)


#: The planner's assumption for one server start on a GPU host (loading the weights from local disk, compiling and
#: capturing CUDA graphs): 10 minutes. Kimi-K3's 1.56 TB checkpoint read at ~3 GB/s alone takes ~9 minutes; stated,
#: not measured, and the engines' startup_timeout_s (3,600 s in b300_step_fit.yaml) is only a cap.
SERVER_START_S = 600.0


def gpu_minutes(spec, data_dir: str | Path = DATA_DIR) -> dict | None:
    """What a sweep of ``spec`` would cost on its GPU host, in GPU-minutes: every run (repeats included) at its
    modelled batch time under the Kimi-K3 fits (the free fit and the physics-only fit: a range), plus one
    :data:`SERVER_START_S` per server start, times the GPUs each server holds (tp). Retries and warm-up requests are
    not counted. None for a CPU experiment or hardware/models the catalog does not know.

    Returns ``runs``, ``servers``, ``gpus`` (most held at once), ``run_minutes`` (lo, hi) of wall time,
    ``start_minutes``, ``gpu_minutes`` (lo, hi) and ``wall_minutes`` (lo, hi): the runs' batch time plus the server
    starts, one after the other as a sweep on one host runs them (its servers never overlap on GPUs)."""
    if spec.device.on_cpu:
        return None
    try:
        g = device_gpu(spec.device.kind, spec.device.accelerator, spec.hardware)
        runs = expand(spec)
        fits = [published_fit(data_dir), published_fit(data_dir, physics=True)]
    except (KeyError, FileNotFoundError, ValueError):
        return None
    totals = []
    for f in fits:
        gpu_s = wall = 0.0
        for r in runs:
            e, w = r.engine, r.workload
            name = e.served_model_name if _known(e.served_model_name) else e.model
            cfg = Config(g, find_model(name), e.name, e.tp, e.dcp, e.mem_util, e.kv_cache_bytes)
            p = fit_for_model(f, cfg.model.model).params
            t = batch_time(cfg, w.context_tokens, Workload(w.batch_size, w.output_tokens), p).batch_time_s
            wall += t
            gpu_s += t * e.tp
        totals.append((wall, gpu_s))
    servers = plan.by_server(runs)
    start_gpu_s = sum(SERVER_START_S * group[0].engine.tp for _, group in servers)
    return {
        "runs": len(runs),
        "servers": len(servers),
        "gpus": max(r.engine.tp for r in runs),
        "run_minutes": (min(t[0] for t in totals) / 60, max(t[0] for t in totals) / 60),
        "start_minutes": len(servers) * SERVER_START_S / 60,
        "gpu_minutes": tuple((start_gpu_s + t[1]) / 60 for t in sorted(totals, key=lambda t: t[1])),
        "wall_minutes": tuple((len(servers) * SERVER_START_S + t) / 60 for t in sorted(t[0] for t in totals)),
    }


def gpu_minutes_line(spec, data_dir: str | Path = DATA_DIR) -> str:
    """The dry run's estimate in words ('' where :func:`gpu_minutes` has none)."""
    est = gpu_minutes(spec, data_dir)
    if est is None:
        return ""
    lo, hi = est["gpu_minutes"]
    rl, rh = est["run_minutes"]
    wl, wh = (f"{m / 60:,.1f}" for m in est["wall_minutes"])
    return (
        f"# estimate: {lo:,.0f}-{hi:,.0f} GPU-minutes on {est['gpus']} GPUs ≈ {wl if wl == wh else f'{wl}-{wh}'} h "
        f"wall ({est['runs']} runs, modelled "
        f"{rl:,.0f}-{rh:,.0f} min of batch time under the free and the physics-only fit; {est['servers']} server "
        f"starts at an assumed {SERVER_START_S / 60:g} min each; retries and warm-up not counted)"
    )


def run_pins(target: str | Path) -> list[str]:
    """One line per distinct run of an experiment file (engine label, context, batch, output): which of the model's
    free parameters (the fields of :class:`~kvlab.perfmodel.roofline.Params`, plus the KV format and expert reads it
    assumes) its TTFT and TPOT pin. Empty unless some engine label runs at three or more contexts at one workload
    (a step-fit design, such as data/experiments/b300_step_fit.yaml)."""
    spec = plan.load(target)
    runs = expand(spec, origin=target)
    base = spec.workload
    ctx_at_base: dict[str, set[int]] = {}
    for r in runs:
        w = r.workload
        if (w.batch_size, w.output_tokens) == (base.batch_size, base.output_tokens):
            ctx_at_base.setdefault(r.engine_label, set()).add(w.context_tokens)
    if not any(len(c) >= 3 for c in ctx_at_base.values()):
        return []
    dcp_of = {}
    for r in runs:
        dcp_of.setdefault(r.engine.name, set()).add(r.engine.dcp)
    seen, out = set(), []
    for r in runs:
        e, w = r.engine, r.workload
        key = (r.engine_label, w.context_tokens, w.batch_size, w.output_tokens)
        if key in seen:
            continue
        seen.add(key)
        c = f"c({engine_label(FAMILY_OF[e.name])})"
        fmt = next((e.extra_args[i + 1] for i, a in enumerate(e.extra_args[:-1]) if a == "--kv-cache-dtype"), None)
        if fmt:
            what = f"kv_format ({fmt} KV: its slope against context beside the BF16 runs gives the bytes a token costs)"
        elif e.dcp == 1 and len(dcp_of.get(e.name, ())) > 1:
            what = (
                f"dcp_layer_latency_s (DCP off beside DCP {max(dcp_of[e.name])} in the same engine at the same "
                f"context: the difference is DCP's KV split and collectives; {c} cancels)"
            )
        elif w.batch_size != base.batch_size:
            what = (
                f"{c} and expert reads (TPOT against batch size at a fixed context: the overhead reads no bytes, "
                "the routed experts grow with the batch)"
            )
        elif w.output_tokens != base.output_tokens:
            what = "linearity of the KV term (step time as the context grows by the output within one run)"
        elif len(ctx_at_base.get(r.engine_label, ())) >= 3:
            what = (
                f"bandwidth_efficiency (slope of TPOT against context), {c} + weights (its intercept), "
                "prefill_efficiency (TTFT against prompt)"
            )
        else:
            what = "a point of the context slope (fewer than three contexts: no slope on its own)"
        out.append(
            f"  {r.engine_label:<13} {w.context_tokens:>7,} tokens  batch {w.batch_size:>2}  output "
            f"{w.output_tokens:>5,}: {what}"
        )
    return out


def physics_markdown(
    free: Fit,
    phys: Fit,
    w: Workload = Workload(),
    a: Assumptions = Assumptions(),
    contexts: tuple[int, ...] = (65536, 204800),
) -> str:
    """Report 04's paragraph on the two fits: what each predicts, the non-physical label with its consequence, the
    priors with their sources, and what four totals cannot separate."""
    f, p = forecast(free, contexts, workload=w, assumptions=a), forecast(phys, contexts, workload=w, assumptions=a)

    def says(fc) -> str:
        wins = ", ".join(f"{win} faster at {k_label(c)}" for c, win in zip(fc.contexts, fc.winners))
        # the page's one notation for a modelled crossover: '≈173K (177,652 tokens)', as in the verdict table
        return wins + (
            f", crossover {approx_tokens(fc.crossover)}" if fc.crossover else ", no crossover up to 1M tokens"
        )

    label = "**non-physical**" if not free.physical else "inside every prior"
    lines = [
        f"- **Free fit** ({label}; residuals up to {free.max_abs_residual_pct:.1f}%): {says(f)}.",
        f"- **Physics-only fit** (every parameter inside its prior; residuals up to {phys.max_abs_residual_pct:.1f}%): "
        f"{says(p)}; decode at {phys.params.bandwidth_efficiency:.0%} of peak bandwidth, "
        f"c(vLLM) {phys.params.vllm_step_overhead_s * 1e3:.1f} ms and c(SGLang) "
        f"{phys.params.sglang_step_overhead_s * 1e3:.1f} ms per decode step.",
    ]
    if not free.physical:
        same = f.winners == p.winners
        lines.append(
            f"- **Consequence:** the free fit reproduces the table only with {'; '.join(implausible(free, short=True))} "
            f"(implausible: see the calibration above). Held to the "
            f"priors, the model " + ("keeps its winners" if same else "names other winners") + f" ({says(p)}): the "
            "article's reversal "
            + ("survives" if p.winners[-1] == engine_label(SGLANG) else "does not follow from the physics")
            + " under the assumed workload."
        )
    lines.append(
        "- Four totals cannot tell the engines' per-step overheads apart from the DCP latency (with DCP only on "
        "SGLang both are one constant per step); the B300 step-fit plan (data/experiments/b300_step_fit.yaml) "
        "names the runs that would."
    )
    lines.append(
        "- Priors: decode bandwidth 0.3–0.9 of peak ("
        + PRIOR_SOURCES["bandwidth_efficiency"]
        + "); DCP collective 1–100 µs ("
        + PRIOR_SOURCES["dcp_layer_latency_s"]
        + ")."
    )
    return "\n".join(lines)
