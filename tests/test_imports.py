"""kvlab's import graph: no cycles (imports inside functions and under TYPE_CHECKING count), no import side effects.

The graph is read from the source (AST), not from ``sys.modules``: an import inside a function is an edge
even if it never runs. Edges: ``import a.b`` -> the module a.b; ``from a import b`` -> a.b when b is a
submodule, else a (the name comes from a's ``__init__``); relative imports resolve against the importing
module's package. A package's ``__init__`` that a submodule import runs implicitly is not an edge (every
package whose ``__init__`` gathers its submodules would otherwise be a cycle).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path


from kvlab.paths import ROOT

PACKAGE = ROOT / "kvlab"


def modules() -> dict[str, Path]:
    """Every module under kvlab/: dotted name -> file (a package is named by its folder)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a kvlab module; None outside kvlab."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The kvlab modules ``name`` imports anywhere in its file -> the first line that does."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else base)
        for target in targets:
            module = _resolve(target, known)
            if module and module != name:
                found.setdefault(module, node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported kvlab module: line} for every module under kvlab/."""
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def knots(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected components of more than one module: modules that all import each other,
    however indirectly."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest cycle per knot (see :func:`knots`), each as a module path that ends where it starts; sorted."""
    out = []
    for component in knots(graph):
        start = min(component)
        paths = {start: [start]}  # breadth-first inside the component: the shortest way back to start
        queue = [start]
        while queue:
            v = queue.pop(0)
            for w in sorted(graph[v]):
                if w == start:
                    out.append(paths[v] + [start])
                    queue = []
                    break
                if w in component and w not in paths:
                    paths[w] = paths[v] + [w]
                    queue.append(w)
    return sorted(out)


def _describe(cycle: list[str], graph: dict[str, dict[str, int]], known: dict[str, Path]) -> str:
    steps = [f"{known[a].relative_to(ROOT)}:{graph[a][b]} imports {b}" for a, b in zip(cycle, cycle[1:])]
    knot = next(k for k in knots(graph) if cycle[0] in k)
    tied = f"\n    (tied together: {', '.join(sorted(knot))})" if len(knot) > len(cycle) - 1 else ""
    return " -> ".join(cycle) + "\n    " + "\n    ".join(steps) + tied


