"""Report 03's sentences, built only from its verdicts and typed values (frames' rows as dicts, read, never
recomputed). A sentence that names a direction of 0.92 against 0.95 asks :func:`kvlab.verdicts.decides` of the
latency claim's verdict first; where it does not decide, the measurement is shown with
:func:`kvlab.verdicts.undecided_label` and no direction. Every modelled count carries its range over the memory sets
('11 (11–25)'). Runs are named by their real tokens, the context they stand for beside them ('3,200 tokens (200K
scaled)')."""

from __future__ import annotations

from kvlab import tables
from kvlab.engines import SGLANG, VLLM, engine_label
from kvlab.perfmodel.roofline import Assumptions
from kvlab.studies.measured_frames import context_name
from kvlab.studies.memory_utilisation.checks import engine_rank, fails_outside_pool
from kvlab.studies.memory_utilisation.frames import with_range
from kvlab.claims.grading import NO_GPU_MEMORY
from kvlab.tables import ms
from kvlab.units import sig2, tokens_label
from kvlab.verdicts import Verdict, decides, undecided_label

#: The 0.95 flag, in the words every page gives it (03, 04 and 07).
FLAG_WORDS = "an assumption, not a predicted OOM"


def claims_list(claims: list[dict]) -> str:
    """The document's statements (claim row dicts) as a list, where it says them given once when they share it."""
    if not claims:
        return "*The document makes no claim of this kind.*"
    cites = list(dict.fromkeys(r["citation"] for r in claims))
    if len(cites) == 1:
        return "\n".join(f"- “{r['statement']}”" for r in claims) + f"\n\nAll from the {cites[0]}."
    return "\n".join(f"- “{r['statement']}” ({r['citation']})" for r in claims)


def seqs(r: dict) -> str:
    """A headroom row's sequences that fit, with their range over the memory sets: '11 (11–25)'."""
    return with_range(r["max_concurrent_seqs"], r.get("max_concurrent_seqs_lo"), r.get("max_concurrent_seqs_hi"))


def headroom_intro(head: list[dict], gpu: str, model: str, article: list[dict] | None = None) -> str:
    """What the modelled headroom (row dicts) is of: the model, GPUs and DCP sizes, the ranges' assumption sets,
    and the article's own set-up (its published row dicts) when it differs."""
    tp = head[0]["tp"] if head and "tp" in head[0] else 8
    paths = " and ".join(
        f"without DCP ({engine_label(VLLM)}'s path)" if d == 1 else f"with DCP {d} ({engine_label(SGLANG)}'s)"
        for d in sorted({r["dcp"] for r in head})
    )
    text = f"KV-cache room each memory setting leaves for {model} on {tp}× {gpu}, {paths}, from report 04's model."
    if head and head[0].get("assumption_sets"):
        text += f" Each count has its range over {head[0]['assumption_sets']}, which the article does not state."
    if article:
        a = article[0]
        a_gpu = str(a.get("hardware") or "").removeprefix("NVIDIA ").strip()
        if (a.get("model"), a_gpu) != (model, gpu):
            text += f" The article ran {a.get('model')} on {a.get('gpu_count')}× {a_gpu}."
    return text


def headroom_caption(head: list[dict]) -> str:
    """One sentence for the headroom figure: at the largest context, the sequences that fit per DCP size and
    setting, each with its range; then what a cross marks. Counts, no winner."""
    if not head:
        return "Modelled: no configuration."
    top = max(r["context_tokens"] for r in head)
    at = sorted((r for r in head if r["context_tokens"] == top), key=lambda r: (r["dcp"], r["mem_util"]))
    by_dcp: dict[int, list[dict]] = {}
    for r in at:
        by_dcp.setdefault(r["dcp"], []).append(r)
    parts = [
        " and ".join(f"{seqs(r)} at {r['mem_util']:g}" for r in g) + (" without DCP" if d == 1 else f" with DCP {d}")
        for d, g in by_dcp.items()
    ]
    text = f"Modelled sequences that fit at {tokens_label(top)}: " + "; ".join(parts) + " (ranges shaded)."
    if any(r["fits"] is False for r in head):
        text += f" A cross marks the memory check's flag: {FLAG_WORDS}."
    return text


