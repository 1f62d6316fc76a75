"""Issue 38's grading: the three verdict families counted apart (every count adds up), one rule for every measured
outcome that decides (found included), configured values shown and not graded, the seed documents' claims, the guide
never picking an engine by a model that fails its held-out test, and randomised property tests over the checkers
(fixed seeds: n is the distinct repeats behind the value, spread a min–max of the value in its unit, value the figure
the claim names)."""

from __future__ import annotations

import random
import re
import statistics

import polars as pl
import pytest
from prefix_frames import conc_runs, sharing_runs

from kvlab import guide, store, verdicts
from kvlab.claims import (
    MIN_REPEATS,
    Repeats,
    cache_shares,
    combined,
    counted,
    cpu_cross_engine,
    finding,
    held_out_gate,
    measured_difference,
    on_cpu,
)
from kvlab.claims import documents
from kvlab.studies.capacity import checks as capacity, frames as capacity_frames
from kvlab.claims.grading import (
    CONFIGURED,
    CPU_IMPLEMENTATIONS,
    FAILS_HELD_OUT,
    FEW_REPEATS,
    MIXED_SIGNS,
    NO_GPU_MEMORY,
    NO_RANGE,
    WITHIN_SPREAD,
    ASSUMED_FROM_CLAIM,
    configured,
)
from kvlab.paths import EXPERIMENTS_DIR
from kvlab.verdicts import Verdict
from kvlab.studies.engine_choice import frames as engine_choice_frames
from kvlab.studies import measured_frames
from kvlab.studies import sharing_frames

# --------------------------------------------------------------------------- the families


def test_a_consistency_verdict_never_reproduces_and_the_others_never_say_consistent():
    with pytest.raises(ValueError, match="a consistency verdict cannot be 'reproduced'"):
        Verdict("x", "reproduced", "published", "1", family="consistency")
    with pytest.raises(ValueError, match="a document verdict cannot be 'consistent'"):
        Verdict("x", "consistent", "measured", "1", family="document")
    with pytest.raises(ValueError, match="family 'mine'"):
        Verdict("x", "found", "measured", "1", family="mine")
    # a verdict without a family gets one from its id, kind, evidence and outcome
    assert [
        Verdict("x", o, e, "1", claim_id=c, kind=k).family
        for c, k, e, o in (
            ("speedup_64K", "relative_speed", "published", "consistent"),
            ("speedup_64K", "relative_speed", "measured", "cannot be tested here"),
            ("model_held_out", "model_held_out", "modelled", "contradicted"),
            ("capacity_goodput_map", "capacity", "measured", "inconclusive"),
            ("", "", "measured", "found"),
        )
    ] == ["consistency", "document", "own", "own", "own"]
    # an index.json written before the families reads back: the article against its own table was "reproduced"
    old = {
        "claim": "vLLM ≈ 1.5× faster at 64K",
        "outcome": "reproduced",
        "evidence": "published",
        "number": "1.50×",
        "claim_id": "speedup_64K",
        "kind": "relative_speed",
    }
    assert (Verdict(**old).outcome, Verdict(**old).family) == ("consistent", "consistency")


