"""What-if tables and figures of the model (curves, crossovers, KV headroom); figures are returned, never shown.

Every context axis is labelled in K (64K, 200K, 1M), never in powers of two; series that are not engines
(GPUs, memory targets) take colours that are not the engine colours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedFormatter, FixedLocator, FuncFormatter, LogLocator, NullLocator

from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.perfmodel.calibrate import UNPINNED_KV_FORMATS, UNPINNED_MLA_WIDTHS, refits
from kvlab.perfmodel.frames import row_config
from kvlab.perfmodel.pools import concurrency_ceilings
from kvlab.perfmodel.roofline import Assumptions, Config, Params, Workload, batch_time, crossover_context, memory
from kvlab.perfmodel.stepfit import GROUP
from kvlab.style import ENGINE_COLORS, number_label, styled
from kvlab.tables import kv_format_words
from kvlab.units import K, approx_label, k_label, modelled_count, sig2, tokens_label

#: Colours of series that are not engines (GPUs, memory targets): none of them reads as vLLM blue or SGLang orange.
SERIES_COLORS = ("#029e73", "#7b3294", "#555555", "#cc78bc", "#8c6d31", "#56b4e9")


def _context_ticks(lo: float, hi: float, extra: Iterable[float] = ()) -> list[int]:
    """Powers of two from ``lo`` to ``hi`` plus ``extra`` (e.g. the published contexts), dropping a power of two
    that sits closer than 0.75 octave to an extra tick, so two labels never overlap."""
    extra = sorted({int(e) for e in extra if lo <= e <= hi})
    powers = [
        1 << k for k in range(int(np.floor(np.log2(max(lo, 1)))), int(np.ceil(np.log2(hi))) + 1) if lo <= 1 << k <= hi
    ]
    keep = [t for t in powers if all(abs(np.log2(t / e)) >= 0.75 for e in extra)]
    return sorted(set(keep) | set(extra))


def value_axis(ax, values: Iterable[float], label: str, spread: float = 20.0) -> None:
    """The y axis of a modelled quantity: logarithmic when the positive ``values`` span more than ``spread``×
    (ticks at 1, 2 and 5 per decade, plain numbers, and the label says 'log scale'), else linear from 0."""
    v = [x for x in values if x is not None and x > 0]
    if v and max(v) / min(v) > spread:
        ax.set_yscale("log")
        ax.set_ylim(min(v) / 1.3, max(v) * 1.3)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: number_label(y)))
        ax.yaxis.set_minor_locator(NullLocator())
        unit = label[label.rindex("(") + 1 : -1] if label.endswith(")") else ""
        ax.set_ylabel(f"{label[: label.rindex('(')].rstrip()} ({unit}, log scale)" if unit else f"{label} (log scale)")
    else:
        ax.set_ylim(bottom=0, top=max(v) * 1.08 if v else None)
        ax.set_ylabel(label)


def context_axis(axis, lo: float, hi: float, extra: Iterable[float] = ()) -> None:
    """Log-2 context axis (``ax.xaxis`` or ``ax.yaxis``) with ticks named in K: 4K, 64K, 200K, 1M."""
    ticks = _context_ticks(lo, hi, extra)
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: tokens_label(v)))
    axis.set_minor_locator(NullLocator())


def context_grid(max_tokens: int = 1 << 20, min_tokens: int = 4096, points: int = 48) -> list[int]:
    """Log-spaced contexts from ``min_tokens`` to ``max_tokens`` (inclusive), plus 64K and 200K."""
    grid = np.unique(np.geomspace(min_tokens, max_tokens, points).round().astype(int)).tolist()
    return sorted(set(grid) | {c for c in (65536, 204800) if min_tokens <= c <= max_tokens})


#: The columns of :func:`curves` that get a range (``<column>_lo``, ``<column>_hi``) over the assumption sets.
RANGED = ("batch_time_s", "output_tokens_per_s")


def curves(
    configs: Iterable[Config],
    contexts: Iterable[int],
    w: Workload,
    p: Params,
    a: Assumptions = Assumptions(),
    sens: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Modelled batch time, its parts, throughput and memory fit for every configuration x context.

    With ``sens`` (a :func:`~kvlab.perfmodel.calibrate.sensitivity` table: one refit per assumption set the
    published points cannot pin), each of :data:`RANGED` also gets its lowest and highest value over those sets
    (``<column>_lo``, ``<column>_hi``; the line's own value ``w``/``p``/``a`` is inside by construction) and
    ``assumption_sets`` says over how many (fewer at a context no longer than some sets' output, where those sets
    have no prompt and say nothing). Each set is computed under its own workload: its batch time is that of
    the article's batch as the set models it, its throughput its own batch x output tokens over that time."""
    configs = list(configs)
    # a context no longer than the output leaves no prompt: the curves start past it (what exists is drawn)
    contexts = [int(c) for c in contexts if int(c) > w.output_tokens]
    if not contexts:
        raise ValueError(
            f"output_tokens {w.output_tokens:,} leaves no prompt at any context drawn: every context must exceed "
            "output_tokens (lower output_tokens, or raise max_context)"
        )
    rows = _curve_rows(configs, contexts, w, p, a)
    df = pl.DataFrame(rows)
    if sens is None:
        return df
    sets = refits(sens, a)
    lo = {col: [r[col] for r in rows] for col in RANGED}
    hi = {col: [r[col] for r in rows] for col in RANGED}
    counted = [0] * len(rows)
    for w_i, a_i, p_i in sets:
        for i, r in enumerate(_curve_rows(configs, contexts, w_i, p_i, a_i)):
            if r is None:  # a context no longer than the set's output: no prompt, the set says nothing there
                continue
            counted[i] += 1
            for col in RANGED:
                lo[col][i] = min(lo[col][i], r[col])
                hi[col][i] = max(hi[col][i], r[col])
    # a model no point was fitted on: the sets are the priors' centre and ends under each assumption set (uncalibrated)
    uncalibrated = "fit" in sens.columns and sens["fit"].str.starts_with("prior").any()
    return df.with_columns(
        *(pl.Series(f"{col}_{end}", v[col]) for col in RANGED for end, v in (("lo", lo), ("hi", hi))),
        pl.Series("assumption_sets", counted),
        pl.lit(uncalibrated).alias("uncalibrated"),
    )


