"""Shared fixtures: kvlab's tiny model and the engine venv's interpreter (skip, or fail under CI, when missing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvlab.paths import ENGINES_DIR

ENGINE_PYTHON = ENGINES_DIR / "vllm" / "bin" / "python"


@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The engine venv's python (vLLM CPU build + SGLang's parser); CI must have it, elsewhere it may be skipped."""
    if not ENGINE_PYTHON.exists():
        reason = f"engine environment missing ({ENGINE_PYTHON}); run `make engines`"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return ENGINE_PYTHON


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """kvlab's tiny local model, generated once (deterministic, no download)."""
    from kvlab.tinymodel import ensure_tiny_model

    return ensure_tiny_model()
