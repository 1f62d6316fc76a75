"""The house rules the import graph alone does not hold: what an engine is lives on its adapter (kvlab.engines), and
nothing else in kvlab spells an engine's name; nothing is declared in kvlab that nothing uses."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kvlab.engines import ENGINE_NAMES, SGLANG, SGLANG_JAX, VLLM, engine_label, registry
from kvlab.paths import ROOT

PACKAGE = ROOT / "kvlab"


#: An engine's name inside a longer string: a whole word (not part of a metric name such as ``vllm:num_requests``, a
#: path or a package such as ``sglang.srt``), in any case.
_NAME_IN_TEXT = r"(?<![\w.:/-])({})(?![\w:/-]|\.\w)"
#: A formatted value that is an engine: an expression that names one (``engine``, ``engine_label(...)``, ``r["engine"]``)
#: or an engine spec's name (``e.name``).
_ENGINE_VALUE = re.compile(r"engine|\be\.name\b")
#: The most words a string may have to be a label (a title, an axis label, a column header, a widget's description).
LABEL_WORDS = 4


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _outside_engines(package: Path) -> list[Path]:
    """kvlab's modules but those of kvlab/engines/, where what an engine is lives."""
    return [path for path in sorted(package.rglob("*.py")) if (package / "engines") not in path.parents]


def _package(tmp_path: Path, outside: str, inside: str) -> Path:
    """A kvlab/ under ``tmp_path`` holding ``outside`` in a.py and ``inside`` in engines/b.py."""
    pkg = tmp_path / "kvlab"
    (pkg / "engines").mkdir(parents=True)
    (pkg / "a.py").write_text(outside)
    (pkg / "engines" / "b.py").write_text(inside)
    return pkg


