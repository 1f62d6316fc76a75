"""Data folders the notebook tests run on: fixed measured runs (made up, and real ones from tests/fixtures) beside
the repository's reference tables and catalog."""

import json
import shutil
from pathlib import Path

import polars as pl

from kvlab import store
from kvlab.paths import DATA_DIR
from payloads import PAYLOAD, SPOOFED_FOLDER

#: Real measured runs of the four CPU experiments (see tests/fixtures/README.md).
FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs"
#: REAL runs of data/experiments/cpu_long_context.yaml at 1,024, 2,048 and 3,200 tokens (tests/fixtures/README.md)
LONG_CONTEXT_RUNS = Path(__file__).parent / "fixtures" / "long_context" / "runs" / "cpu_long_context"
#: Another fresh clone's real cpu_long_context runs (`make report` at 30ed9e4, 2026-12-07, AMD EPYC): the engines'
#: measured batch times cross between 1,024 and 2,048 tokens, so report 01 has a measured crossover
CROSSING_CONTEXT_RUNS = Path(__file__).parent / "fixtures" / "crossing_context" / "runs" / "cpu_long_context"
#: The fixture run the shared fixture data holds a copy of (:func:`write_fixture_data`).
COPIED_RUN = "4ed47393244f"


def copy_reference(data: Path) -> Path:
    """``data`` with the repository's reference tables and catalog (no runs)."""
    shutil.copytree(DATA_DIR / "reference", data / "reference")
    shutil.copytree(DATA_DIR / "catalog", data / "catalog")
    return data


#: Fixed measured runs of both engines: (engine, mem_util, context tokens, batch time s, failed attempts before ok,
#: vLLM preemptions). vllm wins at 32K and 64K, sglang-jax at 200K (6 s vs 8 s): a crossover between 64K and 200K.
TWO_ENGINES = [
    ("vllm", 0.92, 1024, 1.0, 0, 0),
    ("vllm", 0.92, 2048, 2.0, 0, 0),
    ("vllm", 0.92, 6400, 8.0, 0, 2),
    ("vllm", 0.95, 6400, 6.0, 0, 0),
    ("sglang-jax", 0.92, 1024, 3.0, 0, None),
    ("sglang-jax", 0.92, 2048, 4.0, 0, None),
    ("sglang-jax", 0.92, 6400, 6.0, 0, None),
    ("sglang-jax", 0.95, 6400, 5.0, 1, None),
]
LABELS = {1024: "32K", 2048: "64K", 6400: "200K"}


def write_two_engine_runs(data):
    """A data folder with the reference tables and TWO_ENGINES as measured runs of cpu_long_context."""
    copy_reference(data)
    for i, (engine, mem, ctx, t, failed, preempt) in enumerate(TWO_ENGINES):
        run_id = f"r{i}"
        counters = (
            {}
            if engine == "sglang-jax"
            else {  # sglang-jax serves no /metrics: every counter null
                "server_preemptions": [preempt],
                "server_prompt_tokens": [4 * (ctx - 64)],
                "server_generation_tokens": [256],
                "server_prefix_cache_queries": [4 * (ctx - 64)],
                "server_prefix_cache_hits": [0],
            }
        )
        run = pl.DataFrame(
            {
                "source": ["measured"],
                "experiment": ["cpu_long_context"],
                "run_id": [run_id],
                "hardware": ["CPU x86_64 (test)"],
                "model": ["tiny-llama"],
                "engine": [engine],
                "mem_util": [mem],
                "kv_budget_bytes": [8388608 if mem == 0.92 else 20971520],  # cpu_long_context's budgets, as recorded
                "context_label": [LABELS[ctx]],
                "context_tokens": [ctx],
                "scale_factor": [32.0],
                "mode": ["fixed_batch"],
                "batch_size": [4],
                "prompt_tokens": [ctx - 64],
                "output_tokens": [64],
                "repeat": [0],
                "attempts": [failed + 1],
                "status": ["ok"],
                "batch_time_s": [t],
                "ttft_mean_ms": [100.0 * t],
                "e2e_mean_ms": [1000.0 * t],
                **counters,
            }
        )
        attempts = pl.DataFrame(
            {
                "run_id": [run_id] * (failed + 1),
                "attempt": list(range(1, failed + 2)),
                "status": ["failed"] * failed + ["ok"],
                "failure_cause": ["runtime_oom"] * failed + [None],
            }
        )
        store.write_run(data / "runs" / "cpu_long_context", run_id, run, attempts=attempts)
    return data


