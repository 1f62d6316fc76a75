"""Reader's tables: headers with units, fixed significant figures, engines named, hash ids hidden."""

import polars as pl
import pytest

from kvlab import tables


def test_numbers_read_as_a_reader_expects():
    cases = {None: "–", float("nan"): "–", 1.500498: "1.50", 0.434768: "0.435", 14.01178: "14.0", 100.5: "100.5",
             0.92: "0.92", 2199617: "2,199,617", 10440.0: "10,440", True: "yes", 3: "3"}
    assert {v: tables.number(v) for v in cases if v == v} == {v: s for v, s in cases.items() if v == v}
    assert tables.number(float("nan")) == "–"


def test_headers_carry_units_and_rows_are_formatted():
    frame = pl.DataFrame({"context_label": ["64K", "200K"], "engine": ["vllm", "sglang-jax"],
                          "batch_time_s": [0.434768, 14.01178], "ttft_mean_ms": [1044.2, None],
                          "run_id": ["6ee02ffe94c4", "55813f97ce92"], "batch_time_std_s": [None, 0.0123]})
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
    t = tables.table(pl.DataFrame({"engine": ["vllm"], "faster": ["sglang-jax"], "winner_200k": ["sglang"],
                                   "cache_hit_rate": [0.835], "ideal_hit_rate": [0.875], "block_ideal_hit_rate": [None]}))
    assert t.rows == [["vLLM", "sglang-jax (CPU)", "SGLang", "84%", "88%", "–"]]
    assert t.headers[3:] == ["cache-hit rate (%)", "ideal hit rate, token-exact (%)", "ideal hit rate, whole blocks (%)"]


def test_a_range_reads_least_to_most_and_formatted_numbers_line_up_right():
    from kvlab.units import ratio

    assert tables.span(1.72, 1.892) == "1.72–1.89" and tables.span(2.0, 2.0) == "2" and tables.span(None, 1.0) == "–"
    assert tables.span(2.685, 3.249, lambda x: ratio(x, 1)) == "2.7–3.2"
    t = tables.table([{"what": "a", "ratio": "3.0", "range": "1.72–1.89"}, {"what": "b", "ratio": "–", "range": "–"}])
    html = t.html()
    assert "td.col0 {\n  text-align: left" in html  # text reads from the left
    assert "td.col1 {\n  text-align: left" not in html and "td.col2 {\n  text-align: left" not in html
