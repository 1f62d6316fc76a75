"""Report 07's sentences, captions and tables, built only from its verdicts and its typed values (the result's
frames and :class:`~kvlab.studies.capacity.checks.QueueCount`): no number is computed here beside them. A sentence
that names a leader, a direction or a count asks :func:`kvlab.verdicts.decides` of the verdict it speaks to."""

from __future__ import annotations

from kvlab import tables
from kvlab.engines import engine_label
from kvlab.words import modelled_rate
from kvlab.studies.capacity.checks import QueueCount, by_id, config_label, ranged
from kvlab.studies.measured_frames import context_name
from kvlab.studies.capacity.frames import KV_SATURATED, NOT_PROBED
from kvlab.units import count, measured, modelled_count, tokens_label
from kvlab.verdicts import Verdict, decides, undecided_label

#: The commands that measure the capacity study on this machine (the default `make report` sweeps it: its quick
#: ladder, on the long-context study's servers; `FULL=1` the full ladder).
CAPACITY_COMMANDS = ("make report", "kvlab sweep --quick data/experiments/cpu_capacity.yaml && kvlab report")


def not_yet(what: str) -> str:
    """A measured section's note where nothing was measured: what it lacks (each section its own sentence)."""
    return f"*Not measured yet: {what} (see the note at the top).*"


def _config(r: dict, side: str = "") -> str:
    p = f"{side}_" if side else ""
    return config_label(r[side or "engine"], r.get(f"{p}tp"), r.get(f"{p}dcp"))


def _where(r: dict) -> str:
    return f"{context_name(r['context_label'], r['context_tokens'])}, memory setting {r['mem_util']:g}"


def _level(v: float | None, mode: str | None = "closed") -> str:
    if v is None:
        return "–"
    return f"{v:g} req/s" if mode == "open" else f"{v:g} in flight"


def _by_setting(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["context_tokens"], r["mem_util"] or 0, r["engine"]))


# --------------------------------------------------------------------------- the answer


def _queue_sentence(v: Verdict, q: QueueCount | None) -> str:
    said = (
        "" if q is None else f": {q.queued} of {q.past} runs past it queued ({count(q.repeats, 'repeat')} per engine)"
    )
    return f"Loaded past its KV pool's concurrency ceiling, a server queues requests — {v.outcome}{said}."


def _modelled_sentence(v: Verdict, modelled) -> str:
    ctx = modelled["context_tokens"].max()
    at = modelled.filter(modelled["context_tokens"] == ctx).sort("dcp", "mem_util").to_dicts()
    by_config: dict[str, list[str]] = {}
    for r in at:
        by_config.setdefault(_config(r), []).append(
            f"{ranged(r['concurrency_ceiling'], r['concurrency_ceiling_lo'], r['concurrency_ceiling_hi'])} at "
            f"{r['mem_util']:g}"
        )
    said = "; ".join(f"{c} {' and '.join(p)}" for c, p in by_config.items())
    return (
        f"Modelled for {at[0]['model']} on {at[0]['tp']}× {at[0]['gpu']} at {tokens_label(ctx)}, the ceilings are "
        f"{said} requests in flight. Each is a range over the KV format and MLA width, which the published points "
        "cannot pin."
    )


def throughput_sentence(t) -> str:
    """The capacity-limited throughput at the lowest memory setting the page models, per configuration ('' without
    it): the model's main answer for a user choosing an engine at a TPOT target (issue 55)."""
    if t is None or t.is_empty():
        return ""
    m = min(t["mem_util"].to_list())
    rows = t.filter(t["mem_util"] == m).sort("dcp").to_dicts()
    said = "; ".join(f"{_config(r)} {modelled_rate(r)}" for r in rows)
    return (
        f"Within a TPOT of {rows[0]['tpot_ms']:g} ms there, at {m:g}, the pool and the target allow {said} output "
        "tokens/s per GPU."
    )


