"""Report 07's own frames (polars transforms): each load point's rates and SLO attainment, the highest load within the
SLO, the Pareto front, each point against its concurrency ceiling with what telemetry saw, where queueing begins,
the goodput map, telemetry over time and the model's ceilings on the GPU host with their ranges over the assumption
sets the published points cannot pin. Report 07 alone reads them."""

from __future__ import annotations

import polars as pl

from kvlab.engines import SGLANG, VLLM
from kvlab.perfmodel.calibrate import crossover_range
from kvlab.perfmodel.figures import MEMORY_AXES, headroom_table
from kvlab.perfmodel.throughput import capacity_limited
from kvlab.perfmodel.roofline import Assumptions
from kvlab import cost, search, store
from kvlab.schema import RUNS, run_rates
from kvlab.workloads import trace


def concurrency_ceiling(kv_pool_tokens: int | None, tokens_per_request: int) -> int | None:
    """Requests of ``tokens_per_request`` tokens (prompt + output) a KV pool of ``kv_pool_tokens`` holds at once:
    ``kv_pool_tokens // tokens_per_request`` (docs/design.md, "KV capacity"); None where the pool is unknown. Past
    it a server queues or preempts; it ignores block rounding and what a prefix cache shares."""
    if tokens_per_request < 1:
        raise ValueError(f"tokens_per_request must be >= 1, got {tokens_per_request}")
    return None if kv_pool_tokens is None else int(kv_pool_tokens) // int(tokens_per_request)


