"""Verdict boxes: validated outcomes, carried as data through the notebook, moved first in the built HTML."""

import nbformat
import pytest

from kvlab import reports, verdicts
from kvlab.verdicts import Verdict
from kvlab import figures

V = [
    Verdict("vLLM ≈ 1.5× faster at 64K", "consistent", "published", "vLLM 1.50× faster at 64K"),
    Verdict("curves cross", "found", "measured", "no: vLLM faster at every measured context"),
]


def test_outcome_and_evidence_are_checked():
    with pytest.raises(ValueError, match="'maybe'"):
        Verdict("x", "maybe", "measured", "1")
    with pytest.raises(ValueError, match="'guessed'"):
        Verdict("x", "found", "guessed", "1")


def test_box_carries_its_verdicts_as_data():
    bundle = verdicts.box(V)._repr_mimebundle_()
    assert bundle[verdicts.MIME][0] == {
        "claim": "vLLM ≈ 1.5× faster at 64K",
        "outcome": "consistent",
        "evidence": "published",
        "number": "vLLM 1.50× faster at 64K",
        "claim_id": "",
        "kind": "",
        "value": None,
        "unit": "",
        "n": None,
        "spread": None,
        "scope": "",
        "reason": "",
        "limit": "",
        "family": "consistency",
    }
    assert verdicts.Verdict(**bundle[verdicts.MIME][0]) == V[0]  # the payload reads back as the same verdict
    assert bundle["text/html"].count("<tr") == 2 and ">contradicted<" not in bundle["text/html"]
    assert (
        bundle["text/plain"].splitlines()[1]
        == "[found · measured] curves cross: no: vLLM faster at every measured context"
    )


def _executed(tmp_path, monkeypatch):
    """A small executed notebook: title, a verdict box output at the end, a figure with its data (displayed as in a
    report build's kernel: its data link points into the report's figure folder)."""
    import polars as pl
    from matplotlib.figure import Figure

    monkeypatch.setenv(figures.FIGURE_DIR_ENV, "07_test.figures")
    fig = Figure(figsize=(3, 2))
    ax = fig.subplots()
    ax.plot([1, 2], [3, 4], label="vLLM")
    ax.set(title="measured: test", xlabel="context", ylabel="batch time (s)")
    ax.legend()
    view = figures.show(
        fig,
        "vLLM's batch time grows 1.33× from 1 to 2.",
        data=pl.DataFrame({"x": [1, 2], "y": [3, 4]}),
        numbers=figures.FigureNumbers(),
    )  # figure numbers start at 1, as in a fresh notebook
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A title\nWhat it shows."),
        nbformat.v4.new_markdown_cell("## First section"),
        nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("display_data", data=view._repr_mimebundle_())]),
        nbformat.v4.new_markdown_cell("## Verdicts\nWhat came of each claim (shown first in the HTML report)."),
        nbformat.v4.new_code_cell(
            outputs=[
                nbformat.v4.new_output(
                    "display_data", data={k: v for k, v in verdicts.box(V)._repr_mimebundle_().items()}
                )
            ]
        ),
    ]
    path = tmp_path / "07_test.ipynb"
    nbformat.write(nb, path)
    return path


def test_report_puts_the_box_under_the_title_and_writes_figure_data(tmp_path, monkeypatch):
    import json

    out = tmp_path / "07_test.html"
    figures, found = reports.to_html(
        _executed(tmp_path, monkeypatch), out, "A title", panel='<nav class="kvlab-provenance">p</nav>'
    )
    text = out.read_text()
    assert figures == 1 and found == [v.__dict__ for v in V]
    assert text.count('class="kvlab-verdicts"') == 1  # moved, not copied
    assert "shown first in the HTML report" not in text  # the heading that introduced the box left with it
    # the title, the box, the provenance panel, then the title's introduction and the report
    assert (
        text.index("<h1")
        < text.index("kvlab-verdicts")
        < text.index("kvlab-provenance")
        < text.index("What it shows.")
        < text.index("First section")
    )
    # the figure's data travels as typed JSON in the notebook and is written beside it, never read out of the HTML
    assert 'href="07_test.figures/figure1.csv"' in text and "data:text/csv" not in text
    assert (tmp_path / "07_test.figures" / "figure1.csv").read_text() == "x,y\n1,3\n2,4\n"
    assert json.loads((tmp_path / "07_test.figures" / "figures.json").read_text()) == [
        {
            "number": 1,
            "caption": "vLLM's batch time grows 1.33× from 1 to 2.",
            "file": "figure1.csv",
            "columns": ["x", "y"],
            "rows": 2,
        }
    ]
    assert 'alt="measured: test (y: batch time (s), x: context); series: vLLM"' in text
    assert "<b>Figure 1.</b> vLLM&#x27;s batch time" in text or "<b>Figure 1.</b> vLLM's batch time" in text


