"""What a run is stored as: its RUNS row and its ATTEMPTS rows, and the prompts the row describes.

The local executor (kvlab.runner) builds them for each run it measures; the campaign (kvlab.campaign) for a run
it stores failed without sending it (its server never started, or its Ray node was lost in every attempt).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from kvlab import host
from kvlab.client import BatchResult, sum_reported, summarize
from kvlab.engines.base import Failure
from kvlab.load import LoadOutcome, Schedule, as_text, prompt_form, tokenizer_of
from kvlab.schema import RUNS, run_rates
from kvlab.experiment import RunSpec
from kvlab.workloads import Prompt, fixed_batch, shared_tokens


def random_ids_draws(run: RunSpec) -> tuple[list[Prompt], Schedule | None]:
    """A ``load.draws: random_ids`` run's token-id prompts and open-loop schedule, as SGLang's benchmark draws them
    with ``--seed`` the workload's seed plus the repeat (kvlab.workloads.fixed_batch.random_ids_draws), below the
    vocabulary size it draws from: its tokenizer's, less added tokens (HF's ``tokenizer.vocab_size``), which can
    differ from the config's ``vocab_size`` (kvlab.experiment refuses the option without a local tokenizer.json)."""
    w = run.workload
    vocab = tokenizer_of(Path(run.engine.model_arg) / "tokenizer.json").get_vocab_size(with_added_tokens=False)
    return fixed_batch.random_ids_draws(
        w.batch_size, w.prompt_len, w.output_tokens, vocab, w.seed + run.repeat, w.load.rate_rps
    )


def sending_for(run: RunSpec, vocab_size: int) -> tuple[list[Prompt], Schedule | None]:
    """The exact prompts of one run, from its workload kind's generator (deterministic from the workload
    seed and repeat) or SGLang's benchmark's draws (``load.draws: random_ids``: :func:`random_ids_draws`), and the
    open-loop schedule those draws gave (None: kvlab.load draws the send offsets from the load's own seed)."""
    load = run.workload.load
    if load is not None and load.draws == "random_ids":
        prompts, schedule = random_ids_draws(run)
    else:
        prompts = run.workload.generate(vocab_size, seed=run.workload.seed * 1000 + run.repeat)
        schedule = run.workload.replay_schedule()  # a trace's own timestamps (kind trace without a load), else None
    if load is not None and load.prompt_form == "text":  # decoded by the model's tokenizer
        prompts = as_text(prompts, Path(run.engine.model_arg) / "tokenizer.json", exact=load.text_lengths == "exact")
    return prompts, schedule


def prompts_for(run: RunSpec, vocab_size: int) -> list[Prompt]:
    """The exact prompts of one run (:func:`sending_for`)."""
    return sending_for(run, vocab_size)[0]


def vocab_size(run: RunSpec) -> int:
    cfg = run.engine.local_config()
    # A hub model on a GPU host: ids below 1000 exist in every tokenizer kvlab targets.
    return int(cfg["vocab_size"]) if cfg else 1000


def run_row(
    run: RunSpec,
    prompts: list[Prompt],
    status: str,
    attempts: int,
    cause: str | None,
    version: str | None,
    batch: BatchResult | None,
    deltas: dict,
    notes: str,
    kv_pool_tokens: int | None = None,
    load: LoadOutcome | None = None,
) -> pl.DataFrame:
    """The run's RUNS row; ``prompts`` are what it sends (or would have sent), whose shared tokens it records;
    ``kv_pool_tokens``, the KV pool its server reported (:class:`kvlab.campaign.ServerRecord`). Under a load
    (``load``, kvlab.load) the latencies, counts and SLO count cover the requests inside its steady-state window
    only, and ``window_s`` is the time the rates divide by (kvlab.schema.run_rates); ``batch_prompt_tokens`` and
    ``batch_output_tokens`` sum every request sent, as the server's counter deltas do."""
    w = run.workload
    summary = _summary(run, batch, load)
    row = {
        **_server_columns(run, version, kv_pool_tokens),
        "context_label": run.context_label,
        "context_tokens": run.context_tokens,
        "scale_factor": run.scale_factor,
        "mode": w.kind,
        "batch_size": w.in_flight,  # fixed_batch: all batch_size at once
        "shared_prefix_tokens": shared_tokens(prompts),
        "reusable_prompt_tokens": _reusable(prompts, batch, load),
        "prompt_form": prompt_form(prompts),
        "reasoning_tokens": (
            sum_reported([r.reasoning_tokens for r in batch.records]) if batch and w.splits_reasoning else None
        ),
        "prompt_tokens": w.prompt_len,
        "output_tokens": w.output_tokens,
        "repeat": run.repeat,
        "attempts": attempts,
        "status": status,
        "failure_cause": cause,
        "started_at": batch.started_at if batch else datetime.now(timezone.utc).isoformat(),
        "client_loop_lag_ms": batch.loop_lag_max_ms if batch else None,
        "notes": notes or None,
        **summary,
        # the server's counter deltas that have a RUNS column (cached_tokens duplicates prefix hits)
        **{
            f"server_{k}": (None if v is None else int(v))
            for k, v in deltas.items()
            if f"server_{k}" in RUNS.polars_schema
        },
    }
    if status != "ok":
        row["batch_time_s"] = None
    # its rates beside its counts, by the one definition (a failed run, without a batch time, has none)
    return run_rates(RUNS.conform(pl.DataFrame([row]), f"run {run.key}"))