def _index_like() -> list[Verdict]:
    """Every family as the index holds it: the B300 article's 8 claims and the design article's 5 (13 document claims),
    some tested in two reports or on two kinds of evidence, the decay shape built from two of them, and kvlab's own
    questions and self-checks."""
    cpu = dict(evidence="measured", limit=CPU_IMPLEMENTATIONS, reason="two implementations on a CPU")
    few = dict(evidence="measured", limit=FEW_REPEATS, reason="n=1")
    V = Verdict
    return [
        V("vLLM ≈ 1.5× faster at 64K", "consistent", "published", "1.50×", claim_id="speedup_64K", n=2),
        V(
            "vLLM ≈ 1.5× faster at 64K — on this host",
            "cannot be tested here",
            number="4.9×",
            claim_id="speedup_64K",
            n=1,
            **cpu,
        ),
        V("SGLang ≈ 1.31× faster at 200K", "consistent", "published", "1.31×", claim_id="speedup_200K", n=2),
        V(
            "SGLang ≈ 1.31× faster at 200K — on this host",
            "cannot be tested here",
            number="0.07×",
            claim_id="speedup_200K",
            n=1,
            **cpu,
        ),
        V(
            "The winner changes (the table, interpolated)",
            "found",
            "published",
            "124K–130K",
            claim_id="crossover_published",
            n=4,
        ),
        V(
            "Does the model pass its held-out test?",
            "contradicted",
            "modelled",
            "0 of 4",
            claim_id="model_held_out",
            kind="model_held_out",
            n=4,
        ),
        V("vLLM drops 3.29×", "inconsistent", "published", "2.94×", claim_id="decay_vllm", n=2),
        V("SGLang drops 1.25×", "inconsistent", "published", "1.49×", claim_id="decay_sglang", n=2),
        V("SGLang holds up better", "consistent", "published", "1.97×", claim_id="decay_vllm,decay_sglang", n=4),
        V(
            "SGLang holds up better — on this host",
            "cannot be tested here",
            number="4.9×",
            claim_id="decay_vllm,decay_sglang",
            n=1,
            **cpu,
        ),
        V(
            "0.95 caused OOM retries",
            "cannot be tested here",
            "measured",
            "0 retries",
            claim_id="memory_095",
            n=1,
            limit=NO_GPU_MEMORY,
        ),
        V(
            "0.95 caused OOM retries — kvlab's model",
            "cannot be tested here",
            "modelled",
            "13.4 GiB",
            claim_id="memory_095",
            n=1,
            limit=ASSUMED_FROM_CLAIM,
        ),
        V(
            "0.92 removed the retries",
            "cannot be tested here",
            "measured",
            "0",
            claim_id="memory_092_retries",
            n=1,
            limit=NO_GPU_MEMORY,
        ),
        V(
            "0.92 stabilised run time",
            "cannot be tested here",
            "measured",
            "–",
            claim_id="memory_092_stability",
            n=1,
            limit=NO_GPU_MEMORY,
        ),
        V(
            "0.92 came at higher latency",
            "inconclusive",
            number="+1.6%",
            claim_id="memory_092_latency",
            n=1,
            **(few | {"limit": MIXED_SIGNS}),
        ),
        V(
            "The crossover range",
            "inconclusive",
            "modelled",
            "108K–777K",
            claim_id="crossover_range",
            n=96,
            limit=FAILS_HELD_OUT,
        ),
        V(
            "The fit is plausible",
            "contradicted",
            "modelled",
            "no",
            claim_id="model_plausible",
            kind="model_plausibility",
            n=4,
        ),
        *[
            V(f"design claim {c}", "inconclusive", number="78%", claim_id=c, n=1, **few)
            for c in ("vllm_no_prefix_sharing", "sglang_radix_sharing", "sglang_radix_suffix")
        ],
        V("≥30% shared: SGLang", "cannot be tested here", number="19×", claim_id="shared_prefix_threshold", n=1, **cpu),
        V(
            "Does the saving jump at 30%?",
            "inconclusive",
            number="a steady rise",
            claim_id="shared_prefix_threshold_jump",
            n=1,
            **few,
        ),
        V("≥30% shared: SGLang", "cannot be tested here", number="19×", claim_id="shared_prefix_threshold", n=1, **cpu),
        V("≥100 in flight: vLLM", "cannot be tested here", number="–", claim_id="high_concurrency", n=1, **cpu),
        V(
            "A higher memory setting raises the ceiling",
            "configured",
            "measured",
            "8 → 20",
            kind="capacity",
            claim_id="capacity_ceiling_memory",
            n=1,
            limit=CONFIGURED,
        ),
    ]


def test_a_pages_headline_counts_the_very_rows_under_it():
    """Issue 53: 02 said "Checked against the documents' own figures, 2 claims: 2 inconsistent" above three rows,
    one of them consistent. On a page (not the index) every count is a count of the rows in the box under it, and a
    claim with several rows makes the count say checks, not claims."""
    V = Verdict
    rows = [
        V("decay as claimed", "inconsistent", "published", "2.1×", claim_id="decay_vllm"),
        V("decay as claimed", "consistent", "published", "1.1×", claim_id="decay_vllm"),
        V("other decay", "inconsistent", "published", "3×", claim_id="decay_sglang"),
    ]
    holds = verdicts.headline(rows)[1]
    assert "own figures, 3 checks: 1 consistent and 2 inconsistent." in holds
    assert "own figures, 2 claims: 2 inconsistent" in verdicts.headline(rows, index=True)[1]