def engine_literals(package=PACKAGE, root=ROOT, names=ENGINE_NAMES) -> list[str]:
    """Every string in kvlab/ outside kvlab/engines/ that spells an engine's identity, which only the registry may
    give (``engine_label(SGLANG)``, ``registry.family(e)``, an adapter's attributes): 'path:line: text'.

    The rule, for a string literal or an f-string (read whole, each formatted value as ``{}``) that holds an engine's
    name or label as a word, in any case:

    - the whole string is the name (``"sglang"``, ``"vLLM"``): code that means one engine uses VLLM, SGLANG,
      SGLANG_JAX;
    - the string is a label, at most :data:`LABEL_WORDS` words (``"DCP (SGLang)"``, ``"c(vLLM) per step (ms)"``,
      ``f"SGLang {x}× faster"``): what a reader sees as an engine's name comes from ``engine_label``;
    - an f-string formats an engine too (``f"... for {e.name}: SGLang rejects ..."``): a sentence about the engine in
      a variable, whose name the literal would get wrong for the others.

    Prose is left alone: a sentence that names a product as the documents and the engines' behaviour do (vLLM's
    CPU build reserves host memory, SGLang's radix cache) is a statement about that product, not a label.
    Docstrings, and names inside a word, a metric (``vllm:``), a path or a package (``sglang.srt``), are no
    engine identity."""
    spelled = sorted(
        {n.lower() for n in names} | {registry.adapter_class(n).label.lower() for n in names}, key=len, reverse=True
    )
    name_in_text = re.compile(_NAME_IN_TEXT.format("|".join(re.escape(n) for n in spelled)), re.IGNORECASE)
    found = []
    for path in _outside_engines(package):
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _docstrings(tree) | {
            id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
        }
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text, formatted = node.value, []
            elif isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                formatted = [ast.unparse(v.value) for v in node.values if isinstance(v, ast.FormattedValue)]
            else:
                continue
            if not name_in_text.search(text):
                continue
            words = len(name_in_text.sub("E", text.replace("{}", " ")).split())
            if (
                text.strip().lower() in spelled
                or words <= LABEL_WORDS
                or any(_ENGINE_VALUE.search(f) for f in formatted)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {text!r}")
    return found


def test_no_engine_name_literal_outside_the_engines_package():
    """Code that means one engine names it through kvlab.engines (VLLM, SGLANG, SGLANG_JAX); code that means any asks
    the registry (families, labels, notes, colours, capabilities); help texts, labels and messages too."""
    found = engine_literals()
    assert not found, "engine names spelt outside kvlab/engines/ (ask kvlab.engines.registry):\n" + "\n".join(found)


def test_the_literal_check_sees_what_it_looks_for(tmp_path):
    """A quoted engine name in any case, a label that holds one, and a sentence about a formatted engine that spells
    one are found; prose about a product, a docstring, a metric or a package name, and kvlab/engines/ are not."""
    pkg = _package(
        tmp_path,
        '"""SGLang."""\nX = "SGLang"\nY = f"{1}vllm"\nZ = "vllm or sglang"\nL = "DCP (SGLang)"\n'
        'M = f"{e.name}: SGLang rejects a request that fills its context length"\n'
        'P = "vLLM\'s CPU build reserves its share of host memory when it starts"\n'
        'Q = f"{n} requests found the prefix in SGLang\'s radix cache at the start"\n'
        'R = "vllm:num_requests_running"\nS = "import sglang.srt"\n',
        'N = "vllm"\n',
    )
    assert engine_literals(pkg, tmp_path) == [
        "kvlab/a.py:2: 'SGLang'",
        "kvlab/a.py:3: '{}vllm'",
        "kvlab/a.py:4: 'vllm or sglang'",
        "kvlab/a.py:5: 'DCP (SGLang)'",
        "kvlab/a.py:6: '{}: SGLang rejects a request that fills its context length'",
    ]


def test_identity_lives_on_the_adapter():
    assert (VLLM, SGLANG, SGLANG_JAX) == ENGINE_NAMES == registry.ENGINE_NAMES
    assert registry.FAMILIES == (VLLM, SGLANG)
    assert [registry.family(e) for e in ENGINE_NAMES] == [VLLM, SGLANG, SGLANG]
    assert registry.members(SGLANG) == (SGLANG, SGLANG_JAX) and registry.members(VLLM) == (VLLM,)
    assert [registry.is_stand_in(e) for e in ENGINE_NAMES] == [False, False, True]
    assert registry.note(SGLANG_JAX) and not registry.note(VLLM) and registry.stand_in(SGLANG_JAX)
    assert registry.ordered(["other", SGLANG_JAX, VLLM, SGLANG_JAX]) == [VLLM, SGLANG_JAX, "other"]
    assert registry.STRICT_CONTEXT_ENGINES == (SGLANG, SGLANG_JAX)
    assert registry.KV_BUDGET_ENGINES == ENGINE_NAMES
    assert not registry.adapter_class(SGLANG_JAX).serves_metrics() and registry.adapter_class(VLLM).serves_metrics()
    assert [registry.adapter_class(e).dev_endpoints for e in ENGINE_NAMES] == [True, False, False]
    # what reports quote of an engine's command line and model of its cache comes from its adapter
    assert registry.flag(VLLM, "prefix_cache_off") == "--no-enable-prefix-caching"
    assert registry.flag(SGLANG_JAX, "prefix_cache_off") == registry.flag(SGLANG, "prefix_cache_off")
    assert registry.flag(SGLANG, "enforce_eager") is None and registry.flag("other", "dp") is None
    assert registry.VLLM_CPU_BLOCK_TOKENS == registry.adapter_class(VLLM).cpu_block_tokens == 128
    with pytest.raises(ValueError, match="unknown engine"):
        registry.adapter_class("other")


@pytest.mark.parametrize(
    ("engine", "device_kind", "label"),
    [
        (VLLM, None, "vLLM"),
        (SGLANG, "gpu", "SGLang"),
        (SGLANG, "cpu", "SGLang (CPU)"),
        (SGLANG_JAX, "cpu", "sglang-jax (CPU)"),
        (SGLANG_JAX, None, "sglang-jax (CPU)"),
        ("other", "cpu", "other"),
    ],
)
def test_a_label_says_what_ran(engine, device_kind, label):
    """A run's record (its device kind) can change how its engine is named: a CPU run of SGLang says so."""
    assert engine_label(engine, device_kind) == label


def test_every_engine_has_a_colour():
    from kvlab.style import ENGINE_COLORS, PALETTE

    assert list(ENGINE_COLORS) == list(ENGINE_NAMES)
    assert set(ENGINE_COLORS.values()) <= set(PALETTE.values()) and len(set(ENGINE_COLORS.values())) == 3


#: A name that holds a KV block size (a parameter or a constant: ``block_tokens``, ``BLOCK_SIZE``).
_BLOCK_NAME = re.compile(r"block", re.IGNORECASE)


def _int_literal(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def engine_knowledge_outside(package=PACKAGE, root=ROOT) -> list[str]:
    """Engine knowledge spelt in kvlab/ outside kvlab/engines/, where only the adapters hold it: 'path:line: what'.

    - an engine's cache-off flag (each adapter's ``flags["prefix_cache_off"]``: ``--no-enable-prefix-caching``,
      ``--disable-radix-cache``) anywhere, a comment or docstring too: prose quotes
      ``registry.flag(engine, "prefix_cache_off")``;
    - a KV block size given as a number: a parameter whose name says block with an integer literal for default, or
      such a constant (``block_tokens: int = 128``): vLLM's is ``VLLM_CPU_BLOCK_TOKENS``, its adapter's."""
    flags = sorted({f for cls in registry.ADAPTERS if (f := cls.flag("prefix_cache_off"))})
    found = []
    for path in _outside_engines(package):
        rel, text = path.relative_to(root), path.read_text()
        for i, line in enumerate(text.splitlines(), 1):
            found += [f"{rel}:{i}: {flag}" for flag in flags if flag in line]
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                positional = [*a.posonlyargs, *a.args]
                pairs = [
                    *zip(positional[len(positional) - len(a.defaults) :], a.defaults),
                    *zip(a.kwonlyargs, a.kw_defaults),
                ]
                found += [
                    f"{rel}:{d.lineno}: {arg.arg} = {d.value}"
                    for arg, d in pairs
                    if _BLOCK_NAME.search(arg.arg) and _int_literal(d)
                ]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _int_literal(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value.value  # type: ignore[union-attr]
                found += [
                    f"{rel}:{node.lineno}: {t.id} = {value}"
                    for t in targets
                    if isinstance(t, ast.Name) and _BLOCK_NAME.search(t.id)
                ]
    return found


def test_no_engine_knowledge_outside_the_engines_package():
    """Issue 44: the cache-off flag a report quotes and the block size a report models come from the adapters
    (registry.flag, VLLM_CPU_BLOCK_TOKENS), never spelt again beside them."""
    found = engine_knowledge_outside()
    assert not found, "engine knowledge spelt outside kvlab/engines/ (ask the adapter or the registry):\n" + "\n".join(
        found
    )


def test_the_engine_knowledge_check_sees_what_it_looks_for(tmp_path):
    """A cache-off flag in a string or a comment, a block-size default (positional or keyword-only) and a block-size
    constant are found; the registry's constant as a default, other numbers and kvlab/engines/ are not."""
    pkg = _package(
        tmp_path,
        'X = "with it off (--no-enable-prefix-caching)"\n# SGLang: --disable-radix-cache\n'
        "def f(rows, block_tokens: int = 128, n=4):\n    pass\n"
        "def g(*, block_size=16, batch=128):\n    pass\n"
        "def h(block_tokens=VLLM_CPU_BLOCK_TOKENS):\n    pass\n"
        "BLOCK_TOKENS = 128\nPROMPT_TOKENS = 128\n",
        'F = "--no-enable-prefix-caching"\nBLOCK = 128\n',
    )
    assert engine_knowledge_outside(pkg, tmp_path) == [
        "kvlab/a.py:1: --no-enable-prefix-caching",
        "kvlab/a.py:2: --disable-radix-cache",
        "kvlab/a.py:3: block_tokens = 128",
        "kvlab/a.py:5: block_size = 16",
        "kvlab/a.py:9: BLOCK_TOKENS = 128",
    ]


# --------------------------------------------------------------------------- no dead declarations

#: Where a use of a kvlab name can be: the library, the notebooks, the benchmarks and the tests.
USERS = ("kvlab", "notebooks", "benchmarks", "tests")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def declarations(package: Path, root: Path) -> list[tuple[str, str, int]]:
    """Every module-level function, class and constant (a name assigned at module level) of ``package``, as
    (file, name, line); dunder names aside, and kvlab/engines/envs/ aside (code an engine's own interpreter runs, such
    as a sitecustomize, that nothing in kvlab imports). A function a decorator registers as a `kvlab` command
    (``@app.command``: reached through the console script of pyproject.toml) is the public entry point it is, not a
    declaration nothing uses."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if (package / "engines" / "envs") in path.parents:
            continue
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                registered = any(
                    isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "command"
                    for d in node.decorator_list
                )
                names = [] if registered else [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            out += [(str(path.relative_to(root)), n, node.lineno) for n in names if not n.startswith("__")]
    return out


def _used_names(tree: ast.AST) -> set[str]:
    """The names code uses: a name read, an attribute (``module.NAME``, set too: a test's monkeypatch), an imported
    name, or a string that is a name or a dotted path ending in one (``getattr(m, "NAME")``,
    ``monkeypatch.setattr("kvlab.m.NAME", ...)``, a package's ``__all__``). A docstring that names it is no use."""
    used = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store):
            used.add(n.id)
        elif isinstance(n, ast.Attribute):
            used.add(n.attr)
        elif isinstance(n, ast.alias):
            used.add(n.name.rpartition(".")[2])
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and _IDENTIFIER.match(n.value):
            used.add(n.value.rpartition(".")[2])
    return used


def used_names(root: Path, users=USERS) -> set[str]:
    """Every name used anywhere in ``users`` under ``root``: Python files and notebooks' code cells (IPython's
    ``%`` and ``!`` lines left out)."""
    used: set[str] = set()
    for folder in users:
        for path in sorted((root / folder).rglob("*.py")):
            used |= _used_names(ast.parse(path.read_text(), filename=str(path)))
        for path in sorted((root / folder).rglob("*.ipynb")):
            for cell in json.loads(path.read_text())["cells"]:
                if cell["cell_type"] == "code":
                    lines = "".join(cell["source"]).splitlines()
                    used |= _used_names(
                        ast.parse("\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines))
                    )
    return used


def unused_declarations(package=PACKAGE, root=ROOT, users=USERS) -> list[str]:
    """Declarations of :func:`declarations` whose name nothing uses (:func:`used_names`): 'path:line: name'.

    Names are matched by name, not by module: a name used anywhere counts for every declaration of it, so the check
    can miss a dead name that another module's live one shares, and never flags one that is used."""
    used = used_names(root, users)
    return [f"{path}:{line}: {name}" for path, name, line in declarations(package, root) if name not in used]


def test_nothing_is_declared_that_nothing_uses():
    """A module-level function, class or constant of kvlab that nothing in kvlab/, notebooks/, benchmarks/ or tests/
    uses is dead: delete it (or use it where its value is spelt out again)."""
    found = unused_declarations()
    assert not found, "declared in kvlab/ and used nowhere (kvlab, notebooks, benchmarks, tests):\n" + "\n".join(found)


def test_the_dead_declaration_check_sees_what_it_looks_for(tmp_path):
    """Uses by name, attribute, import, string and notebook cell count; a docstring's mention, a module-level
    assignment of the same name and the envs/ folder do not; a registered command is an entry point."""
    pkg = tmp_path / "kvlab"
    (pkg / "engines" / "envs").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    (pkg / "a.py").write_text(
        "import typer\napp = typer.Typer()\nLIMIT = 3\nDEAD = 4\nDEAD = 5\n\n\n"
        'def helper():\n    """Uses :data:`DEAD` in prose only."""\n    return LIMIT\n\n\n'
        "def gone():\n    return 1\n\n\n@app.command()\ndef cmd():\n    pass\n\n\nclass Kept:\n    pass\n"
    )
    (pkg / "b.py").write_text(
        'from kvlab.a import helper\nimport kvlab.a\n__all__ = ["Kept"]\nprint(getattr(kvlab.a, "by_string"))\n'
    )
    (pkg / "c.py").write_text("def by_string():\n    pass\n\n\ndef in_notebook():\n    pass\n")
    (pkg / "engines" / "envs" / "site.py").write_text("UNUSED = 1\n")
    (tmp_path / "notebooks" / "n.ipynb").write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "code", "source": ["%matplotlib inline\n", "from kvlab.c import in_notebook\n"]},
                    {"cell_type": "markdown", "source": ["x"]},
                ]
            }
        )
    )
    assert unused_declarations(pkg, tmp_path, ("kvlab", "notebooks")) == [
        "kvlab/a.py:4: DEAD",
        "kvlab/a.py:5: DEAD",
        "kvlab/a.py:13: gone",
    ]


