"""Hostile data in the reports: a model name, a host's facts, an engine's reported version, a reference CSV's
statement that carry HTML are shown as text, never made elements (issue 25, item 1).

These are the focused checks, one piece of a page at a time. Every page of a whole build is checked on hostile data
by the suite's one shared build (conftest.built_reports, on notebook_data.write_fixture_data, which carries the
payloads of tests/payloads.py): tests/test_notebooks.py parses each page, tests/test_browser.py loads each in
headless Chromium."""

import json
import re
from pathlib import Path

import nbformat
import polars as pl

from kvlab import reports, tables, verdicts
from notebook_data import write_two_engine_runs
from payloads import IMG, SCRIPT, assert_no_live_payload


def _payload_data(tmp_path: Path) -> Path:
    """Measured runs whose model, engine version, start date and host facts carry HTML."""
    data = write_two_engine_runs(tmp_path / "data")
    exp = data / "runs" / "cpu_long_context"
    for f in exp.glob("*/run.parquet"):
        pl.read_parquet(f).with_columns(
            pl.lit(f"tiny {IMG}").alias("model"),
            pl.lit(f"0.1{SCRIPT}").alias("engine_version"),
            pl.lit(f"2026-01-01T00:00{SCRIPT}").alias("started_at"),
            pl.lit(IMG).alias("hardware"),
        ).write_parquet(f)
    (exp / "manifest.json").write_text(
        json.dumps(
            {
                "sweeps": [
                    {"git_commit": SCRIPT, "host": {"cpu": IMG, "cpu_cores": SCRIPT, "cpu_flags": [IMG], "gpus": []}}
                ]
            }
        )
    )
    return data


def test_provenance_panel_escapes_every_value(tmp_path):
    data = _payload_data(tmp_path)
    prov = reports.provenance(data, None, {"gpu": IMG})
    panel = reports.panel_html({**prov, "published": [IMG], "built": SCRIPT, "kvlab": SCRIPT})
    assert_no_live_payload(panel)
    assert "&lt;img src=x onerror=alert(1)&gt;" in panel and "0.1&lt;script&gt;alert(2)&lt;/script&gt;" in panel
    # the panel's own markup is still markup
    assert "<th>hardware</th><td><bdi>&lt;img" in panel
    assert "<code>data/experiments/<bdi>cpu_long_context</bdi>.yaml</code>" in panel


def test_empty_panel_keeps_its_own_markup():
    prov = {
        "engines": [],
        "models": [],
        "hosts": [],
        "runs": 0,
        "run_dates": None,
        "experiments": [],
        "published": [],
        "sweep_commits": [],
        "kvlab": "0",
        "built": "now",
        "parameters": {},
        "notebook": None,
    }
    assert "nothing yet (run <code>make report</code>)" in reports.panel_html(prov)


def test_table_escapes_cells_headers_and_caption():
    frame = pl.DataFrame({"statement": [IMG, "plain"], SCRIPT: [SCRIPT, "x"], "batch_time_s": [1.5, 2.0]})
    page = tables.table(frame, caption=f"data/{IMG}")._repr_html_()
    assert_no_live_payload(page)
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "batch time (s)" in page and 'class="kvlab-table"' in page


def test_run_tables_escape_what_the_runs_say(tmp_path):
    from kvlab import store

    data = _payload_data(tmp_path)
    assert_no_live_payload(reports.run_tables_html(store.load_runs(data)))


def _executed(tmp_path: Path) -> Path:
    """An executed notebook: the template's own Markdown (with HTML it means), a Markdown output computed from
    hostile data, a table and a verdict box carrying it."""
    nb = nbformat.v4.new_notebook()
    table = tables.table(pl.DataFrame({"statement": [IMG]}))
    box = verdicts.box(
        [
            verdicts.Verdict(
                claim=f"the document says {SCRIPT}", outcome="found", evidence="published", number=f"**1.5×** on {IMG}"
            )
        ]
    )
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title\n\nThe template's own <b>markup</b>."),
        nbformat.v4.new_code_cell(
            outputs=[
                nbformat.v4.new_output(
                    "display_data",
                    data={
                        "text/markdown": f"Measured on **{IMG}** with `{SCRIPT}`; {SCRIPT} [a link](javascript:alert(3))",
                        "text/plain": "sentence",
                    },
                )
            ]
        ),
        nbformat.v4.new_code_cell(
            outputs=[
                nbformat.v4.new_output("display_data", data={"text/html": table._repr_html_(), "text/plain": "table"})
            ]
        ),
        nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("display_data", data=box._repr_mimebundle_())]),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return path


def test_exported_page_shows_hostile_markdown_outputs_as_text(tmp_path):
    out = tmp_path / "nb.html"
    reports.to_html(
        _executed(tmp_path),
        out,
        f"T {SCRIPT}",
        panel=reports.panel_html(reports.provenance(_payload_data(tmp_path), None, None)),
    )
    page = out.read_text()
    assert_no_live_payload(page)
    assert "Measured on <strong>&lt;img src=x onerror=alert(1)&gt;</strong>" in page
    assert "<code>&lt;script&gt;alert(2)&lt;/script&gt;</code>" in page
    assert 'href="javascript:' not in page
    assert "The template's own <b>markup</b>." in page  # a template's prose keeps its HTML
    assert 'class="kvlab-verdicts"' in page and "<b>1.5×</b> on &lt;img" in page  # the verdict box still formats


