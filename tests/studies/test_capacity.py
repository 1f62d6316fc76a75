"""Report 07 in its folder (kvlab/studies/capacity/): its reductions and verdicts on the SYNTHETIC capacity runs of
tests/notebook_data.py (CAPACITY: made up, with hand-computable numbers; not measured): telemetry read back from the
run folders, each load point against its concurrency ceiling, where queueing begins, the map, the verdicts and their
headline, the figures' labels; its typed result's JSON round trip; and the words and figures drawn from its verdicts
(issue 53: no leader where the verdict does not decide, modelled numbers with their ranges, runs counted as runs,
CPU contexts by their real tokens, a telemetry figure legible on a phone, the page within the prose limits)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
from kvlab.words import modelled_rate
from matplotlib.backends.backend_agg import FigureCanvasAgg
import pytest
from notebook_data import capacity_frames, write_capacity_probes, write_capacity_runs

from kvlab import search, store, verdicts
from kvlab.probe import probe_comparison, probe_summary
from kvlab.studies.capacity import checks as capacity
from kvlab.studies.capacity import figures, words
from kvlab.studies.capacity import frames as study_frames
from kvlab import figures as shared_figures


EMPTY = pl.DataFrame()


def verdicts_of(curve: pl.DataFrame, points: pl.DataFrame, gmap: pl.DataFrame) -> tuple:
    return capacity.capacity_verdicts(capacity.Evidence(curve, points, gmap, study_frames.modelled_ceilings()))


def map_verdict(curve: pl.DataFrame, gmap: pl.DataFrame):
    return capacity.map_check(capacity.Evidence(curve, EMPTY, gmap, EMPTY))


def ceiling_verdict(points: pl.DataFrame):
    return capacity.ceiling_check(capacity.Evidence(EMPTY, points, EMPTY, EMPTY))


#: Telemetry of no run (the store's frame when no run folder holds a telemetry.csv).
NO_SAMPLES = pl.DataFrame(schema={"run_id": pl.String, "experiment": pl.String, "t_s": pl.Float64, "error": pl.String})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_capacity_runs(tmp_path_factory.mktemp("capacity") / "data")


@pytest.fixture(scope="module")
def frames(data):
    runs = store.load_runs(data, "cpu_capacity")
    curve = study_frames.pareto_front(study_frames.load_curve(runs))
    points = study_frames.capacity_points(curve, store.load_telemetry(data), store.load_telemetry_info(data))
    best = study_frames.highest_load_within_slo(curve)
    return curve, points, best, study_frames.goodput_map(best)


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
    onset = study_frames.saturation_onset(points)
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


def test_queueing_under_the_ceiling_is_counted_against_the_table_above():
    """On a fresh clone's runs (2026-12-07) three configurations queued under their ceiling: once one sentence of 57
    words, then one sentence per setting, repeating the onset table just above the figure; now counted, pointing to
    the table's column."""
    from kvlab import prose

    def early(engine, tokens, mem, level):
        return {"engine": engine, "tp": 1, "dcp": 1, "context_label": "200K", "context_tokens": tokens,
                "mem_util": mem, "first_queued": level, "first_past_ceiling": None}  # fmt: skip

    onset = [early("sglang", 3200, 0.92, 2.0), early("sglang", 3200, 0.95, 4.0), early("vllm", 3200, 0.95, 4.0)]
    late = {**early("vllm", 3200, 0.92, 4.0), "first_past_ceiling": 4.0}  # queued only past its ceiling
    text = words.ceiling_caption([], [*onset, late], None)
    assert text.endswith(
        " 3 configurations in 2 settings queued at or under the ceiling (the table's “requests waited from”): a "
        "scheduler limit, not the KV pool."
    )
    assert prose.problems(f"<p>{text}</p>").long_sentences == []


def test_the_onset_table_says_not_available_where_telemetry_lacked_the_preemption_series(frames):
    """A sampled run whose engine exported no preemption counter (SGLang's appears only after its first retraction)
    has no preemption series: 07 says "not available" there, never "none"; where the series was sampled and never
    rose it says "none"."""
    _, points, _, _ = frames
    no_series = points.with_columns(
        pl.when(pl.col("engine") == "sglang").then(None).otherwise(pl.col("preemptions")).alias("preemptions")
    )
    onset = study_frames.saturation_onset(no_series)
    r = _row(onset, "sglang", 1024, 0.95)
    assert (r["telemetry"], r["preemptions_seen"], r["queue_seen"], r["first_preempted"]) == (
        "sampled",
        False,
        True,
        None,
    )
    assert _row(onset, "vllm", 1024, 0.95)["preemptions_seen"] is True
    shown = words.onset_table(onset.to_dicts()).frame.select(
        "configuration", "context", "memory setting", "requests waited from", "preempted from"
    )
    assert shown.rows() == [
        ("SGLang TP1", "1,024 tokens (stands in for 64K)", 0.92, "none", "not available"),
        ("vLLM TP1", "1,024 tokens (stands in for 64K)", 0.92, "none", "none"),
        ("SGLang TP1", "1,024 tokens (stands in for 64K)", 0.95, "none", "not available"),
        ("vLLM TP1", "1,024 tokens (stands in for 64K)", 0.95, "none", "none"),
        ("SGLang TP1", "3,200 tokens (stands in for 200K)", 0.92, "4 in flight", "not available"),
        ("vLLM TP1", "3,200 tokens (stands in for 200K)", 0.92, "4 in flight", "4 in flight"),
        ("SGLang TP1", "3,200 tokens (stands in for 200K)", 0.95, "none", "not available"),
        ("vLLM TP1", "3,200 tokens (stands in for 200K)", 0.95, "none", "none"),
    ]


