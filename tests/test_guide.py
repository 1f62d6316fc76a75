"""Two measured engines in the guide: vLLM (paged blocks) against sglang-jax (radix tree), exact sentences on fixed frames.

The frames follow cpu_prefix_sharing's design at quick scale: 16 prompts of 2,032 tokens, shared
fractions 0 / 0.2 / 0.5 / 0.9; vLLM hits whole 128-token blocks and reports a server counter,
sglang-jax hits the prefix token for token and reports only usage cached_tokens (server columns null).
"""

from __future__ import annotations

import polars as pl
import pytest

from kvlab import analysis, guide, narrative
from kvlab.perfmodel import published_fit

FRACS = [0.0, 0.2, 0.5, 0.9]
PROMPT, N = 2032, 16


def sharing_runs(vllm_time: float = 2.0, jax_time: float = 4.0) -> pl.DataFrame:
    """Batch time = base × (1 − 0.8 × hit rate): the cache saves in proportion to what it serves."""
    rows = []
    for engine, base in (("vllm", vllm_time), ("sglang-jax", jax_time)):
        for caching in (True, False):
            for f in FRACS:
                prefix = round(f * PROMPT)
                if engine == "vllm":
                    hits = (prefix // 128) * 128 * (N - 1) if caching else 0
                    server = hits
                else:
                    hits = prefix * (N - 1) if caching else 0
                    server = None  # sglang-jax serves no /metrics
                t = base * (1 - 0.8 * hits / (N * PROMPT))
                rows.append(dict(source="measured", experiment="cpu_prefix_sharing", hardware="CPU", engine=engine,
                                 prefix_caching=caching, mode="shared_prefix", status="ok",
                                 run_id=f"{engine}-{caching}-{f}", shared_prefix_tokens=prefix, prompt_tokens=PROMPT,
                                 server_prefix_cache_hits=server, cached_prompt_tokens=hits,
                                 served_prompt_tokens=N * PROMPT, served_output_tokens=N * 16, requests_ok=N,
                                 requests_failed=0, batch_time_s=t, ttft_mean_ms=t * 100, ttft_p99_ms=t * 200))
    return pl.DataFrame(rows, schema_overrides={"server_prefix_cache_hits": pl.Int64})


def conc_runs(vllm_rps: float = 40.0, jax_rps: float = 50.0) -> pl.DataFrame:
    rows = [dict(source="measured", experiment="cpu_classification", hardware="CPU", engine=engine,
                 prefix_caching=True, mode="classification", status="ok", run_id=engine, batch_size=128,
                 requests_ok=256, requests_failed=0, batch_time_s=256 / rps, served_output_tokens=2560,
                 ttft_mean_ms=100.0, ttft_p99_ms=300.0, e2e_mean_ms=400.0, server_preemptions=pre)
            for engine, rps, pre in (("vllm", vllm_rps, 0), ("sglang-jax", jax_rps, None))]
    return pl.DataFrame(rows, schema_overrides={"server_preemptions": pl.Int64})


def multi_turn_frames() -> tuple[pl.DataFrame, pl.DataFrame]:
    """2 conversations × 3 turns; vLLM with its cache off reports no cached-token count at all (null, not 0)."""
    runs, reqs = [], []
    for engine in ("vllm", "sglang-jax"):
        for caching in (True, False):
            rid = f"{engine}-{caching}"
            runs.append(dict(source="measured", experiment="cpu_multi_turn", hardware="CPU", engine=engine,
                             prefix_caching=caching, mode="multi_turn", status="ok", run_id=rid))
            for turn in range(3):
                prompt = 2048 + 64 * (turn + 1) + 32 * turn
                cached = (2048 + 96 * turn) if caching else 0
                if engine == "vllm":
                    cached = cached // 128 * 128 if caching else None
                for _ in range(2):
                    reqs.append(dict(run_id=rid, status="ok", prompt_tokens=prompt, cached_tokens=cached,
                                     ttft_ms=(10.0 if caching else 40.0) * (turn + 1)))
    return pl.DataFrame(runs), pl.DataFrame(reqs, schema_overrides={"cached_tokens": pl.Int64})


@pytest.fixture(scope="module")
def sharing() -> pl.DataFrame:
    return analysis.prefix_sharing(sharing_runs())


@pytest.fixture(scope="module")
def fit():
    return published_fit()


def test_each_engine_counts_its_own_hits(sharing):
    on = {(r["engine"], r["shared_fraction"]): r for r in sharing.filter(pl.col("prefix_caching")).iter_rows(named=True)}
    assert on[("vllm", 0.5)]["cache_hit_rate"] == pytest.approx(7 * 128 * 15 / (16 * 2032))
    assert on[("sglang-jax", 0.5)]["cache_hit_rate"] == pytest.approx(1016 * 15 / (16 * 2032))
    assert on[("vllm", 0.5)]["hit_source"] == "server counter"
    assert on[("sglang-jax", 0.5)]["hit_source"] == "usage cached_tokens"
    assert on[("vllm", 0.5)]["block_ideal_hit_rate"] == pytest.approx(7 * 128 * 15 / (16 * 2032))
    assert on[("sglang-jax", 0.5)]["ideal_hit_rate"] == pytest.approx(0.5 * 15 / 16)


def test_hit_count_not_reported_is_not_available_not_zero():
    runs = sharing_runs().with_columns(
        pl.when(pl.col("engine") == "sglang-jax").then(None).otherwise(pl.col("cached_prompt_tokens"))
        .alias("cached_prompt_tokens"))
    sh = analysis.prefix_sharing(runs)
    jax = sh.filter(pl.col("engine") == "sglang-jax")
    assert jax["cache_hit_rate"].null_count() == jax.height and jax["hit_source"].null_count() == jax.height
    text = narrative.hit_rate_sentence(sh)
    assert ("- sglang-jax (CPU), prefix cache on: cache-hit rate by shared fraction 0 → not available, "
            "0.2 → not available, 0.5 → not available, 0.9 → not available.") in text


def test_hit_rate_sentence_names_engine_label_and_count(sharing):
    assert narrative.hit_rate_sentence(sharing).splitlines() == [
        "- sglang-jax (CPU), prefix cache off: cache-hit rate by shared fraction 0 → 0%, 0.2 → 0%, 0.5 → 0%, 0.9 → 0% "
        "(counted from its usage cached_tokens).",
        "- sglang-jax (CPU), prefix cache on: cache-hit rate by shared fraction 0 → 0%, 0.2 → 19%, 0.5 → 47%, 0.9 → 84% "
        "(counted from its usage cached_tokens).",
        "- vLLM, prefix cache off: cache-hit rate by shared fraction 0 → 0%, 0.2 → 0%, 0.5 → 0%, 0.9 → 0% "
        "(counted from its server counter).",
        "- vLLM, prefix cache on: cache-hit rate by shared fraction 0 → 0%, 0.2 → 18%, 0.5 → 41%, 0.9 → 83% "
        "(counted from its server counter).",
    ]


def test_radix_vs_paged(sharing):
    lines = narrative.radix_vs_paged_sentence(sharing).splitlines()
    assert lines[2] == (
        "- shared fraction 0.5 (1,016 prefix tokens): sglang-jax (CPU) served **47%** of prompt tokens from its radix "
        "cache (token-exact ideal 47%), vLLM **41%** from its paged cache (whole 128-token-block ideal 41%); mean TTFT "
        "250 ms vs 134 ms, median batch time 2.5 s vs 1.34 s.")
    # 1016 − 896 = 120 tokens × 15 requests of 32,512: 5.5 points
    assert lines[-1] == ("- Largest hit-rate gap: at shared fraction 0.5, sglang-jax (CPU) served **5.5 percentage "
                         "points** more of the prompt from its cache than vLLM.")
    only_vllm = sharing.filter(pl.col("engine") == "vllm")
    assert narrative.radix_vs_paged_sentence(only_vllm).startswith("*Radix vs paged: no shared fraction")


def test_stand_in_note_only_with_sglang_jax_runs(sharing):
    note = narrative.stand_in_note(sharing)
    assert note.startswith("**sglang-jax (CPU) is not PyTorch SGLang.** It is SGLang's JAX runtime")
    assert "never as 0" in note
    assert narrative.stand_in_note(sharing.filter(pl.col("engine") == "vllm"), pl.DataFrame()) is None


def test_threshold_and_conclusions_per_engine(sharing):
    th = analysis.sharing_thresholds(analysis.caching_gain(sharing))
    assert set(th) == {"vllm", "sglang-jax"}
    runs, reqs = multi_turn_frames()
    text = narrative.prefix_conclusions(sharing, th, analysis.multi_turn_by_turn(runs, reqs), 0.3, 0.1)
    assert "- sglang-jax (CPU): threshold test at 30% → **smooth**; the cache first saves ≥10% of batch time at " \
           "shared fraction 0.2." in text
    assert "- vLLM: threshold test at 30% → **smooth**" in text
    assert "at shared fraction 0.9, vLLM with its prefix cache on served **83%** of prompt tokens" in text
    # per engine, never mixed: (2048 + 192) / 2304 for sglang-jax; 2176 / 2304 for vLLM's whole blocks
    assert "- Multi-turn, sglang-jax (CPU): with the cache on, the last turn found 97% of its prompt cached." in text
    assert "- Multi-turn, vLLM: with the cache on, the last turn found 94% of its prompt cached." in text


def test_multi_turn_per_engine_and_null_cached_share():
    runs, reqs = multi_turn_frames()
    bt = analysis.multi_turn_by_turn(runs, reqs)
    off = bt.filter((pl.col("engine") == "vllm") & ~pl.col("prefix_caching"))
    assert off["cached_share"].null_count() == 3 and off["cached_reported"].to_list() == [0, 0, 0]
    text = narrative.multi_turn_sentence(bt)
    assert "turn 0: cached tokens not reported of 2,112, TTFT 40 ms" in text
    assert "0 of 2,112 tokens cached" in text  # sglang-jax with its cache off did report 0
    assert ("- vLLM, last turn (turn 2): the cache serves **94%** of the prompt and TTFT is **4.00×** shorter than "
            "without it (30 ms vs 120 ms).") in text
    assert "- sglang-jax (CPU), last turn (turn 2): the cache serves **97%** of the prompt" in text
    assert text.splitlines()[-1] == ("- Radix vs paged, turn by turn (cache on, mean cached tokens per request, "
                                     "sglang-jax (CPU) vs vLLM): turn 1: 2,144 vs 2,048, turn 2: 2,240 vs 2,176; the "
                                     "same at turn 0.")


def test_concurrency_preemptions_not_available_for_sglang_jax():
    conc = analysis.concurrency_study(conc_runs())
    pre = dict(zip(conc["engine"], conc["preemptions"]))
    assert pre == {"vllm": 0, "sglang-jax": None}


def test_prefix_factor_says_by_how_much_and_on_what(sharing):
    w = guide.UserWorkload(shared_fraction=0.4)
    f = guide.prefix_factor(w, sharing)
    assert (f.favours, f.winner, round(f.margin, 4), f.n_engines) == ("vllm", "vllm", round(2.5 / (2 * (1 - 0.8 * 13440 / 32512)), 4), 2)
    assert f.evidence() == ("prefix: vLLM, median batch time 1.87× shorter than sglang-jax (CPU)'s at shared fraction "
                            "0.5, each engine's prefix cache on (cpu_prefix_sharing)")
    assert "With nothing to share (shared fraction 0) vLLM is 2.00× faster, so sharing the prefix narrows vLLM's lead" \
        in f.finding


def test_sglang_jax_win_counts_for_the_sglang_family_and_says_so(fit):
    sh = analysis.prefix_sharing(sharing_runs(vllm_time=4.0, jax_time=2.0))  # 2.677 s vs 1.25 s at 0.5: 2.14×
    w = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(w, fit, sh, analysis.concurrency_study(conc_runs()))
    assert ev.engine == "sglang"
    assert ev.basis == (
        "measured — prefix: sglang-jax (CPU), median batch time 2.14× shorter than vLLM's at shared fraction 0.5, each "
        "engine's prefix cache on (cpu_prefix_sharing); concurrency: sglang-jax (CPU), 1.25× the completed "
        "requests/s of vLLM at 128 requests in flight (cpu_classification); the SGLang side of these measurements is "
        "sglang-jax (CPU): evidence about the SGLang family on CPU, not PyTorch SGLang on a GPU")
    assert narrative.disagreement(w, w.tree(), ev, sh) is None  # the tree says sglang too
    assert "Favours **sglang** (measured on sglang-jax (CPU))." in narrative.evidence_sentences(ev)
    assert narrative.evidence_gap_sentence(ev) is None


def test_split_factors_the_trees_first_question_decides(fit, sharing):
    conc = analysis.concurrency_study(conc_runs())  # sglang-jax 1.25× the requests/s; vLLM wins the prefix factor
    shared = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(shared, fit, sharing, conc)
    assert ev.engine == "vllm" and ev.basis.endswith(
        "so the prefix factor, the tree's first question for this workload, decides; the SGLang side of these "
        "measurements is sglang-jax (CPU): evidence about the SGLang family on CPU, not PyTorch SGLang on a GPU")
    why = narrative.disagreement(shared, shared.tree(), ev, sharing)
    assert ("measured, vLLM's automatic prefix caching reused 41% of prompt tokens at shared fraction 0.5 "
            "(sglang-jax (CPU)'s radix cache: 47%)") in why
    distinct = guide.UserWorkload(shared_fraction=0.0, concurrency=128)
    ev = guide.from_evidence(distinct, fit, sharing, conc)
    assert ev.engine == "sglang" and "so the concurrency factor" in ev.basis
    why = narrative.disagreement(distinct, distinct.tree(), ev, sharing)
    assert ("The tree's high-concurrency branch assumes PagedAttention's memory efficiency wins with ≥ 100 requests in "
            "flight; measured, concurrency: sglang-jax (CPU), 1.25× the completed requests/s of vLLM") in why


def test_differences_under_the_margin_decide_nothing(fit):
    sh = analysis.prefix_sharing(sharing_runs(vllm_time=2.0, jax_time=2.0 * 1.03))  # 3% apart everywhere
    conc = analysis.concurrency_study(conc_runs(40.0, 41.0))
    ev = guide.from_evidence(guide.UserWorkload(shared_fraction=0.4, concurrency=128), fit, sh, conc)
    assert [f.favours for f in ev.factors] == [None, None, None]
    assert ev.engine == "vllm" and "tie-break" in ev.basis
    # at 0.5 sglang-jax's token-exact hits make it 1.339 / 1.2875 = 1.04× faster: still under the margin
    assert ev.factors[1].finding.endswith("With nothing to share (shared fraction 0) vLLM is 1.03× faster. "
                                          "Batch times within 5% (1.04×): no measured difference")
    assert narrative.evidence_gap_sentence(ev) == ("Two engines were measured (prefix, concurrency), but every measured "
                                               "difference is under 5%: the measurements do not separate them.")
    one = guide.from_evidence(guide.UserWorkload(), fit, sh.filter(pl.col("engine") == "vllm"), pl.DataFrame())
    assert narrative.evidence_gap_sentence(one).startswith("No measurement here compares two engines")


def test_a_saving_where_nothing_is_reused_makes_the_threshold_test_inconclusive():
    f = [0.0, 0.2, 0.5, 0.9]
    gain = pl.DataFrame({"engine": ["vllm"] * 4, "shared_fraction": f, "time_saved": [0.31, 0.12, 0.46, 0.65]})
    th = analysis.sharing_threshold(gain)
    assert (th.verdict, th.gain_at_zero) == ("inconclusive", 0.31)
    assert analysis.sharing_threshold(gain.with_columns(pl.Series("time_saved", [0.09, 0.12, 0.46, 0.65]))).verdict \
        != "inconclusive"  # under min_gain (10%) at 0: the test stands
    assert narrative.threshold_sentence(th, gain).endswith(
        "- **The threshold test is inconclusive on these runs**: at shared fraction 0 nothing is reused, yet the runs "
        "with the cache on took 31% less batch time than with it off, a difference the prefix cache cannot explain "
        "and as large as the 10% saving the test looks for. More repeats per point (the full sweep) are needed to test it.")
    sharing = analysis.prefix_sharing(sharing_runs())
    text = narrative.prefix_conclusions(sharing, {"vllm": th}, pl.DataFrame(), 0.3, 0.1)
    assert ("- vLLM: threshold test at 30% → **inconclusive** (at shared fraction 0, with nothing to reuse, cache on "
            "vs off already differ by +31% of batch time).") in text


def test_reports_05_06_compare_both_measured_engines(tmp_path):
    """The fixed frames above as measured runs: both reports name both engines, with the numbers computed from them."""
    import shutil

    from kvlab import reports, store
    from kvlab.paths import DATA_DIR

    data = tmp_path / "data"
    shutil.copytree(DATA_DIR / "reference", data / "reference")
    shutil.copytree(DATA_DIR / "catalog", data / "catalog")
    mt_runs, mt_reqs = multi_turn_frames()
    extra = dict(model="tiny-llama", context_label="2K", context_tokens=2048, scale_factor=1.0, repeat=0, attempts=1)
    for exp, frame, reqs in (("cpu_prefix_sharing", sharing_runs(), None), ("cpu_classification", conc_runs(), None),
                             ("cpu_multi_turn", mt_runs.with_columns(batch_time_s=pl.lit(1.0)), mt_reqs)):
        frame = frame.with_columns(**{k: pl.lit(v) for k, v in extra.items() if k not in frame.columns})
        for run in frame.iter_slices(1):
            rid = run["run_id"][0]
            store.write_run(data / "runs" / exp, rid, run,
                            requests=None if reqs is None else reqs.filter(pl.col("run_id") == rid).with_row_index(
                                "request_index").with_columns(pl.col("request_index").cast(pl.Int64)))
    rep5 = reports.run_one(reports.notebooks(["05"])[0], tmp_path / "out", {"data_dir": str(data)})
    r5 = rep5.html.read_text()
    r6 = reports.run_one(reports.notebooks(["06"])[0], tmp_path / "out",
                         {"data_dir": str(data), "curve_points": 8}).html.read_text()
    for text in (r5, r6):
        assert text.count("<strong>sglang-jax (CPU) is not PyTorch SGLang.</strong>") == 1
    assert ("Largest hit-rate gap: at shared fraction 0.5, sglang-jax (CPU) served <strong>5.5 percentage points</strong> "
            "more of the prompt from its cache than vLLM.") in r5
    assert "sglang-jax (CPU): threshold test at 30% → <strong>smooth</strong>" in r5
    assert "Multi-turn, vLLM: with the cache on, the last turn found 94% of its prompt cached." in r5
    # report 05's verdicts, first on the page: no per-request counts here, so the suffix claim rests on the hit rate
    assert [(v["outcome"], v["number"]) for v in rep5.verdicts] == [
        ("contradicted", "83% of prompt tokens served from vLLM's cache at 90% shared; 0% with it off"),
        ("reproduced", "84% of prompt tokens served from its radix cache at 90% shared; 0% with it off"),
        ("reproduced", "84% of prompt tokens from the cache at 90% shared against 84% if every request after the first "
                       "reused it"),
        ("contradicted", "vLLM finishes the batch 1.9× sooner at 50% and 90% shared, 2.0× sooner at 0%"),
        ("found", "sglang-jax (CPU): no jump, a steady rise (R² 1.00); vLLM: no jump, a steady rise (R² 1.00)"),
        ("found", "turn 2: vLLM 94%, TTFT 4.00× shorter; sglang-jax (CPU) 97%, TTFT 4.00× shorter"),
    ]
    assert r5.index('class="kvlab-verdicts"') < r5.index("<h2")
    assert "turn 0: cached tokens not reported of 2,112" in r5  # vLLM, cache off: not available, never 0
    assert ("from the data: <strong>vllm</strong> (decided by measured — prefix: vLLM, median batch time 1.87× shorter "
            "than sglang-jax (CPU)'s at shared fraction 0.5") in r6
    assert "<strong>They disagree.</strong>" in r6
    assert "concurrency: sglang-jax (CPU), 1.25× the completed requests/s of vLLM at 128 requests in flight" in r6
    # 06's verdicts from the fixed frames (shown first in the report)
    for number in ("83% of prompt tokens from vLLM's cache at shared fraction 0.9",
                   "84% of prompt tokens from its cache at shared fraction 0.9 (token-exact ideal 84%)",
                   "vLLM 1.9× shorter median batch time at 0.9 (vLLM 2.0× at 0, with nothing shared)",
                   "sglang-jax (CPU) 1.2× the completed requests/s at 128 in flight, every request completed",
                   "data: vLLM, median batch time 1.87× shorter than sglang-jax (CPU)'s at shared fraction 0.5 "
                   "(cpu_prefix_sharing)"):
        assert number in r6, number
    assert r6.index('class="kvlab-verdicts"') < r6.index("<h2")


# --------------------------------------------------------------------------- report 05: reuse, tables, captions, figures, verdicts


def sharing_requests(runs: pl.DataFrame) -> pl.DataFrame:
    """Per-request records for ``runs`` (sharing_runs with 4 in flight): vLLM reuses whole blocks from the second
    request on, sglang-jax's first wave (requests 0-3, sent together) finds nothing and every later request the
    whole prefix."""
    rows = []
    for r in runs.iter_rows(named=True):
        p = r["shared_prefix_tokens"]
        for i in range(N):
            if not r["prefix_caching"] or p == 0:
                cached = 0
            elif r["engine"] == "vllm":
                cached = p // 128 * 128 if i > 0 else 0
            else:
                cached = p if i >= 4 else 0
            rows.append(dict(run_id=r["run_id"], request_index=i, status="ok", prompt_tokens=PROMPT,
                             cached_tokens=cached, ttft_ms=10.0))
    return pl.DataFrame(rows)


@pytest.fixture(scope="module")
def study():
    """Everything report 05 computes, from the fixed frames: claims, sharing, per-request reuse, gain, turns."""
    from kvlab import store

    runs = sharing_runs().with_columns(batch_size=pl.lit(4))
    sharing = analysis.prefix_sharing(runs)
    gain = analysis.caching_gain(sharing)
    mt_runs, mt_reqs = multi_turn_frames()
    return dict(claims=store.load_claims().filter(pl.col("experiment") == "article_kv_design"), sharing=sharing,
                reuse=analysis.prefix_reuse_by_request(runs, sharing_requests(runs)), gain=gain,
                thresholds=analysis.sharing_thresholds(gain), by_turn=analysis.multi_turn_by_turn(mt_runs, mt_reqs),
                turn_requests=analysis.multi_turn_requests(mt_runs, mt_reqs))


def test_prefix_reuse_counts_requests_and_the_first_wave(study):
    on = {(r["engine"], r["shared_fraction"]): r for r in study["reuse"].filter(pl.col("prefix_caching")).iter_rows(named=True)}
    jax, vllm = on[("sglang-jax", 0.9)], on[("vllm", 0.9)]
    assert (jax["requests"], jax["requests_hit"], jax["first_wave"], jax["first_wave_hit"]) == (16, 12, 4, 0)
    assert (vllm["requests_hit"], vllm["first_wave_hit"], vllm["cached_tokens_per_hit"]) == (15, 3, 1792)
    assert jax["cached_tokens_per_hit"] == jax["shared_prefix_tokens"] == 1829
    runs = sharing_runs().with_columns(batch_size=pl.lit(4))
    unreported = analysis.prefix_reuse_by_request(runs, sharing_requests(runs).with_columns(
        cached_tokens=pl.lit(None, pl.Int64)))
    assert unreported["requests_hit"].null_count() == unreported.height  # not reported: null, never 0


def test_multi_turn_requests_number_turns_like_the_means(study):
    r = study["turn_requests"]
    assert r.height == 2 * 2 * 3 * 2 and sorted(r["turn"].unique().to_list()) == [0, 1, 2]
    means = r.group_by("engine", "prefix_caching", "turn").agg(pl.col("ttft_ms").mean())
    assert means.join(study["by_turn"], on=["engine", "prefix_caching", "turn"]).filter(
        pl.col("ttft_ms") != pl.col("ttft_mean_ms")).is_empty()


def test_reuse_sentences_say_which_requests_found_the_prefix(study):
    from kvlab import narrative

    assert narrative.reuse_sentences(study["reuse"]).splitlines() == [
        "- vLLM, cache on — requests that found the prefix in the cache: 20% shared: 15 of 16 (3 of the 4 sent first), "
        "50% shared: 15 of 16 (3 of the 4 sent first), 90% shared: 15 of 16 (3 of the 4 sent first).",
        "- sglang-jax (CPU), cache on — requests that found the prefix in the cache: 20% shared: 12 of 16 (0 of the 4 "
        "sent first), 50% shared: 12 of 16 (0 of the 4 sent first), 90% shared: 12 of 16 (0 of the 4 sent first).",
        "- At 90% shared, 0 of the 4 requests sglang-jax (CPU) received together at the start found the prefix in its "
        "radix cache; vLLM reused its blocks for 3 of 4. In these runs the requests that reached sglang-jax (CPU) while "
        "the prefix was still being computed computed it again; every later request reused all 1,829 prefix tokens.",
    ]


def test_prefix_verdicts_test_each_claim_with_one_number(study):
    from kvlab import narrative

    s = study
    found = narrative.prefix_verdicts(s["claims"], s["sharing"], s["gain"], s["thresholds"], s["by_turn"], s["reuse"])
    assert [(v.outcome, v.evidence, v.number) for v in found] == [
        # vLLM's blocks: 14 × 128 of 1,829 prefix tokens for 15 of 16 requests = 26,880 / 32,512
        ("contradicted", "measured", "83% of prompt tokens served from vLLM's cache at 90% shared; 0% with it off"),
        ("reproduced", "measured", "84% of prompt tokens served from its radix cache at 90% shared; 0% with it off"),
        ("contradicted", "measured", "12 of 16 requests reused the 1,829-token prefix at 90% shared (15 could); none "
                                     "of the 4 sent together first"),
        # batch time 2 × (1 − 0.8 × hit rate) against 4 × (…): 1.92× at 90%, 1.87× at 50%, 2× at 0%
        ("contradicted", "measured", "vLLM finishes the batch 1.9× sooner at 50% and 90% shared, 2.0× sooner at 0%"),
        ("found", "measured", "sglang-jax (CPU): no jump, a steady rise (R² 1.00); vLLM: no jump, a steady rise (R² 1.00)"),
        ("found", "measured", "turn 2: vLLM 94%, TTFT 4.00× shorter; sglang-jax (CPU) 97%, TTFT 4.00× shorter"),
    ]
    assert found[2].claim == "“…and computes only each request's own suffix” — sglang-jax (CPU), requests arriving 4 at a time"
    # without per-request counts the suffix claim falls back on the hit rate against the token-exact ideal
    no_reuse = narrative.prefix_verdicts(s["claims"], s["sharing"], s["gain"], s["thresholds"], s["by_turn"], None)
    assert (no_reuse[2].outcome, no_reuse[2].number) == (
        "reproduced", "84% of prompt tokens from the cache at 90% shared against 84% if every request after the first reused it")
    # a vLLM that never hits agrees with the claim; no runs at all test nothing
    zero = s["sharing"].with_columns(pl.when(pl.col("engine") == "vllm").then(0.0).otherwise(pl.col("cache_hit_rate"))
                                     .alias("cache_hit_rate"))
    assert narrative.prefix_verdicts(s["claims"], zero, s["gain"], {}, pl.DataFrame())[0].outcome == "reproduced"
    empty = narrative.prefix_verdicts(s["claims"], s["sharing"].clear(), s["gain"].clear(), {}, pl.DataFrame())
    assert [v.outcome for v in empty] == ["cannot be tested here"] * 3


def test_prefix_captions_say_what_each_figure_shows(study):
    from kvlab import narrative

    s = study
    assert narrative.prefix_sharing_caption(s["sharing"]) == (
        "At 90% shared, with its prefix cache on, vLLM 83% (its whole-block ideal 83%) and sglang-jax (CPU) 84% "
        "(token-exact ideal 84%) of prompt tokens came from the cache; with the caches off every hit rate is 0%. vLLM "
        "finishes the batch 1.9× sooner than sglang-jax (CPU) there and 2.0× sooner with nothing shared, so sharing "
        "does not change which engine is faster.")
    assert narrative.caching_gain_caption(s["gain"], s["thresholds"]) == (
        "Above 1× the cache helps: vLLM: batch time unchanged (1.00×) with the cache at 0% shared, 2.95× shorter at "
        "90%, rising with no jump; sglang-jax (CPU): batch time unchanged (1.00×) with the cache at 0% shared, 3.08× "
        "shorter at 90%, rising with no jump.")
    assert narrative.multi_turn_caption(s["by_turn"]) == (
        "Last turn (turn 2), prefix cache on: vLLM 94% of its prompt cached, mean TTFT 4.00× shorter than with the "
        "cache off; sglang-jax (CPU) 97% of its prompt cached, mean TTFT 4.00× shorter than with the cache off; with "
        "the caches off no token came from the cache.")
    ideal = analysis.ideal_sharing(1008, 8, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9], 128)
    # at 50%: 504 prefix tokens, 3 whole blocks = 384; × 7/8 of 1,008: 43.75% against 33.3%
    assert narrative.ideal_reuse_caption(ideal, 1008, 8, 128, 0.3) == (
        "Modelled for 8 requests of 1,008 tokens: a token-exact cache could serve at most 79% of prompt tokens at 90% "
        "shared, on a straight line (shared fraction × 7/8) with no step at the article's 30%; a cache of whole "
        "128-token blocks falls short of it by up to 10.4 percentage points (33% against 44% at 50% shared).")


