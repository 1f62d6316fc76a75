"""What report 04 still reads of report 03's memory check (the rest moved to kvlab/studies/memory_utilisation/):
whether a modelled headroom row leaves less memory outside the target than the model's assumed need there."""

from __future__ import annotations


def short_outside_pool(row: dict) -> bool:
    """Whether a headroom row (:func:`kvlab.perfmodel.figures.headroom_table`) leaves less memory outside the target
    than the model's assumed need there (False where either is unknown)."""
    left, need = row.get("outside_pool_gib_per_gpu"), row.get("outside_need_gib_per_gpu")
    return left is not None and need is not None and left < need