def test_the_notebooks_only_call_their_study_and_display_it():
    """Issue 38: the seven notebooks' code cells, the parameters cells included, hold at most 150 non-blank,
    non-comment lines: a notebook computes its study once and displays what its page module returns."""
    root = Path(__file__).resolve().parents[1]
    lines = {
        p.name: sum(
            1
            for c in json.loads(p.read_text())["cells"]
            if c["cell_type"] == "code"
            for ln in "".join(c["source"]).splitlines()
            if ln.strip() and not ln.strip().startswith("#")
        )
        for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    }
    assert sum(lines.values()) <= 150, lines


def test_every_notebook_cell_past_the_parameters_is_one_page_call():
    """Issue 38: past its parameters cell, a report notebook opens its study (kvlab.studies.notebook: the study
    computed once) and then only displays sections, each cell one ``page.…(r…)`` expression of its study folder's
    page module: no arithmetic, no prose, no figure code in a notebook."""
    root = Path(__file__).resolve().parents[1]
    setup = re.compile(
        r"from kvlab import studies\n+"
        r'wb, r, page = studies\.open_page\("\d\d", globals\(\)\)(\n(r\.answer|page\.opening\(r, wb\)))?$'
    )
    section = re.compile(r"page\.\w+\(r(, wb)?\)")
    bad = []
    for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = [
            c
            for c in json.loads(p.read_text())["cells"]
            if c["cell_type"] == "code" and "parameters" not in c.get("metadata", {}).get("tags", [])
        ]
        sources = ["".join(c["source"]).strip() for c in cells]
        if not setup.fullmatch(sources[0]):
            bad.append(f"{p.name}: first cell is not the setup:\n{sources[0]}")
        if sources[-1] != "studies.verdicts_and_sources(r)":
            bad.append(f"{p.name}: the last cell is not studies.verdicts_and_sources(r)")
            continue
        bad += [f"{p.name}: {s!r}" for s in sources[1:-1] if not section.fullmatch(s)]
    assert not bad, "\n".join(bad)


