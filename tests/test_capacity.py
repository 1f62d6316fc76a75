"""Report 07's reductions and verdicts on the SYNTHETIC capacity runs of tests/notebook_data.py (CAPACITY: made up,
with hand-computable numbers; not measured): telemetry read back from the run folders, each load point against its
concurrency ceiling, where queueing begins, the map, the verdicts and their headline, the figures' labels."""

from __future__ import annotations

import json

import polars as pl
import pytest
from notebook_data import capacity_frames, write_capacity_probes, write_capacity_runs

from kvlab import analysis, narrative, plots, store, verdicts
from kvlab.claims import capacity


#: Telemetry of no run (the store's frame when no run folder holds a telemetry.csv).
NO_SAMPLES = pl.DataFrame(schema={"run_id": pl.String, "experiment": pl.String, "t_s": pl.Float64, "error": pl.String})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_capacity_runs(tmp_path_factory.mktemp("capacity") / "data")


@pytest.fixture(scope="module")
def frames(data):
    runs = store.load_runs(data, "cpu_capacity")
    curve = analysis.pareto_front(analysis.load_curve(runs))
    points = analysis.capacity_points(curve, store.load_telemetry(data), store.load_telemetry_info(data))
    best = analysis.highest_load_within_slo(curve)
    return curve, points, best, analysis.goodput_map(best)


def _row(frame: pl.DataFrame, engine: str, ctx: int, mem: float, level: float | None = None) -> dict:
    f = frame.filter((pl.col("engine") == engine) & (pl.col("context_tokens") == ctx) & (pl.col("mem_util") == mem))
    if level is not None:
        f = f.filter(pl.col("load_level") == level)
    assert f.height == 1
    return f.row(0, named=True)


def test_telemetry_is_read_back_per_run_on_the_requests_time_origin(data):
    samples, info = store.load_telemetry(data), store.load_telemetry_info(data)
    assert samples.height == 24 * 5 and info.height == 24
    assert samples.columns == [
        "run_id",
        "experiment",
        "t_s",
        "kv_cache_usage",
        "preemptions_total",
        "requests_running",
        "requests_waiting",
        "error",
    ]
    last = samples.filter(pl.col("run_id") == "cap14").sort("t_s")  # vllm, 3,200 tokens, 0.92, 4 in flight
    assert last["t_s"].to_list() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert last["kv_cache_usage"].to_list() == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert last["requests_waiting"].to_list() == [0.0, 2.0, 2.0, 0.0, 0.0]
    assert info["available"].all() and info["samples"].to_list() == [5] * 24


def test_each_load_point_against_its_ceiling_and_what_telemetry_saw(frames):
    _, points, _, _ = frames
    # 8,192 // 3,200 = 2 requests: 4 in flight is past it; the run's queue peaked at 2, KV at 100%, 13 - 10 preemptions
    r = _row(points, "vllm", 3200, 0.92, 4.0)
    assert (r["concurrency_ceiling"], r["past_ceiling"], r["telemetry"], r["samples_ok"]) == (2, True, "sampled", 5)
    assert (r["kv_usage_peak"], r["waiting_peak"], r["running_peak"], r["preemptions"]) == (1.0, 2.0, 2.0, 3.0)
    assert (r["queued"], r["kv_saturated"]) == (True, True)
    r = _row(points, "sglang", 3200, 0.95, 4.0)  # 20,480 // 3,200 = 6: under it, no queue
    assert (r["concurrency_ceiling"], r["past_ceiling"], r["queued"], r["kv_saturated"]) == (6, False, False, False)
    assert points.filter(pl.col("past_ceiling"))["run_id"].sort().to_list() == ["cap14", "cap20"]
    onset = analysis.saturation_onset(points)
    got = {
        (r["engine"], r["context_tokens"], r["mem_util"]): (
            r["concurrency_ceiling"],
            r["first_past_ceiling"],
            r["first_queued"],
            r["first_kv_saturated"],
            r["first_preempted"],
        )
        for r in onset.iter_rows(named=True)
    }
    assert got[("vllm", 3200, 0.92)] == (2, 4.0, 4.0, 4.0, 4.0)
    assert got[("sglang", 3200, 0.92)] == (2, 4.0, 4.0, 4.0, 4.0)
    assert got[("vllm", 1024, 0.95)] == (20, None, None, None, None)


