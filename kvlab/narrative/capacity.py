"""Report 07 (capacity under load): what is missing, the captions, tables and sentences of the throughput-interactivity
curves, the highest load within the SLO, the telemetry against the ceiling, the map and the modelled B300 ceilings.
The frames come from kvlab.analysis and kvlab.claims.capacity, as row dicts; every number here is read from them."""

from __future__ import annotations

from kvlab import tables
from kvlab.analysis import KV_SATURATED, NOT_PROBED, SLO_SHARE
from kvlab.claims.capacity import capacity_verdicts
from kvlab.engines import engine_label
from kvlab.units import count, measured, modelled_count, scaled_context, tokens_label

__all__ = ["capacity_verdicts"]

#: The commands that measure the capacity study on this machine (the default `make report` sweeps it: its quick
#: ladder, on the long-context study's servers; `FULL=1` the full ladder).
CAPACITY_COMMANDS = ("make report", "kvlab sweep --quick data/experiments/cpu_capacity.yaml && kvlab report")


def config_label(r: dict) -> str:
    """'vLLM TP1', 'SGLang TP8+DCP8': a row's engine configuration."""
    dcp = r.get("dcp") or 1
    return f"{engine_label(r['engine'])} TP{r.get('tp') or 1}" + (f"+DCP{dcp}" if dcp > 1 else "")


def _where(r: dict) -> str:
    return f"{scaled_context(r['context_label'], r['context_tokens'])}, memory setting {r['mem_util']:g}"


def _level(v: float | None, mode: str | None = "closed") -> str:
    if v is None:
        return "–"
    return f"{v:g} req/s" if mode == "open" else f"{v:g} in flight"


def no_capacity_runs_note(experiment: str, data_dir) -> str:
    """Said where no capacity run is stored: what is missing, where kvlab looked, and the commands that measure
    them; the modelled part needs no run."""
    return (
        f"*No measured capacity runs (`{experiment}`) under `{data_dir}/runs`. The default `make report` sweeps "
        "this experiment (its quick ladder; `FULL=1` the full one), so these data were swept without it; "
        f"measure it with `{CAPACITY_COMMANDS[0]}`, or `{CAPACITY_COMMANDS[1]}`. The measured sections below stay "
        "empty until then; the modelled B300 ceilings at the end need no run.*"
    )


def slo_note(curve: list[dict]) -> str:
    """The SLO the runs were held to (as stored per run) and what 'within the SLO' means (the hardware is said by
    :func:`kvlab.narrative.measured_engines_note` before it)."""
    slos = sorted(
        {(r["slo_ttft_ms"], r["slo_tpot_ms"]) for r in curve},
        key=lambda s: tuple(x if x is not None else -1 for x in s),
    )
    said = "; ".join(
        " and ".join(
            p
            for p in (f"TTFT ≤ {t:,.0f} ms" if t is not None else "", f"TPOT ≤ {p:,.0f} ms" if p is not None else "")
            if p
        )
        or "none stated"
        for t, p in slos
    )
    # the hardware is said once, by the measured-engines note before it
    return (
        f"The SLO is the one the experiment file states ({said}: an assumption of the file, not a "
        f"measurement). A load point is **within the SLO** when at least {SLO_SHARE:.0%} of its counted requests "
        "met both bounds (the SLO held at p90) and it was not stopped past saturation; **goodput** is those "
        "requests per second of its steady-state window."
    )


def pareto_caption(curve: list[dict]) -> str:
    """What to see in the throughput-interactivity figure: how many points and settings, how many on the front, and
    where throughput per device peaks."""
    rows = curve
    front = sum(bool(r.get("on_front")) for r in rows)
    within = sum(bool(r["within_slo"]) for r in rows)
    top = max(rows, key=lambda r: r["output_tokens_per_s_per_device"] or 0)
    settings = len({(r["context_tokens"], r["mem_util"]) for r in rows})
    return (
        f"Measured: {len(rows)} load points over {settings} context × memory settings, {within} within the SLO "
        f"(filled), {front} on their configuration's Pareto front (the line; other points are dots), the SLO's TPOT bound dashed. The most output per device: "
        f"{config_label(top)} at {_where(top)}, {measured(top['output_tokens_per_s_per_device'], 1)} tokens/s at "
        f"{measured(top['output_tokens_per_s_per_user'], 1)} tokens/s per user ({_level(top['load_level'], top['load_mode'])}"
        f"{', within the SLO' if top['within_slo'] else ', missing the SLO'}). To the right is more "
        "interactive, up is more throughput."
    )


