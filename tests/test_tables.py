"""Reader's tables: headers with units, fixed significant figures, engines named, hash ids hidden."""

import re

import polars as pl
import pytest

from kvlab import tables


def test_numbers_read_as_a_reader_expects():
    cases = {
        None: "–",
        float("nan"): "–",
        1.500498: "1.50",
        0.434768: "0.435",
        14.01178: "14.0",
        100.5: "100.5",
        0.92: "0.92",
        2199617: "2,199,617",
        10440.0: "10,440",
        True: "yes",
        3: "3",
    }
    assert {v: tables.number(v) for v in cases if v == v} == {v: s for v, s in cases.items() if v == v}
    assert tables.number(float("nan")) == "–"


def test_headers_carry_units_and_rows_are_formatted():
    frame = pl.DataFrame(
        {
            "context_label": ["64K", "200K"],
            "engine": ["vllm", "sglang-jax"],
            "batch_time_s": [0.434768, 14.01178],
            "ttft_mean_ms": [1044.2, None],
            "run_id": ["6ee02ffe94c4", "55813f97ce92"],
            "batch_time_std_s": [None, 0.0123],
        }
    )
    t = tables.table(frame)
    assert t.headers == ["context", "engine", "batch time (s)", "ttft mean (ms)", "batch time spread, std (s)"]
    assert t.rows == [["64K", "vLLM", "0.435", "1,044", "–"], ["200K", "sglang-jax (CPU)", "14.0", "–", "0.0123"]]
    html = t._repr_html_()
    assert "overflow-x: auto" in html and "6ee02ffe94c4" not in html and "dtype" not in html


def test_columns_choose_order_and_names():
    frame = pl.DataFrame({"a_s": [1.25], "run_id": ["x1"], "b": [2]})
    t = tables.table(frame, {"b": "count", "run_id": None, "a_s": None})
    assert t.headers == ["count", "run id", "a (s)"] and t.rows == [["2", "x1", "1.25"]]


def test_a_missing_column_is_named():
    with pytest.raises(KeyError, match=r"\['nope'\]"):
        tables.table(pl.DataFrame({"a": [1]}), ["a", "nope"])


def test_engine_names_and_hit_rates_read_the_same_in_every_table():
    """Columns that name engines show display names; hit rates show as whole percentages, as every sentence does."""
    t = tables.table(
        pl.DataFrame(
            {
                "engine": ["vllm"],
                "faster": ["sglang-jax"],
                "winner_200k": ["sglang"],
                "cache_hit_rate": [0.835],
                "ideal_hit_rate": [0.875],
                "block_ideal_hit_rate": [None],
            }
        )
    )
    assert t.rows == [["vLLM", "sglang-jax (CPU)", "SGLang", "84%", "88%", "–"]]
    assert t.headers[3:] == [
        "cache-hit rate (%)",
        "ideal hit rate, token-exact (%)",
        "ideal hit rate, whole blocks (%)",
    ]


def test_a_range_reads_least_to_most_and_formatted_numbers_line_up_right():
    from kvlab.units import ratio

    assert tables.span(1.72, 1.892) == "1.72–1.89" and tables.span(2.0, 2.0) == "2" and tables.span(None, 1.0) == "–"
    assert tables.span(2.685, 3.249, lambda x: ratio(x, 1)) == "2.7–3.2"
    t = tables.table([{"what": "a", "ratio": "3.0", "range": "1.72–1.89"}, {"what": "b", "ratio": "–", "range": "–"}])
    html = t.html()
    assert "td.col0 {\n  text-align: left" in html  # text reads from the left
    assert "td.col1 {\n  text-align: left" not in html and "td.col2 {\n  text-align: left" not in html


def test_a_tiny_value_is_a_bound_never_scientific_notation():
    """Issue 39: residuals of 8.90e-06 ms and 7.32e-11 ms read as bounds; 0.00123 keeps three figures."""
    assert [tables.number(v) for v in (8.9e-06, -7.32e-11, 0.0012345, 0.0)] == ["< 0.001", "> −0.001", "0.00123", "0"]


