"""What reports 01 (context scaling) and 02 (throughput decay) both read: mean batch times, the decay between two
contexts, whether a measured batch fits its engine's KV pool, CPU contexts named by their real token counts, the
throughput-against-context figure and the opening of a "Measured here" section.

Neither study folder imports the other; both import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

import polars as pl
from IPython.display import Markdown
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from kvlab.schema import CONFIG_KEYS, ok_batch_times, with_device_kind
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.words import measured_engines_note, no_runs_note
from kvlab.studies.section import Section
from kvlab.figures import source_panels, repeat_whiskers, repeat_span, panel_row
from kvlab.style import ENGINE_COLORS, styled
from kvlab.style import number_label as _num
from kvlab.units import nominal_tokens

# -- contexts -------------------------------------------------------------------------------------------------------


def context_name(label: str | None, tokens: int | None, sep: str = " ") -> str:
    """A context as a reader should read it: its label where the run had that many tokens ('64K'); a scaled
    (CPU) run by its real token count with the context it stands in for ('1,024 tokens (stands in for 64K)';
    ``sep`` before the bracket, a newline on an axis); a label that is a bare count by that count ('3,000 tokens')."""
    named = nominal_tokens(label or "")
    if tokens is None or not named or tokens in named:
        return f"{tokens:,} tokens" if str(label).isdigit() and tokens is not None else str(label)
    return f"{tokens:,} tokens{sep}(stands in for {label})"


def with_context_names(frame: pl.DataFrame, label: str = "context_label", tokens: str = "context_tokens"):
    """``frame`` with ``context``: :func:`context_name` of each row (what tables and sentences print)."""
    if frame.is_empty() or label not in frame.columns:
        return frame.with_columns(pl.lit(None, pl.String).alias("context"))
    names = [context_name(lab, tok) for lab, tok in zip(frame[label], frame[tokens])]
    return frame.with_columns(pl.Series("context", names, pl.String))


def span_name(r: dict) -> tuple[str, str]:
    """A decay or growth row's two contexts by :func:`context_name` (its ``context_from``/``c_from`` and
    ``context_to``/``c_to``)."""
    return context_name(r["context_from"], r.get("c_from")), context_name(r["context_to"], r.get("c_to"))


# -- frames ---------------------------------------------------------------------------------------------------------


def mean_batch_times(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean, spread (std, min, max) and count of batch time per configuration and engine (repeats folded), with
    the runs' ``device_kind`` (cpu / gpu; what the grading rules of :mod:`kvlab.claims.grading` read)."""
    keys = [*CONFIG_KEYS, "engine"]
    return (
        with_device_kind(ok_batch_times(runs))
        .group_by(keys)
        .agg(
            pl.col("batch_time_s").mean().alias("batch_time_s"),
            pl.col("batch_time_s").std().alias("batch_time_std_s"),
            pl.col("batch_time_s").min().alias("batch_time_min_s"),
            pl.col("batch_time_s").max().alias("batch_time_max_s"),
            pl.len().alias("n_runs"),
            pl.col("device_kind").drop_nulls().first(),
            pl.col("accelerator").drop_nulls().first(),
            pl.col("gpu_count").drop_nulls().first(),
            pl.col("batch_size").first(),
            pl.col("output_tokens").first(),
            pl.col("prompt_tokens").first(),
            pl.col("scale_factor").first(),
        )
        .sort([*CONFIG_KEYS, "engine"])
    )


def _pair(m: pl.DataFrame, context_from: str, context_to: str) -> pl.DataFrame:
    keys = ["source", "experiment", "hardware", "engine"]
    prompt = pl.coalesce(pl.col("prompt_tokens"), pl.col("context_tokens"))  # as analysis.throughput counts them
    lo = m.filter(pl.col("context_label") == context_from).select(
        *keys,
        pl.col("batch_time_s").alias("t_from_s"),
        pl.col("context_tokens").alias("c_from"),
        prompt.alias("p_from"),
        pl.col("n_runs").alias("n_from"),
        "device_kind",
    )
    hi = m.filter(pl.col("context_label") == context_to).select(
        *keys,
        pl.col("batch_time_s").alias("t_to_s"),
        pl.col("context_tokens").alias("c_to"),
        prompt.alias("p_to"),
        pl.col("n_runs").alias("n_to"),
    )
    return lo.join(hi, on=keys, how="inner")