def capacity_table(best: list[dict]):
    """Per engine x context x memory setting: the levels measured, the highest load within the SLO, its goodput (with
    its range over repeats) and the lowest load that missed it."""
    rows = []
    for r in sorted(best, key=lambda r: (r["context_tokens"], r["mem_util"] or 0, r["engine"])):
        g = r["goodput_requests_per_s"]
        spread = (
            ""
            if g is None or r["goodput_min_requests_per_s"] == r["goodput_max_requests_per_s"]
            else f" ({measured(r['goodput_min_requests_per_s'], 1)}–{measured(r['goodput_max_requests_per_s'], 1)})"
        )
        rows.append(
            {
                "configuration": config_label(r),
                "context": scaled_context(r["context_label"], r["context_tokens"]),
                "memory setting": r["mem_util"],
                "loads measured": ", ".join(f"{v:g}" for v in r["levels"]),
                "highest load within the SLO": _level(r["max_load_within_slo"], r["load_mode"])
                if r["max_load_within_slo"] is not None
                else "none",
                "goodput there (req/s)": "–" if g is None else f"{measured(g, r['repeats'])}{spread}",
                "repeats": r["repeats"],
                "lowest load past the SLO": _level(r["first_load_past_slo"], r["load_mode"]),
            }
        )
    return tables.table(rows, list(rows[0]) if rows else ["configuration"])


def capacity_sentences(best: list[dict]) -> str:
    """One line per engine x context x memory setting: the highest load within the SLO and the goodput there."""
    lines = []
    for r in sorted(best, key=lambda r: (r["context_tokens"], r["mem_util"] or 0, r["engine"])):
        head = f"{config_label(r)} at {_where(r)}"
        if r["max_load_within_slo"] is None:
            lines.append(
                f"- {head}: **no load within the SLO** (lowest measured: {_level(min(r['levels']), r['load_mode'])})."
            )
            continue
        past = (
            f"; missed it at {_level(r['first_load_past_slo'], r['load_mode'])}"
            if r["first_load_past_slo"] is not None
            else "; within it at every load measured, so its limit lies above"
        )
        lines.append(
            f"- {head}: highest load within the SLO **{_level(r['max_load_within_slo'], r['load_mode'])}**, "
            f"goodput {measured(r['goodput_requests_per_s'], r['repeats'])} req/s (n={r['repeats']}){past}."
        )
    return "\n".join(lines)


def onset_table(onset: list[dict]):
    """Per engine x context x memory setting: the ceiling, and the lowest load past it, at which requests queued, the
    KV pool saturated and the server preempted (telemetry)."""
    rows = []
    for r in sorted(onset, key=lambda r: (r["context_tokens"], r["mem_util"] or 0, r["engine"])):
        seen = r["telemetry"] == "sampled"

        def none(series: str) -> str:  # no level did, or no sample held the series (then it cannot be said)
            return "none" if seen and r.get(f"{series}_seen", True) else "not available"

        rows.append(
            {
                "configuration": config_label(r),
                "context": scaled_context(r["context_label"], r["context_tokens"]),
                "memory setting": r["mem_util"],
                "ceiling (requests)": r["concurrency_ceiling"],
                "first load past the ceiling": _level(r["first_past_ceiling"]) if r["first_past_ceiling"] else "none",
                "requests waited from": _level(r["first_queued"]) if r["first_queued"] else none("queue"),
                f"KV usage ≥ {KV_SATURATED:.0%} from": _level(r["first_kv_saturated"])
                if r["first_kv_saturated"]
                else none("kv_usage"),
                "preempted from": _level(r["first_preempted"]) if r["first_preempted"] else none("preemptions"),
                "peak KV usage": tables.percent(r["kv_usage_peak"]) if seen else "not available",
                "telemetry": r["telemetry"],
            }
        )
    return tables.table(rows, list(rows[0]) if rows else ["configuration"])