def test_the_onset_table_says_not_available_where_telemetry_lacked_the_preemption_series(frames):
    """A sampled run whose engine exported no preemption counter (SGLang's appears only after its first retraction)
    has no preemption series: 07 says "not available" there, never "none"; where the series was sampled and never
    rose it says "none"."""
    from kvlab import narrative

    _, points, _, _ = frames
    no_series = points.with_columns(
        pl.when(pl.col("engine") == "sglang").then(None).otherwise(pl.col("preemptions")).alias("preemptions")
    )
    onset = analysis.saturation_onset(no_series)
    r = _row(onset, "sglang", 1024, 0.95)
    assert (r["telemetry"], r["preemptions_seen"], r["queue_seen"], r["first_preempted"]) == (
        "sampled",
        False,
        True,
        None,
    )
    assert _row(onset, "vllm", 1024, 0.95)["preemptions_seen"] is True
    shown = narrative.onset_table(onset.to_dicts()).frame.select(
        "configuration", "context", "memory setting", "requests waited from", "preempted from"
    )
    assert shown.rows() == [
        ("SGLang TP1", "64K (1,024 tok)", 0.92, "none", "not available"),
        ("vLLM TP1", "64K (1,024 tok)", 0.92, "none", "none"),
        ("SGLang TP1", "64K (1,024 tok)", 0.95, "none", "not available"),
        ("vLLM TP1", "64K (1,024 tok)", 0.95, "none", "none"),
        ("SGLang TP1", "200K (3,200 tok)", 0.92, "4 in flight", "not available"),
        ("vLLM TP1", "200K (3,200 tok)", 0.92, "4 in flight", "4 in flight"),
        ("SGLang TP1", "200K (3,200 tok)", 0.95, "none", "not available"),
        ("vLLM TP1", "200K (3,200 tok)", 0.95, "none", "none"),
    ]


def test_the_figure_data_report_07_hands_its_reader(frames):
    """The CSVs beside 07's Pareto and ceiling figures: every load point, the columns each figure draws."""
    curve, points, _, _ = frames
    pareto, ceiling = analysis.pareto_figure_data(curve), analysis.ceiling_figure_data(points)
    assert (
        pareto.columns[:7]
        == ceiling.columns[:7]
        == ["engine", "tp", "dcp", "context_tokens", "context_label", "mem_util", "load_level"]
    )
    assert pareto.columns[7:] == [
        "output_tokens_per_s_per_device",
        "output_tokens_per_s_per_user",
        "slo_attainment",
        "within_slo",
        "goodput_requests_per_s",
        "on_front",
        "load_stop",
    ]
    assert ceiling.columns[7:] == [
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
    ]
    assert pareto.height == ceiling.height == 24
    r = _row(ceiling, "vllm", 3200, 0.92, 4.0)  # as the test above reads it from capacity_points
    assert (r["kv_pool_tokens"], r["concurrency_ceiling"], r["past_ceiling"], r["waiting_peak"], r["preemptions"]) == (
        8192,
        2,
        True,
        2.0,
        3.0,
    )


