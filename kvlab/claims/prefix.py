"""Prefix-cache claims that one engine's own runs can decide, on any host (a cache's hit share, cache on against
off): graded by rule 2 of :mod:`kvlab.claims.grading` from :func:`kvlab.studies.sharing_frames.prefix_sharing`'s rows."""

from __future__ import annotations

from kvlab.claims.grading import Grade, Repeats, measured_difference
from kvlab.engines import engine_label


#: The unit of a cache-hit share's difference, cache on − off: a fraction (0–1) of the prompt tokens served.
SHARE_UNIT = "fraction of prompt tokens, cache on − off"


def _side(row: dict | None, n_default: int = 1) -> Repeats:
    if row is None:
        return Repeats(())
    return Repeats.summary(
        row["cache_hit_rate"],
        row.get("cache_hit_rate_min"),
        row.get("cache_hit_rate_max"),
        row.get("n_runs") or n_default,
    )


def cache_shares(on: dict, off: dict | None) -> Grade:
    """Does the engine's prefix cache serve prompt tokens? Its hit share with the cache on (``on``, a
    prefix_sharing row) against off at the same shared fraction (``off``; missing: 0, what a cache that shares
    nothing serves, with as many runs as ``on``). *reproduced* when on is above off in every repeat (n ≥ 3,
    ranges apart); value: the difference of the shares (on − off), a fraction of prompt tokens (:data:`SHARE_UNIT`)."""
    first = _side(on)
    second = _side(off) if off is not None else Repeats.summary(0.0, 0.0, 0.0, first.n)
    engine = engine_label(on["engine"]) if on.get("engine") else "the engine"
    return measured_difference(
        first,
        second,
        "higher",
        difference=True,
        unit=SHARE_UNIT,
        what=f"{engine}'s cache-hit share, cache on against off",
        scope=f"{on.get('hardware') or 'this host'}, one engine's own cache on against off",
    )