def ceiling_caption(points: list[dict], onset: list[dict]) -> str:
    """What to see in the telemetry figure: where the queue appeared, against the ceilings."""
    past = [r for r in onset if r["first_past_ceiling"] is not None]
    queued = [r for r in onset if r["first_queued"] is not None]
    sampled = sum(r["telemetry"] == "sampled" for r in points)
    parts = [
        f"Measured: the peak KV-pool usage the server reported during each load point ({sampled} of "
        f"{len(points)} points sampled), crosses where requests waited, dashed lines at each engine's "
        "concurrency ceiling (its reported KV pool ÷ tokens per request)"
    ]
    if past:
        parts.append(
            "loads past the ceiling at "
            + "; ".join(
                f"{config_label(r)} {_where(r)} (ceiling {r['concurrency_ceiling']}, "
                + (f"waited from {_level(r['first_queued'])})" if r["first_queued"] else "no queue seen)")
                for r in past
            )
        )
    else:
        parts.append("no load measured went past its ceiling")
    early = [r for r in queued if r["first_past_ceiling"] is None or r["first_queued"] < r["first_past_ceiling"]]
    if early:
        parts.append(
            "queueing at or below the ceiling (a scheduler limit, not the KV pool) at "
            + "; ".join(f"{config_label(r)} {_where(r)} from {_level(r['first_queued'])}" for r in early)
        )
    return "; ".join(parts) + "."


def telemetry_caption(series: list[dict], min_line: int) -> str:
    """What to see in the telemetry-over-time figure. ``series``: one row per drawn series (a load point's run) with
    its ``samples`` and ``line`` (report 07's "telemetry_series" frame)."""
    short = sum(not r["line"] for r in series)
    text = (
        f"Measured: the server's KV-pool usage, requests running and requests waiting over each run, seconds from "
        f"its first request, one series per load point ({len(series)} drawn; darker = more in flight), each "
        "legend entry with its sample count"
    )
    if short:
        text += (
            f"; {short} series with fewer than {min_line} samples (a run shorter than the sampling interval "
            "allows) too short to draw as a line: dots only"
        )
    return text + "."


def telemetry_note(points: list[dict]) -> str | None:
    """Which engines' runs have no telemetry, and why (never shown as 0); None when every run was sampled."""
    missing: dict[str, set[str]] = {}
    for r in points:
        if r["telemetry"] != "sampled":
            missing.setdefault(engine_label(r["engine"]), set()).add(r["telemetry"])
    if not missing:
        return None
    return (
        "*Telemetry "
        + "; ".join(f"of {e}: {', '.join(sorted(w))}" for e, w in sorted(missing.items()))
        + " — shown as not available, never as 0.*"
    )


def map_table(gmap: list[dict]):
    """The map as a table: per context x memory setting, the engine with the higher goodput within the SLO, the
    margin, its range and n."""
    rows = []
    for r in gmap:
        w = r.get("winner")
        margin = "–" if not w or r.get("margin") is None else f"{measured(r['margin'], r.get('n'))}×"
        spread = (
            "–" if not w or r.get("margin") is None else f"{measured(r['margin_lo'], 1)}–{measured(r['margin_hi'], 1)}×"
        )
        rows.append(
            {
                "context": scaled_context(r["context_label"], r["context_tokens"]),
                "memory setting": r["mem_util"],
                "higher goodput": (
                    "no engine within the SLO"
                    if not w
                    else config_label({"engine": w, "tp": r["winner_tp"], "dcp": r["winner_dcp"]})
                    + (f" — its output differs (probe: {r['winner_probe']})" if r.get("winner_differs") else "")
                ),
                "its goodput (req/s) at its highest load": "–"
                if not w
                else f"{measured(r['winner_goodput_requests_per_s'], r.get('n'))} at {_level(r['winner_load'], r['load_mode'])}",
                "runner-up": "–"
                if not w
                else config_label({"engine": r["runner_up"], "tp": r["runner_up_tp"], "dcp": r["runner_up_dcp"]}),
                "runner-up goodput (req/s)": "–"
                if not w
                else (
                    "none within the SLO"
                    if r["runner_up_goodput_requests_per_s"] is None
                    else f"{measured(r['runner_up_goodput_requests_per_s'], r.get('n'))} at {_level(r['runner_up_load'], r['load_mode'])}"
                ),
                "margin": margin,
                "margin over the repeats": spread,
                "n": r.get("n"),
                "accuracy probe (winner / runner-up)": "–"
                if not w
                else f"{r.get('winner_probe') or NOT_PROBED} / {r.get('runner_up_probe') or NOT_PROBED}",
            }
        )
    return tables.table(rows, list(rows[0]) if rows else ["context"])