def answer(found, queueing: QueueCount | None, modelled, nothing_measured: bool, throughput=None) -> tuple[str, ...]:
    """Report 07's answer from its verdicts: queueing past the ceiling (what a CPU run can test), whether one engine
    carries more goodput (which it cannot), and the model's ceilings on the reference host with their ranges and the
    capacity-limited throughput they allow at a TPOT target (``throughput``: frames.modelled_throughput)."""
    v = by_id(found)
    out = []
    if nothing_measured:
        out.append("No load ladder was measured on this host: only the modelled ceilings below are shown.")
    if (c := v.get("capacity_ceiling_memory")) is not None and c.outcome == "configured":
        out.append("The memory setting is configuration here: the experiment file sets each setting's KV budget.")
    if (q := v.get("capacity_queueing_past_ceiling")) is not None:
        out.append(_queue_sentence(q, queueing))
    if (m := v.get("capacity_goodput_map")) is not None:
        out.append(
            "Which engine carries more goodput within the SLO: "
            + (m.outcome if decides(m) else undecided_label(m))
            + (f" ({m.limit})." if m.limit and not decides(m) else ".")
        )
    if (mc := v.get("capacity_modelled_ceiling")) is not None and not modelled.is_empty():
        out.append(_modelled_sentence(mc, modelled))
        if said := throughput_sentence(throughput):
            out.append(said)
        if not decides(mc):
            out.append(f"They are an illustration only ({mc.limit or mc.outcome}).")
    return tuple(out) or ("This report has no verdict to answer with.",)


# --------------------------------------------------------------------------- notes


def no_capacity_runs_note(experiment: str, data_dir) -> str:
    """Said where no capacity run is stored: what is missing, where kvlab looked, and the commands that measure it."""
    return (
        f"*No measured capacity runs (`{experiment}`) under `{data_dir}/runs`. Measure them with "
        f"`{CAPACITY_COMMANDS[0]}` (its quick ladder; `FULL=1` the full one), or `{CAPACITY_COMMANDS[1]}`. The "
        "modelled ceilings at the end need no run.*"
    )


def slo_note(curve: list[dict], slo_share: float) -> str:
    """The SLO the runs were held to (as stored per run) and what 'within the SLO' means."""
    slos = sorted(
        {(r["slo_ttft_ms"], r["slo_tpot_ms"]) for r in curve},
        key=lambda s: tuple(x if x is not None else -1 for x in s),
    )
    said = "; ".join(
        " and ".join(
            p for p in (f"TTFT ≤ {t:,.0f} ms" if t is not None else "", f"TPOT ≤ {p:,.0f} ms" if p else "") if p
        )
        or "none stated"
        for t, p in slos
    )
    exps = ", ".join(sorted({str(r["experiment"]) for r in curve if r.get("experiment")}))
    return (
        f"The load ladder's SLO is set in its experiment file ({exps + ': ' if exps else ''}{said}): an assumption, "
        "not a measurement. A load point is **within the "
        f"SLO** when at least {slo_share:.0%} of its counted requests met both bounds and it was not stopped past "
        "saturation; **goodput** is those requests per second of its steady-state window."
    )


def telemetry_note(points: list[dict]) -> str | None:
    """Which engines' runs have no telemetry, and why (never shown as 0); None when every run was sampled."""
    missing: dict[str, set[str]] = {}
    for r in points:
        if r["telemetry"] != "sampled":
            missing.setdefault(engine_label(r["engine"]), set()).add(r["telemetry"])
    if not missing:
        return None
    said = "; ".join(f"of {e}: {', '.join(sorted(w))}" for e, w in sorted(missing.items()))
    return f"*Telemetry {said} — shown as not available, never as 0.*"


# --------------------------------------------------------------------------- throughput and the highest load


def pareto_caption(curve: list[dict]) -> str:
    """What to see in the throughput-interactivity figure: the points, how many within the SLO and on the front,
    and each configuration's most output per device (no engine is ranked against the other here)."""
    front = sum(bool(r.get("on_front")) for r in curve)
    within = sum(bool(r["within_slo"]) for r in curve)
    settings = len({(r["context_tokens"], r["mem_util"]) for r in curve})
    peaks = {}
    for r in curve:
        key = _config(r)
        if (
            key not in peaks
            or (r["output_tokens_per_s_per_device"] or 0) > peaks[key]["output_tokens_per_s_per_device"]
        ):
            peaks[key] = r
    said = "; ".join(
        f"{k} {measured(r['output_tokens_per_s_per_device'], 1)} tokens/s at {_where(r)}"
        for k, r in sorted(peaks.items())
    )
    return (
        f"Measured: {len(curve)} load points over {settings} context × memory settings, {within} within the SLO "
        f"(filled), {front} on their configuration's Pareto front (the line). "
        f"Each configuration's most output per device: {said}."
    )


