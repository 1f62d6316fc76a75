"""What is left of report 04's narrative module: :func:`band_sentence`, which report 06's page and
:mod:`kvlab.explore` read as ``narrative.band_sentence`` too (shared ground, awaiting its move next to
:func:`kvlab.narrative.common.curves_caption`). Report 04's own sentences are in
:mod:`kvlab.studies.whatif_model.words`."""

from __future__ import annotations

from kvlab.narrative.common import config_name
from kvlab.units import tokens_label


def band_sentence(
    model_df: list[dict],
    y: str = "batch_time_s",
    unit: str = "s",
    context: int | None = None,
    tokens_per_batch: tuple[int, int] | None = None,
) -> str:
    """What a figure's bands (``model_df``: the curves' row dicts) are and how wide, read at ``context`` (default: 200K when drawn, else the largest
    context): each configuration's value under the default assumptions with its lowest-highest over the assumption
    sets. ``tokens_per_batch`` (a throughput figure): the sets' lowest and highest batch x output tokens, which
    scale a throughput by themselves."""
    cols = model_df[0] if model_df else {}
    if f"{y}_lo" not in cols:
        return ""
    ctxs = sorted({r["context_tokens"] for r in model_df})
    c = context if context in ctxs else (204800 if 204800 in ctxs else ctxs[-1])
    n = max(r["assumption_sets"] for r in model_df) if "assumption_sets" in cols else None
    few = min(r["assumption_sets"] for r in model_df) if "assumption_sets" in cols else n
    first_full = min((r["context_tokens"] for r in model_df if r.get("assumption_sets") == n), default=None)
    parts = []
    for r in model_df:
        if r["context_tokens"] == c:
            parts.append(
                f"{config_name(r['config'])} {r[y]:,.3g} {unit} ({r[y + '_lo']:,.3g}–{r[y + '_hi']:,.3g} {unit})"
            )
    if any(r.get("uncalibrated") for r in model_df):
        text = (
            f"Bands: uncalibrated (no published point of this model was fitted, and a fit to another model's is "
            f"never applied): the lowest to highest over the priors' centre, fast end and slow end under each "
            f"assumption set ({n or ''} in all), the line inside being the priors' centre; at {tokens_label(c)} "
            + ", ".join(parts)
            + "."
        )
    else:
        text = (
            f"Bands: the lowest to highest over the {n or ''} assumption sets the published points cannot choose "
            f"among (each refitted to them), the line inside being the default set's; at {tokens_label(c)} "
            + ", ".join(parts)
            + "."
        ).replace("the  assumption", "the assumption")
    if few != n and first_full:
        text += (
            f" Below {tokens_label(first_full)} tokens only {few} of the sets count: the others' output is as long as "
            "the context, leaving no prompt."
        )
    if tokens_per_batch:
        lo, hi = tokens_per_batch
        text += (
            f" Most of a throughput band's width is the unstated batch: the sets' batches hold {lo:,}–{hi:,} "
            f"output tokens ({hi / lo:.0f}×), and tokens/s scales with them; the published circles' bars are the "
            "article's own times under the same sets. Which engine is faster is read in the batch-time figure."
        )
    return text