def map_caption(gmap: list[dict]) -> str:
    """What to see in the map: who wins where, and whether the winner changes."""
    cells = [r for r in gmap if r.get("winner")]
    if not cells:
        return "Measured: no context × memory setting had an engine within the SLO."
    wins: dict[str, list[str]] = {}
    for r in cells:
        wins.setdefault(engine_label(r["winner"]), []).append(
            f"{scaled_context(r['context_label'], r['context_tokens'])} at {r['mem_util']:g}"
            + (
                f" ({measured(r['margin'], r.get('n'))}×)"
                if r.get("margin") is not None
                else " (the only one within the SLO)"
            )
        )
    change = "the winner changes with the setting" if len(wins) > 1 else "the same engine at every setting measured"
    ns = sorted({r["n"] for r in cells if r.get("n") is not None})
    return (
        f"Measured: {change}: "
        + "; ".join(f"{e} at {', '.join(w)}" for e, w in wins.items())
        + f" (margin = winner's goodput ÷ runner-up's, each at its own highest load within the SLO; "
        f"n = {', '.join(map(str, ns))} {'run' if ns == [1] else 'runs'} per side, so the range over the repeats is "
        + ("a single value" if ns == [1] else "shown in the table")
        + "). "
        + probe_sentence(cells)
    )


def probe_sentence(cells: list[dict]) -> str:
    """The accuracy probe of the map's winners, in one sentence: each winner whose greedy output differs from its
    engine's reference configuration, named (it cannot win silently), else whether they were probed."""
    flagged = [r for r in cells if r.get("winner_differs")]
    if flagged:
        return (
            "**Accuracy probe: "
            + "; ".join(
                f"the winner at {scaled_context(r['context_label'], r['context_tokens'])}, {r['mem_util']:g} "
                f"({config_label({'engine': r['winner'], 'tp': r['winner_tp'], 'dcp': r['winner_dcp']})}) "
                f"{r['winner_probe']}"
                for r in flagged
            )
            + "** of its engine's reference configuration (greedy, first 16 tokens): fast, but not computing the "
            "same thing, so its cell is marked and the map's verdict does not stand on it."
        )
    said = [r.get("winner_probe") or NOT_PROBED for r in cells]
    if all(p == NOT_PROBED for p in said):
        return (
            "The winners' greedy outputs were not probed (`probe: true` in the experiment file compares each "
            "configuration's with its engine's reference)."
        )
    return "Accuracy probe: no winner's greedy output differs clearly from its engine's reference configuration" + (
        f" ({said.count(NOT_PROBED)} of {len(said)} winners not probed)." if NOT_PROBED in said else "."
    )


def modelled_caption(modelled: list[dict]) -> str:
    """What to see in the modelled ceilings: the range per configuration, how much the higher setting adds, and where
    the model's memory check fails."""
    rows = modelled
    first = rows[0]
    mems = sorted({r["mem_util"] for r in rows})
    ctx = max(r["context_tokens"] for r in rows)
    parts = []
    for cfg in sorted({(r["engine"], r["tp"], r["dcp"]) for r in rows}, key=lambda c: c[2]):
        at = {r["mem_util"]: r for r in rows if (r["engine"], r["tp"], r["dcp"]) == cfg and r["context_tokens"] == ctx}
        lo, hi = at.get(mems[0]), at.get(mems[-1])
        if lo and hi:
            parts.append(
                f"{config_label({'engine': cfg[0], 'tp': cfg[1], 'dcp': cfg[2]})} {lo['concurrency_ceiling']:,} "
                f"→ {hi['concurrency_ceiling']:,} requests from {mems[0]:g} to {mems[-1]:g}"
            )
    bad = sorted({r["mem_util"] for r in rows if not r["fits"]})
    flag = (
        f"; hatched: at {', '.join(f'{m:g}' for m in bad)} the model's memory check fails "
        f"({next(r['reason'] for r in rows if not r['fits'])})"
        if bad
        else ""
    )
    return (
        f"Modelled, not measured (kvlab's physical model, {first['model']} on {first['tp']}× {first['gpu']}): the "
        f"sequences the KV pool the model predicts holds at the context, each charged its linear-attention state "
        f"(the measured ceilings, on a model without such state, are the pool ÷ the context). At "
        f"{tokens_label(ctx)}: " + "; ".join(parts) + flag + "."
    )