def capacity_table(best: list[dict]):
    """Per configuration: the loads measured, the highest within the SLO, its goodput (with its range over
    repeats) and the lowest load that missed it."""
    rows = []
    for r in _by_setting(best):
        g = r["goodput_requests_per_s"]
        lo, hi = r["goodput_min_requests_per_s"], r["goodput_max_requests_per_s"]
        spread = "" if g is None or lo == hi else f" ({measured(lo, 1)}–{measured(hi, 1)})"
        top = r["max_load_within_slo"]
        rows.append(
            {
                "configuration": _config(r),
                "context": context_name(r["context_label"], r["context_tokens"]),
                "memory setting": r["mem_util"],
                "loads measured": ", ".join(f"{v:g}" for v in r["levels"]),
                "highest load within the SLO": "none" if top is None else _level(top, r["load_mode"]),
                "goodput there (req/s)": "–" if g is None else f"{measured(g, r['repeats'])}{spread}",
                "repeats": r["repeats"],
                "lowest load past the SLO": _level(r["first_load_past_slo"], r["load_mode"]),
            }
        )
    rows, caption = tables.shared_columns(rows, ("loads measured", "repeats"))
    return tables.table(rows, list(rows[0]) if rows else ["configuration"], caption=caption)


# --------------------------------------------------------------------------- the pool against the ceiling


