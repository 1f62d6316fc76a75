"""Report 04's one notation for each kind of number, so a value prints the same wherever the page gives it."""

from __future__ import annotations

from kvlab.units import k_label


def pct(value_pct: float) -> str:
    """A percentage in whole percent ('40%' for 40.475): what four held-out points support, and the one rounding
    the page gives the model's errors."""
    return f"{value_pct:.0f}%"


def k_span(lo: float, hi: float | None = None) -> str:
    """A modelled context in whole K ('≈173K tokens'), or a range of them ('108K–746K tokens')."""
    if hi is None:
        return f"≈{k_label(lo)} tokens"
    return f"{k_label(lo)}–{k_label(hi)} tokens"


def ranged(value: float, lo: float, hi: float, fmt: str = "{:,.0f}") -> str:
    """A modelled value with its range over the assumption sets: '12 (12–28)'; one value where they agree."""
    if fmt.format(lo) == fmt.format(hi):
        return fmt.format(value)
    return f"{fmt.format(value)} ({fmt.format(lo)}–{fmt.format(hi)})"
