"""Figures as the reports show them: numbered, captioned, alt text, data beside them, scaled contexts named."""

import base64
import re

import polars as pl
import pytest
from matplotlib.figure import Figure
from prefix_frames import conc_runs, sharing_runs
from kvlab.studies.capacity import figures as capacity_figures
from kvlab.studies.context_scaling import figures as context_scaling_figures
from kvlab.studies.engine_choice import figures as engine_choice_figures
from kvlab.studies.engine_choice import frames as engine_choice_frames
from kvlab import figures
from kvlab.studies import measured_frames
from kvlab.studies.prefix_sharing import figures as prefix_sharing_figures
from kvlab.studies.prefix_sharing import frames as prefix_sharing_frames
from kvlab.studies import sharing_figures
from kvlab.studies import sharing_frames
from kvlab import style
from kvlab.studies.throughput_decay import figures as throughput_decay_figures
from kvlab.studies.throughput_decay import frames as throughput_decay_frames


def _fig():
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([1, 2], [1, 2], label="vLLM")
    ax.set(title="measured: x", xlabel="context", ylabel="batch time (s)")
    ax.legend()
    return fig


def test_show_numbers_figures_and_needs_a_caption(tmp_path):
    from kvlab.workbook import Workbook

    wb = Workbook(tmp_path)
    with pytest.raises(ValueError, match="caption"):
        wb.show(_fig(), "  ")
    a, b = wb.show(_fig(), "first."), wb.show(_fig(), "second.")
    assert (a.number, b.number) == (1, 2)
    assert Workbook(tmp_path).show(_fig(), "another notebook's first.").number == 1  # no count shared
    html = b._repr_html_()
    assert "<b>Figure 2.</b> second." in html
    assert "<b>Figure" not in figures.show(_fig(), "unnumbered.")._repr_html_()
    assert 'alt="measured: x (y: batch time (s), x: context); series: vLLM"' in html


