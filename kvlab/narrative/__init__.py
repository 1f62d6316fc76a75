"""Markdown sentences for the reports, written from the data so no conclusion is typed by hand.

Being dissolved into the study folders (``kvlab/studies/<study>/words.py``) and the shared ground: what is left here
is read by name, ``narrative.<function>``, from whichever of the modules below still holds it (``common`` for what
several reports say alike). A module moved into its study folder is simply gone from this list's search.
"""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec

from kvlab.narrative.common import (  # noqa: F401  (read as narrative.<name>)
    answer_markdown,
    citation_note,
    config_name,
    curves_caption,
    measured_engines_note,
    model_title,
    no_runs_note,
    setup_phrase,
    stand_in_note,
)

_MODULES = (
    "context_scaling",
    "throughput_decay",
    "memory_utilisation",
    "whatif_model",
    "prefix_sharing",
    "engine_choice",
    "capacity",
)


def __getattr__(name: str):
    for sub in _MODULES:
        if find_spec(f"kvlab.narrative.{sub}") is None:
            continue
        mod = import_module(f"kvlab.narrative.{sub}")
        if name in vars(mod) and not name.startswith("_"):
            return vars(mod)[name]
    raise AttributeError(f"module 'kvlab.narrative' has no attribute {name!r}")