def test_the_headline_counts_each_family_apart_and_every_count_adds_up():
    """Issue 38: 'the documents claim … and 16 more' while the claim tables held 13, and '3 claims cannot be tested
    ((3); (1))' adding to 4. Each claim counts once in the first sentence and once per family, under one outcome and
    one cause."""
    vs = _index_like()
    claim, holds, limits = verdicts.headline(vs, index=True)
    assert claim == (
        "**The documents claim** “vLLM ≈ 1.5× faster at 64K”; “SGLang ≈ 1.31× faster at 200K” and 11 more "
        "claims. The reports also ask 6 questions of their own."
    )  # 13 claims; 6 own ids
    assert holds == (
        "**What holds:** no document claim is reproduced or contradicted by independent evidence. "
        "Checked against the documents' own figures, 4 claims: 2 consistent and 2 inconsistent. kvlab's own "
        "checks: 2 failed."
    )
    assert limits == (
        "**What this host cannot say:** 9 claims cannot be tested on this host. Causes: CPU runs of two engine "
        "implementations cannot decide a GPU host's speed — 6; no GPU memory outside the KV pool on this "
        "host, where the claimed OOMs arise — 3. 4 claims are inconclusive. Causes: fewer than 3 repeats — 3; signs "
        "mixed across engines or metrics — 1. 2 own questions are inconclusive. Causes: the model fails its held-out "
        "test — 1; fewer than 3 repeats — 1. 1 value the experiment file sets is shown as configuration, not graded."
    )
    counts = verdicts.family_counts(vs)
    assert counts == {
        "document": {"cannot be tested here": 9, "inconclusive": 4},
        "consistency": {"consistent": 2, "inconsistent": 2},
        "own": {"found": 1, "contradicted": 2, "inconclusive": 2, "configured": 1},
    }
    # the sums: 13 document claims (each in the document family here), 4 checked against their own figures, 6 own
    assert sum(counts["document"].values()) == 13 and sum(counts["own"].values()) == 6
    for sentence in (limits,):  # every parenthesised cause count adds up to the count it explains
        for total, causes in re.findall(
            r"(\d+) (?:claims?|own questions?) (?:cannot be tested on this host|are "
            r"inconclusive|is inconclusive) \(((?:[^()]|\([^()]*\))*)\)",
            sentence,
        ):
            parts = [int(k) for k in re.findall(r" — (\d+)", causes)] or [int(total)]
            assert sum(parts) == int(total), (total, causes)


def test_the_headline_reads_index_json_dicts_as_verdicts():
    from dataclasses import asdict

    vs = _index_like()
    assert verdicts.headline([asdict(v) for v in vs]) == verdicts.headline(vs)
    assert verdicts.family_counts([asdict(v) for v in vs]) == verdicts.family_counts(vs)


# --------------------------------------------------------------------------- one rule for every measured outcome


def test_found_rows_pass_the_cpu_rule_and_the_repeats_rule():
    assert finding(5, engines=("vllm", "sglang"), device_kinds=["cpu", "cpu"])[::2] == (
        "cannot be tested here",
        CPU_IMPLEMENTATIONS,
    )
    # no device kind: counted as CPU; a GPU kind passes to the repeats rule
    assert finding(5, cross_engine=True)[0] == "cannot be tested here"
    assert finding(5, cross_engine=True, device_kinds=["gpu", "gpu"])[0] == "found"
    assert finding(2)[::2] == ("inconclusive", FEW_REPEATS) and "n=2" in finding(2)[1]
    assert finding(None)[0] == "inconclusive"
    assert finding(3, apart=False)[::2] == ("inconclusive", WITHIN_SPREAD)
    assert finding(3, apart=True) == ("found", "", "")
    # the crossover of two engines measured once each on a CPU: cannot be tested here, n shown
    from kvlab.studies.context_scaling.checks import crossover_measured

    x = measured_frames.Crossover(4224.0, "vllm", "sglang-jax", "linear", "", "", n_runs=1)
    (v,) = crossover_measured([x])
    assert (v.claim_id, v.outcome, v.n, v.value, v.limit, v.family) == (
        "crossover_measured",
        "cannot be tested here",
        1,
        4224.0,
        CPU_IMPLEMENTATIONS,
        "own",
    )
    (g,) = crossover_measured([x], device_kinds=["gpu", "gpu"])
    assert (g.outcome, g.limit) == ("inconclusive", FEW_REPEATS)


