"""The look of every kvlab figure: one colour per engine, number labels on axes, and seaborn's whitegrid theme
(notebook scale) applied while a figure is made or drawn (:func:`styled`, :func:`theme`), never at import:
importing a kvlab module changes no matplotlib setting."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import matplotlib as mpl
import seaborn as sns

from kvlab.engines import registry

#: The engines' colours by the key each adapter names (EngineAdapter.colour_key): one hue per family, a darker
#: shade for an engine that stands in for its family's own (sglang-jax, SGLang's JAX runtime).
PALETTE = {"blue": "#3b75af", "orange": "#e1812c", "dark orange": "#a0461a"}
#: One colour per engine in every report, in display order.
ENGINE_COLORS = {engine: PALETTE[key] for engine, key in registry.colour_keys().items()}

F = TypeVar("F", bound=Callable)


@functools.cache
def _theme_rc() -> dict:
    """The rcParams seaborn's ``set_theme(style="whitegrid", context="notebook")`` sets (its style, its scale,
    its palette), read inside an ``rc_context`` so that nothing outside it changes."""
    keys = {*sns.axes_style("whitegrid"), *sns.plotting_context("notebook"), "axes.prop_cycle"}
    with mpl.rc_context():
        sns.set_theme(style="whitegrid", context="notebook", color_codes=False)
        return {k: mpl.rcParams[k] for k in keys}


def theme():
    """A context in which matplotlib draws with the kvlab theme; the settings before it come back after it."""
    return mpl.rc_context(_theme_rc())


def styled(make: F) -> F:
    """``make`` (a function that returns a Figure) run inside :func:`theme`."""

    @functools.wraps(make)
    def wrapper(*args, **kwargs):
        with theme():
            return make(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def number_label(v: float) -> str:
    """A value for a label: 3 significant digits, but whole numbers from 1,000 up (1,260 rather than 1.26e+03)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