def decay_factors(runs: pl.DataFrame, context_from: str = "64K", context_to: str = "200K") -> pl.DataFrame:
    """Throughput decay from ``context_from`` to ``context_to`` per engine, under each definition: a factor > 1
    means throughput fell by that factor; < 1 means it rose."""
    p = _pair(mean_batch_times(runs), context_from, context_to)
    return (
        p.with_columns(
            pl.lit(context_from).alias("context_from"),
            pl.lit(context_to).alias("context_to"),
            (pl.col("t_to_s") / pl.col("t_from_s")).alias("batch_time_ratio"),
            ((pl.col("p_from") / pl.col("t_from_s")) / (pl.col("p_to") / pl.col("t_to_s"))).alias(
                "prompt_tokens_per_s_ratio"
            ),
        )
        .drop("p_from", "p_to")
        .sort(["source", "experiment", "engine"])
    )


def measured_span(runs: pl.DataFrame, context_from: str = "64K", context_to: str = "200K") -> tuple[str, str]:
    """The two context labels a measured growth or decay is read between: ``context_from`` and ``context_to`` (the
    article's, by default) where the runs hold both; else the experiment's own shortest and longest context (of those
    every engine measured, where there are two), so a page given another experiment speaks of the contexts it holds."""
    ok = ok_batch_times(runs).select("engine", "context_label", "context_tokens")
    labels = set(ok["context_label"].drop_nulls())
    if {context_from, context_to} <= labels:
        return context_from, context_to
    per_engine = [set(g["context_label"]) for _, g in ok.group_by("engine")]
    common = set.intersection(*per_engine) if per_engine else set()
    chosen = ok.filter(pl.col("context_label").is_in(sorted(common if len(common) >= 2 else labels)))
    ordered = chosen.group_by("context_label").agg(pl.col("context_tokens").min()).sort("context_tokens")
    names = ordered["context_label"].to_list()
    return (names[0], names[-1]) if len(names) >= 2 else (context_from, context_to)


# -- does the batch fit the KV pool? --------------------------------------------------------------------------------

POOL_SCHEMA = {
    "engine": pl.String,
    "context_label": pl.String,
    "context_tokens": pl.Int64,
    "batch_size": pl.Int64,
    "batch_tokens": pl.Int64,
    "kv_pool_tokens": pl.Int64,
    "fits_at_once": pl.Int64,
    "fits": pl.Boolean,
}