def test_a_row_without_a_device_kind_counts_as_cpu():
    assert on_cpu(None) and on_cpu("cpu") and not on_cpu("gpu")
    g = cpu_cross_engine("vllm", "sglang", [None, None], baseline=2.0, baseline_at="64K", n=1)
    assert (g.outcome, g.value, g.limit) == ("cannot be tested here", 2.0, CPU_IMPLEMENTATIONS)
    assert cpu_cross_engine("vllm", "sglang", ["gpu"], baseline=2.0, baseline_at="64K") is None


def test_repeats_without_their_range_never_decide_and_get_no_spread():
    r = Repeats.summary(2.0, None, None, 3)
    assert (r.n, r.unranged) == (3, True)
    g = measured_difference(Repeats.of([1.0, 1.1, 1.2]), r, "lower")
    assert (g.outcome, g.n, g.spread, g.limit) == ("inconclusive", 3, None, NO_RANGE)
    assert g.value == pytest.approx(1.1 / 2.0)
    assert Repeats.summary(2.0, None, None, 1).unranged is False  # one run: its range is itself


def test_mixed_signs_of_differences_are_read_against_zero():
    up = measured_difference(Repeats.of([1.5] * 3), Repeats.of([0.0] * 3), "higher", difference=True, unit="share")
    small = measured_difference(Repeats.of([0.5] * 3), Repeats.of([0.0] * 3), "higher", difference=True, unit="share")
    assert (up.value, small.value, up.neutral) == (1.5, 0.5, 0.0)
    assert combined([up, small]).outcome == "reproduced"  # both above 0: the same sign (1 was no neutral here)
    down = measured_difference(Repeats.of([0.0] * 3), Repeats.of([0.5] * 3), "higher", difference=True, unit="share")
    mixed = combined([up, down])
    assert (mixed.outcome, mixed.limit, mixed.value, mixed.spread) == ("inconclusive", MIXED_SIGNS, 1.5, (1.5, 1.5))


def test_the_shared_prefix_threshold_row_has_one_n_in_reports_05_and_06(study):
    """The same row, the same n: each page's value is the baseline ratio at 0% shared, so n is the runs behind it
    (report 06 took it from the rows at the claim's fractions)."""
    runs = sharing_runs()
    top = runs.filter(pl.col("shared_prefix_tokens") == pl.col("shared_prefix_tokens").max())  # the 90% point
    three_at_90 = pl.concat([runs] + [top.with_columns(pl.col("run_id") + f"-{k}") for k in (1, 2)])
    sharing = sharing_frames.prefix_sharing(three_at_90)
    at_claim = sharing.filter(pl.col("shared_fraction") == sharing["shared_fraction"].max())
    assert at_claim["n_runs"].min() == 3 and sharing.filter(pl.col("shared_fraction") == 0)["n_runs"].max() == 1
    from kvlab.studies.engine_choice.checks import Inputs as ChoiceInputs
    from kvlab.studies.engine_choice.checks import claim_verdicts
    from kvlab.studies.prefix_sharing.checks import Inputs, verdicts

    kv = study["claims"]
    five = next(
        v
        for v in verdicts(kv, Inputs(sharing, study["gain"], {}, pl.DataFrame(), None, 0.3))
        if v.claim_id == "shared_prefix_threshold"
    )
    conc = engine_choice_frames.concurrency_study(conc_runs())
    six = next(v for v in claim_verdicts(kv, ChoiceInputs(sharing, conc)) if v.claim_id == "shared_prefix_threshold")
    assert (five.outcome, five.value, five.n) == (six.outcome, six.value, six.n) == ("cannot be tested here", 2.0, 1)


def guide_fit():
    from kvlab.perfmodel import published_fit

    return published_fit()