def test_prefix_tables_are_readers_tables(study):
    from kvlab import narrative

    t = narrative.sharing_table(study["sharing"])
    assert t.caption == "one run per point (no repeats); with the prefix cache off every cache-hit rate is 0%"
    assert "cache-hit rate, cache off (%)" not in t.headers  # a column of zeros said once instead
    assert t.rows[3][:5] == ["vLLM", "90", "1,829", "82.7", "84.4"]
    g = narrative.gain_table(study["gain"])
    assert g.headers[-1] == "batch time saved by the cache (%)" and g.rows[3][-1] == "66.1"
    turns = narrative.turns_table(study["by_turn"])
    # vLLM with its cache off reported no cached count: the column stays (–) and the reporting counts are shown
    assert "cached per request, cache off (tokens)" in turns.headers and turns.rows[0][6] == "–"
    assert turns.headers[-2:] == ["requests reporting a cached count, cache on", "requests reporting a cached count, cache off"]
    claims = narrative.prefix_claims_table(study["claims"])
    assert claims.headers == ["what the article says", "how this report tests it"] and len(claims.rows) == 3
    assert narrative.prefix_citation_note(study["claims"].filter(pl.col("claim_id").is_in(list(narrative.PREFIX_CLAIMS)))) \
        .endswith("— section on vLLM PagedAttention, section on SGLang RadixAttention, decision tree.")


