"""The studies (kvlab.studies): one typed result per report, the same on its page and in reports/index.json, and a
quantity that two pages print is one computation (issue 38)."""

from __future__ import annotations


import nbformat
import polars as pl
import pytest

from kvlab import reports, studies
from kvlab.verdicts import MIME as VERDICTS_MIME


@pytest.fixture(scope="module")
def results(built_reports):
    """Every report's study on the suite's fixture data, with each notebook's default parameters: the typed result
    its notebook computed in the suite's one report build (conftest.built_reports) and wrote beside its page, read
    back (each study's round trip is its own test in tests/studies; computing all seven again cost about 12 s)."""
    out, _ = built_reports
    return {
        nb.stem[:2]: studies.result_class(nb.stem).from_json(out / f"{nb.stem}{reports.RESULT_SUFFIX}")
        for nb in reports.notebooks()
    }


def test_every_study_answers_with_typed_verdicts(results):
    assert sorted(results) == ["01", "02", "03", "04", "05", "06", "07"]
    for prefix, r in results.items():
        assert r.report.startswith(prefix) and r.answer.sentences and all(s.strip() for s in r.answer.sentences)
        assert r.verdicts and all(v.claim_id and v.outcome for v in r.verdicts), prefix
        if r.answer.table is not None:
            assert "evidence" in r.answer.table.columns
            assert set(r.answer.table["evidence"]) <= {"published", "measured", "modelled", "configuration"}


def test_report_01_answers_the_reference_host_by_context_with_the_models_range(results):
    """The index's first table: per context the article's winner (published, 64K and 200K) and the model's verdict
    over every assumption set (its range; the count of sets SGLang wins), fixed figures of the article's table."""
    t = results["01"].answer.table
    pub = t.filter(pl.col("evidence") == "published")
    assert pub.select("context", "engine", "margin").rows() == [
        ("64K", "vllm", "1.50× faster"),
        ("200K", "sglang", "1.31× faster"),
    ]
    mod = results["01"].modelled_ratios
    assert mod["context_tokens"].to_list() == [65536, 131072, 204800]
    assert (mod["sets"] == 96).all()
    # at 64K every set has vLLM faster; at 200K the sets split (the model cannot name a winner)
    assert mod["sglang_faster_sets"][0] == 0 and 0 < mod["sglang_faster_sets"][2] < 96
    m = t.filter(pl.col("evidence") == "modelled")
    assert m["engine"].to_list()[0] == "vllm" and m["engine"].to_list()[2] == "either"


def test_index_json_carries_each_reports_answer_and_the_verdicts_its_page_shows(built_reports):
    """index.json's answers and verdicts come from compute() in the report builder; the page's verdict box from the
    notebook's own compute(): the two agree, verdict for verdict."""
    out, _ = built_reports
    listed = reports.read_index(out / "index.json")
    assert len(listed) == 7
    for entry in listed:
        assert entry["answer"]["sentences"], entry["notebook"]
        executed = nbformat.read(out / entry["notebook"], as_version=4)
        on_page = [
            v
            for c in executed.cells
            if c.cell_type == "code"
            for o in c.get("outputs", [])
            for v in (o.get("data") or {}).get(VERDICTS_MIME, [])
        ]
        assert on_page == entry["verdicts"], entry["notebook"]
        page = (out / entry["html"]).read_text()
        assert page.index("Answer.") < page.index("What this report found"), entry["notebook"]