def test_a_configured_value_is_shown_not_graded():
    g = configured(2.5, "×", reason="set by the file", n=3)
    assert (g.outcome, g.limit, g.value, g.n) == ("configured", CONFIGURED, 2.5, 3)
    assert g.verdict("ceiling", "8 → 20", claim_id="capacity_ceiling_memory", kind="capacity").family == "own"


def test_modelled_answers_stand_only_while_the_model_passes_its_held_out_test():
    assert held_out_gate("found", 4, 4, 0.5, 0.1) == ("found", "", "")
    out, why, limit = held_out_gate("found", 0, 4, 0.028, 0.408)
    assert (out, limit) == ("inconclusive", FAILS_HELD_OUT) and why.startswith("an illustration")
    assert held_out_gate("inconclusive", 0, 4, 0.0, 1.0)[0] == "inconclusive"
    # the B300 ceiling of report 07, with the published fit (0 of 4 held-out winners): an illustration
    v = capacity.modelled_check(capacity.Evidence(*[pl.DataFrame()] * 3, capacity_frames.modelled_ceilings()))
    assert (v.outcome, v.value, v.limit, v.family) == ("inconclusive", 11.0, FAILS_HELD_OUT, "own")


def test_the_guide_never_lets_a_model_that_fails_its_held_out_test_pick_an_engine():
    fit = guide_fit()
    f = guide.context_factor(guide.UserWorkload(4096, model="Kimi-K3"), fit)
    ta, tb = f.times
    right, total, error = f.held_out
    assert (right, total) == (0, 4) and max(ta, tb) / min(ta, tb) - 1 > error  # a margin far above the error ...
    assert f.favours is None  # ... and still no pick: the model fails its held-out test at these assumptions
    empty = sharing_frames.prefix_sharing(sharing_runs()).head(0)
    ev = guide.from_evidence(guide.UserWorkload(4096, model="Kimi-K3"), fit, empty, empty)
    assert ev.decided_by == "tree"
    # the tree's own words for each leaf (its parentheses, translated)
    assert [
        guide.decision_tree(*a).reason
        for a in ((True, 0.4), (True, 0.1, True), (True, 0.1), (False, 0.0, False, 128), (False, 0.0, False, 8, True))
    ] == [
        "RadixAttention's effect at its greatest",
        "dedicated optimisations built in",
        "about equal; vLLM is easier to operate",
        "C++ routing stability",
        "hardware and model diversity",
    ]


# --------------------------------------------------------------------------- the seed documents' claims


def test_the_seed_claims_are_graded_each_naming_the_experiment_that_would_decide_it():
    claims = store.load_claims()
    pub = store.load_runs().filter(pl.col("experiment") == "article_b300")  # the article's own table
    got = [
        (v.claim_id, v.outcome, v.family)
        for e in ("article_b300", "article_kv_design")
        for v in documents.graded(claims.filter(pl.col("experiment") == e), claims, pub)
    ]
    untested = ("cannot be tested here", "document")
    assert got == [
        ("decode_decides", *untested),
        ("communication_dominates_64K", *untested),
        ("kv_reads_dominate_200K", *untested),
        ("larger_windows_widen_lead", *untested),
        ("gpu_count_not_linear", *untested),
        ("sglang_timeout_utilisation", *untested),
        ("only_engine_changed", "inconsistent", "consistency"),  # its own table: DCP 1 for vLLM, 8 for SGLang
        ("deepseek_sglang", *untested),
        ("otherwise_equal_vllm_easier", *untested),
        ("high_concurrency_routing", *untested),
        ("mixed_hardware_vllm", *untested),
        ("throughput_sglang_stability_vllm", *untested),
        ("memory_095_recommended", "cannot be tested here", "document"),  # one document against the other
    ]
    every = documents.graded(claims, claims, pub)
    experiments = {p.stem for p in EXPERIMENTS_DIR.glob("*.yaml")}
    for c in claims.filter(pl.col("claim_id").is_in([v.claim_id for v in every])).iter_rows(named=True):
        assert c["decided_by"] in experiments, c  # each names the experiment file that would decide it, which exists
    setup = next(v for v in every if v.claim_id == "only_engine_changed")
    assert (setup.value, setup.n, setup.number) == (8.0, 4, "its table: vLLM DCP 1; SGLang DCP 8")
    conflict = next(v for v in every if v.claim_id == "memory_095_recommended")
    assert (conflict.value, conflict.n, conflict.evidence) == (0.95, 2, "published")
    assert "the 8×B300 article: “" in conflict.claim and "article_b300" not in conflict.claim  # the document in words
    assert "memory_095" in conflict.reason and "caused OOM retries" in conflict.reason
    # without the other documents or the table, nothing is invented: cannot be tested here
    alone = documents.graded(claims.filter(pl.col("claim_id") == "memory_095_recommended"))
    assert [v.outcome for v in alone] == ["cannot be tested here"]