def test_extract_keeps_every_other_output():
    nb = nbformat.v4.new_notebook()
    plain = nbformat.v4.new_output("stream", text="kept")
    nb.cells = [
        nbformat.v4.new_code_cell(
            outputs=[plain, nbformat.v4.new_output("display_data", data=verdicts.box(V[:1])._repr_mimebundle_())]
        )
    ]
    assert [v["outcome"] for v in verdicts.extract(nb)] == ["consistent"]
    assert nb.cells[0].outputs == [plain]


def test_markdown_inline_escapes_and_formats():
    from kvlab.markup import markdown_inline

    assert markdown_inline("**a<b** `x` *y* 2*3") == "<b>a&lt;b</b> <code>x</code> <i>y</i> 2*3"


def test_headline_says_what_is_claimed_what_holds_and_what_this_host_cannot_say():
    vs = [
        verdicts.Verdict(
            "vLLM wins at 64K",
            "cannot be tested here",
            "measured",
            "4.9× (CPU)",
            reason="CPU runs of two implementations; 0%-shared ratio 19×",
        ),
        verdicts.Verdict(
            "SGLang wins at 200K",
            "inconclusive",
            "modelled",
            "1.03×",
            reason="the model fails its held-out test (0 of 4 winners)",
        ),
        verdicts.Verdict("radix cache serves the shared prefix", "reproduced", "measured", "+45 points", n=3),
        verdicts.Verdict("the crossover", "found", "modelled", "176K"),
    ]
    claim, holds, limits = verdicts.headline(vs)
    assert claim == (
        "**The documents claim** “vLLM wins at 64K”; “SGLang wins at 200K” and 1 more claim. The page also "
        "asks 1 question of its own."
    )  # the found row is the page's own question, family own
    assert holds == (
        "**What holds:** 1 claim reproduced on measured evidence. The page's own answer: the crossover — 176K."
    )
    assert limits == (
        "**What this host cannot say:** 1 claim cannot be tested on this host (CPU runs of two "
        "implementations). 1 claim is inconclusive (the model fails its held-out test (0 of 4 winners))."
    )
    html = verdicts.box_html(vs)
    assert html.index('class="kvlab-headline"') < html.index("What this report found") < html.index("<table")


def test_headline_counts_each_claim_once_and_gives_each_cause():
    """The index holds every report's verdicts: a claim tested in two reports, or on published and on measured
    evidence, counts once in each sentence; what cannot be tested is grouped by each verdict's own cause."""
    from kvlab.claims.grading import CPU_IMPLEMENTATIONS, NO_GPU_MEMORY

    cpu = dict(
        evidence="measured",
        reason="vLLM and SGLang are different implementations run on a CPU: …",
        limit=CPU_IMPLEMENTATIONS,
    )
    vs = [
        verdicts.Verdict("vLLM ≈ 1.5× faster at 64K", "reproduced", "published", "1.50×", claim_id="speedup_64K"),
        verdicts.Verdict(
            "vLLM ≈ 1.5× faster at 64K", "cannot be tested here", number="2.6×", claim_id="speedup_64K", **cpu
        ),
        verdicts.Verdict("SGLang ≈ 1.31× faster at 200K", "reproduced", "published", "1.31×", claim_id="speedup_200K"),
        verdicts.Verdict(
            "SGLang ≈ 1.31× faster at 200K", "cannot be tested here", number="2.6×", claim_id="speedup_200K", **cpu
        ),
        verdicts.Verdict(
            "≥30% shared: SGLang", "cannot be tested here", number="11×", claim_id="shared_prefix_threshold", **cpu
        ),  # in report 05 ...
        verdicts.Verdict(
            "≥30% shared: SGLang", "cannot be tested here", number="11×", claim_id="shared_prefix_threshold", **cpu
        ),  # ... and again in report 06
        *[
            verdicts.Verdict(
                f"memory claim {k}",
                "cannot be tested here",
                "measured",
                "0 retries",
                claim_id=f"memory_{k}",
                reason="the setting here is a simulated KV-cache budget: …",
                limit=NO_GPU_MEMORY,
            )
            for k in ("095", "092_retries")
        ],
    ]
    claim, holds, limits = verdicts.headline(vs, index=True)  # the index counts each claim once
    assert claim.endswith("and 3 more claims.")
    # a page counts the rows of its box: one claim has two rows here, so the count says checks (issue 53)
    assert verdicts.headline(vs)[2].startswith("**What this host cannot say:** 6 checks cannot be tested")
    # a claim is quoted in the document's words, its first row's, not as a later row says where it was tested
    on_host = verdicts.Verdict(
        "vLLM ≈ 1.5× faster at 64K — on this host",
        "cannot be tested here",
        number="2.6×",
        claim_id="speedup_64K",
        **cpu,
    )
    assert verdicts.headline([vs[0], on_host])[0] == "**The documents claim** “vLLM ≈ 1.5× faster at 64K”."
    # ... and a row that is the only one of its claim is quoted without what follows its " — " (where it was tested)
    assert verdicts.headline([on_host])[0] == "**The documents claim** “vLLM ≈ 1.5× faster at 64K”."
    quoted = verdicts.Verdict(
        "“vLLM gives each request its own pages” — vLLM as measured here",
        "contradicted",
        "measured",
        "78%",
        claim_id="vllm_no_prefix_sharing",
        n=3,
    )
    assert verdicts.headline([quoted])[0] == "**The documents claim** “vLLM gives each request its own pages”."
    # the published rows check the article against its own table: consistency, never "reproduced"
    assert [v.family for v in vs[:2]] == ["consistency", "document"] and vs[0].outcome == "consistent"
    assert holds == (
        "**What holds:** no document claim is reproduced or contradicted by independent evidence. "
        "Checked against the documents' own figures, 2 claims: 2 consistent."
    )
    assert limits == (
        "**What this host cannot say:** 5 claims cannot be tested on this host. Causes: CPU runs of two "
        "engine implementations cannot decide a GPU host's speed — 3; no GPU memory "
        "outside the KV pool on this host, where the claimed OOMs arise — 2."
    )
    # a verdict without a cause of its own is quoted by its reason's first clause, as before
    assert verdicts.headline(vs[:2] + [verdicts.Verdict("x", "inconclusive", "measured", "1", reason="n=1: too few")])[
        2
    ].endswith("1 claim is inconclusive (n=1).")