def test_a_long_table_is_folded_with_its_rows_as_csv():
    """More than FOLD_ROWS rows: a closed <details> saying how many, and a link to exactly the shown rows as CSV
    (headers as shown, cells as formatted, escaped in the URI); at FOLD_ROWS rows the table is not folded."""
    from urllib.parse import unquote

    rows = [{"engine": "vllm", "residual_ms": 8.9e-06 * (i + 1)} for i in range(tables.FOLD_ROWS + 1)]
    folded = tables.table(rows, caption="Residuals <per point>").html()
    assert folded.startswith('<details class="kvlab-fold"><summary>Residuals &lt;per point&gt;: 13 rows (show)')
    name, uri = re.search(r'download="([^"]+)" href="data:text/csv;charset=utf-8,([^"]+)"', folded).groups()
    assert name == "residuals-per-point.csv"
    lines = unquote(uri).splitlines()
    assert lines[0] == "engine,residual (ms)" and lines[1] == "vLLM,< 0.001" and len(lines) == 14
    assert "<details" not in tables.table(rows[: tables.FOLD_ROWS]).html()


def test_a_short_table_is_folded_when_asked_and_an_empty_one_never():
    """fold=True folds a table of any length (its rows said beside it); fold=False keeps a long one open;
    tables.folded() names the summary line apart from the caption; a table with no rows is never folded."""
    rows = [{"engine": "sglang", "tpot_ms": 7.5}, {"engine": "vllm", "tpot_ms": 3.8}]
    assert (
        tables.table(rows, caption="Step-time points", fold=True)
        .html()
        .startswith('<details class="kvlab-fold"><summary>Step-time points: 2 rows (show)')
    )
    assert "<details" not in tables.table(rows * 10, fold=False).html()
    shown = tables.folded(tables.table(rows, caption="one run a side"), "Per point <cache on>").html()
    assert shown.startswith('<details class="kvlab-fold"><summary>Per point &lt;cache on&gt;: 2 rows (show)')
    assert "one run a side" in shown  # the caption stays on the table inside
    assert "<details" not in tables.table([], ["engine"], fold=True).html()


def test_kv_formats_are_named_in_words():
    assert [tables.kv_format_words(f) for f in ("bf16", "fp8", "fp8_packed_mla", "int4")] == [
        "BF16",
        "FP8",
        "packed FP8 MLA",
        "int4",
    ]


def test_experiments_are_named_in_words():
    assert [tables.experiment_words(e) for e in ("cpu_long_context", "article_b300", "gpu_multi_turn_rag")] == [
        "long-context runs",
        "the B300 article's table",
        "gpu multi turn rag",
    ]


def test_an_answer_cell_reads_the_same_on_the_page_and_on_the_index():
    assert tables.answer_cell("engine", "sglang") == "SGLang"
    assert tables.answer_cell("KV budget (MiB)", 13.625) == "13.6"
    assert tables.answer_cell("ceiling", 12.0) == "12" and tables.answer_cell("ceiling", 12_288) == "12,288"
    assert tables.answer_cell("ratio", None) == "–" and tables.answer_cell("winner", True) == "True"
    assert tables.answer_cell("evidence", "modelled") == "modelled"


def test_a_column_every_row_shares_is_said_once_in_the_caption():
    rows = [
        {"engine": "vLLM", "loads": "1, 2, 4", "repeats": 1},
        {"engine": "SGLang", "loads": "1, 2, 4", "repeats": 3},
    ]
    kept, caption = tables.shared_columns(rows, ("loads", "repeats"))
    assert kept == [{"engine": "vLLM", "repeats": 1}, {"engine": "SGLang", "repeats": 3}]
    assert caption == "every row: loads 1, 2, 4"
    # one row, or no shared value, lifts nothing
    assert tables.shared_columns(rows[:1], ("loads",)) == (rows[:1], None)
    assert tables.shared_columns(rows, ("engine",)) == (rows, None)