def test_show_draws_at_twice_the_shown_density_and_links_its_data():
    view = figures.show(
        _fig(), "**bold** claim.", data=pl.DataFrame({"a": [1], "b": [2.5]}), numbers=figures.FigureNumbers()
    )
    html = view._repr_html_()
    png_width = int.from_bytes(view.png()[16:20], "big")
    shown = int(re.search(r"width: (\d+)px; max-width", html).group(1))
    assert shown == png_width // 2
    csv = re.search(r'download="figure\d+\.csv" href="data:text/csv;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(csv).decode() == "a,b\n1,2.5\n" and "<b>bold</b> claim." in html


def test_batch_time_bars_show_spread_only_where_there_are_repeats():
    base = {
        "source": ["measured"] * 2,
        "experiment": ["e"] * 2,
        "hardware": ["CPU"] * 2,
        "context_label": ["64K"] * 2,
        "context_tokens": [1024] * 2,
        "engine": ["vllm", "sglang-jax"],
        "batch_time_s": [1.0, 2.0],
        "scale_factor": [64.0] * 2,
    }
    one = pl.DataFrame({**base, "batch_time_min_s": [1.0, 2.0], "batch_time_max_s": [1.0, 2.0], "n_runs": [1, 1]})
    three = pl.DataFrame({**base, "batch_time_min_s": [0.9, 1.5], "batch_time_max_s": [1.2, 2.1], "n_runs": [3, 3]})
    ax1, ax3 = (
        context_scaling_figures.batch_time_bars(one).axes[0],
        context_scaling_figures.batch_time_bars(three).axes[0],
    )
    assert [t.get_text() for t in ax1.get_xticklabels()] == ["1,024 tokens\n(stands in for 64K)"]
    assert "whiskers" not in ax1.get_xlabel() and "least to most of the repeats" in ax3.get_xlabel()
    # each whisker spans the least to the most of its repeats, around the mean
    spans = sorted(
        (round(float(seg[0][1]), 3), round(float(seg[1][1]), 3))
        for c in ax3.containers
        if type(c).__name__ == "ErrorbarContainer"
        for seg in c.lines[2][0].get_segments()
    )
    assert spans == [(0.9, 1.2), (1.5, 2.1)]
    assert ax3.get_yscale() == "linear" and len(ax3.patches) == 2  # 2× apart: bars from 0


def test_no_bars_on_a_log_axis():
    """Engines more than 20× apart get a log axis, and on it points, never bars."""
    wide = pl.DataFrame(
        {
            "source": "measured",
            "experiment": "e",
            "hardware": "CPU",
            "context_label": ["64K", "64K", "200K", "200K"],
            "context_tokens": [1024, 1024, 3200, 3200],
            "engine": ["vllm", "sglang-jax"] * 2,
            "batch_time_s": [1.0, 30.0, 2.0, 60.0],
            "scale_factor": 64.0,
            "n_runs": 1,
        }
    )
    ax = context_scaling_figures.batch_time_bars(wide).axes[0]
    assert ax.get_yscale() == "log" and "(log scale)" in ax.get_ylabel()
    assert not [p for p in ax.patches if type(p).__name__ == "Rectangle"]
    assert sorted(y for line in ax.get_lines() for y in line.get_ydata()) == [1.0, 2.0, 30.0, 60.0]
    # the measured prefix and concurrency figures: engines 20× apart on the fixed frames, still no bar on a log axis
    slow = sharing_frames.prefix_sharing(
        sharing_runs().with_columns(
            pl.when(pl.col("engine") == "vllm")
            .then(pl.col("batch_time_s") * 40)
            .otherwise(pl.col("batch_time_s"))
            .alias("batch_time_s")
        )
    )
    for fig in (
        sharing_frames.prefix_sharing_figure(slow),
        engine_choice_figures.concurrency_figure(engine_choice_frames.concurrency_study(conc_runs())),
    ):
        logs = [a for a in fig.axes if a.get_yscale() == "log"]
        assert all(not [p for p in a.patches if type(p).__name__ == "Rectangle"] for a in logs)
    assert [a.get_yscale() for a in sharing_frames.prefix_sharing_figure(slow).axes] == ["linear", "linear", "log"]


def test_throughput_relative_to_a_context_says_which_on_its_axis():
    tp = pl.DataFrame(
        {
            "source": "published",
            "experiment": "a",
            "hardware": "B300 (8 GPUs)",
            "engine": ["vllm", "vllm", "sglang", "sglang"],
            "context_label": ["64K", "200K", "64K", "200K"],
            "context_tokens": [65536, 204800, 65536, 204800],
            "batches_per_s": [0.01, 0.0034, 0.008, 0.0052],
        }
    )
    fig = measured_frames.throughput_vs_context(
        throughput_decay_frames.relative_to_context(tp, "batches_per_s", "64K"),
        "batches_per_s",
        "batches per second",
        relative=True,
    )
    # issue 39: the absolute throughput (left, log axis; its lines cross) beside the relative one (right)
    absolute, ax = fig.axes
    assert absolute.get_yscale() == "log" and absolute.get_ylabel() == "batches per second"
    assert {
        line.get_label(): [float(v) for v in line.get_ydata()]
        for line in absolute.get_lines()
        if not line.get_label().startswith("_")
    } == {"vLLM": [0.01, 0.0034], "SGLang": [0.008, 0.0052]}
    assert ax.get_ylabel() == "batches per second\nrelative to 64K = 1 (each engine its own)"
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    drawn = {
        line.get_label(): [round(float(v), 3) for v in line.get_ydata()]
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }
    assert drawn == {"vLLM": [1.0, 0.34], "SGLang": [1.0, 0.65]}


def test_memory_ratio_figure_draws_each_engine_against_itself():
    from kvlab.studies.memory_utilisation.figures import memory_ratio_figure

    ratios = pl.DataFrame(
        {
            "experiment": "e",
            "hardware": "CPU",
            "engine": ["vllm", "vllm", "sglang-jax"],
            "context_tokens": [1024, 3200, 3200],
            "context_label": ["64K", "200K", "200K"],
            "mem_low": 0.92,
            "mem_high": 0.95,
            "n_runs": [3, 1, 1],
            "batch_time_ratio": [1.1, 4 / 3, 1.2],
            "batch_time_ratio_min": [0.8, 4 / 3, 1.2],
            "batch_time_ratio_max": [1.6, 4 / 3, 1.2],
            "e2e_ratio": [1.0, 1.5, None],
            "e2e_ratio_min": [0.9, 1.5, None],
            "e2e_ratio_max": [1.2, 1.5, None],
        }
    )
    fig = memory_ratio_figure(ratios)
    left, right = fig.axes
    assert (
        left.get_title() == "measured: batch time at 0.92 ÷ at 0.95" and left.get_ylabel() == "batch time, 0.92 ÷ 0.95"
    )
    assert left.get_yscale() == "linear" and left.get_ylim()[0] == 0
    points = sorted(
        round(float(y), 3) for line in left.get_lines() if line.get_marker() == "o" for y in line.get_ydata()
    )
    assert points == [1.1, 1.2, 1.333]
    whiskers = [
        seg for c in left.containers if type(c).__name__ == "ErrorbarContainer" for seg in c.lines[2][0].get_segments()
    ]
    assert [(round(float(a[1]), 3), round(float(b[1]), 3)) for a, b in whiskers] == [(0.8, 1.6)]  # vLLM 64K only
    legend = [t.get_text() for t in next(a.get_legend() for a in fig.axes if a.get_legend()).get_texts()]
    assert legend == [
        "vLLM",
        "sglang-jax (CPU)",
        "1×: the setting changes nothing",
        "whisker: least to most over the repeats",
    ]


def test_prefix_figure_with_gain_draws_each_engine_against_itself(study):
    fig = prefix_sharing_figures.prefix_ratio_figure(study["sharing"], study["gain"])
    hits, ttft, batch = fig.axes
    assert (
        ttft.get_ylabel() == "mean TTFT, cache off ÷ on" and batch.get_ylabel() == "median batch time, cache off ÷ on"
    )
    for ax in (ttft, batch):
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    gain = study["gain"].sort("engine", "shared_fraction")
    drawn = sorted(
        round(float(y), 4)
        for line in batch.get_lines()
        if len(line.get_xdata()) > 1 and line.get_color() in style.ENGINE_COLORS.values()
        for y in line.get_ydata()
    )
    assert drawn == sorted(round(v, 4) for v in gain["batch_speedup"].to_list())
    assert _legend_is_below_every_axis(fig)


def test_one_and_two_point_frames_are_tables_not_figures():
    conc = engine_choice_frames.concurrency_study(conc_runs())
    assert not figures.drawable(conc, "requests_per_s")  # two engines at one setting: two dots, a table
    assert figures.drawable(pl.concat([conc, conc.with_columns(pl.col("in_flight") * 2)]), "requests_per_s")
    assert not figures.drawable(None) and not figures.drawable(pl.DataFrame({"y": [1.0, None, 2.0]}), "y")


def test_engine_colours_mean_engines_only():
    """No series that is not an engine takes an engine's colour; the headroom's no-DCP / DCP series are vLLM's and
    SGLang's configurations, so they take those engines' colours, and never a GPU's."""
    from matplotlib.colors import to_hex

    from kvlab.perfmodel.figures import SERIES_COLORS, headroom_table, plot_headroom

    engine = set(style.ENGINE_COLORS.values())
    assert not engine & {
        *SERIES_COLORS,
        *throughput_decay_figures.DEFINITION_COLORS.values(),
        sharing_figures.THRESHOLD_COLOR,
        "#8c6bb1",
    }
    ax = plot_headroom(headroom_table("B300", "Kimi-K3", [0.92, 0.95], [1, 8], [65536, 204800])).axes[0]
    colours = {
        line.get_label(): to_hex(line.get_color()) for line in ax.get_lines() if not line.get_label().startswith("_")
    }
    assert colours == {
        "memory 0.92, DCP 1 (vLLM-style, no DCP)": style.ENGINE_COLORS["vllm"],
        "memory 0.92, DCP 8 (SGLang-style)": style.ENGINE_COLORS["sglang"],
        "memory 0.95, DCP 1 (vLLM-style, no DCP)": style.ENGINE_COLORS["vllm"],
        "memory 0.95, DCP 8 (SGLang-style)": style.ENGINE_COLORS["sglang"],
    }
    assert not set(colours.values()) & set(SERIES_COLORS[:2])  # green and purple are the GPUs' in 04


def test_claims_figure_names_every_definition_in_colours_that_are_not_engines():
    from kvlab import store
    from kvlab.studies.throughput_decay import figures, frames, words

    claims = store.load_claims().filter(pl.col("experiment") == "article_b300")
    runs = store.load_runs().filter(pl.col("source") == "published")
    check = measured_frames.consistency(runs, claims)
    names = words.claim_labels(frames.stated_ratios(check), claims.to_dicts())
    fig = figures.claims_vs_table(check, names, words.DEFINITION_NAMES)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [
        "stated by the article",
        "table implies: T(slower) ÷ T(faster)",
        "table implies: 1 + time saved ÷ T(slower)",
        "table implies: requests/s, short ÷ long context",
        "table implies: prompt tokens/s, short ÷ long context",
        "✗ hatched: does not match",
    ]
    from matplotlib.colors import to_hex

    colours = {to_hex(p.get_facecolor()) for p in ax.patches}
    assert not colours & set(style.ENGINE_COLORS.values())
    assert [t.get_text() for t in ax.get_xticklabels()][2] == "vLLM falls\n3.29×\n64K→200K"


def test_importing_figures_changes_no_matplotlib_setting_and_figures_still_get_the_theme():
    import subprocess
    import sys

    code = (
        "import matplotlib as mpl; before = dict(mpl.rcParams)\n"
        "import kvlab.figures, kvlab.perfmodel.figures, kvlab.words, kvlab.studies.context_scaling.figures\n"
        "print(sorted(k for k, v in mpl.rcParams.items() if before[k] != v))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    import matplotlib as mpl

    grid = mpl.rcParams["axes.grid"]
    fig = context_scaling_figures.batch_time_bars(
        pl.DataFrame(
            {
                "source": ["measured"] * 2,
                "experiment": ["e"] * 2,
                "hardware": ["CPU"] * 2,
                "context_label": ["64K"] * 2,
                "context_tokens": [1024] * 2,
                "engine": ["vllm", "sglang-jax"],
                "batch_time_s": [1.0, 2.0],
            }
        )
    )
    ax = fig.axes[0]
    assert ax.get_facecolor()[:3] == (1.0, 1.0, 1.0) and ax.yaxis.get_gridlines()[0].get_visible()  # whitegrid
    assert ax.title.get_fontsize() == 10 and ax.yaxis.label.get_fontsize() == 12  # notebook scale
    assert mpl.rcParams["axes.grid"] == grid  # the theme ends with the figure


# --------------------------------------------------------------------------- reports 05 and 06: legends


def _legend_is_below_every_axis(fig) -> bool:
    r = fig._get_renderer()
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    return len(legends) == 1 and legends[0].get_window_extent(r).y1 < min(a.get_window_extent(r).y0 for a in fig.axes)


def test_prefix_figures_legends_below_and_cache_settings_apart(study):
    fig = sharing_frames.prefix_sharing_figure(study["sharing"])
    assert _legend_is_below_every_axis(fig)
    legend = next(a.get_legend() for a in fig.axes if a.get_legend() is not None)
    handles = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles)}
    on, off = handles["prefix cache on: solid line, filled dot"], handles["prefix cache off: dashed line, open dot"]
    assert on.get_linestyle() != off.get_linestyle() and off.get_markerfacecolor() != on.get_markerfacecolor()
    assert {"vLLM", "sglang-jax (CPU)", "the article's threshold: 30% of the prompt shared"} <= set(handles)
    assert not [t for a in fig.axes for t in a.texts if "threshold" in t.get_text()]  # said in the legend, not on data
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0%", "20%", "50%", "90%"]
    gain = prefix_sharing_figures.caching_gain_figure(study["gain"])
    assert _legend_is_below_every_axis(gain) and gain.axes[0].get_ylim()[0] == 0
    turns = prefix_sharing_figures.multi_turn_figure(study["by_turn"], study["turn_requests"])
    assert _legend_is_below_every_axis(turns)
    for ax in turns.axes:  # whole turns only
        assert list(ax.get_xticks()) == [0, 1, 2] and [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    assert "small dots: one request each (TTFT)" in figures.alt_text(turns)
    ideal = prefix_sharing_figures.ideal_reuse_figure(
        prefix_sharing_frames.ideal_sharing(1008, 8, [0.0, 0.3, 0.9], 128), 0.3, 128
    )
    assert _legend_is_below_every_axis(ideal)


def test_concurrency_figure_legend_names_every_drawn_element():
    fig = engine_choice_figures.concurrency_figure(engine_choice_frames.concurrency_study(conc_runs()))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "vLLM",
        "sglang-jax (CPU)",
        "mean TTFT (right)",
        "p99 TTFT (right)",
        "tree threshold: ≥ 100 in flight → vLLM",
    ]
    left, right = fig.axes
    assert [t.get_text() for t in left.get_xticklabels()] == ["100", "128"]
    assert left.get_ylabel() == "completed requests/s" and left.get_ylim()[0] == 0  # 40 vs 50: linear from 0
    assert not left.get_legend() and not right.get_legend()  # one legend, under the panels


