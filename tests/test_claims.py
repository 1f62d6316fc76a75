"""The grading rules of kvlab.claims.grading, each on small fixed frames with exact outcomes and values, and the
verdicts the reports build with them (vLLM against sglang-jax on a CPU, the calibrated model's held-out test)."""

from __future__ import annotations

import polars as pl
import pytest
from prefix_frames import conc_runs, sharing_runs

from kvlab import guide
from kvlab.claims import (
    ILLUSTRATION_SCOPE,
    MIN_REPEATS,
    Repeats,
    combined,
    cpu_cross_engine,
    held_out_grade,
    held_out_passes,
    measured_difference,
    model_factor_decides,
    modelled_claim,
    on_cpu,
)
from kvlab.studies.engine_choice import frames as engine_choice_frames
from kvlab.studies import measured_frames
from kvlab.studies.prefix_sharing import frames as prefix_sharing_frames
from kvlab.studies import sharing_frames


def _speed_runs(device_kind: str | None, times: dict[tuple[str, int], list[float]]) -> pl.DataFrame:
    """Runs of two engines at scaled contexts: one row per repeat."""
    rows = []
    for (engine, tokens), values in times.items():
        for i, t in enumerate(values):
            rows.append(
                dict(
                    source="measured",
                    experiment="cpu_long_context",
                    hardware="CPU x86_64",
                    context_label={1024: "64K", 3200: "200K"}[tokens],
                    context_tokens=tokens,
                    engine=engine,
                    status="ok",
                    batch_time_s=t,
                    batch_size=8,
                    output_tokens=16,
                    prompt_tokens=tokens,
                    scale_factor=64.0,
                    device_kind=device_kind,
                    run_id=f"{engine}-{tokens}-{i}",
                )
            )
    return pl.DataFrame(rows, schema_overrides={"device_kind": pl.String})


# --------------------------------------------------------------------------- rule 1


def test_on_cpu_reads_the_device_kind_only():
    assert on_cpu("cpu") and on_cpu("CPU") and not on_cpu("gpu")
    # no device kind: the row counts as CPU (the rule is never skipped for want of a kind)
    assert on_cpu(None)


def test_cpu_runs_of_two_engines_cannot_decide_a_speed_claim():
    g = cpu_cross_engine("vllm", "sglang-jax", ["cpu", "cpu"], baseline=13.5, baseline_at="0% shared", n=1)
    assert (g.outcome, g.evidence, g.value, g.unit, g.n) == ("cannot be tested here", "measured", 13.5, "×", 1)
    assert g.reason.startswith(
        "vLLM and sglang-jax (CPU) are different implementations run on a CPU: vLLM is already 14×"
    )
    flipped = cpu_cross_engine("vllm", "sglang-jax", ["cpu"], baseline=0.5, baseline_at="64K", spread=(0.4, 0.8))
    assert (flipped.value, flipped.spread) == (2.0, (1.25, 2.5))  # slower ÷ faster, sglang-jax named the faster
    assert flipped.reason.startswith("sglang-jax (CPU) and vLLM")
    # no setting without the mechanism measured: still cannot be tested here, with no value and the reason why
    none = cpu_cross_engine("vllm", "sglang-jax", ["cpu"], baseline=None, baseline_at="no load below 100 measured", n=1)
    assert (none.outcome, none.value, none.unit, none.n) == ("cannot be tested here", None, "×", 1)
    assert "no baseline was measured (no load below 100 measured)" in none.reason
    # the rule does not apply to GPU runs, nor to one engine against itself
    assert cpu_cross_engine("vllm", "sglang", ["gpu", "gpu"], baseline=2.0, baseline_at="64K") is None
    assert cpu_cross_engine("vllm", "vllm", ["cpu"], baseline=2.0, baseline_at="64K") is None
    # a ratio that rounds to 1.0 names no engine ahead: 'vLLM already 1.0× faster' was printed on a fresh clone
    level = cpu_cross_engine("vllm", "sglang", ["cpu"], baseline=1.03, baseline_at="64K", n=1)
    assert level.reason.startswith("vLLM and SGLang are different implementations run on a CPU: they are level (1.0×)")