def make_hostile(data: Path) -> Path:
    """``data`` with tests/payloads.PAYLOAD (an ``<img onerror>``, a ``<script>``, a ``javascript:`` markdown link)
    appended to every text a reader sees that comes from data rather than from kvlab: each measured run's
    hardware label (the experiment file's ``hardware:``) and engine version (what the server reported), each
    sweep's host facts (its CPU model) and each experiment's ``description:`` in its manifest, and every reference
    CSV's statement and citation (the source's title). Numbers, names that join tables and the model name are
    left alone, so every figure the reports compute stays the same."""
    hostile = pl.col("hardware", "engine_version") + f" {PAYLOAD}"
    for run in sorted((data / "runs").glob("*/*/run.parquet")):
        pl.read_parquet(run).with_columns(hostile).write_parquet(run)
    for path in sorted((data / "runs").glob("*/" + store.MANIFEST_FILE)):
        manifest = json.loads(path.read_text())
        manifest["description"] = f"{manifest.get('description') or ''} {PAYLOAD}"
        for sweep in manifest.get("sweeps", []):
            if sweep.get("host"):
                sweep["host"]["cpu"] = f"{sweep['host'].get('cpu')} {PAYLOAD}"
        path.write_text(json.dumps(manifest, indent=1))
    for csv in sorted((data / "reference").glob("*.csv")):
        frame = pl.read_csv(csv)
        text = [c for c in ("statement", "citation") if c in frame.columns]
        frame.with_columns(pl.col(text) + f" {PAYLOAD}").write_csv(csv)
    return data


def write_long_context_data(data: Path, runs: Path = LONG_CONTEXT_RUNS) -> Path:
    """A data folder with the reference tables, the catalog and real three-context cpu_long_context runs (``runs``)."""
    copy_reference(data)
    shutil.copytree(runs, data / "runs" / "cpu_long_context")
    return data


def write_fixture_data(data: Path) -> Path:
    """A data folder with the reference tables, the catalog and the real measured runs of tests/fixtures, plus
    two variants of the documents for parameters that choose one: ``article_b300_alt`` (the B300 table with
    every SGLang batch time 1.3x longer, and its claims) and ``article_kv_design_alt`` (the design article's claims
    without its last one). Hostile: its text carries tests/payloads.PAYLOAD (:func:`make_hostile`), so every page
    built from it does too, and a copy of one run sits beside it (``cp -a``) in a folder whose name holds U+202E
    (payloads.SPOOFED_FOLDER): every report builds without it, the index lists it (issue 56)."""
    copy_reference(data)
    shutil.copytree(FIXTURE_RUNS, data / "runs")
    make_hostile(data)
    multi_turn = data / "runs" / "cpu_multi_turn"
    shutil.copytree(multi_turn / COPIED_RUN, multi_turn / SPOOFED_FOLDER, symlinks=True)
    ref = data / "reference"
    table = pl.read_csv(ref / "article_b300.csv")
    table.with_columns(
        pl.lit("article_b300_alt").alias("experiment"),
        pl.col("run_id").str.replace("article_b300", "article_b300_alt"),
        pl.when(pl.col("engine") == "sglang").then(pl.col("batch_time_s") * 1.3).otherwise(pl.col("batch_time_s")),
    ).write_csv(ref / "article_b300_alt.csv")
    claims = pl.read_csv(ref / "article_b300_claims.csv")
    claims.with_columns(pl.lit("article_b300_alt").alias("experiment")).write_csv(ref / "article_b300_alt_claims.csv")
    design = pl.read_csv(ref / "article_kv_design_claims.csv")
    design.head(len(design) - 1).with_columns(pl.lit("article_kv_design_alt").alias("experiment")).write_csv(
        ref / "article_kv_design_alt_claims.csv"
    )
    return data


