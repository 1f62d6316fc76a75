"""Report 03: memory setting 0.92 vs 0.95 — retries, run-time stability and latency measured per engine, the
model's KV headroom on the reference host, and what the setting means on this host (a configured KV budget)."""

from __future__ import annotations

import polars as pl

from kvlab.gpu import memory_outside_kv_pool
from kvlab.perfmodel.figures import headroom_as_shown, headroom_table
from kvlab.studies.memory_utilisation import checks, frames, words
from kvlab.studies.memory_utilisation.result import REPORT, MemoryUtilisationResult
from kvlab.studies.result import Answer

__all__ = ["REPORT", "MemoryUtilisationResult", "compute"]


def _measured(wb, measured_experiment: str) -> dict:
    """The runs that compare memory settings and every frame computed from them."""
    measured = wb.measured(measured_experiment or frames.memory_experiments(wb.runs))
    attempts = wb.attempts.filter(pl.col("run_id").is_in(measured["run_id"].implode()))
    stats = frames.memory_study(measured, attempts)
    cmp = frames.memory_comparison(stats)
    gpus = measured.filter(pl.col("gpu_count").is_not_null())["gpu_count"].unique().sort() if measured.height else []
    return {
        "measured": measured,
        "attempts": attempts,
        "stats": stats,
        "comparison": cmp,
        "ratios": frames.memory_ratios(stats),  # each engine against itself: lower setting ÷ higher
        "by_setting": frames.retries_by_setting(stats),
        "spreads": frames.spreads(stats, cmp),
        "causes": frames.failure_causes(attempts, measured),
        "counters_missing": frames.counters_missing(measured),
        "budgets": frames.budgets(measured),
        "gpu_left": memory_outside_kv_pool(wb.telemetry, measured),  # NVML samples: GPU runs only, else empty
        "gpus_per_run": ", ".join(str(g) for g in gpus),
        "runs": int(stats["runs"].sum() or 0),
        "retries": int(stats["retries"].sum() or 0),
    }


def compute(
    wb,
    *,
    data_dir: str = "",
    published_experiment: str = "article_b300",
    measured_experiment: str = "",
    gpu: str = "B300",
    model: str = "Kimi-K3",
    mem_utils: list = (0.92, 0.95),
    headroom_contexts: list = (65536, 204800),
    dcp: int = 8,
) -> MemoryUtilisationResult:
    claims = wb.claims(published_experiment, kind="memory")
    m = _measured(wb, measured_experiment)
    head = headroom_table(gpu, model, list(mem_utils), sorted({1, dcp}), list(headroom_contexts))
    setting = checks.memory_setting(m["measured"])
    everyone = wb.all_claims()
    ev = checks.Evidence(m["stats"], m["comparison"], head, checks.Host.of(setting), everyone)
    # the article's memory claims, then a setting another document recommends against the article's OOM claim
    recommending = everyone.filter(pl.col("experiment") != published_experiment)
    found = checks.verdicts(claims, ev) + checks.verdicts(recommending, ev, {"recommended"})
    caused = checks.verdict_of_kind(found, claims, "oom_caused")
    recommended = checks.verdict_of_kind(found, recommending, "recommended", "published")
    outside = frames.outside_target(head)
    u = next((c["setting"] for c in claims.iter_rows(named=True) if checks.claim_kind(c) == "oom_caused"), 0.95)
    sentences = words.answer(
        m["budgets"].to_dicts(), outside.to_dicts(), m["runs"], m["retries"], gpu, model, caused, recommended, u
    )
    src = wb.sources()
    return MemoryUtilisationResult(
        answer=Answer(sentences, frames.budget_table(m["budgets"]) if m["budgets"].height else None),
        verdicts=tuple(found),
        experiments=src.measured,
        documents=src.documents,
        claims=claims,
        article=wb.published(published_experiment),
        headroom=head,
        headroom_shown=headroom_as_shown(head),  # its capacities to three significant figures
        headroom_printed=frames.headroom_printed(head),  # every modelled count with its range
        outside=outside,
        gpu=gpu,
        model=model,
        setting=setting,
        **m,
    )