#: A polars frame operation (issue 38's rule for kvlab/narrative/: sentences are written from typed inputs, the frames
#: are computed once in the study or in kvlab.analysis).
FRAME_CALL = re.compile(r"\.(filter|iter_rows|unique|group_by|agg)\(")


def frame_calls(folder: Path, root: Path = ROOT) -> list[str]:
    """Every line of ``folder``'s modules that calls a frame operation (:data:`FRAME_CALL`): 'path:line: text'."""
    return [
        f"{p.relative_to(root)}:{i}: {line.strip()}"
        for p in sorted(folder.glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if FRAME_CALL.search(line)
    ]


def test_the_narrative_makes_no_frame_calls():
    """Issue 38: kvlab/narrative/ makes no frame calls (``.filter(``, ``.iter_rows(``, ``.unique(``, ``.group_by(``,
    ``.agg(``): its functions take plain values, row dicts or small dataclasses from the study result."""
    bad = frame_calls(PACKAGE / "narrative")
    assert not bad, "\n".join(bad)


def test_frame_calls_names_each_file_and_line(tmp_path):
    (tmp_path / "a.py").write_text(
        'x = 1\nrows = frame.filter(pl.col("a") > 1)\nfor r in f.iter_rows(named=True):\n'
        '    pass\nkeys = sorted(set(r["engine"] for r in rows))\n'
    )
    (tmp_path / "b.py").write_text("g = df.group_by('e').agg(pl.len())\n")
    assert frame_calls(tmp_path, tmp_path) == [
        'a.py:2: rows = frame.filter(pl.col("a") > 1)',
        "a.py:3: for r in f.iter_rows(named=True):",
        "b.py:1: g = df.group_by('e').agg(pl.len())",
    ]


# --------------------------------------------------------------------------- the kind of device is typed (issue 44)

#: A string that names a kind of device (or NVIDIA's name) as a label writes it: what a label is searched for.
_DEVICE_WORD = re.compile(r"^\s*(CPU|GPU|NVIDIA)\b")
#: The same word in any case, searched for in an expression that names a label (``hardware.lower()``, ``hw``).
_ANY_CASE_WORD = re.compile(r"^\s*(cpu|gpu|nvidia)\b", re.IGNORECASE)
_LABEL_NAME = re.compile(r"hardware|label|accelerator|\bhw\b", re.IGNORECASE)
#: Calls that test a string for a part of it.
_PART_TESTS = ("startswith", "endswith", "starts_with", "ends_with", "contains", "find", "index", "rfind")
#: The functions that may still read a label for the kind of device, each with why.
LABEL_READERS = {
    ("kvlab/store.py", "_kind_from_label"): "the migration of runs stored before the typed device, once, on reading",
    ("kvlab/engines/registry.py", "engine_label"): "whether an engine's own label already says CPU (no hardware)",
}


def label_parses(package: Path = PACKAGE, root: Path = ROOT) -> list[str]:
    """Every place in kvlab/ that reads a label for the kind of device instead of the typed device (kvlab.device):
    a call of ``is_cpu_hardware``, a ``.split(" (")`` (a label cut to a short name), a string tested for a part
    that names a device as a label writes it (``"CPU" in x``, ``h.startswith("GPU")``, ``.str.contains("NVIDIA")``;
    in lower case where the expression names a label: ``"cpu" in hardware.lower()``), or a regular expression that
    looks for one (``re.match(r"NVIDIA ...", label)``): 'path:line: code'. The functions of :data:`LABEL_READERS`
    are left out; a column test (``"gpu" in table.columns``) is no label read."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(root))
        tree = ast.parse(path.read_text(), filename=str(path))
        allowed = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and (rel, f.name) in LABEL_READERS
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if id(node) in allowed:
                continue
            bad = False
            if (
                isinstance(node, ast.Name)
                and node.id == "is_cpu_hardware"
                or isinstance(node, ast.Attribute)
                and node.attr == "is_cpu_hardware"
            ):
                bad = True
            elif (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Constant)
                and isinstance(node.left.value, str)
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            ):
                searched = " ".join(ast.unparse(c) for c in node.comparators)
                bad = bool(
                    _DEVICE_WORD.match(node.left.value)
                    or _ANY_CASE_WORD.match(node.left.value)
                    and _LABEL_NAME.search(searched)
                )
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                name, receiver = node.func.attr, ast.unparse(node.func.value)
                bad = (
                    name == "split"
                    and " (" in args
                    or name in _PART_TESTS
                    and any(
                        _DEVICE_WORD.match(a) or _ANY_CASE_WORD.match(a) and _LABEL_NAME.search(receiver) for a in args
                    )
                    or receiver == "re"
                    and any(re.search(r"CPU|GPU|NVIDIA", a) for a in args)
                )
            if bad:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found), key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def test_no_function_reads_a_label_for_the_kind_of_device():
    """Issue 44: CPU or GPU is the typed device (an experiment's ``device``, a run record's ``device_kind``,
    ``accelerator``, ``gpu_count``), never read out of a hardware label; titles name a device from its typed fields
    (kvlab.device.shown). Only the migration of old runs reads a label, once (kvlab.store)."""
    found = label_parses()
    assert not found, "a label read for the kind of device (use kvlab.device / the device columns):\n" + "\n".join(
        found
    )


def test_the_label_parse_check_sees_what_it_looks_for(tmp_path):
    pkg = tmp_path / "kvlab"
    pkg.mkdir()
    (pkg / "store.py").write_text(
        "def _kind_from_label(h):\n    return h.startswith('CPU')\ndef other(h):\n    return h.startswith('CPU')\n"
    )
    (pkg / "a.py").write_text(
        "from kvlab.experiment import is_cpu_hardware\nx = is_cpu_hardware(h)\nshort = hw.split(' (')[0]\n"
        "on_cpu = 'cpu' in hardware.lower()\ngpu = 'GPU' not in label\nm = re.match(r'\\s*NVIDIA\\s+(\\S+)', h)\n"
        "c = runs['hardware'].str.contains('CPU')\nok = kind == 'cpu' and g.gpu == 'CPU'\n"
        "fine = 'vllm' in name and text.split(' ') and 'gpu' in table.columns and c.startswith('gpu')\n"
        "words = v.split(' (e.g.')\nhw_cpu = hw.lower().startswith('cpu')\n"
    )
    assert label_parses(pkg, tmp_path) == [
        "kvlab/a.py:2: is_cpu_hardware",
        "kvlab/a.py:3: hw.split(' (')",
        "kvlab/a.py:4: 'cpu' in hardware.lower()",
        "kvlab/a.py:5: 'GPU' not in label",
        "kvlab/a.py:6: re.match('\\\\s*NVIDIA\\\\s+(\\\\S+)', h)",
        "kvlab/a.py:7: runs['hardware'].str.contains('CPU')",
        "kvlab/a.py:11: hw.lower().startswith('cpu')",
        "kvlab/store.py:4: h.startswith('CPU')",
    ]


#: Issue 53: no function in kvlab longer than this many lines (its definition line to its last, docstring included)
MAX_FUNCTION_LINES = 80


def test_no_function_in_kvlab_is_longer_than_80_lines():
    import ast

    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted((ROOT / "kvlab").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long