#: SYNTHETIC capacity runs (made up for the tests, not measured): cpu_capacity's shape, both CPU engines x 2 contexts
#: x 2 memory settings x a closed-loop ladder of 1, 2, 4 in flight, SLO TTFT 5 s / TPOT 200 ms. Per rung: (engine,
#: context tokens, mem_util, in flight, window s, requests within the SLO of the 2 x in flight counted, median TPOT ms,
#: stopped past saturation, telemetry peaks: KV usage, waiting, preemptions over the run). KV pools (as the engines
#: report them): 8,192 tokens at 0.92 and 20,480 at 0.95, so the ceilings are 8 / 20 at 1,024 tokens and 2 / 6 at
#: 3,200; only 3,200 tokens at 0.92 with 4 in flight is past its ceiling, and both engines queue there.
#: vLLM carries the more goodput at 64K (2.0 vs 1.0 req/s at 4 in flight) and at 200K/0.92 (0.4 vs 0.25 req/s at
#: 2), sglang at 200K/0.95 (1.0 vs 0.8 req/s at 4): the map's winner changes.
CAPACITY = [
    *[
        ("vllm", 1024, m, c, 4.0, 2 * c, t, None, 0.1 * c, 0, 0)
        for m in (0.92, 0.95)
        for c, t in ((1, 20.0), (2, 30.0), (4, 50.0))
    ],
    *[
        ("sglang", 1024, m, c, 8.0, 2 * c, t, None, 0.1 * c, 0, 0)
        for m in (0.92, 0.95)
        for c, t in ((1, 40.0), (2, 60.0), (4, 100.0))
    ],
    ("vllm", 3200, 0.92, 1, 10.0, 2, 50.0, None, 0.39, 0, 0),
    ("vllm", 3200, 0.92, 2, 10.0, 4, 80.0, None, 0.78, 0, 0),
    ("vllm", 3200, 0.92, 4, 10.0, 4, 150.0, None, 1.0, 2, 3),
    ("vllm", 3200, 0.95, 1, 10.0, 2, 50.0, None, 0.16, 0, 0),
    ("vllm", 3200, 0.95, 2, 10.0, 4, 80.0, None, 0.31, 0, 0),
    ("vllm", 3200, 0.95, 4, 10.0, 8, 120.0, None, 0.62, 0, 0),
    ("sglang", 3200, 0.92, 1, 16.0, 2, 90.0, None, 0.39, 0, 0),
    ("sglang", 3200, 0.92, 2, 16.0, 4, 120.0, None, 0.78, 0, 0),
    (
        "sglang",
        3200,
        0.92,
        4,
        16.0,
        2,
        250.0,
        "past saturation: p90 TTFT 16000 ms of 8 finished requests > 3 x the SLO's 5000 ms",
        0.98,
        2,
        1,
    ),
    ("sglang", 3200, 0.95, 1, 16.0, 2, 90.0, None, 0.16, 0, 0),
    ("sglang", 3200, 0.95, 2, 16.0, 4, 120.0, None, 0.31, 0, 0),
    ("sglang", 3200, 0.95, 4, 8.0, 8, 110.0, None, 0.62, 0, 0),
]
CAPACITY_LABELS = {1024: "64K", 3200: "200K"}