def test_the_top_bar_and_contents_escape_titles_and_number_the_reports():
    """The top bar links index, previous, next and glossary, titles escaped (shown on hover); the table of contents
    appears from five sections and links each by its id; a title is numbered as its file once."""
    bar = reports.topbar_html("01 · <b>x</b>", None, ("02_b.html", '02 · "quoted" <i>'))
    assert re.findall(r'href="([^"]+)"', bar) == ["index.html", "02_b.html", "glossary.html"]
    assert "<b>x</b>" not in bar and "<i>" not in bar and "next: 02 →" in bar
    four = "".join(f'<h2 id="s{i}">Section {i}<a class="anchor-link" href="#s{i}">¶</a></h2>' for i in range(4))
    assert reports.toc_html(four) == ""
    five = four + '<h2 id="s4">Section 4<a class="anchor-link" href="#s4">¶</a></h2>'
    assert re.findall(r'href="(#s\d)">Section \d<', reports.toc_html(five)) == [f"#s{i}" for i in range(5)]
    assert reports.numbered("# Title", "03_memory") == "# 03 · Title"
    assert reports.numbered("# 04 · Title", "04_whatif") == "# 04 · Title"


def test_a_mention_of_another_report_links_to_its_page_and_nothing_else_changes():
    """ "report 04" in a page's text becomes a link to report 04's page; this page's own number, a mention inside a
    link, code, a script or an svg, and a number no report has stay as they were."""
    page = (
        '<p>As report 04 and Reports 05 show; this is report 01.</p><a href="x">report 06</a>'
        '<code>report 02</code><script>"report 03"</script><svg><text>report 07</text></svg><p>report 09, report 07</p>'
    )
    assert reports.reports_linked(page, "01_context_scaling") == (
        '<p>As <a href="04_whatif_model.html">report 04</a> and <a href="05_prefix_sharing.html">Reports 05</a> show;'
        ' this is report 01.</p><a href="x">report 06</a><code>report 02</code><script>"report 03"</script>'
        '<svg><text>report 07</text></svg><p>report 09, <a href="07_capacity.html">report 07</a></p>'
    )


#: Issue 56, item 4: a folder named so that U+202E (RIGHT-TO-LEFT OVERRIDE) shows it as "run-exe.png".
RLO = "\u202e"
SPOOFED = f"run-{RLO}gnp.exe"
#: How a page shows it: the control written out, the name isolated from the text around it.
SPOOFED_SHOWN = "<bdi>runs/cpu_long_context/run-[U+202E]gnp.exe</bdi>"


def test_a_bidirectional_control_in_a_name_is_shown_and_isolated():
    from kvlab.markup import BIDI_CONTROLS, controls_shown, markdown_inline, name_html, visible_controls

    assert name_html(SPOOFED) == "<bdi>run-[U+202E]gnp.exe</bdi>"
    assert name_html("<b>x</b>") == "<bdi>&lt;b&gt;x&lt;/b&gt;</bdi>"
    controls = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    assert visible_controls(controls) == "".join(f"[U+{ord(c):04X}]" for c in controls)
    assert not BIDI_CONTROLS.search(controls_shown(f"<p>{controls}</p><script>x = '{RLO}'</script>"))
    assert markdown_inline(f"**{SPOOFED}**") == "<b>run-[U+202E]gnp.exe</b>"
    assert visible_controls("vLLM 0.19 · 한국어 ‘x’") == "vLLM 0.19 · 한국어 ‘x’"  # other text as it is


def test_the_index_shows_a_quarantined_folder_named_with_a_right_to_left_override_isolated(tmp_path):
    """The index's quarantine list, run table and panel and the page as written: the folder's name (and an
    experiment's, a model's) is shown with its control written out and isolated; no U+202E is left on the page."""
    from kvlab import store

    data = _payload_data(tmp_path)
    spoofed = data / "runs" / "cpu_long_context" / SPOOFED
    spoofed.mkdir()
    (spoofed / store.RUN_FILE).write_bytes(b"PAR1 not a parquet file PAR1")
    found = store.quarantined(data)
    assert [q.path for q in found] == [spoofed]
    listed = reports.quarantined_html(found, data)
    assert f"<li><code>{SPOOFED_SHOWN}</code>: <bdi>" in listed and RLO not in listed
    run = next((data / "runs" / "cpu_long_context").glob("*/run.parquet"))
    pl.read_parquet(run).with_columns(experiment=pl.lit(f"exp-{RLO}lmay")).write_parquet(run)
    runs = store.load_runs(data)
    table = reports.run_tables_html(runs)
    assert "<td><bdi>exp-[U+202E]lmay</bdi></td>" in table and RLO not in table
    prov = reports.provenance(data, None, None)
    panel = reports.panel_html({**prov, "models": [f"tiny {RLO}ledom"]})
    assert "<bdi>tiny [U+202E]ledom</bdi>" in panel and "<bdi>exp-[U+202E]lmay</bdi>" in panel and RLO not in panel
    out = tmp_path / "reports"
    out.mkdir()
    page = reports.write_index([], out, panel=panel, runs_html=table, quarantine=listed).read_text()
    assert SPOOFED_SHOWN in page and RLO not in page


def test_a_control_in_a_notebook_output_is_shown_on_the_exported_page(tmp_path):
    """What no renderer isolated (a notebook's own output) is still written out where the page is written."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_code_cell(
            outputs=[nbformat.v4.new_output("display_data", data={"text/html": f"<p>{SPOOFED}</p>", "text/plain": "x"})]
        ),
    ]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    reports.to_html(tmp_path / "nb.ipynb", tmp_path / "nb.html", "T")
    page = (tmp_path / "nb.html").read_text()
    assert "run-[U+202E]gnp.exe" in page and RLO not in page