# --------------------------------------------------------------------------- property tests over the checkers

SEEDS = range(12)


def _times(rng: random.Random, k: int, centre: float) -> list[float]:
    return [round(centre * rng.uniform(0.8, 1.25), 4) for _ in range(k)]


@pytest.mark.parametrize("seed", SEEDS)
def test_measured_difference_n_value_and_spread(seed):
    rng = random.Random(seed)
    a, b = _times(rng, rng.randint(1, 6), rng.uniform(0.5, 5)), _times(rng, rng.randint(1, 6), rng.uniform(0.5, 5))
    g = measured_difference(Repeats.of(a), Repeats.of(b), rng.choice(["higher", "lower"]))
    assert g.n == min(len(a), len(b))
    assert g.value == pytest.approx(statistics.median(a) / statistics.median(b))
    assert g.spread == (pytest.approx(min(a) / max(b)), pytest.approx(max(a) / min(b)))
    assert g.spread[0] <= g.value <= g.spread[1] and g.unit == "×"
    decides = g.n >= MIN_REPEATS and (min(a) > max(b) or max(a) < min(b))
    assert (g.outcome in ("reproduced", "contradicted")) == decides
    d = measured_difference(Repeats.of(a), Repeats.of(b), "higher", difference=True, unit="s")
    assert (d.value, d.unit) == (pytest.approx(statistics.median(a) - statistics.median(b)), "s")
    assert d.spread == (pytest.approx(min(a) - max(b)), pytest.approx(max(a) - min(b)))


@pytest.mark.parametrize("seed", SEEDS)
def test_per_repeat_n_is_the_distinct_repeat_indices(seed):
    rng = random.Random(100 + seed)
    reps = [rng.randint(0, 4) for _ in range(rng.randint(1, 12))]
    values = [rng.uniform(1, 9) for _ in reps]
    r = Repeats.per_repeat(values, reps)
    assert r.n == len(set(reps))
    groups = {k: statistics.median([v for v, q in zip(values, reps) if q == k]) for k in set(reps)}
    assert sorted(r.values) == pytest.approx(sorted(groups.values()))


def _speed_frame(device: str, claimed: list[float], other: list[float]) -> pl.DataFrame:
    rows = [
        dict(
            source="measured",
            experiment="x",
            hardware="8× NVIDIA B300" if device == "gpu" else "CPU",
            context_label="64K",
            context_tokens=1024,
            engine=e,
            status="ok",
            batch_time_s=t,
            batch_size=8,
            output_tokens=16,
            prompt_tokens=1000,
            scale_factor=64.0,
            device_kind=device,
            run_id=f"{e}{i}",
        )
        for e, ts in (("vllm", claimed), ("sglang", other))
        for i, t in enumerate(ts)
    ]
    return pl.DataFrame(rows)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_speed_verdicts_n_value_and_spread(seed, device):
    """The measured speed row: value the claimed engine's speed-up at the claim's context (the other engine's mean
    time ÷ its own), spread its min–max over the repeats, n the fewer runs — on GPUs (graded) and on a CPU (not)."""
    rng = random.Random(200 + seed)
    claimed, other = _times(rng, rng.randint(1, 5), 1.0), _times(rng, rng.randint(1, 5), rng.uniform(0.6, 1.6))
    claims = pl.DataFrame(
        [
            dict(
                claim_id="speedup_64K",
                kind="relative_speed",
                engine="vllm",
                context_from="64K",
                stated_value=1.5,
                statement="vLLM ≈ 1.5× faster at 64K",
            )
        ]
    )
    from kvlab.studies.context_scaling.checks import speed_verdicts

    rel = measured_frames.relative_speed(_speed_frame(device, claimed, other), "vllm", "sglang")
    (v,) = [v for v in speed_verdicts(claims, rel.head(0), rel) if v.evidence == "measured"]
    assert v.n == min(len(claimed), len(other))
    assert v.value == pytest.approx(statistics.mean(other) / statistics.mean(claimed)) and v.unit == "×"
    assert v.spread == (pytest.approx(min(other) / max(claimed)), pytest.approx(max(other) / min(claimed)))
    assert v.family == "document"
    if device == "cpu":
        assert (v.outcome, v.limit) == ("cannot be tested here", CPU_IMPLEMENTATIONS)
    elif v.n < MIN_REPEATS:
        assert v.outcome == "inconclusive"


