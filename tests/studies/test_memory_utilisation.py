"""Report 03 (memory setting 0.92 vs 0.95) in its folder, kvlab/studies/memory_utilisation/: its typed result, its
checks one per claim kind, and the words and figures drawn from its verdicts (issue 53)."""

from __future__ import annotations

import json
import re

import mistune
import polars as pl
import pytest

from kvlab import prose, store, studies
from kvlab import words as shared_words
from kvlab.perfmodel.figures import headroom_table
from kvlab.studies.memory_utilisation import checks, page, words
from kvlab.studies.memory_utilisation import frames as mf
from kvlab.studies.memory_utilisation.figures import memory_ratio_figure
from kvlab.studies.memory_utilisation.result import MemoryUtilisationResult
from kvlab.verdicts import Verdict, family_of
from kvlab.studies.measured_frames import context_name
from support import pages

CLAIMS = store.load_claims().filter(pl.col("experiment") == "article_b300")
#: Words that name a direction of 0.92 against 0.95 (or a winner): none may appear where the verdict does not decide.
DIRECTION = re.compile(r"\b(longer|shorter|higher|lower|faster|slower|more|fewer|wins?)\b", re.I)


@pytest.fixture(scope="module")
def built(fixture_data):
    """(workbook, result) as the notebook's first cell makes them, on the suite's fixture data."""
    return studies.notebook("03", {"data_dir": str(fixture_data)})


@pytest.fixture(scope="module")
def result(built):
    return built[1]


def _memory_runs(gpu_count=None, repeats=1):
    """vLLM and sglang-jax at 0.92 and 0.95, 200K scaled to 3,200 tokens; sglang-jax at 0.95 needed one retry
    (``repeats`` runs of each, run time spreading 1% a run at 0.92 and 10% at 0.95)."""
    rows = [
        ("vllm", 0.92, 1.0, 400.0, 800.0, 0),
        ("vllm", 0.95, 0.8, 300.0, 780.0, 0),
        ("sglang-jax", 0.92, 14.0, 8000.0, 10000.0, 0),
        ("sglang-jax", 0.95, 15.0, 8200.0, 15000.0, 1),
    ]
    if repeats > 1:
        one, att = _memory_runs(gpu_count)
        runs = pl.concat(
            [
                one.with_columns(
                    pl.col("run_id") + f"-{k}",
                    pl.col("batch_time_s") * (1 + k * pl.when(pl.col("mem_util") == 0.92).then(0.01).otherwise(0.1)),
                )
                for k in range(repeats)
            ]
        )
        return runs, pl.concat([att.with_columns(pl.col("run_id") + f"-{k}") for k in range(repeats)])
    runs = pl.DataFrame(
        {
            "source": "measured",
            "experiment": "cpu_long_context",
            "hardware": "CPU",
            "run_id": [f"r{i}" for i in range(4)],
            "engine": [r[0] for r in rows],
            "mem_util": [r[1] for r in rows],
            "context_label": "200K",
            "context_tokens": 3200,
            "status": "ok",
            "batch_time_s": [r[2] for r in rows],
            "ttft_mean_ms": [r[3] for r in rows],
            "e2e_mean_ms": [r[4] for r in rows],
            "attempts": [r[5] + 1 for r in rows],
            "server_preemptions": [0, 0, None, None],
            "gpu_count": pl.Series([gpu_count] * 4, dtype=pl.Int64),
            "device_kind": "gpu" if gpu_count else "cpu",
            "kv_budget_bytes": pl.Series([None if gpu_count else 8388608] * 4, dtype=pl.Int64),
            "scale_factor": 64.0,
        }
    )
    attempts = pl.DataFrame(
        {
            "run_id": ["r0", "r1", "r2", "r3", "r3"],
            "status": ["ok", "ok", "ok", "failed", "ok"],
            "failure_cause": [None, None, None, "runtime_oom", None],
        }
    )
    return runs, attempts


def _verdict(outcome: str, limit: str = "") -> Verdict:
    return Verdict("latency", outcome, "measured", "n", claim_id="memory_092_latency", kind=checks.KIND, limit=limit)


# -- the typed result --------------------------------------------------------------------------------------------------