def test_a_run_without_telemetry_says_why_never_zero(frames):
    curve, _, _, _ = frames
    info = pl.DataFrame(
        {
            "run_id": ["cap00"],
            "experiment": ["cpu_capacity"],
            "available": [False],
            "reason": ["the engine serves no /metrics"],
            "interval_s": [0.5],
            "samples": [0],
            "samples_ok": [0],
        }
    )
    points = analysis.capacity_points(curve, NO_SAMPLES, info)
    a, b = _row(points, "vllm", 1024, 0.92, 1.0), _row(points, "vllm", 1024, 0.92, 2.0)
    assert a["telemetry"] == "not available: the engine serves no /metrics" and b["telemetry"] == "not recorded"
    assert (a["kv_usage_peak"], a["waiting_peak"], a["preemptions"], a["queued"]) == (None, None, None, None)
    onset = analysis.saturation_onset(points)
    assert _row(onset, "vllm", 1024, 0.92)["telemetry"] == "not available: the engine serves no /metrics"
    # an engine that exposes telemetry, on a run too short for a sample: its note, not "sampled" nor "not available"
    short = info.with_columns(
        available=pl.lit(True),
        reason=pl.lit(None, pl.String),
        note=pl.lit("no sample was taken: the run ended before its first sample"),
    )
    a = _row(analysis.capacity_points(curve, NO_SAMPLES, short), "vllm", 1024, 0.92, 1.0)
    assert (a["telemetry"], a["samples_ok"], a["queued"]) == (
        "no sample was taken: the run ended before its first sample",
        None,
        None,
    )


def test_the_highest_load_within_the_slo_and_the_map(frames):
    _, _, best, gmap = frames
    # vllm at 3,200 tokens / 0.92: 4 in flight met the SLO for 4 of 8 requests (50% < 90%): the highest is 2, at
    # 4 requests / 10 s = 0.4 req/s; sglang's 4 stopped past saturation
    r = _row(best, "vllm", 3200, 0.92)
    assert (r["max_load_within_slo"], r["goodput_requests_per_s"], r["first_load_past_slo"]) == (2.0, 0.4, 4.0)
    cells = [
        (r["context_tokens"], r["mem_util"], r["winner"], r["runner_up"], r["winner_load"], r["margin"], r["n"])
        for r in gmap.iter_rows(named=True)
    ]
    assert cells == [
        (1024, 0.92, "vllm", "sglang", 4.0, 2.0, 1),
        (1024, 0.95, "vllm", "sglang", 4.0, 2.0, 1),
        (3200, 0.92, "vllm", "sglang", 2.0, pytest.approx(1.6), 1),
        (3200, 0.95, "sglang", "vllm", 4.0, pytest.approx(1.25), 1),
    ]
    # an engine with no load within the SLO carries no goodput within it: the other wins, without a margin
    one = best.with_columns(
        pl.when((pl.col("engine") == "sglang") & (pl.col("context_tokens") == 1024))
        .then(None)
        .otherwise(pl.col(c))
        .alias(c)
        for c in (
            "max_load_within_slo",
            "goodput_requests_per_s",
            "goodput_min_requests_per_s",
            "goodput_max_requests_per_s",
        )
    )
    r = analysis.goodput_map(one).row(0, named=True)
    assert (r["winner"], r["margin"], r["only_winner_within"], r["n"]) == ("vllm", None, True, 1)