def test_throughput_figures_draw_the_spread_of_repeats():
    """A rate's whisker spans the rate at the slowest repeat to the rate at the fastest: 100 tokens over a mean of
    2 s (repeats 1.5-2.5 s) is 50 tokens/s, drawn from 40 to 66.7; relative to the short context, 0.5 from 0.4 to
    0.667. A context of one run gets no whisker."""
    tp = pl.DataFrame(
        {
            "source": "measured",
            "experiment": "e",
            "hardware": "CPU",
            "engine": "vllm",
            "context_label": ["32K", "64K"],
            "context_tokens": [1024, 2048],
            "scale_factor": 32.0,
            "batch_time_s": [1.0, 2.0],
            "batch_time_min_s": [1.0, 1.5],
            "batch_time_max_s": [1.0, 2.5],
            "n_runs": [1, 3],
            "output_tokens_per_s": [100.0, 50.0],
        }
    )

    def spans(ax):
        return [
            (round(float(a[1]), 3), round(float(b[1]), 3))
            for c in ax.containers
            if type(c).__name__ == "ErrorbarContainer"
            for a, b in c.lines[2][0].get_segments()
        ]

    ax = measured_frames.throughput_vs_context(tp, "output_tokens_per_s", "output tokens/s").axes[0]
    assert spans(ax) == [(40.0, 66.667)] and "least to most of the repeats" in ax.get_xlabel()
    rel = measured_frames.throughput_vs_context(
        throughput_decay_frames.relative_to_context(tp, "output_tokens_per_s"),
        "output_tokens_per_s",
        "output tokens/s",
        relative=True,
    ).axes[1]
    assert spans(rel) == [(0.4, 0.667)]
    assert (
        spans(measured_frames.throughput_vs_context(tp.with_columns(n_runs=pl.lit(1)), "output_tokens_per_s").axes[0])
        == []
    )