def test_the_result_round_trips_through_its_json(result):
    assert isinstance(result, MemoryUtilisationResult)
    data = result.to_json()
    back = MemoryUtilisationResult.from_json(json.loads(json.dumps(data)))
    assert back.to_json() == data
    for name, frame in result.frames.items():
        assert getattr(back, name).equals(frame), name
    assert (back.gpu, back.model, back.setting, back.runs, back.retries) == ("B300", "Kimi-K3", "kv_budget", 6, 0)


def test_the_fixture_verdicts(result):
    """Real CPU runs (n=1): the OOM parts cannot be tested here, the latency signs mix, and the design article's
    0.95 is graded on the other document's report: family document, nothing here decides it."""
    got = [(v.claim_id, v.outcome, v.evidence, v.value, v.n, v.family) for v in result.verdicts]
    assert got == [
        ("memory_095", "cannot be tested here", "measured", 0.0, 1, "document"),
        ("memory_095", "cannot be tested here", "modelled", pytest.approx(13.411045, abs=1e-6), 1, "document"),
        ("memory_092_retries", "cannot be tested here", "measured", 0.0, 1, "document"),
        ("memory_092_stability", "cannot be tested here", "measured", None, 1, "document"),
        ("memory_092_latency", "inconclusive", "measured", pytest.approx(1.016071, abs=1e-6), 1, "document"),
        ("memory_095_recommended", "cannot be tested here", "published", 0.95, 2, "document"),
    ]


# -- drift 1: every modelled count with its range ------------------------------------------------------------------------


def test_kimi_k3s_200k_ceilings_print_with_their_ranges(result, built):
    """03's table gave 11 / 12 / 51 / 58; over the KV format and MLA width the model gives 11–25 / 12–28 / 51–116 /
    58–131 (report 04 prints these): the table, the caption and the frames carry them."""
    at = result.headroom_printed.filter(pl.col("context_tokens") == 204800).sort("dcp", "mem_util")
    assert at.select("dcp", "mem_util", "max_concurrent_seqs").rows() == [
        (1, 0.92, "11 (11–25)"),
        (1, 0.95, "12 (12–28)"),
        (8, 0.92, "51 (51–116)"),
        (8, 0.95, "58 (58–131)"),
    ]
    raw = result.headroom.filter(pl.col("context_tokens") == 204800).sort("dcp", "mem_util")
    assert raw.select("max_concurrent_seqs_lo", "max_concurrent_seqs_hi").rows() == [
        (11, 25),
        (12, 28),
        (51, 116),
        (58, 131),
    ]
    assert words.headroom_caption(result.headroom.to_dicts()) == (
        "Modelled sequences that fit at 200K: 11 (11–25) at 0.92 and 12 (12–28) at 0.95 without DCP; 51 (51–116) at "
        "0.92 and 58 (58–131) at 0.95 with DCP 8 (ranges shaded). A cross marks the memory check's flag: an "
        "assumption, not a predicted OOM."
    )
    html = _html(page.modelled_headroom(result, built[0]))
    for shown in ("11 (11–25)", "12 (12–28)", "51 (51–116)", "58 (58–131)", "2.37M (2.37M–5.33M)"):
        assert shown in html, shown


# -- drift 2: outside the memory target, not the KV pool -------------------------------------------------------------


def test_the_answer_says_outside_the_memory_target_with_the_pool_inside_it(result):
    said = " ".join(result.answer.sentences)
    assert (
        "the model leaves 21.5 GiB per GPU outside the memory target at 0.92 and 13.4 GiB at 0.95; the KV pool inside "
        "it is 61.0 and 69.1 GiB without DCP"
    ) in said
    assert "outside the KV pool" not in said
    assert result.outside.select(
        pl.col("kv_pool_gib_per_gpu").round(1), pl.col("outside_pool_gib_per_gpu").round(1)
    ).rows() == [
        (61.0, 21.5),
        (69.1, 13.4),
    ]


# -- drift 3: a document's advice graded on another document is family document ---------------------------------------


