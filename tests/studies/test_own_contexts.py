"""Issue 57, item 3: pages whose parameters default to the article's contexts follow the experiment they are given.
Reports 01 and 02 on a user's own experiment whose runs are at 2,048 and 8,192 tokens (scaled ÷64, so labelled 128K
and 512K): the growth and decay are read between those two contexts and named by their real tokens, the article's
64K-to-200K growth is not set beside them, and the answer says why these runs test no claim. On runs at the
article's contexts (the fixture's cpu_long_context) the parameters' contexts still hold."""

from __future__ import annotations

import polars as pl
import pytest
from IPython.display import Markdown
from notebook_data import copy_reference

from kvlab import store, studies
from kvlab.studies.measured_frames import measured_span
from kvlab.units import context_label
from kvlab.workbook import Workbook

LO, HI = "2,048 tokens (stands in for 128K)", "8,192 tokens (stands in for 512K)"
#: (engine, context tokens) -> batch time (s) of a user's experiment, three repeats each.
TIMES = {("vllm", 2048): 1.0, ("vllm", 8192): 5.0, ("sglang", 2048): 1.5, ("sglang", 8192): 6.0}


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A data folder with the reference tables and ``my_contexts``: both engines at 2,048 and 8,192 tokens."""
    data = copy_reference(tmp_path_factory.mktemp("own-contexts"))
    for i, ((engine, tokens), t) in enumerate(TIMES.items()):
        for repeat in range(3):
            run = {
                "source": "measured",
                "experiment": "my_contexts",
                "run_id": f"r{i}{repeat}",
                "hardware": "CPU (test)",
                "model": "tiny-llama",
                "engine": engine,
                "mem_util": 0.92,
                "context_label": context_label(tokens * 64),
                "context_tokens": tokens,
                "scale_factor": 64.0,
                "mode": "fixed_batch",
                "batch_size": 4,
                "prompt_tokens": tokens - 64,
                "output_tokens": 64,
                "repeat": repeat,
                "attempts": 1,
                "status": "ok",
                "batch_time_s": t * (1 + 0.01 * repeat),
            }
            store.write_run(data / "runs" / "my_contexts", run["run_id"], pl.DataFrame([run]))
    return data


def shown(report: str, data, sections: list[str]) -> tuple[studies.StudyResult, str]:
    """The report's result on ``my_contexts`` and every word its ``sections`` show (Markdown, figure captions)."""
    r = studies.compute_report(report, data, {"measured_experiment": "my_contexts"})
    page = __import__(f"{studies.module(report).__name__}.page", fromlist=["page"])
    wb = Workbook(data)
    items = [item for name in sections for item in getattr(page, name)(r, wb)]
    text = [i.data if isinstance(i, Markdown) else getattr(i, "caption", None) or "" for i in items]
    return r, "\n".join(text)


def spans(decay: pl.DataFrame) -> set[tuple]:
    return set(decay.select("engine", "context_from", "context_to", "c_from", "c_to").iter_rows())


def test_report_01_reads_the_growth_between_the_contexts_the_experiment_holds(own):
    r, words = shown("01", own, ["measured", "growth", "measured_relative"])
    assert spans(r.decay_measured) == {(e, "128K", "512K", 2048, 8192) for e in ("vllm", "sglang")}
    assert r.decay_measured.sort("engine")["batch_time_ratio"].round(2).to_list() == [4.0, 5.0]
    assert f"vLLM batch time grows **5.00×** from {LO} to {HI}." in words
    assert f"SGLang batch time grows **4.00×** from {LO} to {HI}." in words
    assert "no engine has runs" not in words and "the article's vLLM grew" not in words
    assert "The article's growth, from 64K to 200K, spans contexts these runs do not hold: not compared." in words
    assert r.answer.sentences[-1] == (
        f"This host's runs, at {LO} and {HI}, include no context of a speed claim measured with both engines: "
        "they test none."
    )


def test_report_02_shows_the_decay_of_the_experiments_contexts_and_tests_no_claim_with_it(own):
    r, words = shown("02", own, ["measured"])
    assert spans(r.decay_measured) == {(e, "128K", "512K", 2048, 8192) for e in ("vllm", "sglang")}
    assert f"from {LO} to {HI}, output tokens per second falls 5.00× for vLLM and 4.00× for SGLang" in words
    assert "no engine has runs" not in words
    # the article's claims are about 64K -> 200K: runs at other contexts grade none of them
    assert not [v for v in r.verdicts if v.evidence == "measured"]
    assert r.answer.sentences[-1] == (
        f"This host's runs are not at 64K and 200K, so they test no decay claim; their own decay, from {LO} to "
        f"{HI}, is shown under Measured here."
    )


def test_runs_at_the_parameters_contexts_keep_them(fixture_data):
    """The fixture's cpu_long_context holds 64K and 200K (scaled to 1,024 and 3,200 tokens): the parameters' span,
    and 02 grades the article's shape on it as before; a span it lacks gives way to its own contexts."""
    runs = Workbook(fixture_data).measured("cpu_long_context", 0.92)
    assert measured_span(runs) == measured_span(runs, "200K", "64K")[::-1] == ("64K", "200K")
    assert measured_span(runs, "48K", "200K") == ("64K", "200K")  # 48K not measured: its own shortest and longest
    assert measured_span(runs.filter(pl.col("context_label") == "64K")) == ("64K", "200K")  # one context: no span
    r = studies.compute_report("02", fixture_data, {})
    assert {row[1:3] for row in spans(r.decay_measured)} == {("64K", "200K")}
    assert [v for v in r.verdicts if v.evidence == "measured" and "," in v.claim_id]