@pytest.mark.parametrize("seed", SEEDS)
def test_cache_share_n_value_and_spread(seed):
    rng = random.Random(300 + seed)
    on = [rng.uniform(0.3, 0.9) for _ in range(rng.randint(1, 5))]
    off = [rng.uniform(0.0, 0.2) for _ in range(rng.randint(1, 5))]

    def row(xs):
        return dict(
            engine="vllm",
            hardware="CPU",
            cache_hit_rate=statistics.median(xs),
            cache_hit_rate_min=min(xs),
            cache_hit_rate_max=max(xs),
            n_runs=len(xs),
        )

    g = cache_shares(row(on), row(off))
    assert g.n == min(len(on), len(off))
    assert g.value == pytest.approx(statistics.median(on) - statistics.median(off))
    assert g.spread == (pytest.approx(min(on) - max(off)), pytest.approx(max(on) - min(off)))
    assert g.spread[0] <= g.value <= g.spread[1]


@pytest.mark.parametrize("seed", SEEDS)
def test_capacity_ceiling_n_is_the_repeats_and_the_cpu_form_is_configuration(seed):
    rng = random.Random(400 + seed)
    k = rng.randint(1, 4)
    steps = rng.randint(1, 3)  # load steps of one server start: one repeat however many
    rows = []
    for r in range(k):
        for mem, pool in ((0.92, 8 + rng.randint(0, 1)), (0.95, 20 + rng.randint(0, 2))):
            for s in range(steps):
                rows.append(
                    dict(
                        engine="vllm",
                        context_tokens=1024,
                        context_label="64K",
                        mem_util=mem,
                        concurrency_ceiling=pool,
                        repeat=r,
                        device_kind="gpu",
                        hardware="8× NVIDIA B300",
                        kv_budget_bytes=None,
                        load_level=float(2**s),
                    )
                )
    points = pl.DataFrame(rows, schema_overrides={"kv_budget_bytes": pl.Int64})
    v = capacity.ceiling_check(capacity.Evidence(pl.DataFrame(), points, pl.DataFrame(), pl.DataFrame()))
    assert v.n == k
    hi = {r["repeat"]: r["concurrency_ceiling"] for r in rows if r["mem_util"] == 0.95}
    lo = {r["repeat"]: r["concurrency_ceiling"] for r in rows if r["mem_util"] == 0.92}
    assert v.value == pytest.approx(statistics.median(hi.values()) / statistics.median(lo.values()))
    assert v.spread == (
        pytest.approx(min(hi.values()) / max(lo.values())),
        pytest.approx(max(hi.values()) / min(lo.values())),
    )
    assert v.outcome == ("reproduced" if k >= MIN_REPEATS else "inconclusive")  # 20+ against 8–9: ranges apart
    budgets = points.with_columns(
        pl.when(pl.col("mem_util") == 0.92).then(8 << 20).otherwise(20 << 20).alias("kv_budget_bytes"),
        pl.lit("cpu").alias("device_kind"),
    )
    c = capacity.ceiling_check(capacity.Evidence(pl.DataFrame(), budgets, pl.DataFrame(), pl.DataFrame()))
    assert (c.outcome, c.n, c.value) == ("configured", k, v.value)