def test_graph_reads_every_kind_of_import(tmp_path):
    """The graph sees relative, in-function, TYPE_CHECKING and submodule-by-name imports."""
    pkg = tmp_path / "kvlab"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")  # b is a submodule: an edge to kvlab.sub.b
    (pkg / "sub" / "__init__.py").write_text("X = 1\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n")
    (pkg / "sub" / "d.py").write_text("from . import X\n")  # X is a name: an edge to the package kvlab.sub
    (pkg / "c.py").write_text("def f():\n    import kvlab.a\n    import os\n")
    known = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = list(path.relative_to(tmp_path).with_suffix("").parts)
        known[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert graph == {
        "kvlab": {},
        "kvlab.a": {"kvlab.sub.b": 1},
        "kvlab.c": {"kvlab.a": 2},
        "kvlab.sub": {},
        "kvlab.sub.b": {"kvlab.c": 3},
        "kvlab.sub.d": {"kvlab.sub": 1},
    }
    assert cycles(graph) == [["kvlab.a", "kvlab.sub.b", "kvlab.c", "kvlab.a"]]
    assert knots(graph) == [{"kvlab.a", "kvlab.sub.b", "kvlab.c"}]


def test_no_import_cycles():
    """No module of kvlab imports, however indirectly or lazily, a module that imports it."""
    graph = import_graph()
    known = modules()
    found = cycles(graph)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(_describe(c, graph, known) for c in found)


def _import_order(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every module after the modules it imports (where there is no cycle), so each import runs only its own code."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(v: str) -> None:
        seen.add(v)
        for w in sorted(graph[v]):
            if w not in seen:
                visit(w)
        order.append(v)

    for v in sorted(graph):
        if v not in seen:
            visit(v)
    return order


_RCPARAMS_PROBE = """
import importlib, json, sys, warnings
import matplotlib
warnings.simplefilter("ignore")
changed = {}
for name in json.loads(sys.argv[1]):
    before = {k: repr(v) for k, v in matplotlib.rcParams.items() if k != "backend"}
    importlib.import_module(name)
    after = {k: repr(v) for k, v in matplotlib.rcParams.items() if k != "backend"}
    diff = sorted(k for k in before if before[k] != after.get(k))
    if diff:
        changed[name] = diff
print(json.dumps(changed))
"""


def test_imports_leave_matplotlib_settings_alone():
    """Importing any kvlab module changes no matplotlib rcParams (styles are applied by the code that draws)."""
    order = _import_order(import_graph())
    out = subprocess.run(
        [sys.executable, "-c", _RCPARAMS_PROBE, json.dumps(order)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert changed == {}, "\n".join(
        f"{m} changes rcParams {keys[:8]}{' ...' if len(keys) > 8 else ''}" for m, keys in changed.items()
    )


#: kvlab's layers, from the ground up (docs/design.md, "Architecture: layers"). A module may import modules of lower
#: layers and of its own group (a package's modules import each other), never a module of a higher layer, nor of
#: another group on its own layer. Measuring comes first: reporting reads what it recorded (engines' identities,
#: specs, the schema, the store, the plan) but never the machinery that launches and measures (server, client, runner,
#: cluster). The command line stands over both. The tests' and benchmarks' fixtures are no layer: they live in
#: tests/support/, outside the package (test_no_test_support_in_the_package holds it).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("kvlab", "paths")),
    ("tools", ("device",)),
    ("tools", ("gpu", "httpcall")),
    ("tools", ("units", "markup", "host", "metrics", "reasoning_tokens", "watchdog", "tinymodel", "catalog")),
    ("measuring", ("search", "cost")),
    ("measuring", ("load",)),
    ("measuring", ("workloads",)),
    ("measuring", ("engines",)),
    ("measuring", ("experiment", "server", "schema")),
    ("measuring", ("client", "store", "plan")),
    ("measuring", ("probe",)),
    ("measuring", ("rows",)),
    ("measuring", ("campaign",)),
    ("measuring", ("preflight",)),
    ("measuring", ("runner",)),
    ("measuring", ("cluster",)),
    ("reporting", ("style", "tables", "prose")),
    ("reporting", ("verdicts",)),
    ("reporting", ("perfmodel",)),
    ("reporting", ("claims",)),
    ("reporting", ("guide",)),
    ("reporting", ("words", "figures")),
    ("reporting", ("workbook",)),
    ("reporting", ("explore",)),
    ("reporting", ("studies",)),
    ("reporting", ("reports",)),
    ("entry", ("cli",)),
)
#: What reporting may read of the measuring side: the records, never the machinery.
MEASURING_MACHINERY = ("server", "client", "runner", "cluster")


def group(module: str) -> str:
    """A module's group: its top-level name under kvlab ('kvlab.studies.capacity.page' → 'studies')."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of() -> dict[str, tuple[int, str]]:
    return {g: (i, side) for i, (side, groups) in enumerate(LAYERS) for g in groups}


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import that breaks :data:`LAYERS`, as 'file:line: a imports b (why)'."""
    layers, known, bad = layer_of(), modules(), []
    for a, targets in sorted(graph.items()):
        ga = group(a)
        for b, line in sorted(targets.items()):
            gb = group(b)
            if ga == gb:
                continue
            (la, side_a), (lb, _) = layers[ga], layers[gb]
            why = (
                "imports a higher layer"
                if lb > la
                else "imports another group of its own layer"
                if lb == la
                else "reporting imports measuring's machinery"
                if side_a == "reporting" and gb in MEASURING_MACHINERY
                else ""
            )
            if why:
                bad.append(f"{known[a].relative_to(ROOT)}:{line}: {a} imports {b} ({why})")
    return bad


def test_every_module_has_a_layer():
    layers = layer_of()
    assert sorted({group(m) for m in modules()} - set(layers)) == [], "name the new module's layer in LAYERS"
    assert sorted(set(layers) - {group(m) for m in modules()}) == [], "LAYERS names a module that is gone"


def test_nothing_imports_upward():
    """Measuring: workloads → engines → spec / server / schema → client / store / plan → runner → cluster; reporting:
    style / tables → verdicts → perfmodel → claims → guide → words | figures → workbook → explore → studies (one
    folder per report) → reports; cli over both. The figures' ground does not import the words', nor the words' the
    figures'; perfmodel does not import guide."""
    bad = upward_imports(import_graph())
    assert not bad, f"{len(bad)} import(s) against the layers (docs/design.md):\n" + "\n".join(bad)


def test_the_layer_check_sees_an_upward_import():
    graph = {
        "kvlab.figures": {"kvlab.words": 3},
        "kvlab.words": {},
        "kvlab.perfmodel.figures": {"kvlab.guide": 7},
        "kvlab.guide": {},
        "kvlab.verdicts": {"kvlab.runner": 1},
        "kvlab.runner": {},
    }
    found = upward_imports(graph)
    assert [line.split(": ", 1)[1] for line in found] == [
        "kvlab.figures imports kvlab.words (imports another group of its own layer)",
        "kvlab.perfmodel.figures imports kvlab.guide (imports a higher layer)",
        "kvlab.verdicts imports kvlab.runner (reporting imports measuring's machinery)",
    ]


def unexplained_lazy_imports(path: Path) -> list[int]:
    """The lines of imports inside a function of ``path`` with no comment on their line or the line above."""
    text = path.read_text()
    lines = text.splitlines()
    found = set()
    for fn in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    line, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                    if "#" not in line and not above.startswith("#"):
                        found.add(node.lineno)
    return sorted(found)


def test_imports_are_at_the_top_unless_a_comment_says_why():
    """Every import inside a function says why it is there, on its line or the line above: an optional dependency
    (Ray in kvlab.cluster, ipywidgets in kvlab.explore), a module only a notebook kernel needs (matplotlib_inline in
    kvlab.plots), or a stack a caller must not pay for, with what it costs (each `kvlab` command's own in kvlab.cli;
    matplotlib kept out of kvlab.narrative and kvlab.claims; nbformat out of kvlab.explore). No whitelist: an import
    that nothing forces inside goes to the top (the import graph has no cycle, in-function imports included, so none
    is needed to break one)."""
    over = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if "/envs/" in rel:  # run inside an engine's own interpreter, not imported by kvlab
            continue
        if lazy := unexplained_lazy_imports(path):
            over[rel] = lazy
    assert not over, "imports inside functions with no comment saying why (move them to the top):\n" + "\n".join(
        f"{rel}: lines {lines}" for rel, lines in over.items()
    )


def test_the_lazy_import_check_sees_an_unexplained_one(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "def f():\n    import os\n\n\ndef g():\n    import ray  # optional extra\n\n\n"
        "def h():\n    # nbformat: seconds a caller must not pay\n    import nbformat\n    import json\n"
    )
    assert unexplained_lazy_imports(path) == [2, 12]


def _runtime_imports(path: Path) -> set[str]:
    """Top-level package names a module imports anywhere, except under ``if TYPE_CHECKING:`` (never run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_words_only_format():
    """The words (kvlab.words, each study's words.py) turn findings and verdicts into sentences: they import no
    polars (the reductions live in the frames, the judging in the checks; a type hint under ``if TYPE_CHECKING:``
    never runs)."""
    said = {n: p for n, p in modules().items() if n == "kvlab.words" or n.endswith(".words")}
    assert len(said) >= 8
    assert sorted(n for n, p in said.items() if "polars" in _runtime_imports(p)) == []


def test_no_test_support_in_the_package():
    """The tests' and benchmarks' fixtures (tests/support/: the SSE fixture server) are no part of kvlab and not in its
    wheel: there is no kvlab.testing, pyproject's package search takes none of the folders that hold test support or
    benchmarks, and no kvlab module imports them."""
    import fnmatch
    import tomllib

    # the folder, not importlib's find_spec: an editable install of another checkout would answer for it
    assert [n for n in modules() if n.split(".")[1:2] == ["testing"]] == []
    assert not (PACKAGE / "testing").exists() and (ROOT / "tests/support/sse_fixture.py").is_file()
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = [
        name
        for name in ("tests", "tests.support", "benchmarks", "kvlab", "kvlab.engines")
        if any(fnmatch.fnmatchcase(name, p) for p in find.get("include", ["*"]))
        and not any(fnmatch.fnmatchcase(name, p) for p in find.get("exclude", []))
    ]
    assert shipped == ["kvlab", "kvlab.engines"], f"the wheel would ship {shipped}"
    assert sorted(n for n, p in modules().items() if {"tests", "benchmarks"} & _runtime_imports(p)) == []