def test_a_recommended_setting_against_another_document_is_family_document():
    every = store.load_claims()
    rec = every.filter(pl.col("claim_id") == "memory_095_recommended")
    assert checks.claim_kind(rec.row(0, named=True)) == "recommended"
    ev = checks.Evidence(pl.DataFrame(), pl.DataFrame(), None, checks.Host.of(True), every)
    (v,) = checks.verdicts(rec, ev)
    assert (v.outcome, v.evidence, v.family, v.value, v.n) == (
        "cannot be tested here",
        "published",
        "document",
        0.95,
        2,
    )
    # the family is set by the checker: left to the default, a published row would be filed as consistency
    assert family_of(v.claim_id, v.kind, v.evidence, v.outcome) == "consistency"
    assert "the 8×B300 article: “" in v.claim and "another model" in v.reason
    # without another document saying so, nothing is invented
    alone = checks.Evidence(pl.DataFrame(), pl.DataFrame(), None, checks.Host.of(True), rec)
    assert checks.verdicts(rec, alone) == []


# -- drift 4: a direction only where its verdict decides ---------------------------------------------------------------


def test_no_caption_or_sentence_names_a_direction_its_verdict_does_not_allow(result):
    ratios, stats = result.ratios.to_dicts(), result.stats.to_dicts()
    latency = checks.verdict_of_kind(list(result.verdicts), result.claims, "latency")
    assert latency.outcome == "inconclusive"
    caption = words.memory_caption(ratios, latency)
    assert caption == (
        "Measured, each engine against itself: 0.92 ÷ 0.95. No direction is drawn from these: inconclusive: signs "
        "mixed across engines or metrics (the latency verdict)."
    )
    conclusion = words.memory_conclusion(
        result.by_setting.to_dicts(), ratios, stats, result.spreads.to_dicts(), latency
    )
    for verdict in (latency, _verdict("cannot be tested here"), None):
        for text in (words.memory_caption(ratios, verdict), conclusion):
            assert not DIRECTION.search(text), text
        fig = memory_ratio_figure(result.ratios, verdict)
        assert not DIRECTION.search(fig._suptitle.get_text()), fig._suptitle.get_text()
    assert fig._suptitle.get_text().endswith("not decidable on this host")
    # where the verdict decides, the note names its outcome
    decided = Verdict("latency", "reproduced", "measured", "+9% at 0.92", claim_id="memory_092_latency", n=3)
    assert words.direction_note(decided) == "The latency claim is reproduced here: +9% at 0.92."
    assert memory_ratio_figure(result.ratios, decided)._suptitle.get_text().endswith("latency claim reproduced")


def test_the_095_flag_is_an_assumption_not_a_predicted_oom_wherever_it_is_said(result):
    head = result.headroom.to_dicts()
    for text in (" ".join(result.answer.sentences), words.fits_sentence(head), words.headroom_caption(head)):
        assert "an assumption, not a predicted OOM" in text and "OOM risk" not in text


# -- drift 5: CPU runs by their real token counts ------------------------------------------------------------------------


def test_cpu_runs_are_named_by_their_real_tokens_with_the_scaled_context_beside(result):
    assert context_name("200K", 3200) == "3,200 tokens (stands in for 200K)"
    assert context_name("64K", 65536) == "64K"
    lines = words.ratio_lines(result.ratios.to_dicts(), result.stats.to_dicts())
    assert lines == [
        "vLLM at 3,200 tokens (stands in for 200K): batch time 1.29× (1.0 s vs 0.78 s), mean request latency 1.02× "
        "(779 ms vs 767 ms)",
        "sglang-jax (CPU) at 3,200 tokens (stands in for 200K): batch time 0.90× (14 s vs 16 s), mean request latency "
        "0.65× (10,165 ms vs 15,607 ms)",
    ]
    latency = checks.verdict_of_kind(list(result.verdicts), result.claims, "latency")
    assert "3,200 tokens (stands in for 200K)" in latency.number and "200K (3,200 tok)" not in latency.number
    cols = list(page.STATS_COLUMNS.values())
    assert cols.index("context (tokens)") < cols.index("stands for")
    fig = memory_ratio_figure(result.ratios, latency)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["3,200 tokens\n(stands in for 200K)"]


# -- drift 6: the page's prose within kvlab.prose's limits ---------------------------------------------------------------


def _html(section) -> str:
    """A section as HTML (Markdown through mistune, tables and figures by their own HTML)."""
    out = []
    for item in section:
        text = getattr(item, "data", None) if not hasattr(item, "_repr_html_") else None
        if isinstance(text, str):
            out.append(mistune.html(item.data))  # Markdown
        elif hasattr(item, "_repr_html_"):
            out.append(pages.text_html(item))
        else:
            out.append(item._repr_mimebundle_()["text/html"])
    return "\n".join(out)