def modelled_table(modelled: list[dict]):
    """The modelled ceilings as a table, labelled modelled in its caption."""
    rows = [
        {
            "configuration": config_label(r),
            "memory setting": r["mem_util"],
            "context": tokens_label(r["context_tokens"]),
            "KV pool (tokens)": modelled_count(r["kv_pool_tokens"]),  # modelled: three significant figures
            "pool ÷ context": r["pool_ceiling"],
            "ceiling: sequences the model fits (with their linear-attention state)": r["concurrency_ceiling"],
            "memory check": "fits" if r["fits"] else r["reason"],
        }
        for r in sorted(modelled, key=lambda r: (r["dcp"], r["mem_util"], r["context_tokens"]))
    ]
    return tables.table(rows, list(rows[0]), caption="modelled (kvlab's physical model; no run)")


def probe_table(summary: list[dict]):
    """Per probed configuration (analysis.probe_summary): its engine, memory setting and cache, whether it is its
    engine's reference, and how its greedy outputs compared with the reference's over the first k tokens."""
    rows = [
        {
            "configuration": config_label(r),
            "memory setting": r["mem_util"],
            "prefix cache": "on" if r["prefix_caching"] else "off",
            "role": r["role"],
            "probe": r["probe"],
            "prompts": r["prompts"],
            "identical": r["identical"],
            "differs": r["differs"],
            "differs at a near-tie": r["near_ties"],
            "not compared": r["not_compared"],
            "tokens compared (k)": r["k"],
        }
        for r in summary
    ]
    return tables.table(
        rows,
        list(rows[0]) if rows else ["configuration"],
        caption="measured: greedy (temperature 0) outputs of kvlab.probe's fixed prompts, one probe "
        "per server start, compared with the engine's reference configuration",
    )


def probe_intro(summary: list[dict], experiment: str) -> str:
    """What the probe compared, or that no configuration of the experiment was probed."""
    if not summary:
        return (
            f"*Not probed: no server of the {tables.experiment_words(experiment)} recorded the accuracy probe (its experiment file sets no "
            "`probe: true`, or its runs were stored before the probe existed). Every configuration says "
            f'"{NOT_PROBED}" in the map.*'
        )
    refs = [r for r in summary if r["role"] == "reference"]
    differ = [r for r in summary if r["differs"]]
    return (
        "Per engine and model, the **reference** is the first configuration in the experiment file's order that "
        "was probed: "
        + "; ".join(f"{config_label(r)} at {r['mem_util']:g}" for r in refs)
        + ". "
        + (
            f"{count(len(differ), 'configuration')} {'differs' if len(differ) == 1 else 'differ'} clearly from "
            f"{'its' if len(differ) == 1 else 'their'} reference: "
            + "; ".join(f"{config_label(r)} at {r['mem_util']:g} ({r['probe']})" for r in differ)
            if differ
            else "No configuration differs clearly from its reference"
        )
        + "."
    )


def capacity_answer(found: list, nothing_measured: bool) -> tuple[str, ...]:
    """Report 07's answer, from its verdicts: whether a server loaded past its KV pool's ceiling queues (the
    mechanism a CPU run can test), whether one engine carries more goodput (which it cannot), and the model's
    ceilings on the reference host."""
    by_id = {v.claim_id: v for v in found}
    out = []
    if nothing_measured:
        out.append("No load ladder was measured on this host: only the modelled ceilings below are shown.")
    if (v := by_id.get("capacity_ceiling_memory")) is not None and v.outcome == "configured":
        out.append(f"The memory setting is configuration here: {v.reason.split(', so ')[0]}.")
    if (v := by_id.get("capacity_queueing_past_ceiling")) is not None:
        out.append(
            f"Loaded past its KV pool's concurrency ceiling, a server queues requests: {v.outcome} "
            f"({v.number.split(' (e.g.')[0]}; measured)."
        )
    if (v := by_id.get("capacity_goodput_map")) is not None:
        out.append(
            f"Which engine carries more goodput within the SLO: {v.outcome}"
            + (f", since {v.reason.split(':')[0]}." if v.reason else ".")
        )
    if (v := by_id.get("capacity_modelled_ceiling")) is not None:
        out.append(
            f"On the reference host the model's ceilings at the longest context are: {v.number} "
            "(modelled, requests in flight"
            + ("; an illustration only: the model fails its held-out test)." if v.outcome == "inconclusive" else ").")
        )
    return tuple(out) or ("This report has no verdict to answer with.",)