def _summary(run: RunSpec, batch: BatchResult | None, load: LoadOutcome | None) -> dict:
    """The run's latency, count and SLO columns (:func:`kvlab.client.summarize`): under a load, of the requests inside
    its steady-state window, with the load's own columns; the batch's token sums over every request sent."""
    slo = run.slo.model_dump() if run.slo else None
    summary = summarize(batch.records, batch.batch_time_s, slo) if batch else {}
    if batch and load is not None:
        inside = set(load.window.counted)
        summary = summarize([r for r in batch.records if r.request_index in inside], batch.batch_time_s, slo)
        summary |= load.columns()
    if batch:  # the whole batch, whatever the window counts: what the server's counter deltas cover
        summary |= {
            "batch_prompt_tokens": sum_reported([r.prompt_tokens for r in batch.records]),
            "batch_output_tokens": sum_reported([r.output_tokens for r in batch.records]),
        }
    if not batch and slo:  # a run stored failed without a batch still says what SLO it was to meet
        summary = {"slo_ttft_ms": slo["ttft_ms"], "slo_tpot_ms": slo["tpot_ms"]}
    return summary


def _reusable(prompts: list[Prompt], batch: BatchResult | None, load: LoadOutcome | None) -> int | None:
    """A trace run's reusable prompt tokens (RUNS.reusable_prompt_tokens) over the requests its cached tokens count:
    the successful ones, inside the load's window where a load is set; None for other kinds or without a batch."""
    if batch is None or not any(p.reusable_tokens is not None for p in prompts):
        return None
    reusable = {p.index: p.reusable_tokens or 0 for p in prompts}
    inside = set(load.window.counted) if load is not None else None
    ok = [r.request_index for r in batch.records if r.status == "ok" and (inside is None or r.request_index in inside)]
    return sum(reusable.get(i, 0) for i in ok)


def _device(run: RunSpec) -> tuple[str | None, str | None, int | None]:
    """(device kind, accelerator, GPU count) of the run, from this host's facts (the manifest's)."""
    e = run.engine
    facts = host.describe()
    kind = host.device_kind(e.model_dump(mode="json"), facts)
    if kind is None:  # a server kvlab did not start, on a host it does not see: the device the experiment states
        return run.device.kind, run.device.accelerator, run.device.count
    # what computed it here, from this host's facts (the manifest's)
    accelerator, count = (host.gpu_model(facts), host.gpu_count()) if kind == "gpu" else (None, None)
    return kind, accelerator, count


def _server_columns(run: RunSpec, version: str | None, kv_pool_tokens: int | None) -> dict:
    """The RUNS columns that say what served the run: its device, model, engine and the engine's settings."""
    e = run.engine
    kind, accelerator, count = _device(run)
    return {
        "source": "measured",
        "experiment": run.experiment,
        "run_id": run.key,
        "hardware": run.hardware,
        "gpu_count": count,
        "device_kind": kind,
        "accelerator": accelerator,
        "model": e.served_model_name or Path(e.model).name,
        "engine": e.name,
        "engine_version": version,
        "tp": e.tp,
        "dcp": e.dcp,
        "dp": e.dp,
        "dtype": e.served_dtype() or (e.local_config() or {}).get("torch_dtype"),
        "mem_util": e.mem_util,
        "kv_budget_bytes": e.kv_cache_bytes,
        "kv_pool_tokens": kv_pool_tokens,
        "prefix_caching": e.prefix_caching,
    }


def attempt_row(run: RunSpec, n: int, failure: Failure | None, elapsed_s: float, backoff_s: float | None) -> dict:
    """One row of a run's ATTEMPTS table: attempt ``n`` (1-based), ok or failed with ``failure``'s cause."""
    return {
        "run_id": run.key,
        "attempt": n,
        "status": "failed" if failure else "ok",
        "failure_cause": failure.cause if failure else None,
        "detail": failure.detail if failure else None,
        "fits_max_len": failure.fits_max_len if failure else None,
        "elapsed_s": elapsed_s,
        "backoff_s": backoff_s,
    }