def test_headline_when_everything_is_decided_or_nothing_is_tested():
    decided = [
        verdicts.Verdict("a", "contradicted", "published", "x"),
        verdicts.Verdict("b", "reproduced", "published", "y"),
    ]
    assert verdicts.headline(decided)[1] == (
        "**What holds:** no document claim is reproduced or contradicted by "
        "independent evidence. Checked against the documents' own "
        "figures, 2 claims: 1 consistent and 1 inconsistent."
    )
    measured = [
        verdicts.Verdict("a", "contradicted", "measured", "x", n=3),
        verdicts.Verdict("b", "reproduced", "measured", "y", n=3),
    ]
    assert verdicts.headline(measured)[1] == (
        "**What holds:** 1 claim reproduced on measured evidence, 1 claim contradicted on measured evidence."
    )
    assert verdicts.headline(decided)[2].endswith("every claim it tests was decided.")
    only = verdicts.headline([verdicts.Verdict("which engine for my load", "found", "measured", "vLLM")])
    assert only[0].startswith("**The documents make no claim this page tests**")
    assert only[1] == "**What holds:** The page's own answer: which engine for my load — vLLM."
    # where the documents make no claim the page tests, the first sentence said so: the second does not say it again
    own = [verdicts.Verdict("a queue past the ceiling", "reproduced", "measured", "6 of 6", n=6, family="own")]
    assert verdicts.headline(own)[1] == "**What holds:** kvlab's own checks: 1 passed."
    untested = [verdicts.Verdict("b", "cannot be tested here", "measured", "1.8×", n=1, family="own")]
    assert verdicts.headline(untested)[1] == (
        "**What holds:** no document claim is reproduced or contradicted by independent evidence."
    )
    assert 'class="kvlab-headline"' not in verdicts.box_html([])


def test_the_box_folds_the_rows_with_nothing_here_to_test_them():
    """Issue 39: report 01's box listed six GPU-host mechanisms no run here exercises among its fifteen rows; rows
    with nothing behind them (cannot be tested here, n = 0) are folded under one line once there are two, while a
    row with runs behind it, and a box of nothing else, stay as they are."""
    gpu = dict(evidence="measured", n=0, limit="a claim about a GPU host's mechanism")
    decided = verdicts.Verdict("a", "reproduced", "measured", "x", n=3)
    on_runs = verdicts.Verdict("b", "cannot be tested here", "measured", "1.6×", n=1)
    mechanisms = [verdicts.Verdict(f"m{i}", "cannot be tested here", number="needs a GPU host", **gpu) for i in (1, 2)]
    shown, folded = verdicts.split_rows([decided, mechanisms[0], on_runs, mechanisms[1]])
    assert (shown, folded) == ([decided, on_runs], mechanisms)
    assert verdicts.split_rows([decided, mechanisms[0]]) == ([decided, mechanisms[0]], [])  # one: not worth a fold
    assert verdicts.split_rows(mechanisms) == (mechanisms, [])  # nothing else: the box shows them