def test_the_capacity_verdicts_follow_the_grading_rules(frames):
    curve, points, _, gmap = frames
    got = capacity.capacity_verdicts(curve, points, gmap, capacity.modelled_ceilings())
    assert [(v.claim_id, v.outcome, v.evidence, v.value, v.n, v.spread) for v in got] == [
        # each run records its server's pool: 20,480 // 1,024 = 20 against 8 (2.5x), 6 against 2 (3x); but the pool is
        # the KV budget the experiment file sets per memory setting (8 MiB at 0.92, 20 MiB at 0.95): configuration,
        # not graded. n = 1 repeat (the 3 runs a side are the load steps of one server start); value and spread: the
        # first part's, SGLang at 64K, 20 / 8 in its one repeat
        ("capacity_ceiling_memory", "configured", "measured", 2.5, 1, (2.5, 2.5)),
        # both points past the ceiling queued, one per engine, each of repeat 0: n = 1 repeat per engine (engines are
        # not summed), fewer than 3: inconclusive
        ("capacity_queueing_past_ceiling", "inconclusive", "measured", 1.0, 1, None),
        # two implementations on a CPU: vLLM's goodput at 1 in flight, 64K / 0.92, is already 0.5 / 0.25 = 2x
        ("capacity_goodput_map", "cannot be tested here", "measured", 2.0, 1, None),
        # 2,370,790 // 204,800; one assumption set; the model fails its held-out test (0 of 4), so an illustration
        ("capacity_modelled_ceiling", "inconclusive", "modelled", 11.0, 1, None),
    ]
    assert got[0].reason == (
        "the experiment file sets each memory setting's KV budget (0.92: 8 MiB, 8,192 tokens; 0.95: 20 MiB, 20,480 "
        "tokens; 2.50× the lowest), so "
        "the ceiling follows the configuration by construction: shown, not graded"
    )
    assert got[3].reason.startswith("an illustration: the model fails its held-out test (0 of 4 winners right")
    assert {v.family for v in got} == {"own"}
    assert got[1].number == (
        "2 of 2 load points past the ceiling queued (e.g. SGLang at 200K (3,200 tok), 4 in "
        "flight against a ceiling of 2: up to 2 waiting); 0 of 22 below or at it"
    )
    assert got[2].number.endswith("vLLM ahead at 3 of 4 context × memory settings")
    assert got[3].number == (
        "vLLM TP8 at 0.92: 11; vLLM TP8 at 0.95: 12 (fails the memory check); SGLang TP8+DCP8 "
        "at 0.92: 51; SGLang TP8+DCP8 at 0.95: 58 (fails the memory check) requests at 200K"
    )
    # on GPU runs the map is graded by rule 2: its cells' winners differ, so inconclusive (signs mixed)
    gpu = curve.with_columns(pl.lit("gpu").alias("device_kind"), pl.lit("8x B300").alias("hardware"))
    v = capacity.map_verdict(gpu, gmap.with_columns(pl.lit("8x B300").alias("hardware")))
    assert (v.outcome, v.reason.split(" (")[0]) == ("inconclusive", "signs mixed across engines or metrics")
    # nothing stored: nothing measured can be decided, and says why
    empty = curve.clear()
    no_info = pl.DataFrame(schema={"run_id": pl.String, "available": pl.Boolean, "reason": pl.String})
    none = capacity.capacity_verdicts(
        empty,
        analysis.capacity_points(empty, NO_SAMPLES, no_info),
        analysis.goodput_map(analysis.highest_load_within_slo(empty)),
        capacity.modelled_ceilings(),
    )
    assert [(v.outcome, v.reason) for v in none[:3]] == [
        ("cannot be tested here", "no engine measured at two memory settings with a reported KV pool"),
        ("cannot be tested here", "no capacity run stored"),
        ("cannot be tested here", "no capacity run stored"),
    ]


def test_the_ceiling_against_the_memory_setting_counts_repeats_not_load_steps(frames):
    """Three repeat indices of every load step decide (rule 2: n >= 3, ranges apart); the load steps of one
    repeat never do, however many there are."""
    _, points, _, _ = frames
    # on GPUs the pool is the engine's own (no KV budget configured): a measured difference, graded
    gpu = points.with_columns(
        pl.lit(None, pl.Int64).alias("kv_budget_bytes"),
        pl.lit("gpu").alias("device_kind"),
        pl.lit("8x B300").alias("hardware"),
    )
    three = pl.concat([gpu.with_columns(pl.lit(k, dtype=points["repeat"].dtype).alias("repeat")) for k in range(3)])
    v = capacity.ceiling_verdict(three)
    assert (v.outcome, v.value, v.n, v.spread) == ("reproduced", 2.5, 3, (2.5, 2.5))
    # the same repeats on the CPU form, whose pools are the file's KV budgets: configuration, whatever the repeats
    cpu = pl.concat([points.with_columns(pl.lit(k, dtype=points["repeat"].dtype).alias("repeat")) for k in range(3)])
    assert (capacity.ceiling_verdict(cpu).outcome, capacity.ceiling_verdict(cpu).n) == ("configured", 3)
    two = three.filter(pl.col("repeat") < 2)  # six rows a side, two repeats
    assert (capacity.ceiling_verdict(two).outcome, capacity.ceiling_verdict(two).n) == ("inconclusive", 2)


