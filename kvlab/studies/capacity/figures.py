"""Report 07's figures: a frame in, a matplotlib Figure out, in the house style (kvlab.style, kvlab.figures' shared
helpers). Every panel says measured (and on what) or modelled; contexts of scaled CPU runs are named by their real
tokens, the scaled context beside them; the map names a leader only where its verdict decides
(:func:`kvlab.verdicts.decides`), else it shows this host's measurement under the verdict's label."""

from __future__ import annotations

import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullLocator, PercentFormatter

from kvlab.engines import engine_label
from kvlab.perfmodel.figures import flag_kinds
from kvlab.figures import place_labels, unoverlapped_xticks, device_of
from kvlab.style import ENGINE_COLORS, number_label as _num, styled
from kvlab.studies.capacity.checks import config_label, ranged
from kvlab.studies.measured_frames import context_name
from kvlab.verdicts import Verdict, decides, undecided_label

GREY = "#555555"


def _colour(engine: str) -> str:
    return ENGINE_COLORS.get(engine, "#777777")


def _capacity_grid(frame: pl.DataFrame, width: float = 4.6, height: float = 3.6):
    """One panel per context (rows, shortest first) x memory setting (columns): (fig, {(context, mem): ax},
    contexts, settings)."""
    contexts = frame.select("context_tokens", "context_label").unique().sort("context_tokens").rows()
    mems = sorted(frame["mem_util"].unique().to_list(), key=lambda m: (m is None, m))
    fig = Figure(figsize=(width * max(len(mems), 1), height * max(len(contexts), 1)))
    axes = fig.subplots(max(len(contexts), 1), max(len(mems), 1), squeeze=False)
    grid = {(c, m): axes[i][j] for i, (c, _) in enumerate(contexts) for j, m in enumerate(mems)}
    return fig, grid, contexts, mems


def _setting(mem) -> str:
    return "memory setting –" if mem is None else f"memory setting {mem:g}"


def _title(label: str, ctx: int, mem) -> str:
    """A panel's title, on two lines: a scaled context's name ('1,024 tokens (stands in for 64K)') and its setting
    on one line ran into the next panel's title (2026-12-07)."""
    return f"measured: {context_name(label, ctx)}\n{_setting(mem)}"


# --------------------------------------------------------------------------- throughput against interactivity


def _pareto_panel(ax, part: pl.DataFrame) -> list[tuple[str, float, float, str]]:
    """One context x memory setting: each configuration's Pareto front as a line, every run a dot (filled: within
    the SLO); returns each load's label (text, x, y, colour), placed once the scales are final."""
    labels = []
    x, y = "output_tokens_per_s_per_user", "output_tokens_per_s_per_device"
    for key, g in part.group_by(["engine", "tp", "dcp"], maintain_order=True):
        colour = _colour(key[0])
        front = g.filter(pl.col("on_front")).sort(x) if "on_front" in g.columns else g.clear()
        ax.plot(front[x], front[y], color=colour, linewidth=1.6, label=config_label(*key))
        for r in g.iter_rows(named=True):
            face = colour if r["within_slo"] else "white"
            ax.plot(r[x], r[y], marker="o", markersize=6, color=colour, markerfacecolor=face, linestyle="none")
        mid = g.group_by("load_level").agg(pl.col(x, y).median()).sort("load_level")
        labels += [(f"{r['load_level']:g}", r[x], r[y], colour) for r in mid.iter_rows(named=True)]
    return labels


def _pareto_handles(curve: pl.DataFrame, slo: float | None) -> list:
    handles = [
        Line2D([], [], color=_colour(e), marker="o", label=config_label(e, t, d))
        for e, t, d in curve.select("engine", "tp", "dcp").unique().sort("engine").rows()
    ]
    handles += [
        Line2D(
            [], [], color=GREY, marker="o", linestyle="none", markerfacecolor="white", label="hollow: missed the SLO"
        ),
        Line2D([], [], color=GREY, linewidth=1.6, label="line: the Pareto front"),
    ]
    if slo:
        label = f"dashed: SLO's TPOT ≤ {slo:g} ms ({1000 / slo:g} tokens/s per user)"
        handles.append(Line2D([], [], color=GREY, linestyle="--", linewidth=1.0, label=label))
    return handles