def pool_fit(runs: pl.DataFrame) -> pl.DataFrame:
    """Per engine and context of measured runs: the batch's tokens (``batch_size`` × ``context_tokens``), the KV
    pool the engine reported (``kv_pool_tokens``, the smallest over the runs; null where none was recorded), how
    many requests of that context the pool holds at once (pool // context) and ``fits``: all of the batch at once
    (null where the pool is unknown). Where it is False, the last requests wait for a whole wave, so the batch time
    at that context measures the pool, not the engine's scaling with context."""
    need = {"engine", "context_label", "context_tokens", "batch_size", "kv_pool_tokens"}
    if runs.is_empty() or not need <= set(runs.columns):
        return pl.DataFrame(schema=POOL_SCHEMA)
    g = (
        ok_batch_times(runs)
        .group_by("engine", "context_label", "context_tokens")
        .agg(pl.col("batch_size").max(), pl.col("kv_pool_tokens").min())
        .with_columns((pl.col("batch_size") * pl.col("context_tokens")).alias("batch_tokens"))
        .with_columns((pl.col("kv_pool_tokens") // pl.col("context_tokens")).alias("fits_at_once"))
        .with_columns((pl.col("fits_at_once") >= pl.col("batch_size")).alias("fits"))
    )
    return g.select([pl.col(c).cast(t) for c, t in POOL_SCHEMA.items()]).sort("engine", "context_tokens")


@dataclass(frozen=True)
class PoolExcess:
    """One engine at one context where its batch did not fit its KV pool at once (a row of :func:`pool_fit`)."""

    engine: str
    context: str
    batch_size: int
    batch_tokens: int
    kv_pool_tokens: int
    fits_at_once: int


def pool_excesses(pool: pl.DataFrame) -> tuple[PoolExcess, ...]:
    """The rows of a :func:`pool_fit` frame where the batch exceeded the pool (``fits`` False), shortest first."""
    rows = pool.filter(pl.col("fits").fill_null(True).not_()).sort("context_tokens", "engine")
    return tuple(
        PoolExcess(
            r["engine"],
            context_name(r["context_label"], r["context_tokens"]),
            r["batch_size"],
            r["batch_tokens"],
            r["kv_pool_tokens"],
            r["fits_at_once"],
        )
        for r in rows.iter_rows(named=True)
    )


def pool_sentences(excesses: tuple[PoolExcess, ...]) -> str:
    """One sentence per context and batch where a batch exceeded its pool, the engines that share it together:
    'At 3,200 tokens (stands in for 200K), the KV pools of SGLang, 12,288 tokens, and vLLM, 12,101 tokens, each hold 3
    of the batch's 4 requests (12,800 tokens), so the rest wait for a wave.'"""
    groups: dict[tuple, list[PoolExcess]] = {}
    for x in excesses:
        groups.setdefault((x.context, x.batch_size, x.batch_tokens, x.fits_at_once), []).append(x)
    out = []
    for (context, size, tokens, fits), xs in groups.items():
        if len(xs) == 1:
            pools = f"{engine_label(xs[0].engine)}'s KV pool of {xs[0].kv_pool_tokens:,} tokens holds"
        else:
            each = " and ".join(f"{engine_label(x.engine)}, {x.kv_pool_tokens:,} tokens," for x in xs)
            pools = f"the KV pools of {each} each hold"
        out.append(
            f"At {context}, {pools} {fits} of the batch's {size} requests ({tokens:,} tokens), so the rest wait for "
            "a wave."
        )
    return " ".join(out)


def pool_note(excesses: tuple[PoolExcess, ...]) -> str:
    """The sentences every measured growth or speed-up at a context where a batch exceeded its pool stands beside;
    '' where every batch fitted (or no pool was recorded)."""
    if not excesses:
        return ""
    return (
        "The batch exceeded the KV pool, so the growth there is the pool's waiting, not the engine's scaling with "
        f"context. {pool_sentences(excesses)}"
    )


def pool_recorded(pool: pl.DataFrame) -> bool:
    """Whether any measured run recorded its KV pool (runs stored before kvlab read it have none)."""
    return not pool.is_empty() and pool["fits"].null_count() < pool.height


#: Said once in a measured section whose runs recorded no KV pool.
POOL_UNKNOWN = "These runs recorded no KV pool size, so whether each batch fitted the pool at once is unknown."


def engine_excesses(excesses: tuple[PoolExcess, ...], engine: str) -> tuple[PoolExcess, ...]:
    """The contexts where ``engine``'s batch exceeded its pool."""
    return tuple(x for x in excesses if x.engine == engine)


# -- the figure both reports draw -----------------------------------------------------------------------------------


def _ticks(part: pl.DataFrame):
    ticks = part.select("context_tokens", "context_label").unique().sort("context_tokens")
    return ticks["context_tokens"].to_list(), [context_name(lab, c, "\n") for c, lab in ticks.iter_rows()]


def _engines(part: pl.DataFrame) -> list[str]:
    present = part["engine"].unique(maintain_order=True).to_list()
    return [e for e in ENGINE_COLORS if e in present] + [e for e in present if e not in ENGINE_COLORS]


@styled
def throughput_vs_context(
    tp: pl.DataFrame, y: str = "batches_per_s", ylabel: str | None = None, relative: bool = False
) -> Figure:
    """Throughput against context per engine (log-log), one panel per source; with ``relative`` each engine's
    ``{y}_rel`` beside it (its own value at the reference context = 1: a within-engine change, lines that start
    together and never cross). A scaled (CPU) context is labelled by its real tokens (:func:`context_name`)."""
    col = f"{y}_rel"
    keep = pl.col(y).is_not_null() & (pl.col(col).is_not_null() if relative else True)
    panels = source_panels(tp.filter(keep).sort("context_tokens"))
    fig, axes = panel_row(len(panels) * (2 if relative else 1), width=5.5 if not relative else 4.8)
    for i, (title, part) in enumerate(panels):
        if relative:
            _absolute_axis(axes[2 * i], f"{title}\nabsolute", part, y, ylabel)
            _relative_axis(axes[2 * i + 1], f"{title}\nrelative, each engine its own", part, y, ylabel)
        else:
            _absolute_axis(axes[i], title, part, y, ylabel)
    fig.tight_layout()
    return fig


def _x_axis(ax, part: pl.DataFrame, spread: bool) -> None:
    contexts, labels = _ticks(part)
    ax.set_xscale("log", base=2)
    ax.set_xticks(contexts, labels, minor=False)
    ax.tick_params(axis="x", labelrotation=30 if len(contexts) > 3 else 0)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("context (log scale)" + ("  (whiskers: least to most of the repeats)" if spread else ""))


def _absolute_axis(ax, title: str, part: pl.DataFrame, y: str, ylabel: str | None) -> None:
    spread = False
    for i, e in enumerate(_engines(part)):
        g = part.filter(pl.col("engine") == e)
        color = ENGINE_COLORS.get(e)
        ax.plot(g["context_tokens"], g[y], marker="o", color=color, label=engine_label(e))
        if (span := repeat_span(g, y)) is not None and "n_runs" in g.columns:
            spread |= repeat_whiskers(
                ax, g["context_tokens"].to_list(), g[y].to_list(), *span, g["n_runs"].to_list(), color or "#777777"
            )
        for c, v in zip(g["context_tokens"], g[y]):  # 1st engine above, 2nd below
            ax.annotate(
                _num(v),
                (c, v),
                textcoords="offset points",
                xytext=(4, 4 if i % 2 == 0 else -12),
                fontsize=8,
                color=color,
            )
    ax.set_yscale("log")
    _x_axis(ax, part, spread)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _num(v)))
    lo, hi = ax.get_ylim()
    few = hi / lo < 10  # less than a decade: label every minor tick, else only 2s and 5s
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _, few=few: _num(v) if few or f"{v:e}"[0] in "25" else ""))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set(title=title, ylabel=ylabel or y)
    ax.title.set_fontsize(10)
    ax.legend()