def test_the_figure_data_report_07_hands_its_reader(frames):
    """The CSVs beside 07's Pareto and ceiling figures: every load point, the columns each figure draws."""
    curve, points, _, _ = frames
    pareto, ceiling = study_frames.pareto_figure_data(curve), study_frames.ceiling_figure_data(points)
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
    points = study_frames.capacity_points(curve, NO_SAMPLES, info)
    a, b = _row(points, "vllm", 1024, 0.92, 1.0), _row(points, "vllm", 1024, 0.92, 2.0)
    assert a["telemetry"] == "not available: the engine serves no /metrics" and b["telemetry"] == "not recorded"
    assert (a["kv_usage_peak"], a["waiting_peak"], a["preemptions"], a["queued"]) == (None, None, None, None)
    onset = study_frames.saturation_onset(points)
    assert _row(onset, "vllm", 1024, 0.92)["telemetry"] == "not available: the engine serves no /metrics"
    # an engine that exposes telemetry, on a run too short for a sample: its note, not "sampled" nor "not available"
    short = info.with_columns(
        available=pl.lit(True),
        reason=pl.lit(None, pl.String),
        note=pl.lit("no sample was taken: the run ended before its first sample"),
    )
    a = _row(study_frames.capacity_points(curve, NO_SAMPLES, short), "vllm", 1024, 0.92, 1.0)
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
    r = study_frames.goodput_map(one).row(0, named=True)
    assert (r["winner"], r["margin"], r["only_winner_within"], r["n"]) == ("vllm", None, True, 1)