def test_the_page_the_study_produces_keeps_the_prose_limits(result, built):
    """The answer and every section's words, tables and captions (the verdict box's headline is shared ground)."""
    wb = built[0]
    answer = "".join(f"<p>{s}</p>" for s in result.answer.sentences)
    # the shared note on what ran (kvlab.words, said once on every measured page) is in: a sentence per engine
    note = shared_words.measured_engines_note(result.measured.to_dicts())
    assert note in [x.data for x in page.measured(result, wb) if not hasattr(x, "_repr_html_")]
    sections = (page.article, page.modelled_headroom, page.measured)
    body = "\n".join(_html(f(result, wb)) for f in sections)
    found = prose.problems(answer + body)
    assert found.ok, str(found)
    assert found.words < 2000


# -- the checks on hand-made runs ------------------------------------------------------------------------------------


def test_memory_claims_on_a_cpu_host_and_on_gpus():
    claims = CLAIMS.filter(pl.col("kind") == "memory")
    runs, attempts = _memory_runs()
    stats = mf.memory_study(runs, attempts)
    cmp = mf.memory_comparison(stats)
    assert checks.kv_budget_simulated(runs) and not checks.kv_budget_simulated(_memory_runs(8)[0])
    cpu = checks.memory_claim_verdicts(claims, stats, cmp, None, simulated=True)
    assert [(v.claim_id, v.outcome, v.value, v.n) for v in cpu] == [
        ("memory_095", "cannot be tested here", 1.0, 1),
        ("memory_092_retries", "cannot be tested here", 0.0, 1),
        ("memory_092_stability", "cannot be tested here", None, 1),  # one run per setting: no spread
        # latency: vLLM +2.6% (TTFT +33%), sglang-jax −33% (TTFT −2.4%), one run each: signs mixed, n=1
        ("memory_092_latency", "inconclusive", pytest.approx(800 / 780), 1),
    ]
    assert cpu[3].spread == (pytest.approx(800 / 780), pytest.approx(800 / 780))
    assert cpu[3].reason.startswith("signs mixed") and "simulated KV-cache budget" in cpu[0].claim
    assert {v.family for v in cpu} == {"document"}
    gpu = checks.memory_claim_verdicts(claims, stats, cmp, None, simulated=False)
    assert [(v.outcome, v.n) for v in gpu] == [("inconclusive", 1)] * 4  # one run per engine and setting
    three, att3 = _memory_runs(8, repeats=3)
    s3 = mf.memory_study(three, att3)
    gpu3 = checks.memory_claim_verdicts(claims, s3, mf.memory_comparison(s3), None, simulated=False)
    assert [(v.claim_id, v.outcome, v.n, v.value) for v in gpu3] == [
        ("memory_095", "contradicted", 3, 3.0),  # vLLM: no retry at 0.95
        ("memory_092_retries", "reproduced", 3, 0.0),
        ("memory_092_stability", "reproduced", 3, 2.0),  # CV 1.0% at 0.92 against 9.1% at 0.95, both engines
        ("memory_092_latency", "inconclusive", 3, pytest.approx(800 / 780)),  # signs mixed
    ]
    assert gpu3[2].number == "spread (CV) lower at 0.92 in 2 of 2 engine–context pairs"
    nothing = checks.memory_claim_verdicts(claims, stats.clear(), cmp.clear(), None)
    assert [(v.outcome, v.number) for v in nothing] == [
        ("cannot be tested here", "no measured run with a memory setting")
    ] * 4


def test_each_claim_kind_has_its_checker():
    kinds = [checks.claim_kind(c) for c in CLAIMS.filter(pl.col("kind") == "memory").iter_rows(named=True)]
    assert kinds == ["oom_caused", "oom_removed", "spread", "latency"]
    assert set(checks.CHECKERS) == {"oom_caused", "oom_removed", "spread", "latency", "recommended", "untested"}