# --------------------------------------------------------------------------- report 07: the ceiling figure's ticks


def _drawn_xtick_labels(ax) -> list:
    ax.figure.canvas.draw()
    lo, hi = ax.get_xlim()
    return [lab for v, lab in zip(ax.get_xticks(), ax.get_xticklabels()) if lab.get_text() and lo <= v <= hi]


def test_capacity_ceiling_tick_labels_never_overlap_on_a_dense_ladder():
    """A dense concurrency ladder with a ceiling of 19 beside a level of 20 (07 Fig 2 at 64K, 0.95): the x axis
    labels as many loads as fit, the ladder's levels before the ceiling, and no two drawn labels overlap."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    ladder = [1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32, 40, 48, 64]
    rows = [
        dict(
            engine=e,
            tp=1,
            dcp=1,
            context_tokens=65536,
            context_label="64K",
            mem_util=0.95,
            load_level=float(v),
            kv_usage_peak=min(1.0, v / 19),
            queued=v > 19,
            concurrency_ceiling=19,
        )
        for e in ("vllm", "sglang")
        for v in ladder
    ]
    fig = capacity_figures.capacity_ceiling_figure(pl.DataFrame(rows))
    FigureCanvasAgg(fig)  # as the reports render it
    ax = fig.axes[0]
    labels = _drawn_xtick_labels(ax)
    boxes = [lab.get_window_extent() for lab in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    # matplotlib's bundled DejaVu Sans at the theme's size: the ladder's levels from the lowest up, each that fits;
    # the ceiling's 19 gives way (its dashed line and legend name it)
    assert [lab.get_text() for lab in labels] == ["1", "2", "3", "4", "6", "8", "12", "18", "28", "40", "64"]
    # a sparse ladder keeps every level; 20 gives way to 16 and the ceiling's 19 to both
    sparse = [r | {"load_level": float(v)} for r in rows[:1] for v in (1, 2, 4, 8, 16, 20, 24, 32)]
    fig = capacity_figures.capacity_ceiling_figure(pl.DataFrame(sparse))
    FigureCanvasAgg(fig)
    assert [lab.get_text() for lab in _drawn_xtick_labels(fig.axes[0])] == ["1", "2", "4", "8", "16", "24", "32"]


def test_the_pareto_panels_draw_the_front_as_the_line_share_scales_and_mark_the_slo():
    """Issue 39: per panel each configuration's line runs through its Pareto-front points only (by interactivity),
    every run is a dot, all panels share one y and x scale, and the SLO's TPOT bound (20 ms: 50 tokens/s per user)
    is a dashed vertical line."""
    rows = []
    for ctx, scale in ((1024, 1.0), (3200, 0.4)):
        for load, (user, device, front) in enumerate([(100, 300, True), (80, 500, True), (60, 450, False)], 1):
            rows.append(
                {
                    "hardware": "CPU x86_64",
                    "engine": "vllm",
                    "tp": 1,
                    "dcp": 1,
                    "mem_util": 0.92,
                    "context_tokens": ctx,
                    "context_label": "64K" if ctx == 1024 else "200K",
                    "load_level": load,
                    "load_mode": "closed",
                    "output_tokens_per_s_per_user": user * scale,
                    "output_tokens_per_s_per_device": device * scale,
                    "within_slo": load < 3,
                    "on_front": front,
                    "slo_tpot_ms": 20.0,
                }
            )
    fig = capacity_figures.capacity_pareto_figure(pl.DataFrame(rows))
    small, large = [a for a in fig.axes if a.get_lines()]
    assert small.get_ylim() == large.get_ylim() and small.get_xlim() == large.get_xlim()
    for ax, scale in ((small, 1.0), (large, 0.4)):
        front = [line for line in ax.get_lines() if line.get_label() == "vLLM TP1"]
        assert [list(front[0].get_xdata()), list(front[0].get_ydata())] == [
            [80 * scale, 100 * scale],
            [500 * scale, 300 * scale],
        ]
        assert sum(line.get_marker() == "o" and line.get_linestyle() == "None" for line in ax.get_lines()) == 3
        slo = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert len(slo) == 1 and list(slo[0].get_xdata()) == [50.0, 50.0]


def test_pareto_labels_keep_off_every_marker_and_each_other():
    """Issue 39: a load's label sits beside its point, never over another point or label of its panel. Two engines
    whose loads crowd one corner (a vLLM point where SGLang's first label would go): every label's box, as the Agg
    renderer draws it, is clear of every marker's centre and of every other label."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = []
    for engine, points in (
        ("sglang", [(150, 250), (140, 260), (118, 230)]),
        ("vllm", [(157, 262), (205, 320), (210, 322)]),
    ):
        for load, (user, device) in enumerate(points, 1):
            rows.append(
                {
                    "hardware": "CPU x86_64",
                    "engine": engine,
                    "tp": 1,
                    "dcp": 1,
                    "mem_util": 0.92,
                    "context_tokens": 3200,
                    "context_label": "200K",
                    "load_level": load,
                    "load_mode": "closed",
                    "output_tokens_per_s_per_user": float(user),
                    "output_tokens_per_s_per_device": float(device),
                    "within_slo": True,
                    "on_front": True,
                    "slo_tpot_ms": 20.0,
                }
            )
    fig = capacity_figures.capacity_pareto_figure(pl.DataFrame(rows))
    renderer = FigureCanvasAgg(fig).get_renderer()
    (ax,) = [a for a in fig.axes if a.get_lines()]
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == 6
    centres = [
        ax.transData.transform(xy)
        for line in ax.get_lines()
        if line.get_linestyle() == "None"
        for xy in zip(line.get_xdata(), line.get_ydata())
    ]
    assert len(centres) == 6
    r = 3.5 * fig.dpi / 72  # a 6-point marker's half width and its edge, in pixels
    for i, b in enumerate(boxes):
        near = [c for c in centres if b.x0 < c[0] + r and c[0] - r < b.x1 and b.y0 < c[1] + r and c[1] - r < b.y1]
        assert not near, (ax.texts[i].get_text(), b)
        assert not [o for j, o in enumerate(boxes) if j != i and b.overlaps(o)], ax.texts[i].get_text()