def test_the_headline_does_not_give_the_pages_own_questions_to_the_documents(frames):
    curve, points, _, gmap = frames
    got = capacity.capacity_verdicts(curve, points, gmap, capacity.modelled_ceilings())
    first, holds, cannot = verdicts.headline(got)
    assert first.startswith(
        "**The documents make no claim this page tests**; it asks its own: “A higher memory setting raises"
    ) and first.endswith("and 2 more questions.")  # 2 quoted + 2 = 4 asked
    assert holds == "**What holds:** no document claim is reproduced or contradicted by independent evidence."
    # 1 + 2 own questions held back (1 + 1 by cause) and 1 configured value: the 4 questions, each counted once
    assert cannot == (
        "**What this host cannot say:** 1 own question cannot be tested on this host (CPU runs of two "
        "different engine implementations cannot decide a speed claim about a GPU host); 2 own questions "
        "are inconclusive (fewer than 3 repeats — 1; the model fails its held-out test — 1); 1 value the "
        "experiment file sets is shown as configuration, not graded."
    )
    assert verdicts.family_counts(got)["own"] == {"configured": 1, "inconclusive": 2, "cannot be tested here": 1}
    doc = verdicts.Verdict("a document's claim", "reproduced", "measured", "1×", kind="speedup", n=3)
    assert verdicts.headline([doc, *got])[0] == (
        "**The documents claim** “a document's claim”. The page also asks 4 questions of its own."
    )


def test_the_capacity_figures_say_measured_or_modelled(frames):
    curve, points, _, gmap = frames
    alts = [
        plots.alt_text(f)
        for f in (
            plots.capacity_pareto_figure(curve),
            plots.capacity_ceiling_figure(points),
            plots.capacity_map_figure(gmap),
            plots.modelled_ceiling_figure(capacity.modelled_ceilings()),
        )
    ]
    assert all(a.count("measured: ") == 4 for a in alts[:2])  # one panel per context x memory setting
    assert alts[2].startswith("measured: the engine with the higher goodput within the SLO")
    assert alts[3].startswith("modelled: Kimi-K3 on 8× B300, concurrency ceiling (sequences the KV pool holds)")


def test_the_synthetic_capacity_frames_are_labelled_and_consistent():
    rows = [r.row(0, named=True) for r, _ in capacity_frames()]
    assert len(rows) == 24 and {r["experiment"] for r in rows} == {"cpu_capacity"}
    assert all(r["requests_ok"] == 2 * r["load_concurrency"] for r in rows)
    assert json.dumps(sorted({r["kv_pool_tokens"] for r in rows})) == "[8192, 20480]"


# --------------------------------------------------------------------------- the accuracy probe on the map (item 7)


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """The SYNTHETIC probe records of tests/notebook_data.py (PROBED) as a sweep's manifest keeps them, read back."""
    return store.load_probes(write_capacity_probes(tmp_path_factory.mktemp("probed")))


def test_the_probe_summary_compares_each_configuration_with_its_engines_first(probes):
    assert probes.height == 4 * 8 and probes["order"].unique().sort().to_list() == [0, 1, 2, 3]
    summary = analysis.probe_summary(probes)
    assert summary.select("engine", "mem_util", "role", "reference_key", "probe", "first_diff", "near_ties").rows() == [
        ("sglang", 0.92, "reference", "sglang0.92", "reference", None, 0),
        ("sglang", 0.95, "compared", "sglang0.92", "differs from token 3 (8 of 8 prompts)", 3, 0),
        ("vllm", 0.92, "reference", "vllm0.92", "reference", None, 0),
        ("vllm", 0.95, "compared", "vllm0.92", "differs only at near-ties (8 of 8 prompts)", None, 8),
    ]
    cmp = analysis.probe_comparison(probes).filter(pl.col("server_key") == "vllm0.95").row(0, named=True)
    assert (cmp["outcome"], cmp["first_diff"], cmp["margin_at_diff"], cmp["compared"], cmp["k"]) == (
        "differs at a near-tie",
        7,
        0.05,
        16,
        16,
    )