def _legend_is_below_every_axis(fig) -> bool:
    r = fig._get_renderer()
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    return len(legends) == 1 and legends[0].get_window_extent(r).y1 < min(
        a.get_window_extent(r).y0 for a in fig.axes)


def test_prefix_figures_legends_below_and_cache_settings_apart(study):
    from kvlab import plots

    fig = plots.prefix_sharing_figure(study["sharing"])
    assert _legend_is_below_every_axis(fig)
    legend = next(a.get_legend() for a in fig.axes if a.get_legend() is not None)
    handles = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles)}
    on, off = handles["prefix cache on: solid line, filled dot"], handles["prefix cache off: dashed line, open dot"]
    assert on.get_linestyle() != off.get_linestyle() and off.get_markerfacecolor() != on.get_markerfacecolor()
    assert {"vLLM", "sglang-jax (CPU)", "the article's threshold: 30% of the prompt shared"} <= set(handles)
    assert not [t for a in fig.axes for t in a.texts if "threshold" in t.get_text()]  # said in the legend, not on data
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0%", "20%", "50%", "90%"]
    gain = plots.caching_gain_figure(study["gain"])
    assert _legend_is_below_every_axis(gain) and gain.axes[0].get_ylim()[0] == 0
    turns = plots.multi_turn_figure(study["by_turn"], study["turn_requests"])
    assert _legend_is_below_every_axis(turns)
    for ax in turns.axes:  # whole turns only
        assert list(ax.get_xticks()) == [0, 1, 2] and [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    assert "small dots: one request each (TTFT)" in plots.alt_text(turns)
    ideal = plots.ideal_reuse_figure(analysis.ideal_sharing(1008, 8, [0.0, 0.3, 0.9], 128), 0.3, 128)
    assert _legend_is_below_every_axis(ideal)


# ----------------------------------------------------------------------------- report 06: captions, answer, verdicts


def test_context_factor_says_what_the_model_times_when_dcp_divides_nothing(fit):
    f = guide.context_factor(guide.UserWorkload(8192, model="Llama-3.1-8B"), fit)
    assert f.favours is None
    assert ("at 8,192 tokens on B300 the model gives SGLang TP8+DCP8 72.9 s per batch against vLLM TP8's 5.53 s "
            "(13.20× slower, the cost of DCP alone)") in f.finding  # what the chart beside it shows, not 'the same time'


def test_a_tie_break_is_called_a_tie_break(fit, sharing):
    empty_sh, empty_conc = sharing.head(0), analysis.concurrency_study(conc_runs()).head(0)
    shared = guide.UserWorkload(shared_fraction=0.4, concurrency=128)
    ev = guide.from_evidence(shared, fit, empty_sh, empty_conc)
    assert ev.decided_by == "tie-break" and ev.deciding is None
    assert "the data say" not in narrative.disagreement(shared, shared.tree(), ev, empty_sh)
    assert narrative.recommendation_sentence(shared, shared.tree(), ev, empty_sh) == (
        "**They disagree.** The tree says **sglang** (RadixAttention reuses the shared prefix across requests); "
        "nothing measured or modelled here separates the engines, so the data's **vllm** is only a tie-break (vLLM, "
        "easier to operate), not a finding.")
    distinct = guide.UserWorkload(shared_fraction=0.0, concurrency=16)
    ev = guide.from_evidence(distinct, fit, empty_sh, empty_conc)
    assert narrative.recommendation_sentence(distinct, distinct.tree(), ev, empty_sh) == (
        "**The tree says vLLM; the data cannot confirm it**: nothing measured or modelled here separates the engines, "
        "and vLLM is only the tie-break.")
    assert narrative.evidence_sentences(ev).endswith("- from the data: **vllm**, but only as a tie-break: no factor "
                                                 "separates the engines; vLLM as the tree's tie-break (easier to operate).")


def test_engine_choice_captions(sharing):
    from kvlab import narrative

    assert narrative.prefix_caption(sharing) == (
        "Measured on CPU, prefix cache on, at shared fraction 0.9: prompt tokens served from the cache — vLLM 83% "
        "(whole-block ideal 83%), sglang-jax (CPU) 84% (token-exact ideal 84%); vLLM's median batch time is 2.0× "
        "shorter at 0 and 1.9× shorter at 0.9.")
    assert narrative.concurrency_caption(analysis.concurrency_study(conc_runs())) == (
        "Measured on CPU at 128 requests in flight: sglang-jax (CPU) completes 50 requests/s (mean TTFT 100 ms) and "
        "vLLM completes 40 requests/s (mean TTFT 100 ms) — sglang-jax (CPU) 1.2× the throughput; 512 of 512 "
        "requests sent completed (none failed).")
    tree = guide.UserWorkload(shared_fraction=0.4).tree()
    assert narrative.tree_caption(tree) == (
        "Highlighted, this workload's path: Shared system prompt / document repeated across requests? yes → Fixed "
        "context ≥ 30% of the prompt? yes (40%) ⇒ SGLang (RadixAttention reuses the shared prefix across requests).")


def test_engine_choice_verdicts(fit, sharing):
    from kvlab import narrative, store
    from kvlab.paths import DATA_DIR

    claims = store.load_claims(DATA_DIR).filter(pl.col("experiment") == "article_kv_design")
    conc = analysis.concurrency_study(conc_runs())
    w = guide.UserWorkload(8192, 0.4, 128, "Llama-3.1-8B")
    ev = guide.from_evidence(w, fit, sharing, conc)
    got = [(v.outcome, v.evidence, v.number) for v in narrative.engine_choice_verdicts(claims, sharing, conc, w, w.tree(), ev)]
    assert got == [
        ("contradicted", "measured", "83% of prompt tokens from vLLM's cache at shared fraction 0.9"),
        ("reproduced", "measured", "84% of prompt tokens from its cache at shared fraction 0.9 (token-exact ideal 84%)"),
        ("contradicted", "measured", "vLLM 1.9× shorter median batch time at 0.9 (vLLM 2.0× at 0, with nothing shared)"),
        ("contradicted", "measured", "sglang-jax (CPU) 1.2× the completed requests/s at 128 in flight, every request "
                                     "completed"),
        ("contradicted", "measured", "data: vLLM, median batch time 1.87× shorter than sglang-jax (CPU)'s at shared "
                                     "fraction 0.5 (cpu_prefix_sharing)"),
    ]
    none = narrative.engine_choice_verdicts(claims, sharing.head(0), conc.head(0), w, w.tree(),
                                            guide.from_evidence(w, fit, sharing.head(0), conc.head(0)))
    assert [v.outcome for v in none] == ["cannot be tested here"] * 5
    assert none[-1].number == "nothing separates the engines here; vLLM only as the tie-break"


def test_concurrency_figure_legend_names_every_drawn_element():
    from kvlab import plots

    fig = plots.concurrency_figure(analysis.concurrency_study(conc_runs()))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "vLLM", "sglang-jax (CPU)", "mean TTFT (right)", "p99 TTFT (right)", "tree threshold: ≥ 100 in flight → vLLM"]
    left, right = fig.axes
    assert [t.get_text() for t in left.get_xticklabels()] == ["100", "128"]
    assert left.get_ylabel() == "completed requests/s" and left.get_ylim()[0] == 0  # 40 vs 50: linear from 0
    assert not left.get_legend() and not right.get_legend()  # one legend, under the panels
