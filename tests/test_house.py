"""The house rules the import graph alone does not hold: what an engine is lives on its adapter (kvlab.engines), and
nothing else in kvlab spells an engine's name."""

from __future__ import annotations

import ast

import pytest

from kvlab.engines import ENGINE_NAMES, SGLANG, SGLANG_JAX, VLLM, engine_label, registry
from kvlab.paths import ROOT

PACKAGE = ROOT / "kvlab"


def engine_literals(package=PACKAGE, root=ROOT, names=ENGINE_NAMES) -> list[str]:
    """Every string literal in kvlab/ outside kvlab/engines/ that is, as a whole and in any case, an engine's name
    (f-string parts included): 'path:line: literal'."""
    wanted = {n.lower() for n in names} | {registry.adapter_class(n).label.lower() for n in names}
    found = []
    for path in sorted(package.rglob("*.py")):
        if (package / "engines") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in wanted:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


def test_no_engine_name_literal_outside_the_engines_package():
    """Code that means one engine names it through kvlab.engines (VLLM, SGLANG, SGLANG_JAX); code that means any asks
    the registry (families, labels, notes, colours, capabilities); help texts too."""
    found = engine_literals()
    assert not found, "engine names spelt outside kvlab/engines/ (ask kvlab.engines.registry):\n" + "\n".join(found)


def test_the_literal_check_sees_what_it_looks_for(tmp_path):
    """A quoted engine name in any case is found, a sentence that mentions one is not."""
    pkg = tmp_path / "kvlab"
    (pkg / "engines").mkdir(parents=True)
    (pkg / "a.py").write_text('X = "SGLang"\nY = f"{1}vllm"\nZ = "vllm or sglang"\n')
    (pkg / "engines" / "b.py").write_text('N = "vllm"\n')
    assert engine_literals(pkg, tmp_path) == ["kvlab/a.py:1: 'SGLang'", "kvlab/a.py:2: 'vllm'"]


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
    with pytest.raises(ValueError, match="unknown engine"):
        registry.adapter_class("other")


@pytest.mark.parametrize(("engine", "device_kind", "label"), [
    (VLLM, None, "vLLM"), (SGLANG, "gpu", "SGLang"), (SGLANG, "cpu", "SGLang (CPU)"),
    (SGLANG_JAX, "cpu", "sglang-jax (CPU)"), (SGLANG_JAX, None, "sglang-jax (CPU)"), ("other", "cpu", "other"),
])
def test_a_label_says_what_ran(engine, device_kind, label):
    """A run's record (its device kind) can change how its engine is named: a CPU run of SGLang says so."""
    assert engine_label(engine, device_kind) == label


def test_every_engine_has_a_colour():
    from kvlab.style import ENGINE_COLORS, PALETTE

    assert list(ENGINE_COLORS) == list(ENGINE_NAMES)
    assert set(ENGINE_COLORS.values()) <= set(PALETTE.values()) and len(set(ENGINE_COLORS.values())) == 3