def test_a_speed_gap_names_the_engine_ahead_only_where_it_is_ahead():
    from kvlab.claims.grading import speed_gap

    assert speed_gap("vLLM", "SGLang", 1.24) == "vLLM already 1.2× faster"
    assert speed_gap("vLLM", "SGLang", 1.03) == speed_gap("vLLM", "SGLang", 0.97) == "vLLM and SGLang level (1.0×)"
    assert speed_gap("SGLang", "vLLM", 2.4, "sooner", already=False) == "SGLang 2.4× sooner"
    assert speed_gap("vLLM", "SGLang", 9.5, word="", already=False) == "vLLM 9.5×"


def test_context_scaling_measured_speed_claims_read_cannot_be_tested_on_a_cpu():
    claims = pl.DataFrame(
        [
            dict(
                claim_id="speedup_64K",
                kind="relative_speed",
                engine="vllm",
                context_from="64K",
                stated_value=1.5,
                statement="vLLM ≈ 1.5× faster than SGLang at 64K",
            ),
            dict(
                claim_id="speedup_200K",
                kind="relative_speed",
                engine="sglang",
                context_from="200K",
                stated_value=1.31,
                statement="SGLang ≈ 1.31× faster than vLLM at 200K",
            ),
        ]
    )
    times = {("vllm", 1024): [1.0], ("sglang-jax", 1024): [2.5], ("vllm", 3200): [2.0], ("sglang-jax", 3200): [19.0]}
    from kvlab.studies.context_scaling.checks import speed_verdicts

    rel_m = measured_frames.relative_speed(_speed_runs("cpu", times), "vllm", "sglang-jax")
    got = [
        v for v in speed_verdicts(claims, rel_m.head(0), rel_m, {"sglang": "sglang-jax"}) if v.evidence == "measured"
    ]
    # value: the speed-up each claim names, the other engine's time ÷ the claimed one's at the claim's context
    # (64K: sglang-jax 2.5 s ÷ vLLM 1.0 s; 200K: vLLM 2.0 s ÷ sglang-jax 19.0 s); the 64K baseline is in the number
    assert [(v.claim_id, v.outcome, v.value, v.n) for v in got] == [
        ("speedup_64K", "cannot be tested here", 2.5, 1),
        ("speedup_200K", "cannot be tested here", 2.0 / 19.0, 1),
    ]
    assert [v.spread for v in got] == [(2.5, 2.5), (2.0 / 19.0, 2.0 / 19.0)]  # one repeat a side: min = max
    assert got[1].number == (
        "vLLM already 2.5× faster at 1,024 tokens (stands in for 64K); at 3,200 tokens (stands in for 200K): vLLM 9.5×"
    )  # CPU contexts by their real token counts, the scaled context beside them
    assert got[0].number == "vLLM 2.5× faster at 1,024 tokens (stands in for 64K), the shortest context measured"
    assert all(v.kind == "relative_speed" and v.scope and v.reason for v in got)


def test_context_scaling_on_gpus_decides_by_the_repeats():
    claims = pl.DataFrame(
        [
            dict(
                claim_id="speedup_64K",
                kind="relative_speed",
                engine="vllm",
                context_from="64K",
                stated_value=1.5,
                statement="vLLM ≈ 1.5× faster than SGLang at 64K",
            )
        ]
    )
    from kvlab.studies.context_scaling.checks import speed_verdicts

    apart = {("vllm", 1024): [1.0, 1.1, 1.2], ("sglang", 1024): [1.5, 1.6, 1.7]}
    rel = measured_frames.relative_speed(_speed_runs("gpu", apart), "vllm", "sglang")
    (v,) = [v for v in speed_verdicts(claims, rel.head(0), rel) if v.evidence == "measured"]
    # value: vLLM's speed-up, SGLang's median time ÷ vLLM's; spread: its min–max over the repeats
    assert (v.outcome, v.n, v.value, v.spread) == (
        "reproduced",
        3,
        pytest.approx(1.6 / 1.1),
        (pytest.approx(1.5 / 1.2), pytest.approx(1.7 / 1.0)),
    )
    once = {("vllm", 1024): [1.0], ("sglang", 1024): [1.5]}
    rel = measured_frames.relative_speed(_speed_runs("gpu", once), "vllm", "sglang")
    (v,) = [v for v in speed_verdicts(claims, rel.head(0), rel) if v.evidence == "measured"]
    assert (v.outcome, v.n) == ("inconclusive", 1)


# --------------------------------------------------------------------------- rule 2