def _onset_row(r: dict) -> dict:
    seen = r["telemetry"] == "sampled"

    def none(series: str) -> str:  # no level did, or no sample held the series (then it cannot be said)
        return "none" if seen and r.get(f"{series}_seen", True) else "not available"

    return {
        "configuration": _config(r),
        "context": context_name(r["context_label"], r["context_tokens"]),
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


def onset_table(onset: list[dict]):
    """Per configuration: the ceiling, and the lowest load past it, at which requests queued, the KV pool saturated
    and the server preempted (telemetry)."""
    rows, caption = tables.shared_columns([_onset_row(r) for r in _by_setting(onset)], ("telemetry",))
    return tables.table(rows, list(rows[0]) if rows else ["configuration"], caption=caption)


def ceiling_caption(points: list[dict], onset: list[dict], q: QueueCount | None) -> str:
    """What to see in the KV-usage figure: the points sampled, and where the queue appeared against the ceilings."""
    sampled = sum(r["telemetry"] == "sampled" for r in points)
    text = (
        f"Measured: the peak KV-pool usage during each load point ({sampled} of {len(points)} sampled), a cross "
        "where requests waited, each engine's concurrency ceiling dashed."
    )
    if q is not None:
        text += f" Past the ceiling {q.queued} of {q.past} runs queued; at or under it {q.below_queued} of {q.below}."
    early = [
        r
        for r in onset
        if r["first_queued"] and (r["first_past_ceiling"] is None or r["first_queued"] < r["first_past_ceiling"])
    ]
    if early:  # counted, not listed: the table above gives each configuration's load ("requests waited from")
        settings = len({_where(r) for r in early})
        text += (
            f" {count(len(early), 'configuration')} in {count(settings, 'setting')} queued at or under the ceiling "
            "(the table's “requests waited from”): a scheduler limit, not the KV pool."
        )
    return text


def telemetry_caption(series: list[dict], min_line: int, first: bool = True) -> str:
    """What to see in one telemetry-over-time figure (``series``: its drawn series); the first of them says how to
    read it, the others name only their setting."""
    r = series[0] if series else {}
    where = _where(r) if r else "no setting"
    short = sum(not s["line"] for s in series)
    dots = f"; {short} with fewer than {min_line} samples drawn as dots only" if short else ""
    if not first:
        return f"Measured: the same gauges at {where} ({len(series)} series{dots})."
    return (
        f"Measured at {where}: KV-pool usage and requests running and waiting, by seconds from the run's first "
        f"request. One series per load point ({len(series)} drawn{dots}); engines by colour, loads by line style."
    )


# --------------------------------------------------------------------------- the map


def _sides(r: dict) -> str:
    a = f"{_config(r, 'winner')} {measured(r['winner_goodput_requests_per_s'], r.get('n'))} at {_level(r['winner_load'], r['load_mode'])}"
    g = r["runner_up_goodput_requests_per_s"]
    b = f"{_config(r, 'runner_up')} " + (
        "none within the SLO"
        if g is None
        else f"{measured(g, r.get('n'))} at {_level(r['runner_up_load'], r['load_mode'])}"
    )
    return "; ".join(sorted((a, b)))


def _map_row(r: dict, decided: bool) -> dict:
    w = r.get("winner")
    probe = "–" if not w else f"{r.get('winner_probe') or NOT_PROBED} / {r.get('runner_up_probe') or NOT_PROBED}"
    margin = "–" if not w or r.get("margin") is None else f"{measured(r['margin'], r.get('n'))}×"
    one = (r.get("n") or 0) < 2 or r["margin_lo"] == r["margin_hi"]  # one run a side: no spread to show
    spread = "–" if margin == "–" or one else f"{measured(r['margin_lo'], 1)}–{measured(r['margin_hi'], 1)}×"
    row = {"context": context_name(r["context_label"], r["context_tokens"]), "memory setting": r["mem_util"]}
    if decided:
        row["higher goodput"] = (
            "no engine within the SLO"
            if not w
            else _config(r, "winner")
            + (f" — its output differs (probe: {r['winner_probe']})" if r.get("winner_differs") else "")
        )
    row |= {
        "goodput (req/s) at each engine's highest load within the SLO": "no engine within the SLO"
        if not w
        else _sides(r),
        ("margin" if decided else "ratio, higher ÷ lower"): margin,
        "over the repeats": spread,
        "n": r.get("n"),
        "accuracy probe (higher / lower)": probe,
    }
    return row


def map_table(gmap: list[dict], verdict: Verdict | None):
    """The map as a table: per context x memory setting both engines' goodput at their highest load within the SLO
    and their ratio; the column naming the engine with more only where the map's verdict decides."""
    rows = [_map_row(r, decides(verdict)) for r in gmap]
    return tables.table(rows, list(rows[0]) if rows else ["context"])


def map_caption(gmap: list[dict], verdict: Verdict | None) -> str:
    """What to see in the map. Where its verdict decides: who leads where. Otherwise no engine is named: the cells
    are this host's measurement under the verdict's label, and why it cannot decide."""
    cells = [r for r in gmap if r.get("winner")]
    if not cells:
        return "Measured: no context × memory setting had an engine within the SLO."
    ns = sorted({r["n"] for r in cells if r.get("n") is not None})
    n = f"n = {', '.join(map(str, ns))} {'run' if ns == [1] else 'runs'} per side"
    if not decides(verdict):
        why = f" ({verdict.limit})" if verdict is not None and verdict.limit else ""
        return (
            f"Measured on this host: each cell gives both engines' goodput at their own highest load within the SLO, "
            f"and its ratio ({n}). No engine is named the leader: {undecided_label(verdict)}{why}. "
            + probe_sentence(cells)
        )
    wins: dict[str, list[str]] = {}
    for r in cells:
        m = (
            f" ({measured(r['margin'], r.get('n'))}×)"
            if r.get("margin") is not None
            else " (the only one within the SLO)"
        )
        wins.setdefault(engine_label(r["winner"]), []).append(
            f"{context_name(r['context_label'], r['context_tokens'])} at {r['mem_util']:g}{m}"
        )
    return (
        f"Measured, {verdict.outcome}: "
        + "; ".join(f"{e} leads at {', '.join(w)}" for e, w in wins.items())
        + f" (margin: the leader's goodput ÷ the other's, {n}). "
        + probe_sentence(cells)
    )


def probe_sentence(cells: list[dict]) -> str:
    """The accuracy probe of the map's cells in one sentence: each configuration with more goodput whose greedy
    output differs from its engine's reference, named (it cannot lead silently), else whether they were probed."""
    flagged = [r for r in cells if r.get("winner_differs")]
    if flagged:
        said = "; ".join(f"{_config(r, 'winner')} at {_where(r)} {r['winner_probe']}" for r in flagged)
        return f"**Accuracy probe: {said}** from its engine's reference configuration, so its cell is marked."
    probed = [r.get("winner_probe") or NOT_PROBED for r in cells]
    if all(p == NOT_PROBED for p in probed):
        return "The configurations' greedy outputs were not probed (`probe: true` in the experiment file)."
    unprobed = probed.count(NOT_PROBED)
    return "Accuracy probe: no output differs clearly from its engine's reference" + (
        f" ({unprobed} of {len(probed)} not probed)." if unprobed else "."
    )


# --------------------------------------------------------------------------- the accuracy probe


def probe_table(summary: list[dict]):
    """Per probed configuration: its role, and how its greedy outputs compared with its engine's reference's."""
    rows = [
        {
            "configuration": _config(r),
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
        caption="measured: greedy outputs of kvlab.probe's fixed prompts, one probe per server start",
    )


def probe_intro(summary: list[dict], experiment: str) -> str:
    """What the probe compared, or that no configuration of the experiment was probed."""
    if not summary:
        return (
            f"*Not probed: no server of the {tables.experiment_words(experiment)} recorded the accuracy probe (no "
            f'`probe: true` in its experiment file). Every configuration says "{NOT_PROBED}" in the map.*'
        )
    refs = "; ".join(f"{_config(r)} at {r['mem_util']:g}" for r in summary if r["role"] == "reference")
    differ = [r for r in summary if r["differs"]]
    said = (
        f"{count(len(differ), 'configuration')} {'differs' if len(differ) == 1 else 'differ'} clearly from "
        f"{'its' if len(differ) == 1 else 'their'} reference: "
        + "; ".join(f"{_config(r)} at {r['mem_util']:g} ({r['probe']})" for r in differ)
        if differ
        else "No configuration differs clearly from its reference"
    )
    return f"The **reference** of each engine and model is the first configuration probed: {refs}. {said}."


# --------------------------------------------------------------------------- the model's ceilings


def _check_words(r: dict) -> str:
    return "fits" if r["fits"] else r["reason"]


def modelled_caption(modelled: list[dict], verdict: Verdict | None) -> str:
    """What to see in the modelled ceilings: each configuration's ceiling at the longest context at each setting,
    every number with its range, and what the memory check flags."""
    first = modelled[0]
    ctx = max(r["context_tokens"] for r in modelled)
    at = sorted((r for r in modelled if r["context_tokens"] == ctx), key=lambda r: (r["dcp"], r["mem_util"]))
    said = "; ".join(
        f"{_config(r)} {ranged(r['concurrency_ceiling'], r['concurrency_ceiling_lo'], r['concurrency_ceiling_hi'])} "
        f"at {r['mem_util']:g}"
        for r in at
    )
    flagged = sorted({r["mem_util"] for r in modelled if not r["fits"]})
    flag = (
        f" Hatched at {', '.join(f'{m:g}' for m in flagged)}: {_check_words(next(r for r in modelled if not r['fits']))}."
        if flagged
        else ""
    )
    label = "" if decides(verdict) else f" ({undecided_label(verdict)})"
    return (
        f"Modelled, not measured{label}: {first['model']} on {first['tp']}× {first['gpu']}, the sequences its KV pool "
        f"holds, each charged its linear-attention state; whiskers span {first['assumption_sets']}. "
        f"At {tokens_label(ctx)}: {said}.{flag}"
    )


def modelled_table(modelled: list[dict], throughput: list[dict] = ()):
    """The modelled ceilings as a table, a row per configuration and memory setting and a column per context (each
    ceiling charged its linear-attention state, with its range over the assumption sets), beside the KV pool, the
    capacity-limited rate at the longest context (``throughput``: frames.modelled_throughput rows) and the memory
    check: the contexts read across a row. The pool ÷ context without the state is in the figure's CSV."""
    keyed: dict[tuple, dict] = {}
    for r in sorted(modelled, key=lambda r: (r["dcp"], r["mem_util"], r["context_tokens"])):
        row = keyed.setdefault(
            (r["dcp"], r["mem_util"]),
            {
                "configuration": _config(r),
                "memory setting": r["mem_util"],
                "KV pool (tokens)": f"{modelled_count(r['kv_pool_tokens_lo']):,}–"
                f"{modelled_count(r['kv_pool_tokens_hi']):,}",
            },
        )
        row[f"ceiling at {tokens_label(r['context_tokens'])}"] = ranged(
            r["concurrency_ceiling"], r["concurrency_ceiling_lo"], r["concurrency_ceiling_hi"]
        )
        if row.get("memory check", "fits") == "fits":  # a setting's first flag, at whichever context
            row["memory check"] = _check_words(r)
    t0 = throughput[0] if throughput else None
    rate = f"tokens/s per GPU at {tokens_label(t0['context_tokens'])}, TPOT ≤ {t0['tpot_ms']:g} ms" if t0 else ""
    for t in throughput:
        if (t["dcp"], t["mem_util"]) in keyed:
            keyed[(t["dcp"], t["mem_util"])][rate] = modelled_rate(t)
    rows = list(keyed.values())
    over = modelled[0]["assumption_sets"] if modelled else ""
    columns = [c for c in dict.fromkeys(c for row in rows for c in row) if c not in ("memory check", rate)]
    columns += [rate] * bool(rate) + ["memory check"]
    caption = f"modelled (kvlab's physical model; no run): requests in flight, ranges over {over}" + (
        "; the rate: the largest batch the pool and the TPOT target allow, over every set's bounded fit, the "
        "unexplained per-step cost as a band (report 04)"
        if rate
        else ""
    )
    return tables.table(rows, columns if rows else ["configuration"], caption=caption)


# --------------------------------------------------------------------------- real traffic: the search and the trace

#: The commands that measure the real-traffic part (`make report` runs cpu_trace's quick form, at memory setting 0.92).
TRAFFIC_COMMANDS = ("make report", "kvlab sweep data/experiments/cpu_trace.yaml && kvlab report")


def no_traffic_note(experiment: str, notes: tuple[str, ...] = ()) -> str:
    """The one line the page says where no load search or trace replay is stored (the default build)."""
    unread = f" ({'; '.join(notes)})" if notes else ""
    return (
        f"*No load search or trace replay stored (`{experiment}`){unread}: measure it with `{TRAFFIC_COMMANDS[0]}` "
        f"or `{TRAFFIC_COMMANDS[1]}`.*"
    )


def _slo_words(r: dict) -> str:
    said = [f"TTFT ≤ {r['slo_ttft_ms']:,.0f} ms" if r["slo_ttft_ms"] else "", ""]
    said[1] = f"TPOT ≤ {r['slo_tpot_ms']:,.0f} ms" if r["slo_tpot_ms"] else ""
    return " and ".join(s for s in said if s) or "none stated"


def search_intro(results: list[dict], on_cpu: bool) -> str:
    """How a search decides (its share, the SLO as stored, the Wilson rule) and what a CPU run can say."""
    shares = sorted({r["search_share"] for r in results if r["search_share"] is not None})
    slos = sorted({_slo_words(r) for r in results})
    cpu = " A CPU run of a tiny model tests the search and the replay, not a GPU's capacity." if on_cpu else ""
    return (
        "A search doubles the load while it passes, then bisects between the highest pass and the lowest fail; each "
        f"probe is a stored run of the trace's requests. A load **passes** when the Wilson 95% lower bound of its "
        f"requests within the SLO ({'; '.join(slos)}; failed requests count against) reaches "
        f"{' / '.join(f'{s:.0%}' for s in shares)} and it did not stop past saturation.{cpu}"
    )


def _attainment(r: dict) -> str:
    if r["n"] is None:
        return "–"
    return f"{r['within']} of {r['n']} (Wilson 95%: {r['lower']:.2f}–{r['upper']:.2f})"


def _cost(r: dict) -> str:
    if r["price_per_device_hour"] is None:
        return "no price stated"
    d = r["dollars_per_million_output_tokens"]
    return "–" if d is None else f"${d:,.2f} at ${r['price_per_device_hour']:g}/device-h"


def _energy(r: dict) -> str:
    e, note = r["energy_j_per_output_token"], r["energy_note"] or "no counter"
    if e is not None:
        return f"{e:.3g} J"
    return note if note.startswith("energy not available") else f"not available: {note}"


def _highest(r: dict) -> str:
    top = r["highest_passing"]
    if top is None:
        return "none passed"
    limit = r["first_failing"] is None and (r["stop"] or "").startswith("passes at the limit")
    return _level(top, r["load_mode"]) + (" (the search's limit: none probed above)" if limit else "")


def search_table(results: list[dict]):
    """Per search: the highest load within the SLO and the first past it, attainment there with its interval and
    n, goodput, output tokens/s per device, $ per million output tokens (a stated price), energy per output token,
    and what broke the next load. What every row lacks alike (no price stated; energy not available for one reason)
    is said once, in the caption, not in every row."""
    unpriced = all(r["price_per_device_hour"] is None for r in results)
    missing = {_energy(r) for r in results if r["energy_j_per_output_token"] is None}
    one_reason = len(missing) == 1
    rows = []
    for r in sorted(results, key=lambda r: (r["mem_util"] or 0, r["engine"])):
        g, t = r["goodput_requests_per_s"], r["output_tokens_per_s_per_device"]
        no_energy = one_reason and r["energy_j_per_output_token"] is None
        rows.append(
            {
                "engine": engine_label(r["engine"]),
                "memory setting": r["mem_util"],
                "highest load within the SLO": _highest(r),
                "first load past it": _level(r["first_failing"], r["load_mode"]),
                "within the SLO there": _attainment(r),
                "goodput there (req/s)": "–" if g is None else measured(g),
                "output tokens/s per device": "–" if t is None else measured(t),
                "$ per million output tokens": "–" if unpriced else _cost(r),
                "energy per output token": "not available" if no_energy else _energy(r),
                "what broke the next load": r["mechanism"] or "–",
                "probes": f"{r['probes']}: {r['stop'] or '–'}",
            }
        )
    said = ["no device price stated (parameter price_per_device_hour), so no cost"] if unpriced else []
    said += [next(iter(missing))] if one_reason else []
    return tables.table(rows, list(rows[0]) if rows else ["engine"], caption="; ".join(said) or None)


def search_caption(results: list[dict], on_cpu: bool) -> str:
    """The search path figure's caption: what it draws and how far its result reaches."""
    where = "on this host's CPUs (not a verdict between the engines)" if on_cpu else "on the host named in the title"
    found = "; ".join(
        f"{engine_label(r['engine'])} at {r['mem_util']:g}: {_highest(r)}"
        for r in sorted(results, key=lambda r: (r["mem_util"] or 0, r["engine"]))
    )
    return (
        f"Measured {where}: each search's probes in the order run, at the load each probed (filled: within the SLO, "
        f"cross: past it). Highest load within the SLO: {found}."
    )


def trace_caption(summary: list[dict]) -> str:
    """The trace shape figure's caption, from each trace's sums (frames.trace_summary)."""
    said = []
    for s in summary:
        scale = f", lengths and {s['block_tokens'] * s['scale_factor']}-token blocks ÷ {s['scale_factor']}"
        said.append(
            f"`{s['trace_file']}` ({s['requests']} requests over {s['span_s']:g} s of trace time"
            f"{scale if s['scale_factor'] > 1 else ''}): prompts {s['input_tokens_min']:,.0f}–"
            f"{s['input_tokens_max']:,.0f} tokens (median {s['input_tokens_median']:,.0f}), outputs "
            f"{s['output_tokens_min']:,.0f}–{s['output_tokens_max']:,.0f}; {s['reusable_tokens']:,} of "
            f"{s['prompt_tokens']:,} prompt tokens ({s['reusable_share']:.1%}) reusable: leading blocks whose hash ids "
            "an earlier request sent"
        )
    return (
        "Published trace, as replayed: " + "; ".join(said) + ". Under a load search the requests go at the load, "
        "not on the trace's timestamps."
    )


def reuse_table(reuse: list[dict]):
    """Per engine and memory setting over its trace runs: prompt tokens served, those the trace made reusable and
    those the engine counted as cached, and the requests whose served length is the trace's."""
    rows = []
    for r in sorted(reuse, key=lambda r: (r["mem_util"] or 0, r["engine"])):
        cached = r["cached_tokens"]
        rows.append(
            {
                "engine": engine_label(r["engine"]),
                "memory setting": r["mem_util"],
                "runs": r["runs"],
                "prompt tokens served": f"{r['prompt_tokens']:,}",
                "reusable (trace)": f"{r['reusable_tokens']:,} ({r['reusable_share']:.1%})",
                "cached (engine)": "not reported" if cached is None else f"{cached:,} ({r['cached_share']:.1%})",
                "served length = trace's": f"{r['exact_lengths']} of {r['checked']} requests",
            }
        )
    return tables.table(rows, list(rows[0]) if rows else ["engine"])


def reuse_caption() -> str:
    """What the reuse table compares (its numbers are in the table)."""
    return (
        "Measured: reusable tokens are what the trace's hash ids let a prefix cache serve; cached tokens, what the "
        "engine reports it served (usage.prompt_tokens_details.cached_tokens), each run from an empty cache."
    )