def _relative_axis(ax, title: str, part: pl.DataFrame, y: str, ylabel: str | None) -> None:
    col = f"{y}_rel"
    spread = False
    for i, e in enumerate(_engines(part)):
        g = part.filter(pl.col("engine") == e).sort("context_tokens")
        color = ENGINE_COLORS.get(e, "#777777")
        ax.plot(g["context_tokens"], g[col], marker="o", color=color, label=engine_label(e))
        if (span := repeat_span(g, col, base=y)) is not None and "n_runs" in g.columns:
            spread |= repeat_whiskers(
                ax, g["context_tokens"].to_list(), g[col].to_list(), *span, g["n_runs"].to_list(), color
            )
        for c, v in zip(g["context_tokens"], g[col]):
            if v != 1.0:  # the reference point, where every line starts: the line at 1 says it
                ax.annotate(
                    f"{v:.2f}", (c, v), textcoords="offset points", xytext=(4, 4 if i % 2 == 0 else -12), fontsize=8
                )
    ax.axhline(1, color="#222222", lw=0.9)
    _x_axis(ax, part, spread)
    ax.set_ylim(0, max(1.0, part[col].max() or 1.0) * 1.15)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    refs = part.select("reference_context", "reference_tokens").unique()
    ref = (
        context_name(refs["reference_context"][0], refs["reference_tokens"][0])
        if refs.height == 1
        else "each engine's shortest context"
    )
    ax.set(title=title, ylabel=f"{ylabel or y}\nrelative to {ref} = 1 (each engine its own)")
    ax.title.set_fontsize(10)
    ax.yaxis.label.set_fontsize(10)
    ax.legend()