@styled
def capacity_pareto_figure(curve: pl.DataFrame) -> Figure:
    """Measured: per context x memory setting, each configuration's load points as output tokens/s per device (y)
    against output tokens/s per user (x), each load labelled once at its median, filled dots within the SLO, the
    line each configuration's Pareto front, a dashed line at the SLO's TPOT bound where the runs share one; every
    panel has the same scales."""
    fig, grid, contexts, mems = _capacity_grid(curve)
    slos = curve["slo_tpot_ms"].drop_nulls().unique().to_list() if "slo_tpot_ms" in curve.columns else []
    slo = slos[0] if len(slos) == 1 and slos[0] else None
    slo_x = 1000 / slo if slo else None
    labels = {}
    for ctx, label in contexts:
        for mem in mems:
            ax = grid[(ctx, mem)]
            part = curve.filter((pl.col("context_tokens") == ctx) & (pl.col("mem_util") == mem))
            labels[ax] = _pareto_panel(ax, part)
            if slo_x is not None:
                ax.axvline(slo_x, color=GREY, linestyle="--", linewidth=1.0)
            ax.set(
                title=_title(label, ctx, mem), xlabel="output tokens/s per user", ylabel="output tokens/s per device"
            )
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
            ax.title.set_fontsize(10)
    axes = list(grid.values())
    top = max((a.get_ylim()[1] for a in axes), default=1)
    right = max((a.get_xlim()[1] for a in axes), default=1)
    for a in axes:  # panels compared side by side share their scales
        a.set_ylim(0, top)
        a.set_xlim(0, max(right, (slo_x or 0) * 1.05))
    handles = _pareto_handles(curve, slo)
    fig.suptitle(f"measured on {device_of(curve)}: throughput against interactivity (labels: in flight)", fontsize=11)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.09, 1, 0.96))
    for ax, wanted in labels.items():  # on the final scales, so a label's place is known in points
        place_labels(ax, wanted)
    return fig


# --------------------------------------------------------------------------- KV usage against the ceiling


def _ceiling_panel(ax, part: pl.DataFrame) -> list[float]:
    """One context x memory setting: each engine's peak KV usage per load, a cross where requests waited, its
    ceiling dashed; returns the x values to label (the loads and the ceilings)."""
    levels = part["load_level"].drop_nulls().to_list()
    for (engine,), g in part.group_by("engine", maintain_order=True):
        g = g.sort("load_level")
        colour = _colour(engine)
        seen = g.filter(pl.col("kv_usage_peak").is_not_null())
        if seen.height:
            ax.plot(
                seen["load_level"], seen["kv_usage_peak"], marker="o", color=colour, label=f"{engine_label(engine)}"
            )
        q = g.filter(pl.col("queued").fill_null(False))
        if q.height:
            ax.plot(
                q["load_level"], q["kv_usage_peak"].fill_null(0.0), marker="X", markersize=11, linestyle="none",
                color="#aa3333", label="requests waited",
            )  # fmt: skip
        ceiling = g["concurrency_ceiling"].drop_nulls().min()
        if ceiling is not None:
            label = f"{engine_label(engine)} ceiling: {ceiling}"
            ax.axvline(ceiling, color=colour, linestyle=(0, (4, 2)), linewidth=1.3, label=label)
            levels.append(float(ceiling))
    return levels