def capacity_frames() -> list[tuple[pl.DataFrame, pl.DataFrame]]:
    """SYNTHETIC: :data:`CAPACITY` as (RUNS row, telemetry samples) per run: 64 output tokens per request, each rung
    3 x its level requests of which the first wave (its level) is warm-up, so 2 x level are counted; five telemetry
    samples 0.5 s apart whose KV usage climbs to the peak, whose waiting queue holds the peak in the middle two and
    whose preemption counter rises by the run's preemptions."""
    out = []
    for i, (engine, ctx, mem, c, window, within, tpot, stop, kv, waiting, preempt) in enumerate(CAPACITY):
        counted = 2 * c
        run = pl.DataFrame(
            {
                "source": ["measured"],
                "experiment": ["cpu_capacity"],
                "run_id": [f"cap{i:02d}"],
                "hardware": ["CPU x86_64 (test)"],
                "device_kind": ["cpu"],
                "model": ["tiny-llama"],
                "engine": [engine],
                "tp": [1],
                "dcp": [1],
                "mem_util": [mem],
                "kv_budget_bytes": [8388608 if mem == 0.92 else 20971520],
                "kv_pool_tokens": [8192 if mem == 0.92 else 20480],
                "context_label": [CAPACITY_LABELS[ctx]],
                "context_tokens": [ctx],
                "scale_factor": [64.0],
                "mode": ["fixed_batch"],
                "batch_size": [3 * c],
                "prompt_tokens": [ctx - 64],
                "output_tokens": [64],
                "repeat": [0],
                "attempts": [1],
                "status": ["ok"],
                "batch_time_s": [window + 2.0],
                "load_mode": ["closed"],
                "load_concurrency": [c],
                "requests_warmup": [c],
                "requests_outside_window": [0],
                "window_s": [window],
                "load_stop": [stop],
                "tpot_p50_ms": [tpot],
                "ttft_p50_ms": [100.0 * c],
                "slo_ttft_ms": [5000.0],
                "slo_tpot_ms": [200.0],
                "requests_within_slo": [within],
                "requests_ok": [counted],
                "requests_failed": [0],
                "served_output_tokens": [64 * counted],
                "started_at": [f"2026-12-01T10:{i:02d}:00"],
            }
        )
        samples = pl.DataFrame(
            {
                "t_s": [0.0, 0.5, 1.0, 1.5, 2.0],
                "kv_cache_usage": [round(kv * k / 5, 6) for k in range(1, 6)],
                "preemptions_total": [10.0, 10.0, 10.0, 10.0 + preempt, 10.0 + preempt],
                "requests_running": [float(min(c, 8192 // ctx if mem == 0.92 else 20480 // ctx))] * 5,
                "requests_waiting": [0.0, float(waiting), float(waiting), 0.0, 0.0],
                "error": [None] * 5,
            },
            schema_overrides={"error": pl.String},
        )
        out.append((run, samples))
    return out


def write_capacity_runs(data: Path) -> Path:
    """``data`` (reference tables in it already, or copied here) with :func:`capacity_frames` stored as runs of
    cpu_capacity, each with its telemetry.csv and telemetry.json as kvlab.runner.write_telemetry writes them."""
    import json
    import tempfile

    if not (data / "reference").exists():
        copy_reference(data)
    with tempfile.TemporaryDirectory() as tmp:
        for run, samples in capacity_frames():
            rid = run["run_id"][0]
            folder = Path(tmp) / rid
            folder.mkdir()
            samples.write_csv(folder / store.TELEMETRY_FILE)
            (folder / store.TELEMETRY_INFO_FILE).write_text(
                json.dumps(
                    {
                        "available": True,
                        "reason": None,
                        "source": "GET /metrics, sampled during the batch (SYNTHETIC)",
                        "interval_s": 0.5,
                        "samples": samples.height,
                        "samples_ok": samples.height,
                    }
                )
            )
            store.write_run(
                data / "runs" / "cpu_capacity",
                rid,
                run,
                files={f: folder / f for f in (store.TELEMETRY_FILE, store.TELEMETRY_INFO_FILE)},
            )
    return data


#: SYNTHETIC accuracy-probe records (made up for the tests, not measured) of CAPACITY's four configurations, as a
#: sweep's manifest keeps them: per engine, 0.92 is the reference (first in the file's order); vLLM at 0.95 differs
#: at token 7, where the reference's top-2 margin is 0.05 nats (a near-tie); SGLang at 0.95 differs from token 3 on,
#: where the margin is a clear 1.0: it computes something else, and it wins 200K / 0.95 on the map.
PROBED = [("vllm", 0.92, None), ("sglang", 0.92, None), ("vllm", 0.95, 7), ("sglang", 0.95, 3)]
PROBE_REF_TOKENS = [f" t{i}" for i in range(16)]
PROBE_REF_MARGINS = [0.05 if i == 7 else 1.0 for i in range(16)]


def write_capacity_probes(data: Path) -> Path:
    """:data:`PROBED` written into cpu_capacity's manifest under ``data`` (two sweeps, two starts each; the
    configurations listed in that order), as kvlab.campaign writes it."""
    import json

    from kvlab import probe

    servers = []
    for i, (engine, mem, diverge) in enumerate(PROBED):
        tokens = (
            PROBE_REF_TOKENS if diverge is None else PROBE_REF_TOKENS[:diverge] + [f" u{j}" for j in range(diverge, 16)]
        )
        outs = [probe.ProbeOutput(p, tuple(tokens), tuple(PROBE_REF_MARGINS)) for p in range(len(probe.PROBE_PROMPTS))]
        config = {
            "engine": engine,
            "engine_label": engine,
            "model": "tiny-llama",
            "tp": 1,
            "dcp": 1,
            "dp": 1,
            "mem_util": mem,
            "kv_budget_bytes": 8388608 if mem == 0.92 else 20971520,
            "prefix_caching": True,
        }
        servers.append(
            {
                "server_key": f"{engine}{mem}",
                "engine": engine,
                "experiments": ["cpu_capacity"],
                "started_at": f"2026-12-01T10:0{i}",
                "probe": probe.record(outs, config),
            }
        )
    path = data / "runs" / "cpu_capacity" / store.MANIFEST_FILE
    old = json.loads(path.read_text()) if path.exists() else {"experiment": "cpu_capacity"}
    store.write_json_atomic(
        path,
        old
        | {
            "configurations": [s["server_key"] for s in servers],
            "sweeps": [{"servers": servers[:2]}, {"servers": servers[2:]}],
        },
    )
    return data
