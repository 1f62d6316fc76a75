"""Report 03's typed result: every frame and value its page reads, declared once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from kvlab.studies.result import StudyResult

REPORT = "03_memory_utilisation"


@dataclass(frozen=True, kw_only=True)
class MemoryUtilisationResult(StudyResult):
    """Memory setting 0.92 against 0.95: the article's claims, the modelled headroom, the measured study.

    Frames: ``claims`` (the article's memory claims), ``article`` (its published rows), ``measured`` and
    ``attempts`` (the runs compared at two settings and their launch attempts), ``stats`` (per engine, context and
    setting), ``comparison`` and ``ratios`` (each engine's lower setting against its higher), ``by_setting``
    (retries and failures per setting), ``spreads`` (batch-time CV at both settings, where repeated), ``causes``
    (failed attempts by cause), ``counters_missing`` (server counters an engine never reported), ``budgets`` (what
    each setting configures here), ``gpu_left`` (NVML: memory left outside the engine, GPU runs only),
    ``headroom`` (the model's KV room, with ranges over the memory sets), ``headroom_shown`` (its capacities to
    three significant figures), ``headroom_printed`` (the page's table: every modelled count with its range) and
    ``outside`` (per setting, without DCP: KV pool, memory left outside the target, the assumed need there).

    Values: ``gpu`` and ``model`` (the modelled set-up), ``setting`` (what the memory setting is on this host:
    kv_budget, host_reserve, gpu, mixed, or None), ``gpus_per_run`` (GPU runs: the GPUs per run, in words),
    ``runs`` and ``retries`` (over every measured run)."""

    report: ClassVar[str] = REPORT
    claims: pl.DataFrame
    article: pl.DataFrame
    measured: pl.DataFrame
    attempts: pl.DataFrame
    stats: pl.DataFrame
    comparison: pl.DataFrame
    ratios: pl.DataFrame
    by_setting: pl.DataFrame
    spreads: pl.DataFrame
    causes: pl.DataFrame
    counters_missing: pl.DataFrame
    budgets: pl.DataFrame
    gpu_left: pl.DataFrame
    headroom: pl.DataFrame
    headroom_shown: pl.DataFrame
    headroom_printed: pl.DataFrame
    outside: pl.DataFrame
    gpu: str
    model: str
    setting: str | None
    gpus_per_run: str
    runs: int
    retries: int