def run_ceilings(runs: pl.DataFrame) -> pl.DataFrame:
    """Each run with ``concurrency_ceiling``: its server's reported KV pool (``kv_pool_tokens``) // its tokens per
    request (``context_tokens``, prompt + output; a multi_turn run's longest turn); null where the engine reported
    no pool (never 0)."""
    return runs.with_columns(
        (pl.col("kv_pool_tokens") // pl.col("context_tokens")).cast(pl.Int64).alias("concurrency_ceiling")
    )


#: A load point meets its SLO when at least this share of its counted requests did (the SLO held at p90).
SLO_SHARE = 0.9
#: What one capacity configuration is: its load points form one curve (docs/design.md, "Load definitions").
CAPACITY_KEYS = (
    "experiment",
    "hardware",
    "engine",
    "tp",
    "dcp",
    "mem_util",
    "kv_budget_bytes",
    "context_tokens",
    "context_label",
    "load_mode",
)


def load_curve(runs: pl.DataFrame, slo_share: float = SLO_SHARE) -> pl.DataFrame:
    """One row per successful run under a load (RUNS ``load_mode`` set), with its rates (:func:`run_rates`) and:

    - ``load_level``: requests in flight (closed loop) or arrivals per second (open loop);
    - ``devices`` = tp x dp (1 where unknown: the CPU host is one device);
    - ``output_tokens_per_s_per_device`` = output_tokens_per_s / devices (throughput, the Pareto plot's y);
    - ``output_tokens_per_s_per_user`` = 1,000 / median TPOT (interactivity, its x: the rate one stream decodes at);
    - ``slo_attainment`` = requests_within_slo / counted requests (ok + failed); null without an SLO;
    - ``within_slo``: attainment >= ``slo_share`` (0.9: the SLO held at p90) and the point was not stopped past
      saturation (``load_stop``); null without an SLO.
    """
    if "load_mode" not in runs.columns:
        return runs.clear()
    r = run_rates(runs.filter(pl.col("load_mode").is_not_null() & (pl.col("status") == "ok")))
    counted = pl.col("requests_ok") + pl.col("requests_failed")
    attainment = pl.when(counted > 0).then(pl.col("requests_within_slo") / counted)
    devices = (pl.col("tp").fill_null(1) * pl.col("dp").fill_null(1)).cast(pl.Float64)
    return r.with_columns(
        pl.when(pl.col("load_mode") == "open")
        .then(pl.col("load_rate_rps"))
        .otherwise(pl.col("load_concurrency").cast(pl.Float64))
        .alias("load_level"),
        devices.alias("devices"),
        (pl.col("output_tokens_per_s") / devices).alias("output_tokens_per_s_per_device"),
        (1000.0 / pl.col("tpot_p50_ms")).alias("output_tokens_per_s_per_user"),
        attainment.alias("slo_attainment"),
        ((attainment >= slo_share) & pl.col("load_stop").is_null()).alias("within_slo"),
    ).sort([*CAPACITY_KEYS, "load_level"], nulls_last=True)


def highest_load_within_slo(curve: pl.DataFrame) -> pl.DataFrame:
    """Per capacity configuration (:data:`CAPACITY_KEYS`): the highest load level every repeat of which met the SLO
    (:func:`load_curve`'s ``within_slo``), the goodput there (mean, min and max over its repeats), the levels
    measured and the lowest level that missed it (null: none did); ``max_load_within_slo`` is null when even the
    lowest level missed it, or the runs state no SLO."""
    per_level = curve.group_by([*CAPACITY_KEYS, "load_level"]).agg(
        pl.col("within_slo").all().alias("within"),
        pl.col("goodput_requests_per_s").mean().alias("goodput"),
        pl.col("goodput_requests_per_s").min().alias("goodput_min"),
        pl.col("goodput_requests_per_s").max().alias("goodput_max"),
        pl.len().alias("repeats"),
    )
    best = (
        per_level.filter(pl.col("within"))
        .sort("load_level")
        .group_by(CAPACITY_KEYS)
        .agg(
            pl.col("load_level").last().alias("max_load_within_slo"),
            pl.col("goodput").last().alias("goodput_requests_per_s"),
            pl.col("goodput_min").last().alias("goodput_min_requests_per_s"),
            pl.col("goodput_max").last().alias("goodput_max_requests_per_s"),
            pl.col("repeats").last(),
        )
    )
    levels = per_level.group_by(CAPACITY_KEYS).agg(
        pl.col("load_level").sort().alias("levels"),
        pl.col("load_level").filter(~pl.col("within").fill_null(False)).min().alias("first_load_past_slo"),
    )
    return levels.join(best, on=list(CAPACITY_KEYS), how="left", nulls_equal=True).sort(CAPACITY_KEYS, nulls_last=True)


def pareto_front(
    curve: pl.DataFrame,
    keys: tuple[str, ...] = (
        "experiment",
        "hardware",
        "engine",
        "tp",
        "dcp",
        "mem_util",
        "kv_budget_bytes",
        "context_tokens",
    ),
) -> pl.DataFrame:
    """The load points on the throughput-interactivity Pareto front of their group (``keys``): no other point of the
    group has at least as many output tokens/s per device and per user and more of either. ``on_front`` is added to
    every row of ``curve``."""
    rows = curve.with_row_index("_i")
    x, y = "output_tokens_per_s_per_user", "output_tokens_per_s_per_device"
    front: set[int] = set()
    for _, g in rows.group_by(list(keys)):
        pts = [(i, a, b) for i, a, b in zip(g["_i"], g[x], g[y]) if a is not None and b is not None]
        for i, a, b in pts:
            if not any(a2 >= a and b2 >= b and (a2 > a or b2 > b) for _, a2, b2 in pts):
                front.add(i)
    return rows.with_columns(pl.col("_i").is_in(sorted(front)).alias("on_front")).drop("_i")


#: The telemetry series the capacity study reads (canonical names, kvlab.engines' ``telemetry_names``).
CAPACITY_SERIES = ("kv_cache_usage", "requests_running", "requests_waiting", "preemptions_total")
#: A load point saturated its KV pool when a telemetry sample saw at least this share of it in use.
KV_SATURATED = 0.9


def capacity_points(curve: pl.DataFrame, samples: pl.DataFrame, info: pl.DataFrame) -> pl.DataFrame:
    """Each load point of ``curve`` (:func:`load_curve`) with its ``concurrency_ceiling`` (:func:`run_ceilings`),
    ``past_ceiling`` (closed loop: requests in flight > the ceiling; null for an open loop or an unknown pool) and
    what its telemetry saw (``samples``: kvlab.store.load_telemetry, ``info``: load_telemetry_info):

    - ``telemetry``: "sampled"; or the note of an available telemetry that got no sample (a run shorter than the
      first sample's delay); or "not available: " and why (the run's telemetry.json reason); "not recorded" for a
      run stored before telemetry was;
    - ``samples_ok``: the samples that answered;
    - ``kv_usage_peak``: the highest share of the KV pool in use in one sample (0-1);
    - ``running_peak`` / ``waiting_peak``: the most requests running / waiting in one sample;
    - ``preemptions``: the rise of the server's preemption counter over the run (last minus first sample);
    - ``queued``: waiting_peak > 0; ``kv_saturated``: kv_usage_peak >= :data:`KV_SATURATED`.

    A value nothing sampled is null, never 0."""
    pts = run_ceilings(curve)
    ok = samples.filter(pl.col("error").is_null()) if "error" in samples.columns else samples
    ok = ok.with_columns(pl.lit(None, dtype=pl.Float64).alias(c) for c in CAPACITY_SERIES if c not in ok.columns)
    per_run = (
        ok.sort("t_s")
        .group_by("run_id")
        .agg(
            pl.len().alias("samples_ok"),
            pl.col("kv_cache_usage").max().alias("kv_usage_peak"),
            pl.col("requests_running").max().alias("running_peak"),
            pl.col("requests_waiting").max().alias("waiting_peak"),
            (pl.col("preemptions_total").drop_nulls().last() - pl.col("preemptions_total").drop_nulls().first()).alias(
                "preemptions"
            ),
        )
    )
    note = pl.col("note").fill_null("no sample") if "note" in info.columns else pl.lit("no sample")
    answered = pl.col("samples_ok").fill_null(1) > 0 if "samples_ok" in info.columns else pl.lit(True)
    why = info.select(
        "run_id",
        pl.when(pl.col("available") & answered)
        .then(pl.lit("sampled"))
        .when(pl.col("available"))
        .then(note)
        .otherwise(pl.concat_str(pl.lit("not available: "), pl.col("reason").fill_null("no sample")))
        .alias("telemetry"),
    )
    pts = pts.join(per_run, on="run_id", how="left").join(why, on="run_id", how="left")
    closed = pl.col("load_mode") == "closed"
    return pts.with_columns(
        pl.col("telemetry").fill_null(pl.lit("not recorded")),
        pl.when(closed & pl.col("concurrency_ceiling").is_not_null())
        .then(pl.col("load_level") > pl.col("concurrency_ceiling"))
        .alias("past_ceiling"),
        (pl.col("waiting_peak") > 0).alias("queued"),
        (pl.col("kv_usage_peak") >= KV_SATURATED).alias("kv_saturated"),
    )


def saturation_onset(points: pl.DataFrame) -> pl.DataFrame:
    """Per capacity configuration (:data:`CAPACITY_KEYS`) of :func:`capacity_points`: its ``concurrency_ceiling``
    (the smallest its runs report), the load levels measured, and the lowest level past the ceiling
    (``first_past_ceiling``), at which requests queued (``first_queued``), the KV pool saturated
    (``first_kv_saturated``) and the server preempted (``first_preempted``); each null where no level did (or,
    without telemetry, could be seen to). ``queue_seen``, ``kv_usage_seen``, ``preemptions_seen``: whether any of
    its runs' telemetry held that series (a sampled run whose engine exports no preemption counter has none), so a
    null first_* reads "none" only where it is true. ``telemetry``: "sampled" when any of its runs was, else the
    first reason."""

    def first(cond: pl.Expr) -> pl.Expr:
        return pl.col("load_level").filter(cond.fill_null(False)).min()

    return (
        points.group_by(list(CAPACITY_KEYS))
        .agg(
            pl.col("concurrency_ceiling").min(),
            pl.col("load_level").sort().alias("levels"),
            first(pl.col("past_ceiling")).alias("first_past_ceiling"),
            first(pl.col("queued")).alias("first_queued"),
            first(pl.col("kv_saturated")).alias("first_kv_saturated"),
            first(pl.col("preemptions") > 0).alias("first_preempted"),
            # whether any of its runs' telemetry held the series at all: a null first_* means "no level did" only then
            pl.col("queued").is_not_null().any().alias("queue_seen"),
            pl.col("kv_saturated").is_not_null().any().alias("kv_usage_seen"),
            pl.col("preemptions").is_not_null().any().alias("preemptions_seen"),
            pl.col("kv_usage_peak").max().alias("kv_usage_peak"),
            pl.when((pl.col("telemetry") == "sampled").any())
            .then(pl.lit("sampled"))
            .otherwise(pl.col("telemetry").sort().first())
            .alias("telemetry"),
        )
        .sort(list(CAPACITY_KEYS), nulls_last=True)
    )


#: The columns of report 07's Pareto figure data (the CSV beside it): each load point with what the figure draws.
PARETO_FIGURE_COLUMNS = (
    "engine",
    "tp",
    "dcp",
    "context_tokens",
    "context_label",
    "mem_util",
    "load_level",
    "output_tokens_per_s_per_device",
    "output_tokens_per_s_per_user",
    "slo_attainment",
    "within_slo",
    "goodput_requests_per_s",
    "on_front",
    "load_stop",
)
#: The columns of report 07's ceiling figure data: each load point against its ceiling, with what telemetry saw.
CEILING_FIGURE_COLUMNS = (
    "engine",
    "tp",
    "dcp",
    "context_tokens",
    "context_label",
    "mem_util",
    "load_level",
    "kv_pool_tokens",
    "concurrency_ceiling",
    "past_ceiling",
    "telemetry",
    "samples_ok",
    "kv_usage_peak",
    "running_peak",
    "waiting_peak",
    "preemptions",
    "queued",
    "kv_saturated",
)


def pareto_figure_data(curve: pl.DataFrame) -> pl.DataFrame:
    """The Pareto figure's data as its reader gets it (:data:`PARETO_FIGURE_COLUMNS` of :func:`pareto_front`)."""
    return curve.select(PARETO_FIGURE_COLUMNS)


def ceiling_figure_data(points: pl.DataFrame) -> pl.DataFrame:
    """The ceiling figure's data as its reader gets it (:data:`CEILING_FIGURE_COLUMNS` of :func:`capacity_points`)."""
    return points.select(CEILING_FIGURE_COLUMNS)


#: What a probe summary row is joined to a capacity configuration on (RUNS' names; kvlab.probe.configuration).
PROBE_JOIN_KEYS = ("experiment", "engine", "tp", "dcp", "mem_util", "kv_budget_bytes")
#: Said of a configuration no probe was recorded for (its experiment has no ``probe: true``, or it was stored before).
NOT_PROBED = "not probed"


def _probe_of(summary: pl.DataFrame | None) -> dict[tuple, dict]:
    """:func:`probe_summary` rows by :data:`PROBE_JOIN_KEYS` (a configuration probed under several server keys:
    the one that differs, so that a difference is never hidden behind an identical twin)."""
    out: dict[tuple, dict] = {}
    for r in summary.iter_rows(named=True) if summary is not None else ():
        key = tuple(r[k] for k in PROBE_JOIN_KEYS)
        if key not in out or r["differs"] > out[key]["differs"]:
            out[key] = r
    return out


#: What the capacity map compares engines at: one cell per context x memory setting (and load mode).
MAP_KEYS = ("experiment", "hardware", "context_tokens", "context_label", "mem_util", "load_mode")


def goodput_map(best: pl.DataFrame, probes: pl.DataFrame | None = None) -> pl.DataFrame:
    """The capacity map from :func:`highest_load_within_slo`: per context x memory setting (:data:`MAP_KEYS`) where
    at least two engines were measured, the engine with the higher goodput at its highest load within the SLO
    (``winner``, its tp/dcp, load and goodput) against the next (``runner_up``): ``margin`` = winner goodput ÷ runner-up
    goodput, ``margin_lo``/``margin_hi`` its range over the repeats (winner min ÷ runner-up max, winner max ÷
    runner-up min), ``n`` the fewer repeats. An engine with no load within the SLO carries no goodput within it:
    then ``margin`` is null and ``only_winner_within`` true; ``winner`` is null where no engine met the SLO.

    The accuracy probe (``probes``: :func:`probe_summary`; None: none recorded) of each side's configuration:
    ``winner_probe`` / ``runner_up_probe`` (its label, :data:`NOT_PROBED` where none was recorded),
    ``winner_probe_first_diff`` and ``winner_differs``: true when the winner's greedy output differs clearly (not
    at a near-tie) from its engine's reference configuration, a configuration that may be fast because it computes
    something else; the map names it (kvlab.studies.capacity.words.map_table) and its verdict says so
    (kvlab.studies.capacity.checks.map_check)."""
    probed = _probe_of(probes)

    def probe(r: dict) -> dict | None:
        return probed.get(tuple(r.get(k) for k in PROBE_JOIN_KEYS))

    rows = []
    for key, g in best.group_by(list(MAP_KEYS), maintain_order=True):
        if g["engine"].n_unique() < 2:
            continue
        g = g.sort(["goodput_requests_per_s", "engine"], descending=[True, False], nulls_last=True)
        w, r = g.row(0, named=True), g.row(1, named=True)
        cell = dict(zip(MAP_KEYS, key))
        if w["goodput_requests_per_s"] is None:
            rows.append(cell | {"winner": None, "runner_up": None, "engines": g["engine"].sort().to_list()})
            continue
        rg = r["goodput_requests_per_s"]
        lo = w["goodput_min_requests_per_s"] / r["goodput_max_requests_per_s"] if rg else None
        hi = w["goodput_max_requests_per_s"] / r["goodput_min_requests_per_s"] if rg else None
        pw, pr = probe(w), probe(r)
        rows.append(
            cell
            | {
                "winner": w["engine"],
                "winner_tp": w["tp"],
                "winner_dcp": w["dcp"],
                "winner_probe": pw["probe"] if pw else NOT_PROBED,
                "winner_probe_first_diff": pw["first_diff"] if pw else None,
                "winner_differs": bool(pw and pw["differs"]),
                "runner_up_probe": pr["probe"] if pr else NOT_PROBED,
                "winner_load": w["max_load_within_slo"],
                "winner_goodput_requests_per_s": w["goodput_requests_per_s"],
                "winner_goodput_min": w["goodput_min_requests_per_s"],
                "winner_goodput_max": w["goodput_max_requests_per_s"],
                "winner_repeats": w["repeats"],
                "runner_up": r["engine"],
                "runner_up_tp": r["tp"],
                "runner_up_dcp": r["dcp"],
                "runner_up_load": r["max_load_within_slo"],
                "runner_up_goodput_requests_per_s": rg,
                "runner_up_goodput_min": r["goodput_min_requests_per_s"],
                "runner_up_goodput_max": r["goodput_max_requests_per_s"],
                "runner_up_repeats": r["repeats"],
                "margin": w["goodput_requests_per_s"] / rg if rg else None,
                "margin_lo": lo,
                "margin_hi": hi,
                "n": min(w["repeats"] or 0, r["repeats"] or 0) if rg else (w["repeats"] or 0),
                "only_winner_within": rg is None,
                "engines": g["engine"].sort().to_list(),
            }
        )
    schema = {k: best.schema[k] for k in MAP_KEYS} if all(k in best.columns for k in MAP_KEYS) else None
    out = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame(schema=schema)
    return out.sort(["context_tokens", "mem_util"]) if rows else out


# --------------------------------------------------------------------------- telemetry over time

#: The gauges the telemetry-over-time figure draws, in its panels' order.
TELEMETRY_SERIES = ("kv_cache_usage", "requests_running", "requests_waiting")
#: A run's series with fewer samples than this is drawn as dots, not as a line.
MIN_LINE_SAMPLES = 3


def telemetry_over_time(points: pl.DataFrame, samples: pl.DataFrame) -> pl.DataFrame:
    """Every answered telemetry sample of each load point of ``points`` (:func:`capacity_points`), one row per
    sample on the requests' time origin: the configuration (:data:`CAPACITY_KEYS`), ``load_level``, ``run_id``,
    ``t_s``, the gauges of :data:`TELEMETRY_SERIES` (null where the server did not export one), ``samples`` (the
    run's answered samples) and ``line`` (samples >= :data:`MIN_LINE_SAMPLES`: drawn as a line, else as dots).
    A load point without a sample adds no row."""
    keys = [*CAPACITY_KEYS, "load_level", "run_id"]
    ok = samples.filter(pl.col("error").is_null()) if "error" in samples.columns else samples
    ok = ok.with_columns(pl.lit(None, dtype=pl.Float64).alias(c) for c in TELEMETRY_SERIES if c not in ok.columns)
    out = (
        points.select(keys)
        .join(ok.select("run_id", "t_s", *TELEMETRY_SERIES), on="run_id", how="inner")
        .with_columns(pl.len().over("run_id").alias("samples"))
        .with_columns((pl.col("samples") >= MIN_LINE_SAMPLES).alias("line"))
    )
    return out.sort("context_tokens", "mem_util", "engine", "load_level", "run_id", "t_s", nulls_last=True)


def telemetry_series(telemetry: pl.DataFrame) -> pl.DataFrame:
    """One row per drawn series of :func:`telemetry_over_time` (a load point's run): its configuration, load level,
    run, answered samples and whether it is drawn as a line."""
    return telemetry.unique("run_id", maintain_order=True).select(
        *CAPACITY_KEYS, "load_level", "run_id", "samples", "line"
    )


# --------------------------------------------------------------------------- the model's ceilings on the GPU host

#: What the model's memory check flags at a setting that leaves less outside the target than the need assumed from
#: the article, as reports 03 and 04 word it (kvlab.perfmodel.figures.flag_kinds).
NOT_AN_OOM = "an assumption, not a predicted OOM"


def modelled_ceilings(
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp_sizes: tuple[int, ...] = (1, 8),
    mem_utils: tuple[float, ...] = (0.92, 0.95),
    contexts: tuple[int, ...] = (65536, 131072, 204800),
    assumptions: Assumptions | None = None,
) -> pl.DataFrame:
    """The physical model's concurrency ceiling per DCP size x memory target x context (source "modelled"; DCP 1
    modelled as vLLM, DCP > 1 as SGLang), from :func:`kvlab.perfmodel.figures.headroom_table` (the function
    reports 03 and 04 read, so the pages agree): ``kv_pool_tokens`` (the pool in tokens, the figure engines log),
    ``pool_ceiling`` = that // context (the definition :func:`run_ceilings` gives measured runs, whose tiny model
    has no linear-attention state) and ``concurrency_ceiling`` = the model's own count, which also charges each
    sequence its linear-attention state; ``limited_by`` the pool that sets it; ``fits`` and ``reason`` the model's
    memory check. Each modelled number has ``_lo``/``_hi``: its range over the KV format and cached MLA width
    (``assumption_sets``), the assumptions the published points cannot pin; the default set's value lies inside."""
    t = headroom_table(gpu, model, list(mem_utils), list(dcp_sizes), list(contexts), assumptions or Assumptions(), tp)
    ctx = pl.col("context_tokens")
    return t.select(
        "source",
        "gpu",
        "model",
        "engine",
        "tp",
        "dcp",
        "mem_util",
        "context_tokens",
        pl.col("kv_capacity_tokens").alias("kv_pool_tokens"),
        pl.col("kv_capacity_tokens_lo").alias("kv_pool_tokens_lo"),
        pl.col("kv_capacity_tokens_hi").alias("kv_pool_tokens_hi"),
        (pl.col("kv_capacity_tokens") // ctx).cast(pl.Int64).alias("pool_ceiling"),
        (pl.col("kv_capacity_tokens_lo") // ctx).cast(pl.Int64).alias("pool_ceiling_lo"),
        (pl.col("kv_capacity_tokens_hi") // ctx).cast(pl.Int64).alias("pool_ceiling_hi"),
        pl.col("max_concurrent_seqs").alias("concurrency_ceiling"),
        pl.col("max_concurrent_seqs_lo").alias("concurrency_ceiling_lo"),
        pl.col("max_concurrent_seqs_hi").alias("concurrency_ceiling_hi"),
        "max_concurrent_seqs",  # the same count under report 03's name
        "limited_by",
        "fits",
        pl.col("reason").str.replace(": OOM risk", f": {NOT_AN_OOM}", literal=True),
        pl.col("assumption_sets").fill_null(MEMORY_AXES),
    )


#: The TPOT target the capacity-limited throughput is shown at: report 04's middle one (its figure draws 50, 100 and
#: 200 ms); `kvlab model --context … --tpot-ms …` gives any other.
MODELLED_TPOT_MS = 100.0


def modelled_throughput(
    data_dir,
    gpu: str = "B300",
    model: str = "Kimi-K3",
    tp: int = 8,
    dcp_sizes: tuple[int, ...] = (1, 8),
    mem_utils: tuple[float, ...] = (0.92, 0.95),
    context: int = 204800,
    tpot_ms: float = MODELLED_TPOT_MS,
    assumptions: Assumptions | None = None,
) -> pl.DataFrame:
    """The capacity-limited throughput on the GPU host (issue 55, what ``kvlab model --context --tpot-ms`` prints):
    per DCP size (DCP 1 as vLLM, DCP > 1 as SGLang) and memory setting at ``context``, the sequences the pool holds,
    the batch the TPOT target allows and the output tokens/s per GPU there, each with ``_lo``/``_hi`` over every
    assumption set's bounded fit and the unexplained per-step cost as a band
    (:func:`kvlab.perfmodel.throughput.capacity_limited`, the function report 04's figure draws)."""
    a = assumptions or Assumptions()
    sens, _ = crossover_range(data_dir, a, gpu=gpu, model=model, tp=tp, dcp=max(dcp_sizes), physics=True)
    configs = tuple((VLLM if d == 1 else SGLANG, d) for d in dcp_sizes)
    return pl.concat([capacity_limited(sens, gpu, model, context, tpot_ms, m, configs, tp, a) for m in mem_utils])


# --------------------------------------------------------------------------- real traffic: trace replay and search

#: What one load search is (a search run's configuration): its probes form one path.
SEARCH_KEYS = ("experiment", "hardware", "device_kind", "engine", "tp", "dp", "dcp", "mem_util", "kv_budget_bytes")
#: One row per probe of each search (:func:`search_path`); its schema where no search is stored.
SEARCH_PATH_SCHEMA = {
    **{k: RUNS.polars_schema[k] for k in SEARCH_KEYS},
    "load_mode": pl.String,
    "search_run": pl.String,
    "probe": pl.Int64,
    "level": pl.Float64,
    "probe_run": pl.String,
    "within": pl.Int64,
    "n": pl.Int64,
    "lower": pl.Float64,
    "upper": pl.Float64,
    "passed": pl.Boolean,
    "why": pl.String,
}


def search_runs(runs: pl.DataFrame) -> pl.DataFrame:
    """The load searches among ``runs`` (a row with ``search_probes``: kvlab.search.columns), ok or failed."""
    if "search_probes" not in runs.columns:
        return runs.clear()
    return runs.filter(pl.col("search_probes").is_not_null())


def _search_mode(r: dict, modes: dict[str, str | None]) -> str | None:
    """A search's loop, from its probes' runs (``modes``: run_id -> load_mode): the search row holds no load."""
    return next((modes[p.run_id] for p in search.probes_of(r) if modes.get(p.run_id)), None)


def _modes(runs: pl.DataFrame) -> dict[str, str | None]:
    return dict(runs.select("run_id", "load_mode").iter_rows()) if "load_mode" in runs.columns else {}


def search_path(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per probe of each search in ``runs``, in the order probed (``probe`` from 1): its level, whether it
    passed and why not, requests within the SLO of those counted with their Wilson 95% interval
    (``lower``, ``upper``), and its own run's TTFT and TPOT p90 (null where the probe's run is not among ``runs``)."""
    rows, modes = [], _modes(runs)
    for r in search_runs(runs).to_dicts():
        for i, p in enumerate(search.probes_of(r), 1):
            rows.append(
                {k: r.get(k) for k in SEARCH_KEYS}
                | {"load_mode": _search_mode(r, modes)}
                | {"search_run": r["run_id"], "probe": i, "level": float(p.level), "probe_run": p.run_id}
                | {"within": p.within, "n": p.n, "lower": p.lower, "upper": search.wilson_upper(p.within, p.n)}
                | {"passed": p.passed, "why": p.why}
            )
    path = pl.DataFrame(rows, schema=SEARCH_PATH_SCHEMA)
    own = runs.select(
        pl.col("run_id").alias("probe_run"), *(pl.col(c) for c in ("ttft_p90_ms", "tpot_p90_ms") if c in runs.columns)
    )
    return path.join(own, on="probe_run", how="left") if own.width == 3 else path


def _per_token(run: dict | None, price: float, devices: int) -> dict:
    """Cost and energy per output token at a passing probe's run (``run``: its RUNS row, None where not stored)."""
    r = run or {}
    tokens_s = r.get("output_tokens_per_s")
    served = r.get("served_output_tokens")
    energy = r.get("energy_j")
    return {
        "dollars_per_million_output_tokens": (
            cost.dollars_per_million_tokens(price, tokens_s, devices) if price > 0 and tokens_s else None
        ),
        "energy_j_per_output_token": energy / served if energy is not None and served else None,
        "energy_note": None if energy is not None else (r.get("energy_note") or "no stored run at a passing load"),
    }


def search_results(runs: pl.DataFrame, price_per_device_hour: float = 0.0) -> pl.DataFrame:
    """Per search: the highest load that passed and the first that failed, the attainment there as within / n with
    its Wilson 95% interval, goodput and output tokens/s per device there, the $ per million output tokens at
    ``price_per_device_hour`` (kvlab.cost, InferenceX's formula; null without a price), joules per output token
    (null with ``energy_note`` where no counter was read), why the search stopped and what broke the next load."""
    rated = run_rates(runs) if "served_output_tokens" in runs.columns else runs
    by_id = {r["run_id"]: r for r in rated.to_dicts()}
    rows, modes = [], _modes(runs)
    for r in search_runs(runs).to_dicts():
        probes = search.probes_of(r)
        best = next((p for p in probes if p.passed and p.level == r["search_highest_passing"]), None)
        devices = int(r.get("tp") or 1) * int(r.get("dp") or 1)
        tokens_s = r.get("search_output_tokens_per_s")
        rows.append(
            {k: r.get(k) for k in (*SEARCH_KEYS, "slo_ttft_ms", "slo_tpot_ms", "search_share")}
            | {"load_mode": _search_mode(r, modes)}
            | {"search_run": r["run_id"], "probes": len(probes), "status": r.get("status")}
            | {"highest_passing": r["search_highest_passing"], "first_failing": r["search_first_failing"]}
            | {"within": best.within if best else None, "n": best.n if best else None}
            | {
                "lower": best.lower if best else None,
                "upper": search.wilson_upper(best.within, best.n) if best else None,
            }
            | {"goodput_requests_per_s": r.get("search_goodput_requests_per_s"), "devices": devices}
            | {"output_tokens_per_s_per_device": tokens_s / devices if tokens_s is not None else None}
            | {"price_per_device_hour": price_per_device_hour if price_per_device_hour > 0 else None}
            | _per_token(by_id.get(best.run_id) if best else None, price_per_device_hour, devices)
            | {"stop": r.get("search_stop"), "mechanism": r.get("search_mechanism")}
        )
    schema = {**{k: RUNS.polars_schema[k] for k in SEARCH_KEYS}, **SEARCH_RESULT_SCHEMA}
    return pl.DataFrame(rows, schema=schema).sort(["engine", "mem_util"], nulls_last=True)


SEARCH_RESULT_SCHEMA = {
    "load_mode": pl.String,
    "slo_ttft_ms": pl.Float64,
    "slo_tpot_ms": pl.Float64,
    "search_share": pl.Float64,
    "search_run": pl.String,
    "probes": pl.Int64,
    "status": pl.String,
    "highest_passing": pl.Float64,
    "first_failing": pl.Float64,
    "within": pl.Int64,
    "n": pl.Int64,
    "lower": pl.Float64,
    "upper": pl.Float64,
    "goodput_requests_per_s": pl.Float64,
    "devices": pl.Int64,
    "output_tokens_per_s_per_device": pl.Float64,
    "price_per_device_hour": pl.Float64,
    "dollars_per_million_output_tokens": pl.Float64,
    "energy_j_per_output_token": pl.Float64,
    "energy_note": pl.String,
    "stop": pl.String,
    "mechanism": pl.String,
}


#: One row per replayed trace record (:func:`trace_shape`); its schema where no trace run is stored.
TRACE_SHAPE_SCHEMA = {
    "trace_file": pl.String,
    "scale_factor": pl.Int64,
    "block_tokens": pl.Int64,
    "line": pl.Int64,
    "arrival_s": pl.Float64,
    "input_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "reusable_tokens": pl.Int64,
    "reusable_share": pl.Float64,
}


def trace_workloads(data_dir, runs: pl.DataFrame) -> tuple[list[dict], list[str]]:
    """The distinct trace workloads (their spec.json ``workload``) the trace runs among ``runs`` replayed, and a note
    for each trace that cannot be read back as it ran (its file gone, or changed since: another digest)."""
    ids = set(runs.filter(pl.col("mode") == "trace")["run_id"].to_list()) if "mode" in runs.columns else set()
    exps = set(runs["experiment"].to_list()) if ids else set()
    seen: dict[tuple, dict] = {}
    notes: list[str] = []
    for d in (d for e in sorted(exps) for d in store.run_dirs(data_dir, e) if d.name in ids):
        if not (d / store.SPEC_FILE).is_file():
            continue
        w = dict(store.read_json_capped(d / store.SPEC_FILE).get("workload") or {})
        fields = ("trace_file", "scale_factor", "block_size", "offset", "window_s", "batch_size", "trace_digest")
        key = tuple(w.get(f) for f in fields)
        if key in seen or not w.get("trace_file"):
            continue
        seen[key] = w
        if not trace.resolve(w["trace_file"]).is_file():
            notes.append(f"{w['trace_file']} is not on this machine")
        elif w.get("trace_digest") and trace.digest(w["trace_file"]) != w["trace_digest"]:
            notes.append(f"{w['trace_file']} changed since it was replayed (sha256 {w['trace_digest']} then)")
    readable = [w for w in seen.values() if not any(n.startswith(f"{w['trace_file']} ") for n in notes)]
    return readable, sorted(set(notes))


def trace_shape(workloads: list[dict]) -> pl.DataFrame:
    """One row per record each trace workload replayed (kvlab.workloads.trace, published lengths divided by its
    ``scale_factor``): its arrival in trace seconds from the first replayed, prompt and output tokens, and the
    tokens its hash ids made reusable (leading blocks an earlier record sent) with their share of the prompt."""
    rows = []
    for w in workloads:
        factor, block = int(w.get("scale_factor") or 1), int(w.get("block_size") or trace.MOONCAKE_ID_TOKENS)
        recs = trace.Trace.model_validate(w).records
        reusable = trace.reusable_tokens(recs, block // factor)
        for rec, re_ in zip(recs, reusable, strict=True):
            rows.append(
                {"trace_file": w["trace_file"], "scale_factor": factor, "block_tokens": block // factor}
                | {"line": rec.line, "arrival_s": (rec.timestamp_ms - recs[0].timestamp_ms) / 1000}
                | {"input_tokens": rec.input_length, "output_tokens": rec.output_length, "reusable_tokens": re_}
                | {"reusable_share": re_ / rec.input_length}
            )
    return pl.DataFrame(rows, schema=TRACE_SHAPE_SCHEMA)


def trace_reuse(runs: pl.DataFrame, requests: pl.DataFrame | None, shape: pl.DataFrame) -> pl.DataFrame:
    """Per experiment x engine x memory setting, over its trace runs that sent requests (a search's probes, a
    replay): runs, requests, the prompt tokens served, those the trace made reusable and those the engine counted as
    cached (null where it reported none), and how many requests' served prompt length equals the trace's (scaled)
    input_length, by trace line (``exact_lengths`` of ``checked``)."""
    keys = ["experiment", "engine", "mem_util"]
    sent = runs.filter((pl.col("mode") == "trace") & (pl.col("status") == "ok")) if "mode" in runs.columns else None
    if sent is not None and "search_probes" in sent.columns:
        sent = sent.filter(pl.col("search_probes").is_null())
    if sent is None or sent.is_empty() or requests is None:
        return pl.DataFrame(schema={**{k: RUNS.polars_schema[k] for k in keys}, **TRACE_REUSE_SCHEMA})
    lengths = shape.select("line", "input_tokens").unique("line")  # one trace: a line is one record
    per = (
        requests.filter(pl.col("run_id").is_in(sent["run_id"].implode()) & (pl.col("status") == "ok"))
        .join(lengths, left_on="trace_line", right_on="line", how="left")
        .join(sent.select("run_id", *keys), on="run_id")
        .group_by(keys)
        .agg(
            pl.col("input_tokens").is_not_null().sum().cast(pl.Int64).alias("checked"),
            (pl.col("prompt_tokens") == pl.col("input_tokens")).sum().cast(pl.Int64).alias("exact_lengths"),
        )
    )
    totals = sent.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("runs"),
        pl.col("requests_ok").sum().cast(pl.Int64).alias("requests"),
        pl.col("served_prompt_tokens").sum().cast(pl.Int64).alias("prompt_tokens"),
        pl.col("reusable_prompt_tokens").sum().cast(pl.Int64).alias("reusable_tokens"),
        pl.when(pl.col("cached_prompt_tokens").is_not_null().all())
        .then(pl.col("cached_prompt_tokens").sum())
        .cast(pl.Int64)
        .alias("cached_tokens"),
    )
    out = totals.join(per, on=keys, how="left").with_columns(
        (pl.col("reusable_tokens") / pl.col("prompt_tokens")).alias("reusable_share"),
        (pl.col("cached_tokens") / pl.col("prompt_tokens")).alias("cached_share"),
    )
    return out.select(*keys, *TRACE_REUSE_SCHEMA).sort(keys, nulls_last=True)


TRACE_REUSE_SCHEMA = {
    "runs": pl.Int64,
    "requests": pl.Int64,
    "prompt_tokens": pl.Int64,
    "reusable_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "reusable_share": pl.Float64,
    "cached_share": pl.Float64,
    "checked": pl.Int64,
    "exact_lengths": pl.Int64,
}


def trace_summary(shape: pl.DataFrame) -> pl.DataFrame:
    """Per trace replayed (:func:`trace_shape`): requests, the trace seconds they arrive over, prompt and output
    tokens (least, median, most), prompt tokens in all and those the hash ids made reusable, with their share."""
    return (
        shape.group_by("trace_file", "scale_factor", "block_tokens", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("requests"),
            (pl.col("arrival_s").max() - pl.col("arrival_s").min()).alias("span_s"),
            *(
                getattr(pl.col(c), f)().cast(pl.Float64).alias(f"{c}_{f}")
                for c in ("input_tokens", "output_tokens")
                for f in ("min", "median", "max")
            ),
            pl.col("input_tokens").sum().cast(pl.Int64).alias("prompt_tokens"),
            pl.col("reusable_tokens").sum().cast(pl.Int64).alias("reusable_tokens"),
        )
        .with_columns((pl.col("reusable_tokens") / pl.col("prompt_tokens")).alias("reusable_share"))
    )