def test_the_capacity_verdicts_follow_the_grading_rules(frames):
    curve, points, _, gmap = frames
    got = verdicts_of(curve, points, gmap)
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
    # each context once, its engines together (a fresh clone's four pairs ran to 60 words, each context per engine)
    assert got[0].number == (
        "1,024 tokens (stands in for 64K): SGLang 8 → 20, vLLM 8 → 20 requests (0.92 → 0.95); 3,200 tokens (stands in for 200K): "
        "SGLang 2 → 6, vLLM 2 → 6 requests (0.92 → 0.95)"
    )
    assert got[3].reason.startswith("an illustration: the model fails its held-out test (0 of 4 winners right")
    assert {v.family for v in got} == {"own"}
    assert got[1].number == (
        "2 of 2 runs past the ceiling queued (e.g. SGLang at 3,200 tokens (stands in for 200K), 4 in "
        "flight against a ceiling of 2: up to 2 waiting); 0 of 22 at or under it"
    )
    # a verdict that cannot decide names no leader: the ratio where load plays no part, not "vLLM ahead at 3 of 4"
    assert (
        got[2].number
        == "goodput ratio 2.0× at 1 in flight (the lowest load measured), 1,024 tokens (stands in for 64K), 0.92"
    )
    # every modelled ceiling with its range over the KV format and MLA width (report 04's 11–25 / 12–28 / 51–116 /
    # 58–131)
    assert got[3].number == (
        "vLLM TP8 at 0.92: 11–25; vLLM TP8 at 0.95: 12–28 (flagged by the memory check); SGLang TP8+DCP8 "
        "at 0.92: 51–116; SGLang TP8+DCP8 at 0.95: 58–131 (flagged by the memory check) requests at 200K (ranges "
        "over KV format BF16/FP8/packed FP8 MLA × MLA width 576/512)"
    )
    # on GPU runs the map is graded by rule 2: its cells' winners differ, so inconclusive (signs mixed)
    gpu = curve.with_columns(pl.lit("gpu").alias("device_kind"), pl.lit("8x B300").alias("hardware"))
    v = map_verdict(gpu, gmap.with_columns(pl.lit("8x B300").alias("hardware")))
    assert (v.outcome, v.reason.split(" (")[0]) == ("inconclusive", "signs mixed across engines or metrics")
    # nothing stored: nothing measured can be decided, and says why
    empty = curve.clear()
    no_info = pl.DataFrame(schema={"run_id": pl.String, "available": pl.Boolean, "reason": pl.String})
    none = verdicts_of(
        empty,
        study_frames.capacity_points(empty, NO_SAMPLES, no_info),
        study_frames.goodput_map(study_frames.highest_load_within_slo(empty)),
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
    v = ceiling_verdict(three)
    assert (v.outcome, v.value, v.n, v.spread) == ("reproduced", 2.5, 3, (2.5, 2.5))
    # the same repeats on the CPU form, whose pools are the file's KV budgets: configuration, whatever the repeats
    cpu = pl.concat([points.with_columns(pl.lit(k, dtype=points["repeat"].dtype).alias("repeat")) for k in range(3)])
    assert (ceiling_verdict(cpu).outcome, ceiling_verdict(cpu).n) == ("configured", 3)
    two = three.filter(pl.col("repeat") < 2)  # six rows a side, two repeats
    assert (ceiling_verdict(two).outcome, ceiling_verdict(two).n) == ("inconclusive", 2)


def test_the_headline_does_not_give_the_pages_own_questions_to_the_documents(frames):
    curve, points, _, gmap = frames
    got = verdicts_of(curve, points, gmap)
    first, holds, cannot = verdicts.headline(got)
    assert first.startswith(
        "**The documents make no claim this page tests**; it asks its own: “A higher memory setting raises"
    ) and first.endswith("and 2 more questions.")  # 2 quoted + 2 = 4 asked
    assert holds == "**What holds:** no document claim is reproduced or contradicted by independent evidence."
    # 1 + 2 own questions held back (1 + 1 by cause) and 1 configured value: the 4 questions, each counted once
    assert cannot == (
        "**What this host cannot say:** 1 own question cannot be tested on this host (CPU runs of two "
        "engine implementations cannot decide a GPU host's speed). 2 own questions are inconclusive. Causes: fewer "
        "than 3 repeats — 1; the model fails its held-out test — 1. 1 value the experiment file sets is shown as "
        "configuration, not graded."
    )
    assert verdicts.family_counts(got)["own"] == {"configured": 1, "inconclusive": 2, "cannot be tested here": 1}
    doc = verdicts.Verdict("a document's claim", "reproduced", "measured", "1×", kind="speedup", n=3)
    assert verdicts.headline([doc, *got])[0] == (
        "**The documents claim** “a document's claim”. The page also asks 4 questions of its own."
    )


def test_the_capacity_figures_say_measured_or_modelled(frames):
    curve, points, _, gmap = frames
    alts = [
        shared_figures.alt_text(f)
        for f in (
            figures.capacity_pareto_figure(curve),
            figures.capacity_ceiling_figure(points),
            figures.capacity_map_figure(gmap, map_verdict(curve, gmap)),
            figures.modelled_ceiling_figure(study_frames.modelled_ceilings()),
        )
    ]
    assert all(a.count("measured: ") == 4 for a in alts[:2])  # one panel per context x memory setting
    # no panel's title runs into another's (a scaled context's name on one line with its setting once did)
    for fig in (figures.capacity_pareto_figure(curve), figures.capacity_ceiling_figure(points)):
        renderer = FigureCanvasAgg(fig).get_renderer()
        boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
        assert len(boxes) == 4 and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert alts[2].startswith("measured: goodput within the SLO (not decidable on this host)")  # CPU: no leader
    assert alts[3].startswith("modelled: Kimi-K3 on 8× B300, concurrency ceiling")


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
    summary = probe_summary(probes)
    assert summary.select("engine", "mem_util", "role", "reference_key", "probe", "first_diff", "near_ties").rows() == [
        ("sglang", 0.92, "reference", "sglang0.92", "reference", None, 0),
        ("sglang", 0.95, "compared", "sglang0.92", "differs from token 3 (8 of 8 prompts)", 3, 0),
        ("vllm", 0.92, "reference", "vllm0.92", "reference", None, 0),
        ("vllm", 0.95, "compared", "vllm0.92", "differs only at near-ties (8 of 8 prompts)", None, 8),
    ]
    cmp = probe_comparison(probes).filter(pl.col("server_key") == "vllm0.95").row(0, named=True)
    assert (cmp["outcome"], cmp["first_diff"], cmp["margin_at_diff"], cmp["compared"], cmp["k"]) == (
        "differs at a near-tie",
        7,
        0.05,
        16,
        16,
    )


def test_a_winner_whose_probe_differs_is_named_in_its_cell_and_by_the_verdict(frames, probes):
    curve, _, best, plain = frames
    gmap = study_frames.goodput_map(best, probe_summary(probes))
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
    # the map's verdict cannot decide on a CPU: its table names no engine with more goodput, only both sides' goodput,
    # and its caption and the verdict name the configuration whose output differs
    v = map_verdict(curve, gmap)
    cell = words.map_table(gmap.to_dicts(), v).frame.row(3, named=True)
    assert "higher goodput" not in cell
    assert cell["goodput (req/s) at each engine's highest load within the SLO"] == (
        "SGLang TP1 1.0 at 4 in flight; vLLM TP1 0.80 at 4 in flight"
    )
    assert cell["accuracy probe (higher / lower)"] == (
        "differs from token 3 (8 of 8 prompts) / differs only at near-ties (8 of 8 prompts)"
    )
    # one run a side has no spread over repeats: a dash, never '1.3–1.3×'
    assert (cell["n"], cell["over the repeats"]) == (1, "–")
    said = "SGLang TP1 at 3,200 tokens (stands in for 200K), memory setting 0.95 differs from token 3 (8 of 8 prompts)"
    assert f"**Accuracy probe: {said}** from its engine's reference configuration" in words.map_caption(
        gmap.to_dicts(), v
    )
    named = "the configuration with more goodput at 3,200 tokens (stands in for 200K), 0.95 (SGLang TP1)"
    assert v.outcome == "cannot be tested here" and v.reason.startswith(
        f"{named} differs from token 3 (8 of 8 prompts) in the accuracy probe against its engine's reference "
        "configuration: fast, but not computing what the reference computes, so the map does not stand on it; "
    )
    unprobed = map_verdict(curve, plain)
    assert unprobed.reason.endswith(
        "; the configurations' greedy outputs were not probed (probe: true in the experiment file compares them)"
    )
    assert "not probed" in words.map_caption(plain.to_dicts(), unprobed)
    assert shared_figures.alt_text(figures.capacity_map_figure(gmap, v)).startswith("measured: goodput within the SLO")
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
    stands = map_verdict(gpu_curve, three)
    flagged = map_verdict(
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
        "the configuration with more goodput at 1,024 tokens (stands in for 64K), 0.95 (vLLM TP1) differs from token 2 (1 of "
        "8 prompts) in the accuracy probe"
    )
    assert stands.reason.endswith(
        "; no configuration's greedy output differed clearly from its engine's reference configuration in the "
        "accuracy probe"
    )


def test_the_telemetry_over_time_frame_and_figure_draw_short_series_as_dots(data, frames):
    from kvlab.studies.capacity.frames import MIN_LINE_SAMPLES, telemetry_over_time

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
    # one small figure per context x memory setting (issue 53: 24 panels printed 4.8 cm wide), 3 gauges stacked
    settings = figures.telemetry_settings(tel)
    assert [(c, m) for c, _, m in settings] == [(1024, 0.92), (1024, 0.95), (3200, 0.92), (3200, 0.95)]
    figs = [
        figures.capacity_telemetry_figure(tel.filter((pl.col("context_tokens") == c) & (pl.col("mem_util") == m)))
        for c, _, m in settings
    ]
    assert all(len(f.get_axes()) == 3 for f in figs)
    # legible at 390 px: drawn at most 5 inches (500 px) wide and taller than wide, so a phone shrinks it at most
    # to ~0.78 and the 7.5-pt legend stays ~8 px; at 1280 px it is shown at its natural 480 px
    assert all(f.get_size_inches()[0] <= 5.0 < f.get_size_inches()[1] for f in figs)
    drawn = [ln for f in figs for ax in f.get_axes() for ln in ax.get_lines()]
    dots = [ln for ln in drawn if ln.get_linestyle() == "None"]
    assert len(drawn) == 24 * 3 and len(dots) == 2 * 3 and len(drawn) - len(dots) == 66
    assert sorted(len(ln.get_xdata()) for ln in dots) == [1, 1, 1, 2, 2, 2]
    legend = [t.get_text() for f in figs for lg in f.legends for t in lg.get_texts()]
    assert "vLLM, 1 in flight (2 samples)" in legend and "vLLM, 2 in flight (1 sample)" in legend
    assert legend.count("SGLang, 4 in flight (5 samples)") == 4  # one legend per figure
    titles = [f.get_axes()[0].get_title(loc="left") for f in figs]
    assert titles[0] == "measured: 1,024 tokens (stands in for 64K)\nmemory setting 0.92"  # the real tokens first
    series = tel.unique("run_id", maintain_order=True)
    first = words.telemetry_caption(series.filter(pl.col("mem_util") == 0.92).filter(
        pl.col("context_tokens") == 1024).to_dicts(), MIN_LINE_SAMPLES)  # fmt: skip
    assert "6 drawn" in first and "2 with fewer than 3 samples drawn as dots only" in first
    assert "fewer than" not in words.telemetry_caption(full.unique("run_id").to_dicts(), MIN_LINE_SAMPLES)


def test_the_glossary_states_the_slo_share_report_07_grades_by():
    """Issue 39: the glossary said the SLO holds 'at the 99th percentile' where report 07 grades a load point within
    it when 90% of its requests met both bounds (study_frames.SLO_SHARE)."""
    from kvlab import reports
    from kvlab.studies.capacity.frames import SLO_SHARE

    slo = dict(reports.GLOSSARY_TERMS)["SLO (service-level objective)"]
    assert f"at least {SLO_SHARE:.0%}" in slo and f"p{SLO_SHARE * 100:.0f}" in slo and "99th" not in slo


# --------------------------------------------------------------------------- the folder's typed result and its words


@pytest.fixture(scope="module")
def computed(data, probes):
    """(workbook, result) as the notebook's first cell makes them, on the SYNTHETIC capacity runs with probes."""
    from kvlab import studies

    write_capacity_probes(data)
    return studies.notebook("07", {"data_dir": str(data)})


def test_the_result_is_typed_and_round_trips_through_json(computed, fixture_data):
    from kvlab import studies
    from kvlab.studies.capacity import CapacityResult

    for r in (computed[1], studies.notebook("07", {"data_dir": str(fixture_data)})[1]):
        assert isinstance(r, CapacityResult)
        back = CapacityResult.from_json(json.loads(json.dumps(r.to_json())))
        assert back.to_json() == r.to_json()
        assert all(back.frames[k].equals(f) for k, f in r.frames.items())
        assert back.queueing == r.queueing and back.verdicts == r.verdicts
    r = computed[1]
    assert r.queueing == capacity.QueueCount(past=2, queued=2, below=22, below_queued=0, repeats=1, engines=2)
    assert (r.curve.height, r.goodput_map.height, r.modelled.height, r.telemetry.height) == (24, 4, 12, 120)


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.get_axes() for t in ax.texts] + [ax.get_title() for ax in fig.get_axes()]