def _curve_rows(configs: list[Config], contexts: list[int], w: Workload, p: Params, a: Assumptions) -> list:
    """One row per configuration x context (None where the context leaves no prompt before ``w``'s output)."""
    rows = []
    for cfg in configs:
        for c in contexts:
            if int(c) <= w.output_tokens:
                rows.append(None)
                continue
            pr = batch_time(cfg, int(c), w, p, a)
            rows.append(
                {
                    "source": "modelled",
                    "config": cfg.label(),
                    "engine": cfg.engine,
                    "model": cfg.model.model,
                    "gpu": cfg.gpu.gpu,
                    "tp": cfg.tp,
                    "dcp": cfg.dcp,
                    "context_tokens": int(c),
                    "prefill_time_s": pr.prefill_s,
                    "decode_time_s": pr.decode_s,
                    "batch_time_s": pr.batch_time_s,
                    "output_tokens_per_s": pr.output_tokens_per_s,
                    "concurrent_seqs": pr.concurrent_seqs,
                    "waves": pr.waves,
                    "fits": pr.fits,
                }
            )
    return rows


def matched_published(model_df: pl.DataFrame, published: pl.DataFrame | None) -> pl.DataFrame:
    """The published rows whose configuration (engine, GPU, model, TP, DCP) is one of ``model_df``'s curves, with
    that curve's ``config`` label; empty when none is (e.g. another GPU or model than the article's)."""
    if published is None or published.is_empty():
        return pl.DataFrame(
            {"config": [], "context_tokens": []}, schema={"config": pl.String, "context_tokens": pl.Int64}
        )
    keys = {
        (r["engine"], r["gpu"], r["model"], r["tp"], r["dcp"]): r["config"]
        for r in model_df.unique(["config"], maintain_order=True).iter_rows(named=True)
    }
    labels = []
    for r in published.iter_rows(named=True):
        cfg = row_config(r)
        labels.append(keys.get((cfg.engine, cfg.gpu.gpu, cfg.model.model, cfg.tp, cfg.dcp)))
    return published.with_columns(pl.Series("config", labels, dtype=pl.String)).filter(pl.col("config").is_not_null())


def published_throughput(published: pl.DataFrame, w: Workload, sens: pl.DataFrame | None = None) -> pl.DataFrame:
    """The published rows with ``output_tokens_per_s`` under the assumed workload ``w`` (the article gives batch
    times only) and, with ``sens``, its lowest and highest under the workloads of every assumption set there
    (``output_tokens_per_s_lo``/``_hi``: the same batch time over each set's batch x output tokens)."""
    t = pl.col("batch_time_s")
    out = published.with_columns((pl.lit(float(w.batch_size * w.output_tokens)) / t).alias("output_tokens_per_s"))
    if sens is None or sens.is_empty():
        return out
    tokens = (sens["batch_size"] * sens["output_tokens"]).cast(pl.Float64)
    lo, hi = (
        min(float(tokens.min()), w.batch_size * w.output_tokens),
        max(float(tokens.max()), w.batch_size * w.output_tokens),
    )
    return out.with_columns(
        (pl.lit(lo) / t).alias("output_tokens_per_s_lo"), (pl.lit(hi) / t).alias("output_tokens_per_s_hi")
    )


def calibrated_ranges(model_df: pl.DataFrame, published: pl.DataFrame | None) -> dict[str, tuple[int, int]]:
    """Per curve, the contexts the fit has published points for (first to last): outside them, or for a curve
    with no published point, the curve is an extrapolation."""
    m = matched_published(model_df, published)
    return {
        cfg: (int(g["context_tokens"].min()), int(g["context_tokens"].max()))
        for (cfg,), g in m.group_by(["config"], maintain_order=True)
    }


def _segments(d: pl.DataFrame, rng: tuple[int, int] | None) -> list[tuple[pl.DataFrame, bool]]:
    """A curve cut into (part, calibrated?) pieces that share their end points, so the line stays continuous."""
    if rng is None:
        return [(d, False)]
    lo, hi = rng
    c = pl.col("context_tokens")
    parts = [(d.filter(c <= lo), False), (d.filter((c >= lo) & (c <= hi)), True), (d.filter(c >= hi), False)]
    return [(part, cal) for part, cal in parts if part.height >= 2 or (cal and part.height)]


