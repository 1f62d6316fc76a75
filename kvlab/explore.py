"""What the interactive controls of reports 04 and 06 share when a report is opened in JupyterLab: whether widgets may
be drawn at all (:func:`interactive_enabled`) and the options they offer. The controls themselves are each study's
(``kvlab/studies/whatif_model/explore.py``, ``kvlab/studies/engine_choice/explore.py``): every change redraws through
the same functions the static report uses. A report build sets :data:`STATIC_ENV` in its
kernel's environment, and only a kernel Jupyter Server started for an open notebook gets widgets at all: otherwise
(or without ipywidgets) no widget is created and the functions return None, so the HTML shows the defaults only,
with nothing that needs a live kernel.
"""

from __future__ import annotations

import os

from IPython.display import display

from kvlab.perfmodel import load_gpus, load_models
from kvlab.units import tokens_label

#: Contexts offered by the context controls (tokens), named as the figures name them.
CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072, 204800, 262144, 524288, 1048576)
#: Requests in flight offered by 06's concurrency control (100 is the tree's threshold).
IN_FLIGHT = (1, 8, 16, 32, 64, 99, 100, 128, 256, 512)


#: Set by Jupyter Server in the environment of a kernel it starts for a notebook (JupyterLab, Notebook 7); never by
#: papermill, nbconvert or nbclient.
SESSION_ENV = "JPY_SESSION_NAME"
#: Set in the environment of every kernel the report build starts (:mod:`kvlab.reports`): notebooks render their
#: defaults statically (no interactive widgets, whose views would need a live kernel or a CDN in the HTML).
STATIC_ENV = "KVLAB_STATIC_REPORT"


def interactive_enabled() -> bool:
    """True in a notebook a person has open in JupyterLab (:data:`SESSION_ENV` set) with ipywidgets; False in a report
    build (:data:`STATIC_ENV` set) and in every batch execution (papermill, nbconvert): a widget there
    has no one to use it, and executing ``interact`` headless can leave the kernel client waiting for ever (nbclient
    issue 312, papermill issue 723: seen here twice in 10 runs of report 04's test)."""
    if os.environ.get(STATIC_ENV) or not os.environ.get(SESSION_ENV):
        return False
    try:
        import ipywidgets  # noqa: F401  (here, not at the top: whether it imports is the question)
    except ImportError:
        return False
    return True


def _context_options(extra: int | None = None) -> list[tuple[str, int]]:
    values = sorted(set(CONTEXTS) | ({extra} if extra else set()))
    return [(f"{tokens_label(c)} ({c:,} tokens)", c) for c in values]


def _catalog_options() -> tuple[list[str], list[str]]:
    """GPUs (without the CPU host) and served models (without kvlab's tiny test model) of the catalog."""
    gpus = [k for k in load_gpus() if k != "CPU"]
    models = [k for k, m in load_models().items() if not k.startswith("kvlab-")]
    return gpus, models


def _with(options: list[str], value: str) -> list[str]:
    """The catalog's options in catalog order, with ``value`` added at the end when it is not one of them."""
    return options if value in options else [*options, value]


def _display_all(items: list) -> list:
    for item in items:
        display(item)
    return items