def test_the_map_names_no_engine_where_its_verdict_does_not_decide(computed):
    """Issue 53: the map was solid blue, 'vLLM 2.15× goodput' in every cell, under 'cannot be tested here'."""
    from kvlab.style import ENGINE_COLORS
    from matplotlib.colors import to_hex

    r = computed[1]
    v = capacity.by_id(r.verdicts)["capacity_goodput_map"]
    assert v.outcome == "cannot be tested here" and not verdicts.decides(v)
    fig = figures.capacity_map_figure(r.goodput_map, v)
    said = " ".join(_texts(fig))
    assert "not decidable on this host" in said and "× goodput" not in said and "higher goodput" not in said
    fills = {to_hex(c.get_facecolor()[0]) for c in fig.get_axes()[0].collections if len(c.get_facecolor())}
    assert not fills & {to_hex(c) for c in ENGINE_COLORS.values()}  # no cell in an engine's colour
    caption = words.map_caption(r.goodput_map.to_dicts(), v)
    assert "not decidable on this host" in caption and not re.search(r"\b(leads?|wins?|winner changes)\b", caption)
    assert "higher goodput" not in words.map_table(r.goodput_map.to_dicts(), v).frame.columns
    said = next(s for s in r.answer.sentences if "goodput" in s)
    assert "not decidable on this host" in said and not re.search(r"vLLM|SGLang", said)
    assert "ahead" not in v.number
    # where the verdict decides (GPU runs, three repeats a side, ranges apart), the leader is named
    gpu = r.curve.with_columns(pl.lit("gpu").alias("device_kind"), pl.lit("8x B300").alias("hardware"))
    three = r.goodput_map.filter(pl.col("winner") == "vllm").with_columns(
        pl.lit("8x B300").alias("hardware"),
        pl.lit(False).alias("winner_differs"),
        *[pl.lit(3).alias(f"{s}_repeats") for s in ("winner", "runner_up")],
        *[(pl.col(f"{s}_goodput_requests_per_s") * f).alias(f"{s}_goodput_{e}")
          for s in ("winner", "runner_up") for e, f in (("min", 0.98), ("max", 1.02))],
    )  # fmt: skip
    stands = map_verdict(gpu, three)
    assert stands.outcome == "reproduced"
    assert "vLLM" in " ".join(_texts(figures.capacity_map_figure(three, stands)))
    assert "vLLM leads at" in words.map_caption(three.to_dicts(), stands)