def fits_sentence(head: list[dict]) -> str:
    """What the model's *fits* column says at each memory setting and what it rests on: a flag for memory left
    outside the target rests on a need chosen from the B300 article's own report, so it is an assumption."""
    frac = Assumptions().outside_pool_fraction
    by_util: dict[float, list[dict]] = {}
    for r in sorted(head, key=lambda r: r["mem_util"]):
        by_util.setdefault(r["mem_util"], []).append(r)
    out, restated = [], False
    for u, g in by_util.items():
        bad = [r for r in g if r["fits"] is False]
        if not bad:
            out.append(f"Every row fits at {u:g}.")
        elif fails_outside_pool(bad[0]):
            r = bad[0]
            out.append(
                f"At {u:g} the model flags {len(bad)} of {len(g)} rows: "
                f"{r['outside_pool_gib_per_gpu']:.1f} GiB per GPU "
                f"is left outside the target, under the {r['outside_need_gib_per_gpu']:.1f} GiB ({frac:.1%} of the "
                "GPU) it assumes activations, CUDA graphs and communication buffers need."
            )
            restated = True
        else:
            out.append(f"At {u:g}, {len(bad)} of {len(g)} rows do not fit: {bad[0]['reason']}.")
    if restated:
        out.append(
            f"That {frac:.1%} was chosen between the article's failing and working settings, so the flag restates "
            f"its OOM claim: {FLAG_WORDS}, as in report 04. The KV room is what the model derives."
        )
    return " ".join(out)


def memory_scope(setting: str | None, gpus: str = "") -> str:
    """What the measured memory study can and cannot test on the host that ran it (``setting``:
    :func:`.checks.memory_setting`'s value; ``gpus``: the GPUs per run, where they ran on GPUs)."""
    head = "**What this host tests.** "
    not_oom = (
        "It does not test the article's OOM retries, which on a GPU come from activations, CUDA graphs and "
        "communication buffers outgrowing the memory left outside the target."
    )
    texts = {
        "host_reserve": "These runs had no GPU and no explicit KV-cache budget: each setting is the share of host "
        "memory vLLM's CPU build reserves, refusing to start when that much is not free. " + not_oom,
        None: "These runs record neither a KV-cache budget nor their device, so what their setting meant is not "
        "known here, and the verdicts do not take the OOM claims as tested.",
        "mixed": "These runs mix memory settings of different meaning: read each experiment on its own. The "
        "verdicts do not take the OOM claims as tested.",
        "kv_budget": "These runs had no GPU: each setting is an explicit KV-cache budget on a simulated device, so "
        "the lower one only means less KV room and fewer requests held at once. " + not_oom,
    }
    if setting in texts:
        return head + texts[setting]
    return head + (
        f"These runs were served on GPUs ({gpus} per run): each setting is the engine's own target, so retries, run "
        "time and latency test the article's claims directly."
    )


def ratio_lines(ratios: list[dict], stats: list[dict]) -> list[str]:
    """Per engine and context measured at both settings: batch time and mean request latency at the lower setting
    ÷ the higher (``ratios``: :func:`.frames.memory_ratios`' rows), with both sides' values (``stats``' rows)."""

    def side(r: dict, u: float) -> dict:
        return next(
            s
            for s in stats
            if (s["engine"], s["context_tokens"], s["mem_util"]) == (r["engine"], r["context_tokens"], u)
        )

    lines = []
    for r in sorted(ratios, key=lambda r: (engine_rank(r["engine"]), r["context_tokens"])):
        a, b = side(r, r["mem_low"]), side(r, r["mem_high"])
        one = r["n_runs"] == 1
        secs = sig2 if one else (lambda t: f"{t:.3g}")
        parts = []
        if r["batch_time_ratio"] is not None:
            parts.append(
                f"batch time {r['batch_time_ratio']:.2f}× ({secs(a['batch_time_mean_s'])} s vs "
                f"{secs(b['batch_time_mean_s'])} s)"
            )
        if r["e2e_ratio"] is not None:
            parts.append(
                f"mean request latency {r['e2e_ratio']:.2f}× ({ms(a['e2e_mean_ms'])} vs {ms(b['e2e_mean_ms'])})"
            )
        where = context_name(r["context_label"], r["context_tokens"])
        lines.append(f"{engine_label(r['engine'])} at {where}: " + (", ".join(parts) or "no successful run a side"))
    return lines