def _draw_model_curves(ax, model_df: pl.DataFrame, y: str, ranges: dict, banded: bool) -> list:
    """Each configuration's modelled curve (solid where calibrated, dashed where extrapolated; its band over the
    assumption sets under it when ``banded``), then an x where it does not fit; its legend handles, one a curve."""
    handles = []
    for cfg in model_df["config"].unique(maintain_order=True).to_list():
        d = model_df.filter(pl.col("config") == cfg).sort("context_tokens")
        color = ENGINE_COLORS.get(d["engine"][0], "#777777")
        if banded:
            ax.fill_between(d["context_tokens"], d[f"{y}_lo"], d[f"{y}_hi"], color=color, alpha=0.18, lw=0, zorder=1)
        for part, cal in _segments(d, ranges.get(cfg)):
            ax.plot(part["context_tokens"], part[y], color=color, lw=2, ls="-" if cal else "--")
        handles.append(
            Line2D([], [], color=color, lw=2, label=f"{engine_label(d['engine'][0])} {cfg.split(' ', 1)[1]}")
        )
    for cfg, g in model_df.filter(~pl.col("fits")).group_by("config", maintain_order=True):
        ax.plot(
            g["context_tokens"],
            g[y],
            ls="none",
            marker="x",
            ms=7,
            mew=2,
            color=ENGINE_COLORS.get(g["engine"][0], "#777777"),
        )
    return handles


def _draw_published(ax, pub: pl.DataFrame, y: str) -> None:
    """The published points as open circles in their engine's colour, each with its bar over the assumption sets
    where ``pub`` has ``<y>_lo`` and ``<y>_hi``."""
    for cfg, g in pub.group_by("config", maintain_order=True):
        eng = g["engine"][0]
        ax.scatter(
            g["context_tokens"],
            g[y],
            s=70,
            marker="o",
            facecolor="white",
            linewidths=2,
            zorder=5,
            edgecolor=ENGINE_COLORS.get(eng, "#777777"),
        )
        if f"{y}_lo" in g.columns and f"{y}_hi" in g.columns:
            ax.vlines(
                g["context_tokens"],
                g[f"{y}_lo"],
                g[f"{y}_hi"],
                color=ENGINE_COLORS.get(eng, "#777777"),
                lw=1.5,
                zorder=4,
            )


def _curve_key(
    model_df: pl.DataFrame,
    ranges: dict,
    published: bool,
    unfit: bool,
    banded: bool,
    band: tuple[float, float] | None,
) -> list:
    """The legend's entries for what the marks mean (grey, not an engine's): calibrated and extrapolated lines,
    published points, points that do not fit, the assumption band, the crossover range."""
    grey = "#666666"
    handles = []
    if ranges:
        spans = sorted(set(ranges.values()))
        where = ", ".join(f"{tokens_label(lo)}–{tokens_label(hi)}" for lo, hi in spans)
        handles.append(Line2D([], [], color=grey, lw=2, label=f"modelled, calibrated contexts ({where})"))
    handles.append(
        Line2D(
            [],
            [],
            color=grey,
            lw=2,
            ls="--",
            label="modelled, extrapolated" if ranges else "modelled, extrapolated (no published point)",
        )
    )
    if published:
        handles.append(Line2D([], [], ls="none", marker="o", ms=8, mfc="white", mec=grey, mew=2, label="published"))
    if unfit:
        handles.append(Line2D([], [], ls="none", marker="x", ms=7, mew=2, color=grey, label="does not fit in memory"))
    if banded:
        n = model_df["assumption_sets"].max() if "assumption_sets" in model_df.columns else None
        handles.append(
            Patch(
                color=grey,
                alpha=0.3,
                label="modelled range over the " + (f"{n} " if n else "") + "assumption sets (lowest–highest)",
            )
        )
    if band:
        handles.append(
            Patch(
                color="#bbbbbb",
                alpha=0.5,
                label=f"crossover range over unpinned assumptions (≈{k_label(band[0])}–{k_label(band[1])})",
            )
        )
    return handles


def _curve_values(model_df: pl.DataFrame, pub: pl.DataFrame, y: str, banded: bool) -> list:
    """Every value the figure draws (curves, bands, published points and their bars): what the y axis must hold."""
    shown = model_df[y].to_list() + (pub[y].to_list() if pub.height and y in pub.columns else [])
    if banded:
        shown += model_df[f"{y}_lo"].to_list() + model_df[f"{y}_hi"].to_list()
    if pub.height and f"{y}_lo" in pub.columns and f"{y}_hi" in pub.columns:
        shown += pub[f"{y}_lo"].to_list() + pub[f"{y}_hi"].to_list()
    return shown