def test_every_modelled_ceiling_prints_with_its_range(computed):
    """Issue 53: 07 gave Kimi-K3's 200K ceilings as 11 / 12 / 51 / 58; over the KV format and MLA width the model
    gives 11–25 / 12–28 / 51–116 / 58–131 (report 04's ranges, from the same headroom_table)."""
    from kvlab.perfmodel.figures import headroom_table

    r = computed[1]
    at = r.modelled.filter(pl.col("context_tokens") == 204800).sort("dcp", "mem_util")
    got = at.select("concurrency_ceiling", "concurrency_ceiling_lo", "concurrency_ceiling_hi").rows()
    assert got == [(11, 11, 25), (12, 12, 28), (51, 51, 116), (58, 58, 131)]
    h = headroom_table("B300", "Kimi-K3", [0.92, 0.95], [1, 8], [204800]).sort("dcp", "mem_util")
    assert h.select("max_concurrent_seqs", "max_concurrent_seqs_lo", "max_concurrent_seqs_hi").rows() == got
    spans = ["11–25", "12–28", "51–116", "58–131"]
    answer = " ".join(r.answer.sentences)
    caption = words.modelled_caption(r.modelled.to_dicts(), capacity.by_id(r.verdicts)["capacity_modelled_ceiling"])
    table = words.modelled_table(r.modelled.to_dicts()).frame
    shown = table["ceiling at 200K"].to_list()  # a row per configuration and setting, by DCP then setting
    labels = [t.get_text() for ax in figures.modelled_ceiling_figure(r.modelled).get_axes() for t in ax.texts]
    assert all(s in answer and s in caption and s in labels for s in spans) and shown == spans
    assert not re.search(r"\b(11|12|51|58) requests", answer)


