"""The README stays short and every link in it and in docs/ resolves (issue 26): files exist, and an anchor names
a heading of its page (GitHub's slugs)."""

import re

import pytest

from kvlab.paths import ROOT
from kvlab.experiment import ExperimentSpec, expand

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(page) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", page.read_text(), re.M)}


def test_readme_is_at_most_200_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page):
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor}")
    assert not bad, f"{page.name}: {bad}"


def test_the_example_experiment_is_the_shipped_file_trimmed(tmp_path):
    """docs/experiments.md's example loads as an experiment file and sweeps the same vLLM points as the file it is
    trimmed from (engine, memory setting, KV budget, context; 5 contexts x 2 settings x 3 repeats = 30 runs)."""
    text = (ROOT / "docs" / "experiments.md").read_text()
    example = re.search(r"^### An example experiment file\n.*?^```yaml\n(.*?)^```", text, re.M | re.S).group(1)
    path = tmp_path / "cpu_long_context.yaml"
    path.write_text(example)
    shipped = ROOT / "data" / "experiments" / "cpu_long_context.yaml"

    def points(spec, origin):
        return sorted(
            (r.engine.name, r.engine.mem_util, r.engine.kv_cache_bytes, r.workload.context_tokens)
            for r in expand(spec, origin=origin)
            if r.engine.name == "vllm"
        )

    mine = points(ExperimentSpec.load(path), path)
    assert len(mine) == 30 and len(set(mine)) == 10
    assert mine == points(ExperimentSpec.load(shipped), shipped)


LIST_ITEM = re.compile(r"\s*([-*+]|\d+[.)])\s")


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph: a block of consecutive non-blank lines that is not a table, a code
    block, a heading or a list (a block's lines before its first list item are a paragraph; an indented block is a
    list item's continuation)."""
    blocks: list[tuple[int, list[str]]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            blocks.append((number, []))  # a fence ends the block before it
        elif fenced or not line.strip():
            blocks.append((number, []))
        elif blocks and blocks[-1][1]:
            blocks[-1][1].append(line)
        else:
            blocks.append((number, [line]))
    found = []
    for start, lines in blocks:
        if not lines or lines[0][:1] in (" ", "\t") or lines[0].lstrip().startswith(("#", "|")):
            continue
        prose = []
        for line in lines:
            if LIST_ITEM.match(line):
                break
            prose.append(line)
        if prose:
            found.append((start, " ".join(prose)))
    return found


def test_no_docs_paragraph_is_over_150_words():
    """Issue 53, item 6: the docs state what is, in paragraphs a reader can take in (lists and tables aside)."""
    long = [
        f"{page.relative_to(ROOT)}:{start} ({len(text.split())} words)"
        for page in PAGES
        for start, text in paragraphs(page.read_text())
        if len(text.split()) > 150
    ]
    assert not long, f"{len(long)} paragraph(s) over 150 words: {long}"


def test_the_readmes_exploring_snippet_runs_on_a_computed_report(fixture_data):
    """Issue 57: the README's "Exploring a report" snippet runs as written, with the ``wb`` and ``r`` a notebook's
    first cell gives (report 01 on the fixture data)."""
    from kvlab import studies

    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Exploring a report") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    wb, r = studies.notebook("01", {"data_dir": str(fixture_data)})
    scope = {"wb": wb, "r": r}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102  (the README's own snippet, run as a user would)
    assert len(scope["page"].measured(r, wb)) > 0 and "measured" in r.frames