def test_a_winner_whose_probe_differs_is_named_in_its_cell_and_by_the_verdict(frames, probes):
    curve, _, best, plain = frames
    gmap = analysis.goodput_map(best, analysis.probe_summary(probes))
    assert gmap.select(
        "context_tokens",
        "mem_util",
        "winner",
        "winner_probe",
        "winner_differs",
        "winner_probe_first_diff",
        "runner_up_probe",
    ).rows() == [
        (1024, 0.92, "vllm", "reference", False, None, "reference"),
        (
            1024,
            0.95,
            "vllm",
            "differs only at near-ties (8 of 8 prompts)",
            False,
            None,
            "differs from token 3 (8 of 8 prompts)",
        ),
        (3200, 0.92, "vllm", "reference", False, None, "reference"),
        (
            3200,
            0.95,
            "sglang",
            "differs from token 3 (8 of 8 prompts)",
            True,
            3,
            "differs only at near-ties (8 of 8 prompts)",
        ),
    ]
    # without probe data every configuration says so; the winners and margins are the map's as before
    assert set(plain["winner_probe"]) == set(plain["runner_up_probe"]) == {"not probed"}
    assert gmap.select("winner", "margin").equals(plain.select("winner", "margin"))
    # the map's table names the configuration in its cell, its caption and the verdict say why it cannot stand on it
    from kvlab import narrative

    cell = narrative.map_table(gmap.to_dicts()).frame.row(3, named=True)
    assert cell["higher goodput"] == "SGLang TP1 — its output differs (probe: differs from token 3 (8 of 8 prompts))"
    assert cell["accuracy probe (winner / runner-up)"] == (
        "differs from token 3 (8 of 8 prompts) / differs only at near-ties (8 of 8 prompts)"
    )
    said = "the winner at 200K (3,200 tok), 0.95 (SGLang TP1) differs from token 3 (8 of 8 prompts)"
    assert f"**Accuracy probe: {said}** of its engine's reference configuration" in narrative.map_caption(
        gmap.to_dicts()
    )
    v = capacity.map_verdict(curve, gmap)
    assert v.outcome == "cannot be tested here" and v.reason.startswith(
        f"{said} in the accuracy probe against its engine's reference configuration: fast, but not computing what the "
        "reference computes, so the map does not stand on it; "
    )
    unprobed = capacity.map_verdict(curve, plain)
    assert unprobed.reason.endswith(
        "; the winners' greedy outputs were not probed (probe: true in the experiment file compares them)"
    )
    assert "not probed" in narrative.map_caption(plain.to_dicts())
    assert plots.alt_text(plots.capacity_map_figure(gmap)).startswith("measured: the engine with the higher goodput")
    # on GPU runs a map that would stand is inconclusive while a winner's output differs
    gpu_curve = curve.with_columns(pl.lit("gpu").alias("device_kind"), pl.lit("8x B300").alias("hardware"))
    three = gmap.filter(pl.col("winner") == "vllm").with_columns(
        pl.lit("8x B300").alias("hardware"),
        pl.lit(3).alias("winner_repeats"),
        pl.lit(3).alias("runner_up_repeats"),
        (pl.col("winner_goodput_requests_per_s") * 0.98).alias("winner_goodput_min"),
        (pl.col("winner_goodput_requests_per_s") * 1.02).alias("winner_goodput_max"),
        (pl.col("runner_up_goodput_requests_per_s") * 0.98).alias("runner_up_goodput_min"),
        (pl.col("runner_up_goodput_requests_per_s") * 1.02).alias("runner_up_goodput_max"),
    )
    stands = capacity.map_verdict(gpu_curve, three)
    flagged = capacity.map_verdict(
        gpu_curve,
        three.with_columns(
            (pl.col("mem_util") == 0.95).alias("winner_differs"),
            pl.when(pl.col("mem_util") == 0.95)
            .then(pl.lit("differs from token 2 (1 of 8 prompts)"))
            .otherwise(pl.col("winner_probe"))
            .alias("winner_probe"),
        ),
    )
    assert (stands.outcome, flagged.outcome) == ("reproduced", "inconclusive")
    assert flagged.reason.startswith(
        "the winner at 64K (1,024 tok), 0.95 (vLLM TP1) differs from token 2 (1 of 8 prompts) in the accuracy probe"
    )
    assert stands.reason.endswith(
        "; no winner's greedy output differed clearly from its engine's reference configuration in the accuracy probe"
    )