def test_the_capacity_limited_rate_is_the_models_answer_as_kvlab_model_prints_it(computed):
    """Issue 55 item 5: the modelled column of the capacity report is kvlab.perfmodel's capacity-limited throughput
    (what `kvlab model --context 204800 --tpot-ms 100` and report 04's figure compute), per configuration and memory
    setting at the longest context, each rate with its range; the answer gives it at the lower setting."""
    from kvlab.engines import SGLANG, VLLM
    from kvlab.perfmodel.calibrate import crossover_range
    from kvlab.perfmodel.roofline import Assumptions
    from kvlab.perfmodel.throughput import capacity_limited

    wb, r = computed
    t = r.modelled_throughput
    assert t.select("config", "mem_util", "context_tokens", "tpot_ms").rows() == [
        ("vllm TP8", 0.92, 204800, 100.0),
        ("sglang TP8+DCP8", 0.92, 204800, 100.0),
        ("vllm TP8", 0.95, 204800, 100.0),
        ("sglang TP8+DCP8", 0.95, 204800, 100.0),
    ]
    sens, _ = crossover_range(wb.data, Assumptions(), physics=True)
    direct = capacity_limited(sens, "B300", "Kimi-K3", 204800, 100.0, 0.92, ((VLLM, 1), (SGLANG, 8)), 8)
    assert t.filter(pl.col("mem_util") == 0.92).equals(direct)
    # every rate lies in its range, and a batch past the pool or a rate past the batch's is impossible
    for x in t.iter_rows(named=True):
        assert x["tokens_per_s_per_gpu_lo"] <= x["tokens_per_s_per_gpu"] <= x["tokens_per_s_per_gpu_hi"]
        assert x["batch"] <= x["seqs"] and x["batch_lo"] <= x["batch"] <= x["batch_hi"] <= x["seqs_hi"]
    low = t.filter(pl.col("mem_util") == 0.92).sort("dcp").to_dicts()
    said = [f"{words._config(x)} {modelled_rate(x)}" for x in low]
    sentence = next(s for s in r.answer.sentences if s.startswith("Within a TPOT of 100 ms there, at 0.92"))
    assert all(s in sentence for s in said) and all("(" in modelled_rate(x) for x in low)
    table = words.modelled_table(r.modelled.to_dicts(), t.to_dicts()).frame
    rates = table["tokens/s per GPU at 200K, TPOT ≤ 100 ms"].to_list()
    assert rates == [modelled_rate(x) for x in t.sort("dcp", "mem_util").to_dicts()]
    gone = {"tokens_per_s_per_gpu": 0.0, "tokens_per_s_per_gpu_lo": 0.0, "tokens_per_s_per_gpu_hi": 136.2, "batch": 0}
    assert modelled_rate(gone) == "out of reach at the default set (up to 140 over the others)"


def test_the_memory_flag_is_worded_as_reports_03_and_04_word_it(computed):
    r = computed[1]
    caption = words.modelled_caption(r.modelled.to_dicts(), None)
    table = words.modelled_table(r.modelled.to_dicts()).frame
    fig = figures.modelled_ceiling_figure(r.modelled)
    legend = [t.get_text() for ax in fig.get_axes() for t in ax.get_legend().get_texts()]
    everything = " ".join([caption, *table["memory check"].to_list(), *legend, *r.modelled["reason"].to_list()])
    assert "OOM risk" not in everything and "an assumption, not a predicted OOM" in caption
    assert any("an assumption, not a predicted OOM" in t for t in legend)


def test_the_queueing_verdict_counts_runs_not_repeats(frames):
    """Issue 53: 07's queueing verdict said 'over 3 runs' where 6 runs (3 repeats of 2 engines) were past it."""
    _, points, _, _ = frames
    three = pl.concat([points.with_columns(pl.lit(k, dtype=points["repeat"].dtype).alias("repeat")) for k in range(3)])
    v = capacity.queueing_check(capacity.Evidence(EMPTY, three, EMPTY, EMPTY))
    q = capacity.queue_count(three)
    assert q == capacity.QueueCount(past=6, queued=6, below=66, below_queued=0, repeats=3, engines=2)
    assert (v.outcome, v.n) == ("reproduced", 3)
    assert v.reason == "6 of 6 runs past the ceiling queued, over 2 engines and 3 repeats per engine"
    assert "over 3 runs" not in v.reason and v.number.startswith("6 of 6 runs past the ceiling queued")
    assert words._queue_sentence(v, q).endswith("reproduced: 6 of 6 runs past it queued (3 repeats per engine).")