# -- a "Measured here" section's first lines ------------------------------------------------------------------------


def measured_opening(measured: pl.DataFrame | None, experiment: str, wb, out: Section) -> bool:
    """A "Measured here" section's first line: the note naming the engines measured, and True; or, without runs of
    the report's measured experiment, the note saying how to make them, and False."""
    if measured is None or measured.is_empty():
        out.add(Markdown(no_runs_note(f"runs of `{experiment}`", wb.data, "make report")))
        return False
    out.add(Markdown(measured_engines_note(measured.to_dicts())))
    return True


#: Plausible definitions of a "throughput decay" between two contexts, each as a function of
#: (batch time, context tokens) at the two ends. Documents rarely say which one they mean.
DECAY_DEFINITIONS: dict[str, str] = {
    "batch_time_ratio": "T(to) / T(from): fall of requests/s, and of output tokens/s at a fixed output length",
    "prompt_tokens_per_s_ratio": "(C(from)/T(from)) / (C(to)/T(to)): fall of prompt (context) tokens/s",
}

#: Plausible definitions of "X is N times faster" at one context.
SPEED_DEFINITIONS: dict[str, str] = {
    "time_ratio": "T(slower) / T(faster), equal to the ratio of throughputs",
    "percent_less_time": "1 + (T(slower) - T(faster)) / T(slower): 'N× faster' read as '(N-1)·100% less time'",
}

#: Claim kinds a published table can imply, with the definitions each is checked under.
CLAIM_DEFINITIONS: dict[str, dict[str, str]] = {
    "relative_speed": SPEED_DEFINITIONS,
    "throughput_decay": DECAY_DEFINITIONS,
}


def relative_speed(runs: pl.DataFrame, engine_a: str = VLLM, engine_b: str = SGLANG) -> pl.DataFrame:
    """Per configuration that holds both engines: ``engine`` (= ``engine_a``) and its ``batch_time_s``,
    ``other_engine`` (= ``engine_b``) and its ``other_batch_time_s``, which is ``faster``, and by how much.

    ``speedup`` = T(slower) / T(faster) >= 1, the ratio the documents quote. Each side keeps its repeats'
    ``batch_time_min_s`` / ``batch_time_max_s``, ``n_runs`` and ``device_kind`` (``other_*`` for ``engine_b``).
    """
    m = mean_batch_times(runs)
    side = ("batch_time_min_s", "batch_time_max_s", "n_runs", "device_kind")
    a = m.filter(pl.col("engine") == engine_a).select(*CONFIG_KEYS, "engine", "batch_time_s", *side)
    on = [k for k in CONFIG_KEYS if k != "context_label"]  # contexts joined on tokens; the label is only shown
    b = m.filter(pl.col("engine") == engine_b).select(
        *on,
        pl.col("engine").alias("other_engine"),
        pl.col("batch_time_s").alias("other_batch_time_s"),
        *[pl.col(c).alias(f"other_{c}") for c in side],
    )
    ta, tb = pl.col("batch_time_s"), pl.col("other_batch_time_s")
    return (
        a.join(b, on=on, how="inner")
        .with_columns(
            pl.when(ta <= tb).then(pl.lit(engine_a)).otherwise(pl.lit(engine_b)).alias("faster"),
            (pl.max_horizontal(ta, tb) / pl.min_horizontal(ta, tb)).alias("speedup"),
        )
        .sort(["source", "experiment", "context_tokens"])
    )