def direction_note(verdict: Verdict | None) -> str:
    """What the ratios of the lower setting ÷ the higher may be read as: the latency claim's outcome where its
    verdict decides, else the measurement's label and no direction."""
    if decides(verdict):
        return f"The latency claim is {verdict.outcome} here: {verdict.number}."
    return f"No direction is drawn from these: {undecided_label(verdict)} (the latency verdict)."


def conclusion_note(verdict: Verdict | None) -> str:
    """The conclusion's reading of the ratios (worded apart from the caption's, so the page says neither twice)."""
    if decides(verdict):
        return f"These ratios decide the latency claim: {verdict.outcome}."
    return f"The latency verdict is {undecided_label(verdict)}, so these ratios name no direction."


def memory_caption(ratios: list[dict], verdict: Verdict | None) -> str:
    """One sentence for the figure (or table) of each engine against itself: what it shows, and what its verdict
    allows it to say."""
    if not ratios:
        return "Measured: no engine at two settings."
    r0 = ratios[0]
    lo, hi = r0["mem_low"], r0["mem_high"]
    return f"Measured, each engine against itself: {lo:g} ÷ {hi:g}. " + direction_note(verdict)


def retries_line(by_setting: list[dict]) -> str:
    """'**Retries**: 0 at 0.92 (4 runs) and 1 at 0.95 (2 runs: sglang-jax (CPU) at 3,200 tokens (200K scaled)); no
    run failed.' (``by_setting``: :func:`.frames.retries_by_setting`' rows)."""
    parts, failed = [], []
    for s in by_setting:
        where = f": {', '.join(s['retried'])}" if s["retried"] else ""
        runs = s["runs"]
        parts.append(f"{s['retries']} at {s['mem_util']:g} ({runs} run{'' if runs == 1 else 's'}{where})")
        if s["runs_failed"]:
            failed.append(f"{s['runs_failed']} at {s['mem_util']:g}")
    return (
        "- **Retries**: "
        + " and ".join(parts)
        + ("; failed runs: " + ", ".join(failed) if failed else "; no run failed")
        + "."
    )


def memory_conclusion(
    by_setting: list[dict], ratios: list[dict], stats: list[dict], cvs: list[dict], verdict: Verdict | None
) -> str:
    """The measured study's conclusion: retries at each setting, each engine's lower setting ÷ higher at every
    context measured at both (with what its verdict allows), and the spread over repeats (``cvs``: rows with
    ``engine``, ``context_label``, ``context_tokens``, ``cv_low``, ``cv_high``)."""
    if not ratios:
        return "*No engine was measured at both memory settings at the same context.*"
    lo, hi = ratios[0]["mem_low"], ratios[0]["mem_high"]
    lines = ["### Conclusion (measured)", retries_line(by_setting)]
    lines.append(f"- **{lo:g} ÷ {hi:g}**, each engine against itself:")
    lines += [f"    - {line}." for line in ratio_lines(ratios, stats)]
    lines.append("- " + conclusion_note(verdict))
    spread = [
        f"{engine_label(c['engine'])} at {context_name(c['context_label'], c['context_tokens'])} "
        f"{c['cv_low']:.1%} at {lo:g}, {c['cv_high']:.1%} at {hi:g}"
        for c in cvs
    ]
    lines.append(
        "- **Spread** of batch time over repeats (CV): "
        + ("; ".join(spread) if spread else "not measured, one successful run per engine, setting and context")
        + "."
    )
    return "\n".join(lines)


#: What each server counter is, as a reader names it.
COUNTER_NAMES = {
    "server_preemptions": "preemptions",
    "server_prompt_tokens": "prompt tokens",
    "server_generation_tokens": "generated tokens",
    "server_prefix_cache_queries": "prefix-cache queries",
    "server_prefix_cache_hits": "prefix-cache hits",
}