def _page_html(r, wb) -> str:
    """The page's prose as the built HTML carries it: the notebook's Markdown cells and every section's Markdown,
    captions and tables (as cells), so kvlab.prose reads what a reader reads."""
    import mistune
    import nbformat

    from kvlab.paths import ROOT
    from kvlab.studies.capacity import page

    nb = nbformat.read(ROOT / "notebooks" / "07_capacity.ipynb", as_version=4)
    parts = [mistune.html(c.source) for c in nb.cells if c.cell_type == "markdown"]
    parts += [f"<p>{s}</p>" for s in r.answer.sentences]
    sections = ("opening", "pareto", "highest_load", "pool_fills", "engine_map", "real_traffic", "probe")
    for name in (*sections, "modelled_ceiling"):
        for item in getattr(page, name)(r, wb):
            if hasattr(item, "caption") and hasattr(item, "fig"):
                parts.append(f"<figcaption>{item.caption}</figcaption>")
            elif isinstance(getattr(item, "data", None), str):
                parts.append(mistune.html(item.data))
            elif hasattr(item, "frame"):
                f = item.frame
                parts.append("<table>" + " ".join(f"<td>{v}</td>" for row in f.rows() for v in row) + "</table>")
    return "\n".join(parts)


def test_the_page_keeps_the_prose_limits(computed, fixture_data, traffic):
    from kvlab import prose, studies

    for wb, r in (computed, studies.notebook("07", {"data_dir": str(fixture_data)}), traffic):
        found = prose.problems(_page_html(r, wb))
        assert found.words <= prose.MAX_WORDS and not found.long_sentences and not found.repeated, str(found)


# --------------------------------------------------------------------------- real traffic: trace replay and search

#: REAL runs of data/experiments/cpu_trace.yaml at memory setting 0.92 (tests/fixtures/README.md): per engine one
#: replay on the trace's timestamps and one load search with its probes.
TRACE_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "trace" / "runs" / "cpu_trace"


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """(workbook, result) of report 07 on the stored cpu_trace runs alone, priced at $2 per device-hour."""
    import shutil

    from notebook_data import copy_reference

    from kvlab import studies

    data = copy_reference(tmp_path_factory.mktemp("traffic") / "data")
    shutil.copytree(TRACE_RUNS, data / "runs" / "cpu_trace")
    return studies.notebook("07", {"data_dir": str(data), "price_per_device_hour": 2.0})


def test_each_search_reads_back_as_stored_with_its_interval_cost_and_mechanism(traffic):
    """The typed result on real runs: SGLang passed 1 in flight (40 of 40) and failed 2 (21 of 40), decode slowing
    named from its own TPOT; vLLM passed every level up to the search's limit of 32. Goodput and tokens/s are the
    passing probe's own; $ per million output tokens = 2 / (tokens/s x 3,600 / 10^6); no energy counter here."""
    r = traffic[1]
    assert r.trace_experiment == "cpu_trace" and r.price_per_device_hour == 2.0 and r.curve.is_empty()
    got = {row["engine"]: row for row in r.search.to_dicts()}
    assert set(got) == {"sglang", "vllm"} and {row["mem_util"] for row in got.values()} == {0.92}
    sg, vl = got["sglang"], got["vllm"]
    assert (sg["highest_passing"], sg["first_failing"], sg["probes"], sg["within"], sg["n"]) == (1.0, 2.0, 2, 40, 40)
    assert (vl["highest_passing"], vl["first_failing"], vl["probes"], vl["within"], vl["n"]) == (32.0, None, 6, 40, 40)
    assert sg["lower"] == pytest.approx(40 / (40 + search.Z95**2)) and sg["upper"] == pytest.approx(1.0)
    assert sg["stop"] == "bracket [1, 2] within the precision" and vl["stop"] == "passes at the limit (32)"
    assert (
        sg["mechanism"] == "decode slowing with batch size: TPOT p90 +269% on the passing load's while nothing queued"
    )
    assert vl["mechanism"] is None and (sg["slo_ttft_ms"], sg["slo_tpot_ms"], sg["search_share"]) == (3000, 300, 0.85)
    assert r.runs.is_empty()  # the capacity ladder (cpu_capacity) is not among these runs
    stored = store.load_runs(TRACE_RUNS.parents[1], "cpu_trace")
    for row in (sg, vl):
        passing = next(
            p
            for p in search.probes_of(_row_of(stored, row["search_run"]))
            if p.passed and p.level == row["highest_passing"]
        )
        probe = _row_of(stored, passing.run_id)
        assert row["goodput_requests_per_s"] == pytest.approx(probe["requests_within_slo"] / probe["batch_time_s"])
        tokens_s = probe["served_output_tokens"] / probe["batch_time_s"]
        assert row["output_tokens_per_s_per_device"] == pytest.approx(tokens_s)
        assert row["dollars_per_million_output_tokens"] == pytest.approx(2.0 / (tokens_s * 3600 / 1e6))
        assert row["energy_j_per_output_token"] is None and "no /sys/class/powercap" in row["energy_note"]


def _row_of(runs: pl.DataFrame, run_id: str) -> dict:
    return runs.filter(pl.col("run_id") == run_id).row(0, named=True)


def test_the_search_path_is_every_probe_in_order_with_its_own_run(traffic):
    path = traffic[1].search_path
    assert path.filter(pl.col("engine") == "vllm")["level"].to_list() == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    sg = path.filter(pl.col("engine") == "sglang").sort("probe")
    assert (sg["level"].to_list(), sg["passed"].to_list(), sg["within"].to_list()) == (
        [1.0, 2.0],
        [True, False],
        [40, 21],
    )
    assert sg["upper"][1] == pytest.approx(search.wilson_upper(21, 40)) and sg["lower"][1] == pytest.approx(
        0.374974, abs=1e-6
    )
    assert path["ttft_p90_ms"].null_count() == 0 and path["load_mode"].unique().to_list() == ["closed"]
    # SGLang's TPOT p90 at 2 in flight against 1: the +269% its mechanism names
    assert sg["tpot_p90_ms"][1] / sg["tpot_p90_ms"][0] - 1 == pytest.approx(2.69, abs=0.005)


def test_the_trace_shape_and_reusable_against_cached_per_engine(traffic):
    """The shipped slice at scale 64 (40 requests over 12 s, 312 of 7,933 prompt tokens reusable); every served
    prompt length is the trace's; SGLang's radix cache served about the reusable tokens, vLLM's 128-token blocks
    none of the 8-token shared block."""
    r = traffic[1]
    s = r.trace_summary.row(0, named=True)
    assert r.trace_summary.height == 1 and r.trace_shape.height == 40 and r.trace_notes == ()
    assert (s["requests"], s["span_s"], s["prompt_tokens"], s["reusable_tokens"], s["block_tokens"]) == (
        40,
        12.0,
        7933,
        312,
        8,
    )
    assert (s["input_tokens_min"], s["input_tokens_max"], s["output_tokens_max"]) == (15, 1363, 15)
    reuse = {row["engine"]: row for row in r.trace_reuse.to_dicts()}
    assert (reuse["vllm"]["runs"], reuse["vllm"]["requests"], reuse["vllm"]["cached_tokens"]) == (7, 280, 0)
    assert (reuse["sglang"]["runs"], reuse["sglang"]["requests"], reuse["sglang"]["cached_tokens"]) == (3, 120, 939)
    for row in reuse.values():
        assert row["exact_lengths"] == row["checked"] == row["requests"]
        assert row["reusable_tokens"] == 312 * row["runs"] and row["prompt_tokens"] == 7933 * row["runs"]


def test_the_real_traffic_section_draws_both_figures_and_round_trips(traffic):
    from kvlab.studies.capacity import CapacityResult
    from kvlab.studies.capacity import page

    wb, r = traffic
    sec = page.real_traffic(r, wb)
    captions = [item.caption for item in sec if hasattr(item, "caption") and hasattr(item, "fig")]
    assert len(captions) == 2 and captions[0].startswith(
        "Measured on this host's CPUs (not a verdict between the engines)"
    )
    assert "SGLang at 0.92: 1 in flight; vLLM at 0.92: 32 in flight (the search's limit" in captions[0]
    assert (
        captions[1].startswith("Published trace, as replayed:") and "312 of 7,933 prompt tokens (3.9%)" in captions[1]
    )
    texts = [t for item in sec for t in (getattr(item, "data", None),) if isinstance(t, str)]
    assert texts[0].startswith("## On replayed traffic") and "not a GPU's capacity" in texts[1]
    table = next(item.frame for item in sec if hasattr(item, "frame"))
    assert table["$ per million output tokens"].to_list() == ["$104.19 at $2/device-h", "$3.16 at $2/device-h"]
    back = CapacityResult.from_json(json.loads(json.dumps(r.to_json())))
    assert all(back.frames[k].equals(f) for k, f in r.frames.items()) and back.trace_notes == r.trace_notes


def test_without_search_or_trace_runs_the_section_is_one_line(computed):
    from kvlab.studies.capacity import page

    wb, r = computed
    assert r.search.is_empty() and r.search_path.is_empty() and r.trace_shape.is_empty() and r.trace_reuse.is_empty()
    sec = page.real_traffic(r, wb)
    assert len(sec) == 1 and sec[0].data.startswith("*No load search or trace replay stored (`cpu_trace`)")
    assert "measure it with `make report` or" in sec[0].data and "\n" not in sec[0].data


def test_a_trace_that_changed_since_its_replay_is_named_not_drawn(tmp_path):
    """Each run's spec.json keeps its trace file's digest: where the file now differs, the shape is not drawn from it
    (it would not be what was sent), and the section says which file and why."""
    import shutil

    runs = tmp_path / "runs" / "cpu_trace"
    shutil.copytree(TRACE_RUNS, runs)
    for spec in runs.glob("*/spec.json"):
        saved = json.loads(spec.read_text())
        saved["workload"]["trace_digest"] = "0123456789ab"
        spec.write_text(json.dumps(saved))
    workloads, notes = study_frames.trace_workloads(tmp_path, store.load_runs(tmp_path, "cpu_trace"))
    assert workloads == [] and notes == [
        "data/traces/mooncake_conversation_40.jsonl changed since it was replayed (sha256 0123456789ab then)"
    ]
    assert (
        study_frames.trace_shape(workloads).is_empty()
        and study_frames.trace_summary(study_frames.trace_shape(workloads)).is_empty()
    )