def test_the_telemetry_over_time_frame_and_figure_draw_short_series_as_dots(data, frames):
    from kvlab.studies.capacity import MIN_LINE_SAMPLES, telemetry_over_time

    _, points, _, _ = frames
    samples = store.load_telemetry(data)
    full = telemetry_over_time(points, samples)
    # SYNTHETIC: 24 load points x 5 samples each, every one long enough for a line
    assert full.height == 120 and full["run_id"].n_unique() == 24
    assert full["samples"].unique().to_list() == [5] and full["line"].all()
    v = full.filter(pl.col("run_id") == "cap14")  # vllm, 3,200 tokens, 0.92, 4 in flight: the queue in the middle
    assert v["t_s"].to_list() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert v["requests_waiting"].to_list() == [0.0, 2.0, 2.0, 0.0, 0.0]
    assert v["kv_cache_usage"].to_list() == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert v.select("engine", "context_tokens", "mem_util", "load_level").unique().rows() == [("vllm", 3200, 0.92, 4.0)]
    # cap00 keeps 2 answered samples (one more failed), cap01 1: both too short for a line
    short = samples.with_columns(
        pl.when((pl.col("run_id") == "cap00") & (pl.col("t_s") == 1.0))
        .then(pl.lit("timeout"))
        .otherwise(pl.col("error"))
        .alias("error")
    ).filter(
        ~((pl.col("run_id") == "cap00") & (pl.col("t_s") > 1.0))
        & ~((pl.col("run_id") == "cap01") & (pl.col("t_s") > 0.0))
    )
    tel = telemetry_over_time(points, short)
    per_run = tel.unique("run_id").sort("run_id")
    assert per_run.filter(~pl.col("line"))[["run_id", "samples"]].rows() == [("cap00", 2), ("cap01", 1)]
    assert MIN_LINE_SAMPLES == 3
    fig = plots.capacity_telemetry_figure(tel)
    axes = fig.get_axes()
    assert len(axes) == 8 * 3  # 2 engines x 2 contexts x 2 settings, 3 gauges each
    drawn = [ln for ax in axes for ln in ax.get_lines()]
    dots = [ln for ln in drawn if ln.get_linestyle() == "None"]
    assert len(drawn) == 24 * 3 and len(dots) == 2 * 3 and len(drawn) - len(dots) == 66
    assert sorted(len(ln.get_xdata()) for ln in dots) == [1, 1, 1, 2, 2, 2]
    legend = [t.get_text() for ax in axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert "1 in flight (2 samples)" in legend and "2 in flight (1 sample)" in legend
    assert legend.count("4 in flight (5 samples)") == 8  # one legend per configuration
    series = tel.unique("run_id", maintain_order=True)
    caption = narrative.telemetry_caption(series.to_dicts(), MIN_LINE_SAMPLES)
    assert "24 drawn" in caption and "2 series with fewer than 3 samples" in caption
    assert "fewer than" not in narrative.telemetry_caption(full.unique("run_id").to_dicts(), MIN_LINE_SAMPLES)


def test_the_glossary_states_the_slo_share_report_07_grades_by():
    """Issue 39: the glossary said the SLO holds 'at the 99th percentile' where report 07 grades a load point within
    it when 90% of its requests met both bounds (analysis.SLO_SHARE)."""
    from kvlab import reports
    from kvlab.analysis import SLO_SHARE

    slo = dict(reports.GLOSSARY_TERMS)["SLO (service-level objective)"]
    assert f"at least {SLO_SHARE:.0%}" in slo and f"p{SLO_SHARE * 100:.0f}" in slo and "99th" not in slo