@styled
def plot_curves(
    model_df: pl.DataFrame,
    published: pl.DataFrame | None,
    y: str = "batch_time_s",
    ylabel: str = "batch time (s)",
    title: str | None = None,
    band: tuple[float, float] | None = None,
) -> Figure:
    """Modelled curves against context, one colour per engine: solid over the contexts the fit has published
    points for, dashed where the curve extrapolates (beyond those contexts, or a configuration with no published
    point at all); the published points as open circles; an x where a configuration does not fit in memory.
    The y axis is logarithmic (and says so) when the values span more than 20×. ``band``: the crossover's range
    over the assumptions the data cannot pin (:func:`kvlab.perfmodel.calibrate.crossover_range`), shaded.
    When ``model_df`` has ``<y>_lo`` and ``<y>_hi`` (:func:`curves` with ``sens``), each curve is drawn as a band
    (lowest to highest over the assumption sets) in its engine's colour around its default-assumption line; when
    ``published`` has them, each circle gets a bar over the same sets (a published throughput rests on the unstated
    batch and output length too)."""
    fig = Figure(figsize=(7.8, 4.6))
    ax = fig.subplots()
    ranges = calibrated_ranges(model_df, published)
    if band:
        ax.axvspan(band[0], band[1], color="#bbbbbb", alpha=0.35, lw=0, zorder=0)
    banded = f"{y}_lo" in model_df.columns and f"{y}_hi" in model_df.columns
    handles = _draw_model_curves(ax, model_df, y, ranges, banded)
    pub = matched_published(model_df, published)
    has_pub = bool(pub.height and y in pub.columns)
    if has_pub:
        _draw_published(ax, pub, y)
    unfit = bool(model_df.filter(~pl.col("fits")).height)
    handles += _curve_key(model_df, ranges, has_pub, unfit, banded, band)
    ax.set_xscale("log", base=2)
    lo, hi = model_df["context_tokens"].min(), model_df["context_tokens"].max()
    context_axis(ax.xaxis, lo, hi, extra=[c for r in ranges.values() for c in r])
    ax.set_xlabel("context (tokens, log scale)")
    value_axis(ax, _curve_values(model_df, pub, y, banded), ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


def crossover_table(
    gpus: Iterable[str],
    model: str,
    dcp_sizes: Iterable[int],
    w: Workload,
    p: Params,
    a: Assumptions = Assumptions(),
    tp: int = 8,
    max_tokens: int = 1 << 20,
    sens: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Context at which SGLang TP+DCP overtakes vLLM TP (no DCP), per GPU and DCP size (null: no crossing); with
    ``sens`` (a :func:`~kvlab.perfmodel.calibrate.sensitivity` table) also its lowest and highest over every
    assumption set there (``crossover_low_tokens``, ``crossover_high_tokens``; null when none crosses), and in how
    many of them it crosses at all."""
    sets = refits(sens) if sens is not None else []
    rows = []
    for g in gpus:
        base = Config.of(g, model, VLLM, tp, 1, a.default_mem_util)
        for d in dcp_sizes:
            if d <= 1:
                continue
            other = Config.of(g, model, SGLANG, tp, d, a.default_mem_util)
            x = crossover_context(base, other, w, p, a, hi_tokens=max_tokens)
            weights_fit = memory(base, 1, a).weights_bytes_per_gpu < base.gpu.memory_bytes * a.default_mem_util
            xs = [
                v
                for v in (crossover_context(base, other, w_i, p_i, a_i, hi_tokens=max_tokens) for w_i, a_i, p_i in sets)
                if v is not None
            ]
            rows.append(
                {
                    "source": "modelled",
                    "model": base.model.model,
                    "gpu": g,
                    "tp": tp,
                    "dcp": d,
                    "crossover_tokens": x,
                    "crossover_low_tokens": min(xs) if xs else None,
                    "crossover_high_tokens": max(xs) if xs else None,
                    "crosses_in": f"{len(xs)} of {len(sets)}" if sets else None,
                    "weights_fit": weights_fit,
                }
            )
    return pl.DataFrame(rows, schema={"source": pl.String, "model": pl.String, "gpu": pl.String, "tp": pl.Int64,
                                      "dcp": pl.Int64, "crossover_tokens": pl.Float64,
                                      "crossover_low_tokens": pl.Float64, "crossover_high_tokens": pl.Float64,
                                      "crosses_in": pl.String, "weights_fit": pl.Boolean})  # fmt: skip


def crossover_columns(frame: pl.DataFrame) -> list[str]:
    """The columns of ``frame`` that hold a modelled crossover in tokens (``crossover_tokens``,
    ``phys_crossover_tokens``, ``crossover_low_tokens``, ``crossover_high_tokens``)."""
    return [c for c in frame.columns if "crossover" in c and c.endswith("_tokens")]


def column_labels(values: list) -> list[str | None]:
    """One column's crossovers in one notation: :func:`kvlab.units.approx_label`'s, or whole K throughout ('869K',
    '1,003K') where it would mix K and M in the column ('869K' above '0.98M' reads as the smaller)."""
    shown = [None if v is None or v != v else approx_label(v) for v in values]
    if len({label[-1] for label in shown if label}) > 1:
        return [None if v is None or v != v else f"{round(v / K):,}K" for v in values]
    return shown


def as_shown(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` as its table shows it: every modelled crossover in whole K ('173K' for 177,652 tokens, '0.98M' past
    0.9M: :func:`kvlab.units.approx_label`), the notation of every sentence that gives one, since a model whose
    crossover moves over 108K–746K with the assumptions supports no more digits (issue 39; null, no crossing, stays
    null); a KV number format in words ('packed FP8 MLA', not 'fp8_packed_mla')."""
    out = frame.with_columns(
        pl.Series(c, column_labels(frame[c].to_list()), dtype=pl.String) for c in crossover_columns(frame)
    )
    if "kv_format" in out.columns:
        out = out.with_columns(
            pl.Series("kv_format", [None if v is None else kv_format_words(v) for v in out["kv_format"].to_list()])
        )
    return out


@styled
def plot_crossover(table: pl.DataFrame) -> Figure:
    """Modelled crossover context against SGLang's DCP size, one line per GPU (colours that are not engines');
    dotted where the model's weights do not fit on the GPUs (a hypothetical); GPUs without a crossing are left
    out (the caption says which)."""
    t = table.filter(pl.col("crossover_tokens").is_not_null())
    fig = Figure(figsize=(7.8, 4.2))
    ax = fig.subplots()
    for i, g in enumerate(t["gpu"].unique(maintain_order=True).to_list()):
        d = t.filter(pl.col("gpu") == g).sort("dcp")
        fits = bool(d["weights_fit"].all())
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        ax.plot(
            d["dcp"],
            d["crossover_tokens"],
            marker="o",
            ms=7,
            ls="-" if fits else ":",
            lw=2,
            color=color,
            label=g if fits else f"{g} (weights do not fit: hypothetical)",
        )
        if "crossover_low_tokens" in d.columns:  # the range over the assumption sets the data cannot choose among
            r = d.filter(pl.col("crossover_low_tokens").is_not_null())
            if r.height:
                ax.fill_between(
                    r["dcp"], r["crossover_low_tokens"], r["crossover_high_tokens"], color=color, alpha=0.15, lw=0
                )
    if "crossover_low_tokens" in t.columns and t["crossover_low_tokens"].is_not_null().any():
        ax.add_artist(
            ax.legend(
                handles=[Patch(color="#888888", alpha=0.3, label="range over the unpinned assumptions")],
                fontsize=8,
                loc="lower left",
                bbox_to_anchor=(1.01, 0),
                borderaxespad=0,
            )
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    dcps = sorted(table["dcp"].unique().to_list())
    ax.xaxis.set_major_locator(FixedLocator(dcps))
    ax.xaxis.set_major_formatter(FixedFormatter([str(d) for d in dcps]))
    ax.xaxis.set_minor_locator(NullLocator())
    if t.height:
        lo, hi = t["crossover_tokens"].min(), t["crossover_tokens"].max()
        if "crossover_low_tokens" in t.columns and t["crossover_low_tokens"].is_not_null().any():
            lo, hi = min(lo, t["crossover_low_tokens"].min()), max(hi, t["crossover_high_tokens"].max())
        ax.set_ylim(lo / 1.4, hi * 1.4)
        context_axis(ax.yaxis, lo / 1.4, hi * 1.4)
    tp = table["tp"][0] if "tp" in table.columns and table.height else None
    model = table["model"][0] if "model" in table.columns and table.height else ""
    ax.set_xlabel(f"DCP size of {engine_label(SGLANG)}" + (f" (TP {tp})" if tp else ""))
    ax.set_ylabel("crossover context (tokens, log scale)")
    ax.set_title(
        f"modelled: context from which SGLang TP+DCP is faster than vLLM TP ({model})".replace(" ()", ""), fontsize=10
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, title="GPU", title_fontsize=8)
    fig.tight_layout()
    return fig


def memory_sets(a: Assumptions = Assumptions()) -> list[Assumptions]:
    """The assumption sets the memory picture rests on that the article does not state: the KV cache's number
    format x cached MLA width (:data:`~kvlab.perfmodel.calibrate.UNPINNED_KV_FORMATS` x
    :data:`~kvlab.perfmodel.calibrate.UNPINNED_MLA_WIDTHS`), each on top of ``a``. (Batch size, output length and
    expert reads change time, not room.)"""
    return [replace(a, kv_format=f, mla_width=wd) for f in UNPINNED_KV_FORMATS for wd in UNPINNED_MLA_WIDTHS]


#: The memory sets in words (:func:`memory_sets`).
MEMORY_AXES = "KV format BF16/FP8/packed FP8 MLA × MLA width 576/512"


def headroom_table(
    gpu: str, model: str, mem_utils: Iterable[float], dcp_sizes: Iterable[int], contexts: Iterable[int],
    a: Assumptions = Assumptions(), tp: int = 8, ranged: bool = True,
) -> pl.DataFrame:  # fmt: skip
    """KV pool, KV capacity and sequences that fit, per memory target x DCP size x context: the rows of
    :func:`kvlab.perfmodel.pools.concurrency_ceilings` (each engine's own pools; DCP 1 vLLM, DCP > 1 SGLang).

    ``fits`` is the model's memory check: false when a sequence does not fit, or when less memory is left outside
    the target than :attr:`Assumptions.outside_pool_fraction` (``outside_need_gib_per_gpu``), an assumption taken
    from the B300 article (0.95 failed there): such a row restates that assumption, it does not predict an OOM.
    With ``ranged`` (the default), ``max_concurrent_seqs_lo``/``_hi`` and ``kv_capacity_tokens_lo``/``_hi`` give
    the lowest and highest over :func:`memory_sets` (``a``'s own value inside), named in ``assumption_sets``.
    """
    # the one function every modelled ceiling comes from (report 07's too): per-engine pools
    table = concurrency_ceilings(gpu, model, mem_utils, dcp_sizes, contexts, a, tp)
    sets = memory_sets(a) if ranged else []
    if not sets:
        return table
    alt = [
        concurrency_ceilings(
            gpu,
            model,
            sorted(set(table["mem_util"])),
            sorted(set(table["dcp"])),
            sorted(set(table["context_tokens"])),
            a_i,
            tp,
        )
        for a_i in sets
    ]
    keys = ["mem_util", "dcp", "context_tokens"]
    both = pl.concat(
        [table.select(*keys, "max_concurrent_seqs", "kv_capacity_tokens")]
        + [t.select(*keys, "max_concurrent_seqs", "kv_capacity_tokens") for t in alt]
    )
    ranges = both.group_by(keys).agg(
        pl.col("max_concurrent_seqs").min().alias("max_concurrent_seqs_lo"),
        pl.col("max_concurrent_seqs").max().alias("max_concurrent_seqs_hi"),
        pl.col("kv_capacity_tokens").min().alias("kv_capacity_tokens_lo"),
        pl.col("kv_capacity_tokens").max().alias("kv_capacity_tokens_hi"),
    )
    return table.join(ranges, on=keys, how="left", maintain_order="left").with_columns(
        pl.lit(MEMORY_AXES).alias("assumption_sets")
    )


def _headroom_colour(dcp: int, dcps: list[int]) -> str:
    """A headroom series' colour: no DCP is vLLM's configuration (vLLM's colour), a single DCP size SGLang's
    (SGLang's colour), as in the modelled curves; several DCP sizes take colours that are neither an engine's nor
    a GPU's (:data:`SERIES_COLORS` from its third on: the first two are the GPUs' in the crossover figure)."""
    sglang_dcps = [d for d in dcps if d != 1]
    if dcp == 1:
        return ENGINE_COLORS[VLLM]
    if len(sglang_dcps) == 1:
        return ENGINE_COLORS[SGLANG]
    rest = SERIES_COLORS[2:]
    return rest[sglang_dcps.index(dcp) % len(rest)]


#: Line styles of the memory targets in :func:`plot_headroom`, in the targets' order.
_HEADROOM_STYLES = ["-", "--", ":", "-."]


def _draw_headroom_series(ax, grp: pl.DataFrame, u: float, d: int, utils: list, dcps: list[int]) -> None:
    """One memory target ``u`` × DCP size ``d``: its line (its range over the assumption sets shaded under it), a
    dot at each point that fits and a cross at each point the model flags."""
    grp = grp.sort("context_tokens")
    color = _headroom_colour(d, dcps)
    seqs = grp["max_concurrent_seqs"].cast(pl.Float64).clip(lower_bound=0.5)
    who = "vLLM-style, no DCP" if d == 1 else "SGLang-style"
    if "max_concurrent_seqs_lo" in grp.columns:
        ax.fill_between(
            grp["context_tokens"],
            grp["max_concurrent_seqs_lo"].cast(pl.Float64).clip(lower_bound=0.5),
            grp["max_concurrent_seqs_hi"].cast(pl.Float64).clip(lower_bound=0.5),
            color=color,
            alpha=0.12,
            lw=0,
            zorder=1,
        )
    ax.plot(
        grp["context_tokens"],
        seqs,
        color=color,
        lw=2,
        ls=_HEADROOM_STYLES[utils.index(u) % len(_HEADROOM_STYLES)],
        label=f"memory {u:g}, DCP {d} ({who})",
    )
    ok = grp["fits"].to_list()
    xs, ys = grp["context_tokens"].to_list(), seqs.to_list()
    ax.plot(
        [x for x, f in zip(xs, ok) if f], [v for v, f in zip(ys, ok) if f], ls="none", marker="o", ms=6, color=color
    )
    ax.plot(
        [x for x, f in zip(xs, ok) if not f],
        [v for v, f in zip(ys, ok) if not f],
        ls="none",
        marker="x",
        ms=8,
        mew=2,
        color=color,
    )


def _headroom_legend(ax, table: pl.DataFrame) -> list:
    """The series' own entries, then what a dot, a cross and a shaded range mean."""
    handles, _ = ax.get_legend_handles_labels()
    handles = [h for h in handles if h.get_label() and not h.get_label().startswith("_")]
    if table["fits"].any():
        handles.append(Line2D([], [], ls="none", marker="o", ms=6, color="#666666", label="fits (modelled)"))
    if not table["fits"].all():
        handles.append(
            Line2D(
                [],
                [],
                ls="none",
                marker="x",
                ms=8,
                mew=2,
                color="#666666",
                label="flagged: " + "; ".join(flag_kinds(table)),
            )
        )
    if "max_concurrent_seqs_lo" in table.columns:
        handles.append(Patch(color="#666666", alpha=0.25, label=f"range over {table['assumption_sets'][0]}"))
    return handles


def _headroom_axes(ax, table: pl.DataFrame) -> None:
    """Context on a log-2 x axis named in K; sequences on a log-2 y axis in powers of two (a '0' tick below 1 where
    no sequence fits); the title names the model and the GPUs."""
    ax.set_xscale("log", base=2)
    context_axis(
        ax.xaxis,
        table["context_tokens"].min(),
        table["context_tokens"].max(),
        extra=table["context_tokens"].unique().to_list(),
    )
    ax.set_yscale("log", base=2)
    top = max(
        1,
        int(table["max_concurrent_seqs"].max() or 1),
        int(table["max_concurrent_seqs_hi"].max() or 1) if "max_concurrent_seqs_hi" in table.columns else 1,
    )
    yt = [1 << k for k in range(0, int(np.ceil(np.log2(top))) + 1)]
    if (table["max_concurrent_seqs"] < 1).any():
        yt = [0.5] + yt
    ax.yaxis.set_major_locator(FixedLocator(yt))
    ax.yaxis.set_major_formatter(FixedFormatter(["0" if v < 1 else f"{int(v):,}" for v in yt]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("context (tokens, log scale)")
    ax.set_ylabel("concurrent sequences that fit (log scale)")
    model = table["model"][0] if "model" in table.columns and table.height else ""
    gpu = table["gpu"][0] if "gpu" in table.columns and table.height else ""
    tp = table["tp"][0] if "tp" in table.columns and table.height else None
    if model:
        ax.set_title(f"modelled: KV room for {model} on {tp}× {gpu}", fontsize=10)


@styled
def plot_headroom(table: pl.DataFrame) -> Figure:
    """Concurrent sequences that fit, by context, for each memory target (line style) and DCP size (colour: no DCP
    in vLLM's, one DCP size in SGLang's, the engines whose configurations they are; never a GPU's). A cross marks a point the model flags: either no sequence fits, or less memory is left
    outside the target than the assumed need (an assumption from the article, not a prediction of an OOM)."""
    fig = Figure(figsize=(7.8, 4.8))
    ax = fig.subplots()
    utils = sorted(table["mem_util"].unique().to_list())
    dcps = sorted(table["dcp"].unique().to_list())
    for (u, d), grp in table.sort("mem_util", "dcp").group_by(["mem_util", "dcp"], maintain_order=True):
        _draw_headroom_series(ax, grp, u, d, utils, dcps)
    handles = _headroom_legend(ax, table)
    _headroom_axes(ax, table)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def flag_kinds(head: pl.DataFrame) -> list[str]:
    """Why the memory check flags rows of a headroom table, in a reader's words (one phrase per kind)."""
    kinds = []
    for reason in head.filter(~pl.col("fits"))["reason"].unique(maintain_order=True).to_list():
        kind = (
            "weights do not fit"
            if reason.startswith("weights")
            else "not one sequence fits"
            if reason.startswith("one ")
            else "less left outside the target than the assumed need:\nan assumption, not a predicted OOM"
        )
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def headroom_as_shown(head: pl.DataFrame) -> pl.DataFrame:
    """A :func:`headroom_table` as its tables show it: each modelled KV capacity (and its range's ends) to three
    significant figures (:func:`kvlab.units.modelled_count`: 2,370,000, not 2,370,790 tokens), what a model that
    misses its held-out points by 40% supports; the sequences that fit are counts of whole sequences, kept."""
    cols = [c for c in ("kv_capacity_tokens", "kv_capacity_tokens_lo", "kv_capacity_tokens_hi") if c in head.columns]
    return head.with_columns(
        pl.Series(c, [modelled_count(v) for v in head[c].to_list()], dtype=head.schema[c]) for c in cols
    )


def headroom_summary(head: pl.DataFrame) -> pl.DataFrame:
    """The headroom table as a reader reads it: one row per memory target and DCP size (KV pool, capacity, memory
    left outside the target, whether that is under the assumed need) and one column of sequences per context; with
    the ranges of a ranged :func:`headroom_table`, each context's column is followed by its range over the
    assumption sets ('range at 200K': '11–23'), and the capacity by its range."""
    keys = ["mem_util", "dcp"]
    ranged = "max_concurrent_seqs_lo" in head.columns
    head = headroom_as_shown(head)
    base = head.group_by(keys, maintain_order=True).agg(
        pl.col(
            "kv_pool_gib_per_gpu", "kv_capacity_tokens", "outside_pool_gib_per_gpu", "outside_need_gib_per_gpu"
        ).first(),
        (pl.col("outside_pool_gib_per_gpu") < pl.col("outside_need_gib_per_gpu")).any().alias("under_assumed_need"),
    )
    if ranged:
        cap = head.group_by(keys, maintain_order=True).agg(
            pl.format(
                "{}–{}",
                pl.col("kv_capacity_tokens_lo").first().map_elements(lambda v: f"{v:,}", return_dtype=pl.String),
                pl.col("kv_capacity_tokens_hi").first().map_elements(lambda v: f"{v:,}", return_dtype=pl.String),
            ).alias("kv_capacity_range")
        )
        base = base.join(cap, on=keys, how="left").select(
            *keys,
            "kv_pool_gib_per_gpu",
            "kv_capacity_tokens",
            "kv_capacity_range",
            "outside_pool_gib_per_gpu",
            "outside_need_gib_per_gpu",
            "under_assumed_need",
        )
    seqs = head.with_columns(
        pl.col("context_tokens")
        .map_elements(lambda c: f"sequences at {tokens_label(c)}", return_dtype=pl.String)
        .alias("ctx")
    )
    ctxs = sorted(head["context_tokens"].unique().to_list())
    wide = seqs.pivot(on="ctx", index=keys, values="max_concurrent_seqs")
    order = []
    for c in ctxs:
        order.append(f"sequences at {tokens_label(c)}")
        if ranged:
            order.append(f"range at {tokens_label(c)}")
    if ranged:
        rng = seqs.with_columns(
            pl.format("{}–{}", "max_concurrent_seqs_lo", "max_concurrent_seqs_hi").alias("r"),
            pl.col("ctx").str.replace("sequences at ", "range at ", literal=True),
        )
        wide = wide.join(rng.pivot(on="ctx", index=keys, values="r"), on=keys, how="left")
    return base.join(wide.select(*keys, *order), on=keys, how="left").sort(keys)


def bound_summary(frac: pl.DataFrame) -> pl.DataFrame:
    """:func:`~kvlab.perfmodel.achieved_fraction` as a reader's table: one row per source, experiment and engine
    (runs, and the least, median and most of the model's bound they reached), not one row per run id. Measured
    rows' shares are rounded to two significant figures (each rests on one run), published rows' are not."""
    keys = ["source", "experiment", "hardware", "engine"]
    share = pl.col("batch_fraction_of_bound") * 100
    shares = ["least_of_bound_pct", "median_of_bound_pct", "most_of_bound_pct", "median_of_peak_bandwidth_pct"]
    # Which precision rule applies: each share is one run's batch time against the modelled bound. A measured
    # run is n=1, so its shares get two significant figures (as units.sig2 gives every n=1 number, and as
    # words.bound_sentence quotes them); a published row's time is the article's stated value, not an n=1
    # measurement, so it keeps the table's three significant figures.
    measured = pl.col("source") == "measured"
    return (
        frac.group_by(keys, maintain_order=True)
        .agg(
            pl.len().alias("runs"),
            share.min().alias(shares[0]),
            share.median().alias(shares[1]),
            share.max().alias(shares[2]),
            (pl.col("bandwidth_fraction_of_peak") * 100).median().alias(shares[3]),
        )
        .with_columns(pl.when(measured).then(pl.col(c).round_sig_figs(2)).otherwise(pl.col(c)).alias(c) for c in shares)
        .sort("source", "experiment", "engine", descending=[True, False, False])
    )


def _step_key(row: dict) -> tuple:
    return tuple(row.get(k) for k in GROUP)


@styled
def plot_step_fits(fits: pl.DataFrame, points: pl.DataFrame) -> Figure:
    """Measured decode step time (TPOT) against mean decode context, per engine configuration, with its line fit
    (:func:`kvlab.perfmodel.stepfit.step_fits`) on the left and the residuals on the right. Each engine's legend
    entry gives its slope in ms per 1,000 tokens with the 95% interval (or says there is none)."""
    fig = Figure(figsize=(9.6, 4.2))
    ax, rx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    per_engine = fits.group_by("engine").len() if fits.height else None
    rx.axhline(0, color="#999999", lw=1)
    handles = []
    for f in fits.iter_rows(named=True):
        key = _step_key(f)
        pts = [p for p in points.iter_rows(named=True) if _step_key(p) == key]
        pts.sort(key=lambda p: p["mean_decode_context"])
        color = ENGINE_COLORS.get(f["engine"], "#777777")
        xs = [p["mean_decode_context"] for p in pts]
        ax.plot(xs, [p["tpot_ms"] for p in pts], ls="none", marker="o", ms=7, color=color, zorder=3)
        ax.plot(
            [min(xs), max(xs)],
            [f["intercept_ms"] + f["slope_us_per_1k_tokens"] * 1e-6 * x for x in (min(xs), max(xs))],
            color=color,
            lw=1.5,
        )
        rx.plot(xs, [p["residual_ms"] for p in pts], ls="none", marker="o", ms=7, color=color)
        slope, lo, hi = (f["slope_us_per_1k_tokens"] / 1000, f["slope_ci_low"] / 1000, f["slope_ci_high"] / 1000)
        ci = (
            "no interval: two contexts"
            if not np.isfinite(lo)
            else f"95% {sig2(lo)} to {sig2(hi)}" + (", includes 0" if lo <= 0 <= hi else "")
        )
        many = per_engine is not None and per_engine.filter(pl.col("engine") == f["engine"])["len"][0] > 1
        who = engine_label(f["engine"]) + (f" ({f['experiment']}, batch {f['batch_size']})" if many else "")
        handles.append(
            Line2D(
                [], [], color=color, lw=1.5, marker="o", ms=6, label=f"{who}: {sig2(slope)} ms per 1,000 tokens ({ci})"
            )
        )
    handles.append(Line2D([], [], color="#666666", ls="none", marker="o", ms=6, label="measured (mean TPOT of a run)"))
    handles.append(Line2D([], [], color="#666666", lw=1.5, label="least-squares line"))
    ax.set_xlabel("mean context over the decode (tokens)")
    ax.set_ylabel("decode step time, TPOT (ms)")
    ax.set_title("measured: step time against context, line fit per engine", fontsize=10)
    rx.set_xlabel("mean context over the decode (tokens)")
    rx.set_ylabel("residual: measured − line (ms)")
    rx.set_title("residuals", fontsize=10)
    for a in (ax, rx):
        a.grid(alpha=0.3)
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    fig.legend(handles=handles, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0.04 + 0.045 * ((len(handles) + 1) // 2), 1, 1))
    return fig


def short_outside_pool(row: dict) -> bool:
    """Whether a headroom row (:func:`headroom_table`) leaves less memory outside the target than the model's assumed
    need there (False where either is unknown): the 0.95 flag, an assumption and not a predicted OOM."""
    left, need = row.get("outside_pool_gib_per_gpu"), row.get("outside_need_gib_per_gpu")
    return left is not None and need is not None and left < need