def test_index_json_lists_every_verdict_with_its_typed_fields(tmp_path):
    from dataclasses import asdict

    v = Verdict(
        "vLLM ≈ 1.5× faster at 64K",
        "cannot be tested here",
        "measured",
        "vLLM already 2.0× faster at 64K",
        claim_id="speedup_64K",
        kind="relative_speed",
        value=2.0,
        unit="×",
        n=1,
        scope="CPU, tiny model",
        reason="two implementations on a CPU",
    )
    page = tmp_path / "01_x.html"
    page.write_text("<html></html>")
    rep = reports.Report("01_x.ipynb", "X", "What it shows.", page, 1.0, 1, (asdict(v),))
    reports.write_index([rep], tmp_path)
    entry = reports.read_index(tmp_path / "index.json")[0]
    got = entry["verdicts"][0]
    assert {
        k: got[k]
        for k in ("claim_id", "kind", "outcome", "evidence", "value", "unit", "n", "scope", "reason", "family")
    } == {
        "claim_id": "speedup_64K",
        "kind": "relative_speed",
        "outcome": "cannot be tested here",
        "evidence": "measured",
        "value": 2.0,
        "unit": "×",
        "n": 1,
        "scope": "CPU, tiny model",
        "reason": "two implementations on a CPU",
        "family": "document",
    }
    assert Verdict(**got) == v  # reads back as the same typed verdict


def test_the_index_counts_speed_claims_apart_from_a_gpu_hosts_other_claims():
    """Issue 39: the index said this host 'cannot test 22 speed claims' where 8 were speed claims and 14 a GPU host's
    mechanisms, service or memory: each cannot-be-tested claim is counted under its own cause, once."""
    from kvlab.claims.documents import NEEDS_GPU_HOST
    from kvlab.claims.grading import CPU_IMPLEMENTATIONS, NO_GPU_MEMORY

    def v(cid, outcome, limit="", evidence="measured"):
        return {"claim_id": cid, "outcome": outcome, "evidence": evidence, "limit": limit}

    every = [
        v("speedup_64K", "cannot be tested here", CPU_IMPLEMENTATIONS),
        v("speedup_64K", "cannot be tested here", CPU_IMPLEMENTATIONS),  # a second report: one claim
        v("decode_decides", "cannot be tested here", NEEDS_GPU_HOST),
        v("memory_095", "cannot be tested here", NO_GPU_MEMORY),
        v("radix_sharing", "reproduced"),
        v("speedup_200K", "consistent", evidence="published"),
    ]
    zero = {"decided_own": 0, "speed_own": 0, "gpu_only_own": 0}
    assert reports.host_counts(every) == {"measured": 5, "decided": 1, "speed": 1, "gpu_only": 2} | zero
    assert reports.host_counts([]) == {"measured": 0, "decided": 0, "speed": 0, "gpu_only": 0} | zero
    # issue 53: kvlab's own questions are counted apart from the documents' claims, in both sentences
    own = [
        v("crossover_measured", "cannot be tested here", CPU_IMPLEMENTATIONS),
        v("multi_turn_reuse", "reproduced"),
    ]
    n = reports.host_counts(every + own)
    assert (n["decided"], n["decided_own"], n["speed"], n["speed_own"]) == (1, 1, 1, 1)
    said = reports.host_sentence(every + own)
    assert "decide 1 document claim and 1 own question about mechanisms" in said
    assert "cannot test 1 document speed claim and 1 own question (CPU runs" in said
    assert all(len(s.split()) <= 45 for s in said.split(". "))
    # a compound id counts each claim it speaks to, as the headline does (the decay shape is two claims: the index
    # said 5 speed claims above a headline of 6); a claim decided in one report is not also counted as untestable
    shape = v("decay_vllm,decay_sglang", "cannot be tested here", CPU_IMPLEMENTATIONS)
    again = v("radix_sharing", "cannot be tested here", NEEDS_GPU_HOST)
    assert reports.host_counts([*every, shape, again]) | {"measured": 0} == {
        "measured": 0, "decided": 1, "speed": 3, "gpu_only": 2} | zero  # fmt: skip


def test_the_index_headline_speaks_of_the_reports_not_of_a_page():
    vs = [
        verdicts.Verdict("vLLM wins at 64K", "consistent", "published", "1.50×", claim_id="speedup_64K"),
        verdicts.Verdict("where the winner changes", "found", "published", "121K–127K", claim_id="crossover_published"),
    ]
    page, index = verdicts.headline(vs), verdicts.headline(vs, index=True)
    assert page[0].endswith("The page also asks 1 question of its own.")
    assert index[0].endswith("The reports also ask 1 question of their own.")
    assert "The page's own answer: where the winner changes — 121K–127K." in page[1]
    # the index quotes no own answer: its answer table, with the ranges, stands above (issue 53: a two-point
    # interpolation was quoted there as what holds, beside a table saying the crossover is not pinned)
    assert "own answer" not in index[1] and "121K" not in index[1]