@pytest.mark.parametrize("seed", SEEDS)
def test_counted_n_passes_through_and_decides_only_over_three(seed):
    rng = random.Random(500 + seed)
    n = rng.randint(0, 6)
    g = counted(rng.random() < 0.5, n, reason="r", value=1.0, unit="of the points")
    assert g.n == n and (g.outcome in ("reproduced", "contradicted")) == (n >= MIN_REPEATS)


def test_the_decay_shape_on_gpus_never_decides_on_a_range_it_does_not_have():
    """Repeats.summary with no min and max (the decay GPU path, one factor per engine): 3 repeats, but no range, so
    inconclusive with no spread — never a zero-width range that could decide."""
    claims = store.load_claims().filter(pl.col("experiment") == "article_b300")
    pub = store.load_runs().filter(pl.col("experiment") == "article_b300")
    rows = [
        dict(
            source="measured",
            experiment="b300_long_context",
            hardware="NVIDIA B300 x8",
            run_id=f"{e}{c}{k}",
            engine=e,
            context_label=lab,
            context_tokens=c,
            status="ok",
            batch_time_s=t * (1 + k / 100),
            batch_size=8,
            output_tokens=1024,
            prompt_tokens=c - 1024,
            device_kind="gpu",
            gpu_count=8,
            scale_factor=1.0,
        )
        for e, times in (("vllm", (100.0, 300.0)), ("sglang", (150.0, 225.0)))
        for (lab, c), t in zip((("64K", 65536), ("200K", 204800)), times)
        for k in range(3)
    ]
    from kvlab.studies.measured_frames import decay_factors
    from kvlab.studies.throughput_decay.checks import Inputs, verdicts as decay_verdicts

    measured = decay_factors(pl.DataFrame(rows))
    check = measured_frames.consistency(pub, claims)
    got = decay_verdicts(Inputs(claims, check, decay_factors(pub), measured))[-1]
    assert (got.evidence, got.outcome, got.n, got.spread, got.limit) == ("measured", "inconclusive", 3, None, NO_RANGE)


@pytest.mark.parametrize("seed", SEEDS)
def test_memory_latency_n_value_and_spread_are_one_engine_one_metric(seed):
    """The latency claim tested on two engines and two metrics: value, spread and n are its first part's — the first
    engine's mean request latency at 0.92 ÷ 0.95, min–max over its repeats — never a range mixing engines or metrics."""
    from kvlab.studies.memory_utilisation import checks, frames as mf

    rng = random.Random(600 + seed)
    k = {e: {u: rng.randint(1, 4) for u in (0.92, 0.95)} for e in ("vllm", "sglang")}
    rows = []
    for e in ("vllm", "sglang"):
        for u in (0.92, 0.95):
            for i in range(k[e][u]):
                e2e = rng.uniform(80, 120)
                rows.append(
                    dict(
                        source="measured",
                        experiment="b300_long_context",
                        hardware="NVIDIA B300 x8",
                        engine=e,
                        mem_util=u,
                        context_tokens=204800,
                        context_label="200K",
                        status="ok",
                        run_id=f"{e}{u}{i}",
                        attempts=1,
                        batch_time_s=1.0,
                        ttft_mean_ms=e2e / 2,
                        e2e_mean_ms=e2e,
                        server_preemptions=0,
                        device_kind="gpu",
                        gpu_count=8,
                        kv_budget_bytes=None,
                    )
                )
    runs = pl.DataFrame(rows, schema_overrides={"kv_budget_bytes": pl.Int64})
    stats = mf.memory_study(runs, pl.DataFrame(schema={"run_id": pl.String, "status": pl.String}))
    claims = store.load_claims().filter(pl.col("claim_id") == "memory_092_latency")
    (v,) = checks.memory_claim_verdicts(claims, stats, mf.memory_comparison(stats), None, simulated=False)
    e2e = {u: [r["e2e_mean_ms"] for r in rows if r["engine"] == "vllm" and r["mem_util"] == u] for u in (0.92, 0.95)}
    assert v.n == min(min(x.values()) for x in k.values())  # the fewest repeats of any engine and setting
    assert v.value == pytest.approx(statistics.mean(e2e[0.92]) / statistics.mean(e2e[0.95]))
    assert v.spread == (pytest.approx(min(e2e[0.92]) / max(e2e[0.95])), pytest.approx(max(e2e[0.92]) / min(e2e[0.95])))