def test_a_measured_difference_needs_three_repeats_and_ranges_apart():
    a, b = Repeats.of([1.0, 1.1, 1.2]), Repeats.of([1.5, 1.6, 1.7])
    g = measured_difference(a, b, "lower")
    assert (g.outcome, g.n, g.value, g.spread) == (
        "reproduced",
        3,
        pytest.approx(1.1 / 1.6),
        (pytest.approx(1 / 1.7), pytest.approx(1.2 / 1.5)),
    )
    assert measured_difference(a, b, "higher").outcome == "contradicted"
    overlap = measured_difference(Repeats.of([1.0, 1.4, 1.6]), b, "lower")
    assert (overlap.outcome, overlap.n) == ("inconclusive", 3) and "overlap" in overlap.reason
    few = measured_difference(Repeats.of([1.0, 1.1]), b, "lower")
    assert (few.outcome, few.n) == ("inconclusive", 2) and f"fewer than the {MIN_REPEATS}" in few.reason
    empty = measured_difference(Repeats.of([None]), b, "lower")
    assert empty.outcome == "cannot be tested here"
    with pytest.raises(ValueError):
        measured_difference(a, b, "faster")


def test_repeats_from_an_aggregated_row():
    r = Repeats.summary(1.0, 0.8, 1.3, 4)
    assert (r.n, r.lo, r.hi, r.mid) == (4, 0.8, 1.3, 1.0)
    assert Repeats.summary(2.0, None, None, 1).values == (2.0,) and Repeats.summary(None, 1, 2, 3).n == 0


def test_repeats_count_distinct_repeat_indices_not_rows():
    """Rule 2's n: the load steps of one server start (three rows of repeat 0) are one repeat, folded by their median."""
    one = Repeats.per_repeat([8, 8, 8], [0, 0, 0])
    assert (one.n, one.values) == (1, (8.0,))
    three = Repeats.per_repeat([8, 9, 7, 10, None], [0, 1, 2, 2, 3])
    assert (three.n, three.values) == (3, (8.0, 9.0, 8.5))
    assert Repeats.per_repeat([1.0, 2.0], [None, None]).n == 2  # rows without an index are their own
    g = measured_difference(
        Repeats.per_repeat([20, 20, 20], [0, 0, 0]), Repeats.per_repeat([8, 8, 8], [0, 0, 0]), "higher"
    )
    assert (g.outcome, g.n, g.value) == ("inconclusive", 1, 2.5)


def test_mixed_signs_across_engines_or_metrics_are_inconclusive():
    up = measured_difference(Repeats.of([1.032]), Repeats.of([1.0]), "higher")  # vLLM latency +3.2%
    down = measured_difference(Repeats.of([0.77]), Repeats.of([1.0]), "higher")  # sglang-jax −23%
    g = combined([up, down])
    # value and spread: the first part's (one metric of one engine, its min–max over its one repeat); the parts'
    # values are in the reason, never mixed into the spread
    assert (g.outcome, g.n, g.value, g.spread) == ("inconclusive", 1, pytest.approx(1.032), (1.032, 1.032))
    assert g.reason == "signs mixed across engines or metrics (1.03×, 0.77×); n=1"
    agree = [measured_difference(Repeats.of([2.0, 2.1, 2.2]), Repeats.of([1.0, 1.1, 1.2]), "higher")] * 2
    assert combined(agree).outcome == "reproduced"


def test_memory_latency_claim_at_n1_with_mixed_signs_is_inconclusive():
    from kvlab.studies.memory_utilisation import checks, frames as mf

    claims = pl.DataFrame(
        [
            dict(
                claim_id="memory_092_latency",
                kind="memory",
                setting=0.92,
                metric="e2e_latency",
                direction="higher",
                statement="Lowering the target to 0.92 came at slightly higher latency",
            )
        ]
    )
    rows = []
    for engine, lat in (("vllm", {0.92: 103.2, 0.95: 100.0}), ("sglang-jax", {0.92: 77.0, 0.95: 100.0})):
        for u, e2e in lat.items():
            rows.append(
                dict(
                    source="measured",
                    experiment="cpu_long_context",
                    hardware="CPU",
                    engine=engine,
                    mem_util=u,
                    context_tokens=3200,
                    context_label="200K",
                    status="ok",
                    run_id=f"{engine}{u}",
                    attempts=1,
                    batch_time_s=1.0,
                    ttft_mean_ms=e2e / 2,
                    e2e_mean_ms=e2e,
                    server_preemptions=None,
                    device_kind="cpu",
                )
            )
    runs = pl.DataFrame(rows, schema_overrides={"server_preemptions": pl.Int64})
    stats = mf.memory_study(runs, pl.DataFrame(schema={"run_id": pl.String, "status": pl.String}))
    got = checks.memory_claim_verdicts(claims, stats, mf.memory_comparison(stats), None, simulated=True)
    lat = got[-1]
    assert (lat.outcome, lat.n, lat.kind, lat.claim_id) == ("inconclusive", 1, "memory_setting", "memory_092_latency")
    assert lat.spread == (pytest.approx(1.032), pytest.approx(1.032))  # vLLM's mean latency, 0.92 ÷ 0.95, one run
    assert lat.reason.startswith("signs mixed")