def test_memory_setting_is_read_from_what_each_run_recorded():
    cpu, _ = _memory_runs()
    reserve = cpu.with_columns(pl.lit(None, pl.Int64).alias("kv_budget_bytes"))  # host_memory_reserve: no KV budget
    assert [checks.memory_setting(f) for f in (cpu, reserve, _memory_runs(8)[0], pl.concat([cpu, reserve]))] == [
        "kv_budget",
        "host_reserve",
        "gpu",
        "mixed",
    ]
    scope = words.memory_scope(checks.memory_setting(reserve))
    assert "no explicit KV-cache budget" in scope and "simulated device" not in scope
    stats = mf.memory_study(reserve, _memory_runs()[1])
    claims = CLAIMS.filter(pl.col("kind") == "memory")
    v = checks.memory_claim_verdicts(claims, stats, mf.memory_comparison(stats), None, checks.memory_setting(reserve))
    assert [x.outcome for x in v[:3]] == ["cannot be tested here"] * 3
    assert all(x.scope == "CPU, host-memory reserve" for x in v) and not any("KV budget" in x.claim for x in v)
    bare = reserve.with_columns(pl.lit(None, pl.String).alias("device_kind"))  # records neither: never a GPU run
    assert checks.memory_setting(bare) is None and "not known" in words.memory_scope(None)
    v = checks.memory_claim_verdicts(claims, stats, mf.memory_comparison(stats), None, None)
    assert [x.outcome for x in v[:3]] == ["cannot be tested here"] * 3


def test_the_models_memory_check_restates_the_claim():
    head = headroom_table("B300", "Kimi-K3", [0.92, 0.95], [1, 8], [65536, 204800])
    assert words.fits_sentence(head.to_dicts()) == (
        "Every row fits at 0.92. At 0.95 the model flags 4 of 4 rows: 13.4 GiB per GPU is left outside the target, "
        "under the 17.4 GiB (6.5% of the GPU) it assumes activations, CUDA graphs and communication buffers need. "
        "That 6.5% was chosen between the article's failing and working settings, so the flag restates its OOM "
        "claim: an assumption, not a predicted OOM, as in report 04. The KV room is what the model derives."
    )
    empty = pl.DataFrame(schema={"mem_util": pl.Float64, "retries": pl.Int64, "runs": pl.Int64, "engine": pl.String})
    v = checks.memory_claim_verdicts(CLAIMS.filter(pl.col("claim_id") == "memory_095"), empty, pl.DataFrame(), head)
    assert (v[-1].outcome, v[-1].evidence, v[-1].number, v[-1].limit) == (
        "cannot be tested here",
        "modelled",
        "13.4 GiB/GPU left outside the target at 0.95 < 17.4 GiB assumed need — an assumption taken from this claim",
        checks.ASSUMED_FROM_CLAIM,
    )


def test_the_conclusion_counts_retries_and_shows_each_engine_against_itself():
    runs, attempts = _memory_runs()
    stats = mf.memory_study(runs, attempts)
    ratios = mf.memory_ratios(stats)
    text = words.memory_conclusion(
        mf.retries_by_setting(stats).to_dicts(),
        ratios.to_dicts(),
        stats.to_dicts(),
        mf.spreads(stats, mf.memory_comparison(stats)).to_dicts(),
        _verdict("inconclusive", "signs mixed across engines or metrics"),
    )
    assert text.splitlines() == [
        "### Conclusion (measured)",
        "- **Retries**: 0 at 0.92 (2 runs) and 1 at 0.95 (2 runs: sglang-jax (CPU) at 3,200 tokens (stands in for 200K)); "
        "no run failed.",
        "- **0.92 ÷ 0.95**, each engine against itself:",
        "    - vLLM at 3,200 tokens (stands in for 200K): batch time 1.25× (1.0 s vs 0.80 s), mean request latency 1.03× "
        "(800 ms vs 780 ms).",
        "    - sglang-jax (CPU) at 3,200 tokens (stands in for 200K): batch time 0.93× (14 s vs 15 s), mean request latency "
        "0.67× (10,000 ms vs 15,000 ms).",
        "- The latency verdict is inconclusive: signs mixed across engines or metrics, so these ratios name no "
        "direction.",
        "- **Spread** of batch time over repeats (CV): not measured, one successful run per engine, setting and "
        "context.",
    ]
    three, att3 = _memory_runs(repeats=3)
    s3 = mf.memory_study(three, att3)
    cvs = mf.spreads(s3, mf.memory_comparison(s3))
    assert cvs.select("engine", pl.col("cv_low").round(3), pl.col("cv_high").round(3)).rows() == [
        ("sglang-jax", 0.01, 0.091),
        ("vllm", 0.01, 0.091),
    ]