def throughput(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean batch times with throughput under explicit definitions.

    - ``batches_per_s`` = 1 / T: always defined, proportional to requests/s at a fixed batch size.
    - ``requests_per_s`` = batch_size / T (null when the batch size is unknown).
    - ``output_tokens_per_s`` = batch_size × output_tokens / T (null when either is unknown).
    - ``prompt_tokens_per_s`` = batch_size × prompt_tokens / T (null when batch size unknown). Context is
      prompt + output (:class:`kvlab.perfmodel.Workload`); a row that states its ``prompt_tokens`` (every measured
      run) uses them; a published row gives only its context, so its context stands in for the prompt there — an
      overcount by its unstated output length (1,024 of 65,536 tokens under the model's assumed workload, 1.6%).
    """
    m = mean_batch_times(runs)
    t = pl.col("batch_time_s")
    prompt = pl.coalesce(pl.col("prompt_tokens"), pl.col("context_tokens"))
    return m.with_columns(
        (1.0 / t).alias("batches_per_s"),
        (pl.col("batch_size") / t).alias("requests_per_s"),
        (pl.col("batch_size") * pl.col("output_tokens") / t).alias("output_tokens_per_s"),
        (pl.col("batch_size") * prompt / t).alias("prompt_tokens_per_s"),
    )


@dataclass(frozen=True)
class Crossover:
    """Where two engines' batch times meet, with the assumption that locates it."""

    context_tokens: float | None
    faster_below: str | None
    faster_above: str | None
    method: str
    assumption: str
    note: str
    #: The fewest runs behind any point compared (either engine at any context); None where the frame does not say.
    n_runs: int | None = None

    @property
    def context_k(self) -> float | None:
        return None if self.context_tokens is None else self.context_tokens / 1024


def crossover(
    runs: pl.DataFrame,
    engine_a: str = VLLM,
    engine_b: str = SGLANG,
    method: str = "linear",
) -> Crossover:
    """Estimate the context where ``engine_a`` and ``engine_b`` take equal batch time.

    ``runs`` must hold one source/experiment/hardware. ``method``:
    - ``"linear"``: batch time is linear in context between adjacent measured contexts;
    - ``"power"``: batch time follows T = a·C^k between adjacent contexts (straight in log-log).
    The estimate only interpolates: outside the measured range it says so and returns ``None``.
    """
    if method not in ("linear", "power"):
        raise ValueError(f"method must be 'linear' or 'power', not {method!r}")
    assumption = {
        "linear": "batch time grows linearly with context between adjacent measured contexts",
        "power": "batch time follows a power law of context (straight line in log-log) between adjacent measured contexts",
    }[method]
    groups = runs.select("source", "experiment", "hardware").unique()
    if groups.height > 1:
        raise ValueError(f"crossover needs one source/experiment/hardware, got {groups.height}: {groups.rows()}")
    rel = relative_speed(runs, engine_a, engine_b).sort("context_tokens")
    ns = [v for c in ("n_runs", "other_n_runs") for v in rel[c].to_list() if v is not None]
    n = min(ns) if ns else None
    if rel.height < 2:
        return Crossover(None, None, None, method, assumption, "fewer than two contexts hold both engines", n)
    c = rel["context_tokens"].to_list()
    d = [x - y for x, y in zip(rel["batch_time_s"], rel["other_batch_time_s"])]  # <0: engine_a faster
    fa = lambda diff: engine_a if diff < 0 else engine_b  # noqa: E731
    for i in range(len(c) - 1):
        if d[i] == 0:
            return Crossover(float(c[i]), None, None, method, assumption, "equal batch times at a measured context", n)
        if d[i] * d[i + 1] < 0:
            if method == "linear":
                x = c[i] + (c[i + 1] - c[i]) * d[i] / (d[i] - d[i + 1])
            else:
                ta = [math.log(v) for v in rel["batch_time_s"][i : i + 2]]
                tb = [math.log(v) for v in rel["other_batch_time_s"][i : i + 2]]
                lc = [math.log(v) for v in c[i : i + 2]]
                ka, kb = (ta[1] - ta[0]) / (lc[1] - lc[0]), (tb[1] - tb[0]) / (lc[1] - lc[0])
                x = math.exp(lc[0] + (tb[0] - ta[0]) / (ka - kb))
            return Crossover(
                float(x),
                fa(d[i]),
                fa(d[i + 1]),
                method,
                assumption,
                f"between the measured contexts {c[i]:,} and {c[i + 1]:,} tokens",
                n,
            )
    return Crossover(
        None,
        fa(d[0]),
        fa(d[0]),
        method,
        assumption,
        f"{engine_label(fa(d[0]))} is faster at every measured context ({c[0]:,}–{c[-1]:,} tokens): no crossover "
        "inside the range",
        n,
    )


def stated_tolerance(value: float, precision: float | None = None) -> float:
    """Half the precision the document wrote the value to (the claims table's ``stated_precision``: 0.1 → 0.05,
    0.01 → 0.005); without one (a hand-built claim), half a unit of the value's last digit (1.5 → 0.05,
    3.29 → 0.005)."""
    if precision:
        return 0.5 * precision
    text = repr(float(value)).rstrip("0")
    decimals = len(text.split(".")[1]) if "." in text and not text.endswith(".") else 0
    return 0.5 * 10 ** (-decimals)


def consistency(runs: pl.DataFrame, claims: pl.DataFrame) -> pl.DataFrame:
    """Check each stated ratio in ``claims`` against what the same document's table implies.

    One row per (claim, definition): the implied value, the stated one, and ``consistent`` when
    they agree to the precision the document wrote (half a unit of its last digit).
    """
    rows = []
    # Only ratios a published table can imply; other kinds (e.g. engine_choice) are checked by their own studies.
    numeric = claims.filter(pl.col("stated_value").is_not_null() & pl.col("kind").is_in(list(CLAIM_DEFINITIONS)))
    for claim in numeric.iter_rows(named=True):
        table = runs.filter((pl.col("experiment") == claim["experiment"]) & (pl.col("source") == "published"))
        implied: dict[str, float] = {}
        if claim["kind"] == "relative_speed":
            rel = relative_speed(table).filter(pl.col("context_label") == claim["context_from"])
            if rel.height == 1:
                r = rel.row(0, named=True)
                slow, fast = sorted((r["batch_time_s"], r["other_batch_time_s"]), reverse=True)
                sign = 1.0 if r["faster"] == claim["engine"] else -1.0  # a claim naming the slower engine fails
                implied = {
                    "time_ratio": sign * slow / fast,
                    "percent_less_time": sign * (1 + (slow - fast) / slow),
                }
        elif claim["kind"] == "throughput_decay":
            dec = decay_factors(table, claim["context_from"], claim["context_to"]).filter(
                pl.col("engine") == claim["engine"]
            )
            if dec.height == 1:
                implied = {k: dec[k][0] for k in DECAY_DEFINITIONS}
        tol = stated_tolerance(claim["stated_value"], claim.get("stated_precision"))
        for name, text in CLAIM_DEFINITIONS[claim["kind"]].items():
            value = implied.get(name)
            rows.append(
                {
                    "claim_id": claim["claim_id"],
                    "kind": claim["kind"],
                    "engine": claim["engine"],
                    "statement": claim["statement"],
                    "stated_value": claim["stated_value"],
                    "definition": name,
                    "definition_text": text,
                    "implied_value": value,
                    "tolerance": tol,
                    "consistent": None if value is None else abs(value - claim["stated_value"]) <= tol + 1e-12,
                }
            )
    schema = {
        "claim_id": pl.String,
        "kind": pl.String,
        "engine": pl.String,
        "statement": pl.String,
        "stated_value": pl.Float64,
        "definition": pl.String,
        "definition_text": pl.String,
        "implied_value": pl.Float64,
        "tolerance": pl.Float64,
        "consistent": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)