# --------------------------------------------------------------------------- rule 3


def test_the_held_out_rule():
    assert held_out_passes(3, 4, 0.5, 0.1) and held_out_passes(4, 4, 0.2, 0.1)
    assert not held_out_passes(2, 4, 0.5, 0.1)  # too few winners
    assert not held_out_passes(4, 4, 0.03, 0.408)  # margin inside the error
    assert not held_out_passes(0, 0, 1.0, 0.0)  # nothing held out


def test_a_model_that_fails_its_held_out_test_only_illustrates():
    g = modelled_claim(True, 0, 4, 0.03, 0.408, value=179999.0, unit="tokens")
    assert (g.outcome, g.evidence, g.scope, g.value) == ("inconclusive", "modelled", ILLUSTRATION_SCOPE, 179999.0)
    assert g.reason.startswith("an illustration, not a test")
    h = held_out_grade(0, 4, 0.03, 0.408)
    assert (h.outcome, h.value, h.unit, h.spread, h.family) == ("contradicted", 0.0, "of 4 winners", None, "own")
    assert "margin 3.0% within the 40.8% mean held-out error" in h.reason
    ok = modelled_claim(False, 4, 4, 0.5, 0.1)
    assert (ok.outcome, held_out_grade(4, 4, 0.5, 0.1).outcome) == ("contradicted", "reproduced")


def test_the_calibrated_models_crossover_is_an_illustration_with_a_red_held_out_row(fit):
    from kvlab.claims import winners_held_out
    from kvlab.studies.context_scaling.checks import crossover_modelled

    right, total = winners_held_out(fit)
    assert (right, total) == (0, 4) and fit.loo_mean_abs_pct > 40  # the published fit fails its held-out test
    got = crossover_modelled(179999.0, (110000.0, 190000.0), fit, None)
    assert [(v.claim_id, v.outcome, v.evidence) for v in got] == [
        ("crossover_modelled", "inconclusive", "modelled"),
        ("model_held_out", "contradicted", "modelled"),
    ]
    assert got[0].scope == ILLUSTRATION_SCOPE and got[1].value == 0.0
    assert not any(v.outcome == "reproduced" for v in got)


def test_report_01s_modelled_crossover_carries_04s_consistent_fits_range(fit):
    """01's crossover row quotes the range of the fits consistent with the published totals, from the same summary
    report 04 computes (consistent_fits over the physics-refitted assumption sets) and in 04's words; the grade, value
    and spread stay those of the model's illustration."""
    from kvlab.paths import DATA_DIR
    from kvlab.perfmodel.calibrate import consistent_fits, crossover_from_fit, crossover_range
    from kvlab.perfmodel.report import consistent_summary
    from kvlab.studies.context_scaling.checks import crossover_modelled

    sens, x_range = crossover_range(DATA_DIR, physics=True)
    cons = consistent_summary(consistent_fits(sens, DATA_DIR))
    x = crossover_from_fit(fit)
    plain = crossover_modelled(x, x_range, fit, None)
    got = crossover_modelled(x, x_range, fit, cons)
    # the range first, always; the default assumptions' value only beside it
    assert got[0].number == (
        "108K–746K over the assumptions the article leaves open (≈173K under the defaults); 70K–158K "
        "tokens (K = 1,024) over the 36 of 1,248 fits consistent with the published totals (not an "
        "independent check)"
    )
    assert (
        plain[0].number
        == "108K–746K over the assumptions the article leaves open (≈173K under the defaults) (not an independent check)"
    )
    assert [(v.claim_id, v.outcome, v.value, v.spread) for v in got] == [
        (v.claim_id, v.outcome, v.value, v.spread) for v in plain
    ]
    # report 04's crossover-range row gives the very same consistent-fits range
    from kvlab.perfmodel.figures import headroom_table
    from kvlab.studies.whatif_model import checks
    from kvlab.studies.whatif_model.frames import consistent

    head = headroom_table("B300", "Kimi-K3", [0.92, 0.95], [1], [204800])
    (row04,) = checks.check_crossover_range(checks.evidence(fit, sens, head, x, consistent(cons), ()))
    assert "70K–158K tokens (K = 1,024) over the 36 of 1,248 fits consistent with the published totals" in row04.number