def counters_note(missing: list[dict]) -> str:
    """Engines whose server counters are missing in every measured run (``missing``: :func:`.frames.counters_missing`'
    rows): shown empty, never as 0."""
    lines = []
    for m in missing:
        engine, n, names, every = m["engine"], m["runs"], m["missing"], m["every"]
        said = ", ".join(COUNTER_NAMES.get(c, c.removeprefix("server_").replace("_", " ")) for c in names)
        runs = f"{n} run{'' if n == 1 else 's'}"
        what = f"no server counters ({said})" if every else f"no {said}"
        lines.append(f"- {engine_label(engine)} reported {what} in any of its {runs}: shown empty (–), never as 0.")
    return "\n".join(lines)


def answer(
    budgets: list[dict],
    outside: list[dict],
    runs: int,
    retries: int,
    gpu: str,
    model: str,
    caused: Verdict | None,
    recommended: Verdict | None,
    u: float = 0.95,
) -> tuple[str, ...]:
    """Report 03's answer: what the 0.95 claim's measured verdict allows; what the documents say; what the setting
    configures on this host; what the model leaves outside the memory target (the KV pool is inside it)."""
    if decides(caused):
        first = f"On this host's GPUs the claim that {u:g} caused OOM retries is {caused.outcome} ({caused.number})."
    elif caused is not None and caused.limit == NO_GPU_MEMORY:
        first = (
            f"Whether {u:g} runs out of memory on {gpu} cannot be tested here: this host has no GPU memory to run "
            "out of."
        )
    else:
        first = f"Whether {u:g} runs out of memory on {gpu} is not decided here ({undecided_label(caused)})."
    said = [
        first,
        f"The 8×B300 article says {u:g} caused out-of-memory retries for both engines and 0.92 removed them "
        "(published, no figures given).",
    ]
    if recommended is not None:
        said.append(
            f"The KV-cache design article serves vLLM at {u:g} in its own example, for another model and GPUs: the "
            f"two documents' advice differs, and nothing here decides it ({recommended.outcome})."
        )
    said.append(_configured(budgets, runs, retries))
    if len(outside) >= 2:
        a, b = outside[0], outside[-1]
        said.append(
            f"For {model} on {gpu} the model leaves {a['outside_pool_gib_per_gpu']:.1f} GiB per GPU outside the memory "
            f"target at {a['mem_util']:g} and {b['outside_pool_gib_per_gpu']:.1f} GiB at {b['mem_util']:g}; the KV "
            f"pool inside it is {a['kv_pool_gib_per_gpu']:.1f} and {b['kv_pool_gib_per_gpu']:.1f} GiB without DCP "
            "(modelled, the same in every memory set)."
        )
        if b["outside_pool_gib_per_gpu"] < b["outside_need_gib_per_gpu"]:
            said.append(
                f"Under an assumed need of {b['outside_need_gib_per_gpu']:.1f} GiB, {b['mem_util']:g} is flagged: "
                f"{FLAG_WORDS}."
            )
    return tuple(said)


def _configured(budgets: list[dict], runs: int, retries: int) -> str:
    """What the settings configure on this host (the experiment file's KV budgets) and what its runs needed."""
    if len(budgets) < 2:
        return "No run on this host compares two memory settings."
    lo, hi = budgets[0], budgets[-1]

    def pool(r: dict) -> str:
        return tables.span(r.get("pool_tokens_low"), r.get("pool_tokens_high"), "{:,}".format)

    pools = (
        f"; the engines made KV pools of {pool(lo)} and {pool(hi)} tokens of them"
        if lo.get("pool_tokens_low") is not None and hi.get("pool_tokens_low") is not None
        else ""
    )
    return (
        f"On this host {lo['mem_util']:g} and {hi['mem_util']:g} are KV budgets of {lo['kv_budget_mib']:.3g} and "
        f"{hi['kv_budget_mib']:.3g} MiB ({hi['ratio_to_lowest']:.2f}×) set by the experiment file{pools}: "
        f"configuration, not a finding; its {runs} runs needed {'no' if retries == 0 else retries} "
        f"{'retry' if retries == 1 else 'retries'}."
    )
