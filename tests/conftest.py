"""Shared fixtures: kvlab's tiny model, the engine venvs' interpreters (skip, or fail under CI, when missing) and
the data folder of real measured runs the notebook tests read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvlab.paths import ENGINES_DIR

ENGINE_PYTHON = ENGINES_DIR / "vllm" / "bin" / "python"
SGLANG_JAX_PYTHON = ENGINES_DIR / "sglang-jax" / "bin" / "python"


def _required(python: Path) -> Path:
    """``python`` when it exists; otherwise fail under CI (which must have it) and skip elsewhere."""
    if not python.exists():
        reason = f"engine environment missing ({python}); run `make engines`"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return python


@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The vLLM engine venv's python (vLLM CPU build + SGLang's parser)."""
    return _required(ENGINE_PYTHON)


@pytest.fixture(scope="session")
def sglang_jax_python() -> Path:
    """The sglang-jax engine venv's python (SGLang's JAX runtime, Python >= 3.12)."""
    return _required(SGLANG_JAX_PYTHON)


@pytest.fixture(scope="session", autouse=True)
def tiny_model() -> Path:
    """kvlab's tiny local model, generated once (deterministic, no download) before any test: the shipped
    experiments name it, and validating them (side-effect free) needs it on disk."""
    from kvlab.tinymodel import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def fixture_data(tmp_path_factory) -> Path:
    """A data folder with the reference tables, the catalog and the real measured runs of tests/fixtures (the
    same on every machine, unlike data/runs), plus document variants (see notebook_data.write_fixture_data)."""
    from notebook_data import write_fixture_data

    return write_fixture_data(tmp_path_factory.mktemp("fixture") / "data")