def test_a_quantity_two_pages_print_is_one_computation(results):
    """The crossover range over the assumption sets (01 and 04) and the KV headroom of Kimi-K3 on B300 (03 and 04,
    at the contexts and settings both show) are the same numbers on both pages."""
    x4 = getattr(results["04"], "x_range", None) or results["04"].x_range
    assert (results["01"].model.lo, results["01"].model.hi) == tuple(x4)
    keys = ["mem_util", "dcp", "context_tokens"]
    cols = keys + ["kv_pool_gib_per_gpu", "kv_capacity_tokens", "max_concurrent_seqs", "outside_pool_gib_per_gpu"]
    h3 = results["03"].headroom.select(cols)
    h4 = results["04"].headroom.select(cols).join(h3.select(keys), on=keys, how="semi")
    assert h4.height == h3.height > 0
    assert h3.sort(keys).equals(h4.sort(keys))
    # Kimi-K3's concurrency ceilings on 8× B300: report 03's headroom and report 07's modelled ceilings (and the
    # number 07's verdict prints) are one count at every context and setting both show
    c7 = results["07"].modelled.select("mem_util", "dcp", "context_tokens", "concurrency_ceiling")
    c3 = results["03"].headroom.select(
        "mem_util", "dcp", "context_tokens", pl.col("max_concurrent_seqs").alias("concurrency_ceiling")
    )
    both = c7.join(c3, on=["mem_util", "dcp", "context_tokens"], suffix="_03")
    assert both.height == 8 and (both["concurrency_ceiling"] == both["concurrency_ceiling_03"]).all(), both
    number = next(v.number for v in results["07"].verdicts if v.claim_id == "capacity_modelled_ceiling")
    for r in both.filter(pl.col("context_tokens") == 204800).iter_rows(named=True):
        assert f"at {r['mem_util']:g}: {r['concurrency_ceiling']:,}" in number, (r, number)


def test_report_04s_tables_give_each_modelled_crossover_in_whole_k(results):
    """Issue 39: the sentences round a modelled crossover to whole K (a model whose crossover moves over 108K–746K
    supports no more digits); the tables' frames do too, never '177,652 tokens', and name a KV number format in words.
    The frames behind the figures and the verdicts keep the exact tokens."""
    from kvlab.perfmodel.figures import column_labels, crossover_columns

    r = results["04"]
    cons = r.consistent_fits.filter(pl.col("consistent")).sort("max_abs_residual_pct")
    for shown, raw in (
        (r.sensitivity_shown, r.sensitivity),
        (r.crossovers_shown, r.crossovers),
        (r.consistent_fits_shown, cons),
    ):
        cols = crossover_columns(raw)
        words = [c for c in ("kv_format",) if c in raw.columns]
        assert cols and shown.drop(cols + words).equals(raw.drop(cols + words))
        for c in cols:
            assert shown[c].dtype == pl.String and raw[c].dtype.is_numeric(), c
            assert shown[c].to_list() == column_labels(raw[c].to_list()), c  # whole K, or M, one per column
            assert len({label[-1] for label in shown[c].drop_nulls()}) <= 1, c
    assert set(crossover_columns(r.sensitivity)) == {"crossover_tokens", "phys_crossover_tokens"}
    assert set(r.sensitivity_shown["kv_format"]) == {"BF16", "FP8", "packed FP8 MLA"}
    assert r.crossovers_shown["crossover_tokens"].drop_nulls().str.contains(r"^[\d,]+K$|^\d(\.\d+)?M$").all()


def test_modelled_kv_capacities_are_shown_to_three_significant_figures(results):
    """Issue 39: a modelled KV capacity ('2,370,790 tokens' from a model that misses its held-out points by 40%) is
    shown to three significant figures in 03's and 04's tables; the frames the figures and sentences read keep it."""
    from kvlab.units import modelled_count

    head = results["03"].headroom
    shown = results["03"].headroom_shown
    assert shown["kv_capacity_tokens"].to_list() == [modelled_count(v) for v in head["kv_capacity_tokens"].to_list()]
    assert shown.drop("kv_capacity_tokens", "kv_capacity_tokens_lo", "kv_capacity_tokens_hi", strict=False).equals(
        head.drop("kv_capacity_tokens", "kv_capacity_tokens_lo", "kv_capacity_tokens_hi", strict=False)
    )
    summary = results["04"].headroom_summary
    assert all(v == modelled_count(v) for v in summary["kv_capacity_tokens"].to_list())
    budgets = results["03"].budgets  # what 0.92 and 0.95 configure on this host, with the pools the engines made
    assert {"kv_budget_mib", "ratio_to_lowest", "pool_tokens_low", "pool_tokens_high"} <= set(budgets.columns)
    assert budgets["ratio_to_lowest"][0] == 1.0


def test_an_answer_needs_a_sentence_and_a_result_names_its_frames(results):
    with pytest.raises(ValueError, match="at least one non-empty sentence"):
        studies.Answer(())
    r = results["02"]
    assert "published" in r.frames and all(isinstance(f, pl.DataFrame) for f in r.frames.values())
    with pytest.raises(AttributeError):
        r.nope  # noqa: B018  (a typed result has no string-keyed bag: a misspelt field fails by name)