@styled
def capacity_ceiling_figure(points: pl.DataFrame) -> Figure:
    """Measured: per context x memory setting, the highest KV-pool usage each engine's telemetry sampled at each load
    (a line per engine, none where nothing was sampled), a cross where requests waited, and each engine's
    concurrency ceiling as a dashed line in its colour; the x axis labelled at the loads and ceilings that fit."""
    fig, grid, contexts, mems = _capacity_grid(points)
    ladders = {}
    for ctx, label in contexts:
        for mem in mems:
            ax = grid[(ctx, mem)]
            part = points.filter((pl.col("context_tokens") == ctx) & (pl.col("mem_util") == mem))
            levels = _ceiling_panel(ax, part)
            ax.set_xscale("log", base=2)
            ticks = sorted({v for v in levels if v and v > 0})
            ax.set_xticks(ticks, [_num(t) for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
            ladders[ax] = set(part["load_level"].drop_nulls().to_list())
            ax.set_ylim(0, 1.1)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            ax.set(title=_title(label, ctx, mem), xlabel="requests in flight (log scale)", ylabel="peak KV-pool usage")
            ax.title.set_fontsize(10)
            handles, names = ax.get_legend_handles_labels()
            keep = dict(zip(names, handles))  # one entry per label
            ax.legend(keep.values(), keep.keys(), fontsize=7, loc="upper left")
    fig.tight_layout()
    for ax, first in ladders.items():
        unoverlapped_xticks(ax, first)
    return fig


# --------------------------------------------------------------------------- telemetry over time

#: The telemetry-over-time figure's gauges: (column of frames.telemetry_over_time, y label).
_TELEMETRY_GAUGES = (
    ("kv_cache_usage", "KV-pool usage"),
    ("requests_running", "requests running"),
    ("requests_waiting", "requests waiting"),
)
#: Line styles by a load's rank in its ladder (lowest first): the engines keep their colours.
_LEVEL_STYLES = ("-", "--", ":", "-.")
_LEVEL_MARKERS = ("o", "s", "^", "D", "v")


def telemetry_settings(telemetry: pl.DataFrame) -> list[tuple[int, str, float | None]]:
    """The context x memory settings the telemetry frame holds, shortest context first: one figure each."""
    if not telemetry.height:
        return []
    rows = telemetry.select("context_tokens", "context_label", "mem_util").unique().sort("context_tokens", "mem_util")
    return rows.rows()


def _telemetry_series(ax, part: pl.DataFrame, series: str, levels: list[float]) -> None:
    for (engine, level, _rid), g in part.group_by("engine", "load_level", "run_id", maintain_order=True):
        g = g.filter(pl.col(series).is_not_null())
        if not g.height:
            continue
        rank = levels.index(level) if level in levels else 0
        n = g["samples"][0]
        kw = {
            "color": _colour(engine),
            "marker": _LEVEL_MARKERS[rank % len(_LEVEL_MARKERS)],
            "markersize": 3.5,
            "label": f"{engine_label(engine)}, {_num(level)} in flight ({n} sample{'s' if n != 1 else ''})",
        }
        style = _LEVEL_STYLES[rank % len(_LEVEL_STYLES)] if g["line"][0] else "none"
        ax.plot(g["t_s"], g[series], linestyle=style, linewidth=1.3, **kw)


@styled
def capacity_telemetry_figure(telemetry: pl.DataFrame) -> Figure:
    """Measured, one context x memory setting (``telemetry`` holds one; :func:`telemetry_settings` lists them): the
    server's KV-pool usage, requests running and requests waiting (three panels, one above the other, narrow enough
    to read on a phone) against seconds into the run, one series per load point in its engine's colour, its load
    by line style and marker, its answered sample count in the legend. A series with ``line`` false (fewer samples
    than frames.MIN_LINE_SAMPLES) is drawn as dots only, never joined into a line."""
    fig = Figure(figsize=(4.8, 7.4))
    axes = fig.subplots(len(_TELEMETRY_GAUGES), 1, squeeze=False, sharex=True)[:, 0]
    levels = sorted(telemetry["load_level"].drop_nulls().unique().to_list()) if telemetry.height else []
    for ax, (series, ylabel) in zip(axes, _TELEMETRY_GAUGES):
        _telemetry_series(ax, telemetry, series, levels)
        if series == "kv_cache_usage":
            ax.set_ylim(0, 1.05)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        else:  # counts: at least 0 to 1, so an all-zero gauge reads as zero, not as noise
            top = telemetry[series].max() if telemetry.height else None
            ax.set_ylim(0, max(1.0, (top or 0) * 1.08))
        ax.set_ylabel(ylabel, fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0].set_xlim(0, max(telemetry["t_s"].max() or 0.0, 0.5) * 1.05 if telemetry.height else 1.0)
    axes[-1].set_xlabel("seconds into the run", fontsize=9)
    if telemetry.height:
        r = telemetry.row(0, named=True)
        title = _title(r["context_label"], r["context_tokens"], r["mem_util"])
        axes[0].set_title(title, fontsize=9, loc="left")
    handles, labels = axes[0].get_legend_handles_labels()
    rows = -(-len(handles) // 2)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7.5, frameon=False, columnspacing=1.0)
    fig.tight_layout(rect=(0, 0.01 + 0.03 * rows, 1, 1))
    return fig


# --------------------------------------------------------------------------- the goodput map


def _cell_text(r: dict, decided: bool) -> tuple[str, str]:
    """A map cell's text and fill: the leader and its margin where the verdict decides; else both engines' goodput
    and their ratio (this host's measurement), on a neutral fill."""
    w = r.get("winner")
    if not w:
        return "no engine\nwithin the SLO", "#dddddd"
    if not decided:
        lo = r.get("runner_up_goodput_requests_per_s")
        sides = [(w, r["winner_goodput_requests_per_s"]), (r["runner_up"], lo)]
        text = "\n".join(f"{engine_label(e)}: {'–' if g is None else _num(g)} req/s" for e, g in sorted(sides))
        ratio = "" if r.get("margin") is None else f"\nratio {_num(r['margin'])}×"
        return f"{text}{ratio}, n={r['n']}", "#e8e8e8"
    if r.get("margin") is None:
        return f"{engine_label(w)}\nonly one within the SLO", _colour(w)
    spread = "" if r["margin_lo"] == r["margin_hi"] else f"\n({_num(r['margin_lo'])}–{_num(r['margin_hi'])}×)"
    return f"{engine_label(w)}\n{_num(r['margin'])}× goodput{spread}\nn={r['n']}", _colour(w)


@styled
def capacity_map_figure(gmap: pl.DataFrame, verdict: Verdict | None) -> Figure:
    """Measured: the capacity map, one cell per context (rows) x memory setting (columns). Where the map's verdict
    decides (:func:`kvlab.verdicts.decides`), each cell is coloured by the engine with the higher goodput at its
    highest load within the SLO, with its margin, range and n; otherwise every cell is neutral and gives both
    engines' goodput and their ratio, under the verdict's label ('not decidable on this host'): no leader."""
    decided = decides(verdict)
    contexts = gmap.select("context_tokens", "context_label").unique().sort("context_tokens").rows()
    mems = sorted(gmap["mem_util"].unique().to_list())
    fig = Figure(figsize=(2.3 * len(mems) + 1.9, 1.25 * len(contexts) + 1.4))
    ax = fig.subplots()
    for r in gmap.iter_rows(named=True):
        i, j = [c for c, _ in contexts].index(r["context_tokens"]), mems.index(r["mem_util"])
        text, colour = _cell_text(r, decided)
        ax.fill_between([j, j + 1], i, i + 1, color=colour, alpha=0.35 if decided and r.get("winner") else 1.0, lw=0)
        if r.get("winner") and r.get("winner_differs"):  # fast but wrong: the accuracy probe's difference, on the cell
            text += f"\noutput differs (probe,\nfrom token {r['winner_probe_first_diff']})"
            ax.fill_between([j, j + 1], i, i + 1, facecolor="none", hatch="//", edgecolor="#cf222e", linewidth=0)
        ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8.5)
    ax.set_xlim(0, len(mems))
    ax.set_ylim(0, len(contexts))
    ax.set_xticks([j + 0.5 for j in range(len(mems))], [f"{m:g}" for m in mems])
    ticks = [context_name(lab, c).replace(" (", "\n(") for c, lab in contexts]
    ax.set_yticks([i + 0.5 for i in range(len(contexts))], ticks)
    ax.grid(False)
    title = (
        "measured: the engine with the higher goodput within the SLO"
        if decided
        else f"measured: goodput within the SLO ({undecided_label(verdict)})"
    )
    ax.set(xlabel="memory setting", ylabel="context", title=title)
    ax.title.set_fontsize(10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- the model's ceilings


def _modelled_bars(ax, modelled: pl.DataFrame, ctxs: list[int], configs: list[tuple]) -> None:
    width = 0.8 / max(len(configs), 1)
    lowest = min(m for *_, m in configs)
    for k, (engine, tp, dcp, mem) in enumerate(configs):
        part = modelled.filter((pl.col("engine") == engine) & (pl.col("dcp") == dcp) & (pl.col("mem_util") == mem))
        for i, c in enumerate(ctxs):
            row = part.filter(pl.col("context_tokens") == c)
            if row.is_empty():
                continue
            r = row.row(0, named=True)
            x, v = i + (k - (len(configs) - 1) / 2) * width, r["concurrency_ceiling"]
            lo, hi = r.get("concurrency_ceiling_lo"), r.get("concurrency_ceiling_hi")
            bar = ax.bar(
                x, v, width, color=_colour(engine), alpha=0.55 if mem == lowest else 1.0,
                hatch="" if r["fits"] else "//", edgecolor="white",
                label=f"{config_label(engine, tp, dcp)} at {mem:g}" if i == 0 else None,
            )  # fmt: skip
            top = v
            if lo is not None and hi is not None and hi > lo:
                ax.errorbar(x, v, yerr=[[v - lo], [hi - v]], color="#333333", capsize=2, linewidth=0.9)
                top = hi
            ax.annotate(
                ranged(v, lo, hi), (x, max(top, 1)), xytext=(0, 3), textcoords="offset points", ha="center",
                va="bottom", rotation=90, fontsize=7,
            )  # fmt: skip
            del bar


@styled
def modelled_ceiling_figure(modelled: pl.DataFrame) -> Figure:
    """Modelled (kvlab's physical model, no run): the concurrency ceiling per context, a bar per engine configuration
    and memory setting (lighter: the lower setting) at the default assumptions, a whisker and its label over the
    range the KV format and MLA width give; hatched where the model's memory check flags it (an assumption, not a
    predicted OOM); log scale."""
    ctxs = sorted(modelled["context_tokens"].unique().to_list())
    configs = modelled.select("engine", "tp", "dcp", "mem_util").unique().sort("dcp", "mem_util").rows()
    fig = Figure(figsize=(8.0, 4.8))
    ax = fig.subplots()
    _modelled_bars(ax, modelled, ctxs, configs)
    ax.set_xticks(range(len(ctxs)), [f"{c // 1024}K" for c in ctxs])
    ax.set_yscale("log")
    ax.set_ylim(ax.get_ylim()[0] * 0.7, ax.get_ylim()[1] * 4)  # room for the range labels above the whiskers
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _num(v)))
    first = modelled.row(0, named=True)
    title = f"modelled: {first['model']} on {first['tp']}× {first['gpu']}, concurrency ceiling"
    ax.set(xlabel="context (tokens per request)", ylabel="requests that fit at once (log scale)", title=title)
    ax.title.set_fontsize(10)
    handles = ax.get_legend_handles_labels()[0]
    if "concurrency_ceiling_lo" in modelled.columns:
        over = first.get("assumption_sets") or "the assumption sets"
        handles.append(Line2D([], [], color="#333333", marker="|", linestyle="-", label=f"range over {over}"))
    if not modelled["fits"].all():
        said = "; ".join(k.replace("\n", " ") for k in flag_kinds(modelled))
        handles.append(Patch(facecolor="white", hatch="//", edgecolor=GREY, label=f"hatched: {said}"))
    ax.legend(handles=handles, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- real traffic: the search and the trace


def _search_panel(ax, part: pl.DataFrame, engines: list[str]) -> None:
    """One memory setting: each engine's probes in the order probed (x, each engine a little apart so equal paths
    stay visible) at their level (y), filled where the level passed, a cross where it failed, a line through them."""
    for (engine,), g in part.sort("probe").group_by("engine", maintain_order=True):
        colour, dx = _colour(engine), (engines.index(engine) - (len(engines) - 1) / 2) * 0.18
        x = [p + dx for p in g["probe"].to_list()]
        ax.plot(x, g["level"], color=colour, linewidth=1.2, label=engine_label(engine))
        for xi, r in zip(x, g.iter_rows(named=True), strict=True):
            marker, face = ("o", colour) if r["passed"] else ("X", "white")
            ax.plot(xi, r["level"], marker=marker, markersize=8, color=colour, markerfacecolor=face, zorder=3)


@styled
def search_path_figure(path: pl.DataFrame) -> Figure:
    """Measured: per memory setting (columns), each engine's load search as its probes in order (x) against the
    level probed (y, log 2: the bracket doubles), filled dots for levels within the SLO, crosses for those past it."""
    mems = sorted(path["mem_util"].unique().to_list(), key=lambda m: (m is None, m))
    fig = Figure(figsize=(4.6 * max(len(mems), 1), 3.6))
    axes = fig.subplots(1, max(len(mems), 1), squeeze=False)[0]
    closed = "open" not in path["load_mode"].to_list()
    top = max(path["level"].max() or 1, 2)
    for ax, mem in zip(axes, mems, strict=False):
        _search_panel(ax, path.filter(pl.col("mem_util").eq_missing(mem)), sorted(path["engine"].unique()))
        ax.set_yscale("log", base=2)
        ax.set_ylim(0.8 * path["level"].min(), top * 1.25)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xticks(range(1, int(path["probe"].max()) + 1))
        ax.set(title=_setting(mem), xlabel="probe, in the order run", ylabel="in flight" if closed else "req/s")
        ax.title.set_fontsize(10)
    handles = [
        Line2D([], [], color=_colour(e), marker="o", label=engine_label(e)) for e in sorted(path["engine"].unique())
    ]
    handles += [
        Line2D([], [], color=GREY, marker="o", linestyle="none", label="filled: within the SLO"),
        Line2D([], [], color=GREY, marker="X", markerfacecolor="white", linestyle="none", label="cross: past it"),
    ]
    fig.suptitle(f"measured on {device_of(path)}: the load search, probe by probe", fontsize=11)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 0.94))
    return fig