# --------------------------------------------------------------------------- rule 4


def test_a_modelled_factor_decides_only_past_the_held_out_error(fit):
    assert model_factor_decides(1.5, 0.408) and not model_factor_decides(1.001, 0.408)
    f = guide.context_factor(guide.UserWorkload(204800, model="Kimi-K3"), fit)
    ta, tb = f.times
    assert max(ta, tb) / min(ta, tb) - 1 < f.held_out[2]  # the model's lead at 200K is within its error
    assert f.favours is None and f.crossover_range is not None
    lo, hi = f.crossover_range
    assert lo < f.crossover < hi  # the point crossover lies inside the range the factor gives


# --------------------------------------------------------------------------- the engine-choice verdicts on a CPU


def _choice_verdicts(claims, sharing, conc, w, ev):
    """Report 06's claim verdicts and its recommendation (kvlab.studies.engine_choice.checks)."""
    from kvlab.studies.engine_choice.checks import Inputs, claim_verdicts, recommendation_verdict

    return [*claim_verdicts(claims, Inputs(sharing, conc)), recommendation_verdict(w, w.tree(), ev)]


def test_engine_choice_cross_engine_claims_cannot_be_tested_on_a_cpu(fit):
    claims = pl.DataFrame(
        [
            dict(
                claim_id="shared_prefix_threshold",
                kind="engine_choice",
                metric="batch_time",
                threshold=0.3,
                statement="With a shared system prompt or document making up 30% or more of the prompt, choose SGLang",
            ),
            dict(
                claim_id="high_concurrency",
                kind="engine_choice",
                metric="requests_per_s",
                threshold=100.0,
                statement="Without a shared prefix and with 100 or more concurrent requests, choose vLLM",
            ),
        ]
    )
    sharing = sharing_frames.prefix_sharing(sharing_runs())
    conc = engine_choice_frames.concurrency_study(conc_runs())
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(w, fit, sharing, conc)
    got = _choice_verdicts(claims, sharing, conc, w, ev)
    assert [(v.claim_id, v.outcome, v.value) for v in got] == [
        ("shared_prefix_threshold", "cannot be tested here", 2.0),  # vLLM 2 s against 4 s at 0 shared
        # one level, 128 in flight, above the claim's 100: no baseline below it was measured, so no value
        ("high_concurrency", "cannot be tested here", None),
        ("engine_choice_recommendation", "cannot be tested here", 2.0),
    ]
    assert all(v.n == 1 and v.scope and v.reason for v in got)
    assert got[1].reason.startswith(
        "sglang-jax (CPU) and vLLM are different implementations run on a CPU, and no "
        "baseline was measured (no load below the claim's 100 in flight measured with "
        "both engines)"
    )
    # with a load below the threshold measured, its ratio is the baseline: sglang-jax 60 against 30 requests/s at 8
    low = conc_runs(30.0, 60.0).with_columns(pl.lit(8, pl.Int64).alias("batch_size"), pl.col("run_id") + "-8")
    conc2 = engine_choice_frames.concurrency_study(pl.concat([conc_runs(), low]))
    v = next(v for v in _choice_verdicts(claims, sharing, conc2, w, ev) if v.claim_id == "high_concurrency")
    assert (v.outcome, v.value, v.unit) == ("cannot be tested here", 2.0, "×")
    assert v.number.startswith("sglang-jax (CPU) already 2.0× ahead at 8 in flight (the lowest load measured)")


def test_hit_shares_cache_on_against_off_decide_only_over_three_runs():
    from kvlab.claims import cache_shares, counted, negated

    on = dict(
        engine="vllm", hardware="CPU", cache_hit_rate=0.78, cache_hit_rate_min=0.75, cache_hit_rate_max=0.8, n_runs=3
    )
    off = dict(
        engine="vllm", hardware="CPU", cache_hit_rate=0.0, cache_hit_rate_min=0.0, cache_hit_rate_max=0.0, n_runs=3
    )
    g = cache_shares(on, off)
    assert (g.outcome, g.value, g.unit, g.spread, g.n) == (
        "reproduced",
        0.78,
        "fraction of prompt tokens, cache on − off",
        (0.75, 0.8),
        3,
    )
    assert negated(g).outcome == "contradicted"  # "vLLM shares no prefixes"
    once = cache_shares(on | {"n_runs": 1, "cache_hit_rate_min": None, "cache_hit_rate_max": None}, None)
    assert (once.outcome, once.n, once.value) == ("inconclusive", 1, 0.78)
    assert once.reason.startswith("vLLM's cache-hit share, cache on against off: n=1")  # the display name
    assert negated(once).outcome == "inconclusive"
    assert (counted(True, 2, reason="r").outcome, counted(False, 3, reason="r").outcome) == (
        "inconclusive",
        "contradicted",
    )


def test_a_threshold_whose_saving_falls_across_it_is_not_called_a_jump():
    """The 05 question 'does the saving jump at 30%?': an engine whose saving falls from 20% to 50% shared but rises
    steeply above is described by every point and the steep rise, never as 'jumps from +11% to -15%'."""
    import polars as pl

    from kvlab.studies.prefix_sharing.checks import _shape as _threshold_shape

    gain = pl.DataFrame(
        {"engine": ["vllm"] * 4, "shared_fraction": [0.0, 0.2, 0.5, 0.9], "time_saved": [0.02, 0.11, -0.15, 0.40]}
    )
    th = prefix_sharing_frames.sharing_threshold(gain)
    assert th.verdict == "threshold" and th.slope_above > 2 * th.slope_below
    assert _threshold_shape(gain, th) == (
        "saving +2.0% at 0%, +11% at 20%, −15% at 50%, +40% at 90% shared: it rises more steeply from 30% up than below"
    )
    step = pl.DataFrame(
        {"engine": ["x"] * 5, "shared_fraction": [0.0, 0.1, 0.2, 0.5, 0.9], "time_saved": [0.0, 0.01, 0.02, 0.50, 0.52]}
    )
    th = prefix_sharing_frames.sharing_threshold(step)
    assert th.verdict == "threshold"
    assert _threshold_shape(step, th).endswith(f"a step of {th.step_at:+.0%} across 30%")


# --------------------------------------------------------------------------- every verdict's typed fields


def typed_field_gaps(verdicts) -> list[str]:
    """What a verdict lacks of its typed fields (issue 22): claim_id, kind, scope; a unit wherever it has a value;
    n (runs, published points, points fitted or assumption sets: docs/verdicts.md) for every kind of evidence."""
    gaps = []
    for v in verdicts:
        v = v if isinstance(v, dict) else v.__dict__
        where = f"{v['claim_id'] or v['claim'][:40]} ({v['evidence']}, {v['outcome']})"
        gaps += [f"{where}: no {f}" for f in ("claim_id", "kind", "scope") if not v[f]]
        if v["value"] is not None and not v["unit"]:
            gaps.append(f"{where}: value {v['value']} without a unit")
        if v["n"] is None and v["evidence"] in ("measured", "published", "modelled"):
            gaps.append(f"{where}: no n")
    return gaps


def test_every_verdict_on_the_fixed_frames_carries_its_typed_fields(fit, study):
    from kvlab import store

    conc = engine_choice_frames.concurrency_study(conc_runs())
    w = guide.UserWorkload(8192, 0.4, 128, "Llama-3.1-8B")
    kv = store.load_claims().filter(pl.col("experiment") == "article_kv_design")
    from kvlab.studies.prefix_sharing.checks import Inputs, verdicts

    got = [
        *_choice_verdicts(kv, study["sharing"], conc, w, guide.from_evidence(w, fit, study["sharing"], conc)),
        *verdicts(
            study["claims"],
            Inputs(study["sharing"], study["gain"], study["thresholds"], study["by_turn"], study["reuse"], 0.3),
        ),
    ]
    empty = study["sharing"].head(0)  # nothing measured: every row still says n = 0 runs
    got += _choice_verdicts(kv, empty, conc.head(0), w, guide.from_evidence(w, fit, empty, conc.head(0)))
    assert len(got) == 16  # 5 + 6 from the frames, 5 with nothing measured
    assert typed_field_gaps(got) == []
    # the last turn's cached share, vLLM first: 2,176 of 2,304 prompt tokens (whole 128-token blocks of 2,240 shared)
    multi = next(v for v in got if v.claim_id == "multi_turn_reuse")
    assert (multi.value, multi.unit.split(" (")[0]) == (
        pytest.approx(2176 / 2304),
        "fraction of the last turn's prompt from the cache",
    )