@styled
def trace_shape_figure(shape: pl.DataFrame) -> Figure:
    """Published (the trace file, lengths divided by its scale factor): its arrivals over trace time, its prompt and
    output lengths sorted (each a share of the requests), and each request's reusable share of its prompt."""
    fig = Figure(figsize=(13.2, 3.6))
    arrivals, lengths, reuse = fig.subplots(1, 3)
    for (name,), g in shape.group_by("trace_file", maintain_order=True):
        n = g.height
        arrivals.step(g["arrival_s"], range(1, n + 1), where="post", color=GREY, label=name.rsplit("/", 1)[-1])
        share = [(i + 1) / n for i in range(n)]
        lengths.step(g["input_tokens"].sort(), share, where="post", color="#1f77b4", label="prompt")
        lengths.step(g["output_tokens"].sort(), share, where="post", color="#d62728", label="output")
        reuse.bar(range(1, n + 1), g["reusable_share"], color=GREY, width=0.8)
    arrivals.set(title="arrivals", xlabel="trace time (s)", ylabel="requests arrived")
    lengths.set_xscale("log")
    lengths.set(title="lengths (scaled)", xlabel="tokens", ylabel="share of requests at or below")
    lengths.yaxis.set_major_formatter(PercentFormatter(1.0))
    lengths.legend(fontsize=8, frameon=False)
    reuse.set(title="reusable share of each prompt", xlabel="request, in trace order", ylabel="reusable")
    reuse.yaxis.set_major_formatter(PercentFormatter(1.0))
    reuse.set_ylim(0, 1)
    for ax in (arrivals, lengths, reuse):
        ax.title.set_fontsize(10)
    factors = sorted({int(f) for f in shape["scale_factor"].to_list()})
    scale = f", lengths ÷ {', '.join(map(str, factors))}" if factors != [1] else ""
    fig.suptitle(f"published trace{scale}: what the replay sends", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig
