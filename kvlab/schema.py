"""The one results schema shared by published, measured and modelled figures.

Every table kvlab reads or writes is checked against a :class:`Table` defined here, so
a figure from an article, a real engine run and a model prediction can sit in one frame
and never be mixed silently: the ``source`` column says which is which.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import polars as pl

from kvlab.device import DEVICE_KINDS
from kvlab.engines import ENGINE_NAMES
from kvlab.workloads import KINDS

SOURCES = ("published", "measured", "modelled")
ENGINES = ENGINE_NAMES
STATUSES = ("ok", "failed")
#: How a failed request's error is classified (kvlab.client.ERROR_KINDS maps error prefixes to these).
REQUEST_ERROR_KINDS = (
    "http_status",
    "error_event",
    "aborted",
    "incomplete",
    "stalled",
    "timeout",
    "dropped",
    "connection",
    "unparseable",
    "malformed",
    "oversized",
    "client",
)


class SchemaError(ValueError):
    """A table does not match its schema; the message names the file and the problem."""


@dataclass(frozen=True)
class Column:
    name: str
    dtype: pl.DataType
    required: bool  # a value must be present in every row
    doc: str
    allowed: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    #: Columns an earlier kvlab version wrote and this one no longer has: dropped on reading, so stored files stay
    #: readable (name -> why it went).
    retired: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def polars_schema(self) -> dict[str, pl.DataType]:
        return {c.name: c.dtype for c in self.columns}

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.polars_schema)

    def conform(self, df: pl.DataFrame, origin: str | Path = "<frame>") -> pl.DataFrame:
        """Return ``df`` with every schema column in schema order and dtype, or raise.

        Missing optional columns are added as nulls and retired columns are dropped; unknown columns, missing
        required columns, values that cannot be cast, nulls in required columns and values outside an allowed set
        raise :class:`SchemaError` naming ``origin``.
        """
        df = df.drop([name for name, _ in self.retired if name in df.columns])
        unknown = [c for c in df.columns if c not in self.polars_schema]
        if unknown:
            raise SchemaError(f"{origin}: unknown column(s) {unknown} for table '{self.name}'")
        missing = [c.name for c in self.columns if c.required and c.name not in df.columns]
        if missing:
            raise SchemaError(f"{origin}: missing required column(s) {missing} for table '{self.name}'")
        # one select casts every column (and adds the missing ones as nulls); where it fails, the column-by-column
        # pass below finds the column to name. A frame without any schema column gets its nulls from that pass too
        # (a select of literals alone would make one row).
        out = None
        if any(c.name in df.columns for c in self.columns):
            try:
                out = df.select(_cast_exprs(self, tuple(df.columns)))
            except Exception:  # polars raises several kinds here
                out = None
        if out is None:
            out = pl.DataFrame([self._cast(df, col, origin) for col in self.columns])
        # the checks in one pass over the frame; the first column (in schema order) that fails one is named
        checks = _check_exprs(self)
        flags = out.select(checks).row(0, named=True) if out.height and checks else {}
        for col in self.columns:
            series = out.get_column(col.name)
            if flags.get(f"null:{col.name}"):
                row = int(series.is_null().arg_true()[0])
                raise SchemaError(f"{origin}: required column '{col.name}' is empty in row {row + 1}")
            if flags.get(f"in:{col.name}"):
                bad = series.drop_nulls().filter(~series.drop_nulls().is_in(list(col.allowed)))
                raise SchemaError(f"{origin}: column '{col.name}' has value {bad[0]!r}; allowed: {list(col.allowed)}")
        return out

    @staticmethod
    def _cast(df: pl.DataFrame, col: "Column", origin: str | Path) -> pl.Series:
        """One column of ``df`` as ``col`` types it (nulls where ``df`` lacks it), or a :class:`SchemaError` naming
        the column and its first values."""
        if col.name not in df.columns:
            return pl.Series(col.name, [None] * df.height, dtype=col.dtype)
        try:
            return df.get_column(col.name).cast(col.dtype, strict=True).alias(col.name)
        except Exception as exc:  # polars raises several kinds here
            bad = df.get_column(col.name).head(3).to_list()
            raise SchemaError(
                f"{origin}: column '{col.name}' cannot be read as {col.dtype} (first values {bad}): {type(exc).__name__}"
            ) from None


@lru_cache(maxsize=256)
def _cast_exprs(table: Table, present: tuple[str, ...]) -> tuple[pl.Expr, ...]:
    """:meth:`Table.conform`'s casts for a frame with the columns ``present``: each schema column cast (strict), or
    nulls of its type where the frame lacks it. Built once per table and set of columns: a sweep's folder of runs
    reads the same columns from every file."""
    return tuple(
        pl.col(c.name).cast(c.dtype, strict=True) if c.name in present else pl.lit(None, dtype=c.dtype).alias(c.name)
        for c in table.columns
    )


@lru_cache(maxsize=64)
def _check_exprs(table: Table) -> tuple[pl.Expr, ...]:
    """:meth:`Table.conform`'s checks, one boolean each: a required column with a null (``null:<name>``), a value
    outside a column's allowed set (``in:<name>``)."""
    return (
        *(pl.col(c.name).is_null().any().alias(f"null:{c.name}") for c in table.columns if c.required),
        *(
            (pl.col(c.name).is_not_null() & ~pl.col(c.name).is_in(list(c.allowed))).any().alias(f"in:{c.name}")
            for c in table.columns
            if c.allowed is not None
        ),
    )


def _c(name: str, dtype: pl.DataType, doc: str, *, required: bool = False, allowed=None) -> Column:
    return Column(name, dtype, required, doc, tuple(allowed) if allowed else None)


Str, Int, Float = pl.String(), pl.Int64(), pl.Float64()

#: One row per run: one fixed batch (or concurrency run) at one configuration, or one
#: published / modelled figure for such a configuration. A run's rates (requests_per_s,
#: output_tokens_per_s, goodput_requests_per_s) are derived from its counts and time by
#: :func:`kvlab.schema.run_rates`, the one definition, and stored beside them (runs stored
#: before get them on reading, kvlab.store.load_runs).
#: What a claim measures (CLAIMS.metric).
CLAIM_METRICS = (
    "batch_time",
    "throughput",
    "oom_retries",
    "batch_time_spread",
    "e2e_latency",
    "cache_hit_share",
    "requests_reusing_prefix",
    "requests_per_s",
    "dcp",
)

#: A load.search run's result (kvlab.search.columns): null on every other run. The search run itself sends
#: nothing; each probe is a run of its own, named in search_probes.
SEARCH_COLUMNS = (
    _c("search_share", Float, "load.search: the SLO attainment share the Wilson 95% lower bound must reach"),
    _c("search_highest_passing", Float, "load.search: the highest level that passed (null: none passed)"),
    _c("search_first_failing", Float, "load.search: the lowest level that failed (null: it passed at its limit)"),
    _c("search_lower_bound", Float, "load.search: the Wilson 95% lower bound of attainment at the passing level"),
    _c("search_n", Int, "load.search: requests counted at the passing level (failed ones included)"),
    _c("search_goodput_requests_per_s", Float, "load.search: goodput of the passing level's run"),
    _c("search_output_tokens_per_s", Float, "load.search: output tokens/s of the passing level's run"),
    _c("search_probes", Str, "load.search: JSON list of the probes in order (level, run_id, within, n, lower, ...)"),
    _c("search_stop", Str, "load.search: why the search ended"),
    _c("search_mechanism", Str, "load.search: what broke the SLO at the first failing level, or 'not determined'"),
)

RUNS = Table(
    "runs",
    (
        _c("source", Str, "published | measured | modelled", required=True, allowed=SOURCES),
        _c("experiment", Str, "experiment or document this row belongs to", required=True),
        _c(
            "run_id",
            Str,
            "unique within (source, experiment); for measured runs a hash of the full run spec",
            required=True,
        ),
        _c(
            "hardware",
            Str,
            "the hardware label, free text for readers (the experiment's ``hardware:``, the "
            "document's words); never read to decide CPU or GPU: device_kind says that",
            required=True,
        ),
        _c("gpu_count", Int, "number of GPUs serving (null on CPU)"),
        _c(
            "device_kind",
            Str,
            "what computed the run: cpu | gpu (kvlab.device). Measured: from the host's facts (the "
            "GPUs NVML sees where the run was measured) and the engine spec (an engine pinned to the CPU: sglang-jax's "
            "--device cpu, JAX_PLATFORMS=cpu); for a server kvlab did not start, the experiment's ``device``. "
            "Published: the document's (gpu where it states GPUs). Modelled: the catalog entry's kind. Runs stored "
            "before it was recorded get it on reading (kvlab.store)",
            allowed=DEVICE_KINDS,
        ),
        _c(
            "accelerator",
            Str,
            "the GPU model that computed the run (measured: the name NVML reports, e.g. 'NVIDIA "
            "H100 80GB HBM3'; for a server kvlab did not start, the experiment's device.accelerator; published: the "
            "document's; modelled: the catalog GPU's name); null on CPU or where not known",
        ),
        _c("model", Str, "served model", required=True),
        _c("engine", Str, "inference engine", required=True, allowed=ENGINES),
        _c("engine_version", Str, "engine version reported by the server"),
        _c("tp", Int, "tensor-parallel size"),
        _c("dcp", Int, "decode-context-parallel size (1 = off)"),
        _c("dp", Int, "data-parallel size: engine replicas behind one server (1 = off)"),
        _c(
            "dtype",
            Str,
            "compute and KV dtype the engine ran in (its --dtype, else the local model's own; float32 "
            "where a CPU lacks native bfloat16 and the spec says bfloat16-if-native)",
        ),
        _c("mem_util", Float, "memory-utilisation setting (vLLM gpu-memory-utilization, SGLang mem-fraction-static)"),
        _c(
            "kv_budget_bytes",
            Int,
            "KV-cache budget the experiment configures (its engine's kv_cache_bytes, in the "
            "model's dtype; the engine is given twice this where bfloat16-if-native computes in float32); null where "
            "the engine sizes its cache itself. What was asked for, not the pool the engine reports",
        ),
        _c(
            "kv_pool_tokens",
            Int,
            "KV pool in tokens as the serving engine reported it at start-up (vLLM's 'KV cache "
            "size: N tokens', SGLang's max_total_num_tokens; the smallest where replicas report several); null where "
            "it reported none or for runs stored before it was recorded. What the engine made, beside kv_budget_bytes",
        ),
        _c("prefix_caching", pl.Boolean(), "prefix / radix cache enabled"),
        _c("context_label", Str, "context as the source names it, e.g. '64K'", required=True),
        _c("context_tokens", Int, "nominal context length in tokens (K = 1024)", required=True),
        _c("scale_factor", Float, "full-scale context / this row's context (1 at full scale, e.g. 32 on CPU)"),
        _c("mode", Str, "workload kind: " + " | ".join(KINDS), allowed=KINDS),
        _c(
            "batch_size",
            Int,
            "requests in the batch (fixed batch) or most in flight (other kinds; multi_turn: conversations)",
        ),
        _c(
            "shared_prefix_tokens",
            Int,
            "prompt tokens every request shares by construction (shared_prefix: the common "
            "prefix; multi_turn: the document); what a prefix cache could reuse across requests",
        ),
        _c("reasoning_tokens", Int, "sum over the run of output tokens in the reasoning part (reasoning kind)"),
        _c("prompt_tokens", Int, "prompt tokens per request"),
        _c("output_tokens", Int, "requested output tokens per request"),
        _c("repeat", Int, "repeat index, 0-based"),
        _c("attempts", Int, "launch attempts until this outcome (1 = no retry)"),
        _c("status", Str, "ok | failed", required=True, allowed=STATUSES),
        _c("failure_cause", Str, "classified cause when failed (or of the last retried attempt)"),
        _c("batch_time_s", Float, "first send to last completion of the batch"),
        _c(
            "client_loop_lag_ms",
            Float,
            "the largest delay of the benchmark client's own event loop while the batch ran (how late a timer of "
            "kvlab.client.LOOP_LAG_INTERVAL_S woke, at most): a client too busy to read its sockets in time shows "
            "here, beside any request it called stalled; null for runs stored before it was recorded",
        ),
        _c(
            "load_mode",
            Str,
            "under a load (workload.load, kvlab.load): closed (a concurrency kept in flight) or open "
            "(arrivals at a rate); null: no load, the batch was sent at once or at workload.concurrency",
            allowed=("closed", "open"),
        ),
        _c("load_concurrency", Int, "closed loop: requests kept in flight; open loop: the cap on them, if any"),
        _c("load_rate_rps", Float, "open loop: mean arrivals per second"),
        _c("load_burstiness", Float, "open loop: shape of the gamma inter-arrival times (1: Poisson)"),
        _c("requests_warmup", Int, "under a load: the first requests sent, left out of every latency and count"),
        _c(
            "requests_outside_window",
            Int,
            "under a load: measured requests that started or finished outside the "
            "steady-state window, left out of every latency and count",
        ),
        _c(
            "window_s",
            Float,
            "under a load: the window the counts cover (load_window: steady, first measured send to "
            "last send; span, first measured send to last completion); the rates divide by it instead of "
            "batch_time_s (kvlab.schema.run_rates)",
        ),
        _c(
            "load_stop",
            Str,
            "under a load: why sending stopped early past saturation (kvlab.load.SaturationWatch); "
            "null: the point ran to its request-count or duration limit",
        ),
        _c(
            "load_phase",
            Str,
            "closed loop: together (the first wave sent at once, kvlab's loop and the peers') or "
            "staggered (each of the first wave sent once the one before has its first token); workload.load.phase. "
            "Null: no closed loop, or stored before it was recorded (then together)",
            allowed=("together", "staggered"),
        ),
        _c(
            "load_window",
            Str,
            "under a load: steady (window_s from the first measured send to the last send, "
            "requests finished inside it) or span (first measured send to the last completion, every measured "
            "request: the peers' benchmark duration); workload.load.window. Null: no load, or stored before it was "
            "recorded (then steady)",
            allowed=("steady", "span"),
        ),
        _c(
            "load_arrivals",
            Str,
            "open loop: drawn (the first request at once, each later one after its drawn gap: kvlab's and SGLang's "
            "benchmark) or scaled (the n gaps scaled so the last send falls at n / rate_rps: `vllm bench serve`); "
            "workload.load.arrivals. Null: no open loop, or stored before it was recorded (then drawn)",
            allowed=("drawn", "scaled"),
        ),
        _c(
            "load_connections",
            Str,
            "under a load: kept (requests reuse the client's open HTTP connections: kvlab's and `vllm bench serve`'s) "
            "or per_request (each request connects anew, inside its TTFT: SGLang's benchmark); "
            "workload.load.connections. Null: no load, or stored before it was recorded (then kept)",
            allowed=("kept", "per_request"),
        ),
        _c(
            "load_text_lengths",
            Str,
            "text prompts under a load: exact (the decoded text re-encoded until the server counts the prompt's "
            "length: kvlab's and `vllm bench serve`'s) or decoded (sent as decoded, the server's counts varying "
            "around it: SGLang's benchmark's random-ids); workload.load.text_lengths. Null: token ids, no load, or "
            "stored before it was recorded (then exact)",
            allowed=("exact", "decoded"),
        ),
        _c(
            "load_draws",
            Str,
            "under a load: whose random draws made the prompts and an open loop's gaps: kvlab (its own generators) or "
            "random_ids (SGLang's benchmark's random-ids, drawn as it draws them for the seed); workload.load.draws. "
            "Null: no load, or stored before it was recorded (then kvlab)",
            allowed=("kvlab", "random_ids"),
        ),
        _c(
            "prompt_form",
            Str,
            "how the prompts were sent: token_ids (the server's prompt length is exact), text "
            "(tokenised by the server, inside TTFT; workload.load.prompt_form) or chat; null for runs stored before "
            "it was recorded",
            allowed=("token_ids", "text", "chat", "chat+token_ids", "text+token_ids"),
        ),
        _c("prefill_time_s", Float, "modelled prefill part of batch time"),
        _c("decode_time_s", Float, "modelled decode part of batch time"),
        _c("ttft_mean_ms", Float, "mean time to first token"),
        _c("ttft_p50_ms", Float, "50th percentile time to first token (successful requests; numpy linear)"),
        _c("ttft_p90_ms", Float, "90th percentile time to first token"),
        _c("ttft_p99_ms", Float, "99th percentile time to first token"),
        _c("tpot_mean_ms", Float, "mean time per output token after the first"),
        _c("tpot_p50_ms", Float, "50th percentile time per output token after the first"),
        _c("tpot_p90_ms", Float, "90th percentile time per output token after the first"),
        _c("tpot_p99_ms", Float, "99th percentile time per output token after the first"),
        _c(
            "itl_p50_ms",
            Float,
            "50th percentile inter-token latency, per network read (every gap of every "
            "successful request, kvlab.client.itl_gaps_ms); null for runs stored before it was recorded",
        ),
        _c("itl_p90_ms", Float, "90th percentile inter-token latency, per network read"),
        _c("itl_p99_ms", Float, "99th percentile inter-token latency, per network read"),
        _c("e2e_mean_ms", Float, "mean request latency, send to last token"),
        _c("e2e_p50_ms", Float, "50th percentile request latency, send to last token"),
        _c("e2e_p90_ms", Float, "90th percentile request latency, send to last token"),
        _c("e2e_p99_ms", Float, "99th percentile request latency, send to last token"),
        _c("slo_ttft_ms", Float, "the experiment's SLO bound on TTFT (spec slo.ttft_ms); null when it states none"),
        _c("slo_tpot_ms", Float, "the experiment's SLO bound on TPOT (spec slo.tpot_ms); null when it states none"),
        _c(
            "requests_within_slo",
            Int,
            "successful requests meeting every bound of the SLO (kvlab.client.within_slo); "
            "goodput_requests_per_s = this / T (window_s under a load, else batch_time_s); null when the experiment "
            "states no SLO",
        ),
        _c("requests_ok", Int, "requests that completed"),
        _c("requests_failed", Int, "requests that failed (never dropped)"),
        _c("served_prompt_tokens", Int, "sum of usage.prompt_tokens over the run"),
        _c(
            "served_output_tokens",
            Int,
            "sum of usage.completion_tokens over the run, requests whose count cannot be "
            "right (requests.count_flag) left out",
        ),
        _c(
            "batch_prompt_tokens",
            Int,
            "sum of usage.prompt_tokens over every request the run sent: under a load "
            "the warm-up and the requests outside the steady-state window too (served_prompt_tokens counts the window "
            "only); what the server's counter delta (server_prompt_tokens) covers. Equal to served_prompt_tokens "
            "without a load; null for runs stored before it was recorded",
        ),
        _c(
            "batch_output_tokens",
            Int,
            "sum of usage.completion_tokens over every request the run sent (warm-up, "
            "outside the window, and miscounted requests as reported): what server_generation_tokens covers; null "
            "for runs stored before it was recorded",
        ),
        _c(
            "requests_miscounted",
            Int,
            "successful requests whose usage.completion_tokens cannot be right (negative, "
            "below their token-bearing chunks, above max_tokens, or not max_tokens under ignore_eos): kept in "
            "requests, left out of served_output_tokens and TPOT",
        ),
        _c("cached_prompt_tokens", Int, "sum of usage.prompt_tokens_details.cached_tokens, when reported"),
        *SEARCH_COLUMNS,
        _c(
            "energy_j",
            Float,
            "joules the run's devices drew over its batch (kvlab.cost: NVML total-energy counters on GPUs, powercap "
            "RAPL packages on a CPU); null where no counter was readable (energy_note says why), never 0",
        ),
        _c("energy_source", Str, "the counters energy_j was read from"),
        _c("energy_note", Str, "why energy_j is null: the counter missing or unreadable"),
        _c(
            "reusable_prompt_tokens",
            Int,
            "kind trace: sum of the requests' reusable tokens (leading blocks an earlier request of the replay sent), "
            "over the requests cached_prompt_tokens counts; null for other kinds",
        ),
        _c("server_prompt_tokens", Int, "delta of the server's prompt-token counter over the run"),
        _c("server_generation_tokens", Int, "delta of the server's generation-token counter"),
        _c("server_prefix_cache_queries", Int, "delta of the server's prefix-cache query counter (tokens)"),
        _c("server_prefix_cache_hits", Int, "delta of the server's prefix-cache hit counter (tokens)"),
        _c("server_preemptions", Int, "delta of the server's preemption counter"),
        _c(
            "requests_per_s",
            Float,
            "completed requests per second: requests_ok / T, T = window_s under a load, else "
            "batch_time_s (kvlab.schema.run_rates); null without a batch time (a failed run)",
        ),
        _c(
            "output_tokens_per_s",
            Float,
            "output tokens per second: served_output_tokens / T (as requests_per_s); a "
            "published row's figure where its source states one without a batch time",
        ),
        _c(
            "goodput_requests_per_s",
            Float,
            "goodput: requests_within_slo / T (as requests_per_s), successful requests "
            "meeting the experiment's SLO per second; null where it states no SLO",
        ),
        _c("started_at", Str, "ISO-8601 UTC start time"),
        _c("citation", Str, "where a published figure comes from"),
        _c("notes", Str, "free text: assumptions, scaling, caveats"),
    ),
    retired=(("kv_cache_tokens", "measured runs never filled it; the configured budget is kv_budget_bytes"),),
)

#: One row per request of a measured run (client-side timestamps, seconds from batch start).
REQUESTS = Table(
    "requests",
    (
        _c("run_id", Str, "run this request belongs to", required=True),
        _c("request_index", Int, "index within the run", required=True),
        _c("status", Str, "ok | failed", required=True, allowed=STATUSES),
        _c("error", Str, "HTTP status / error event / dropped connection, when failed"),
        _c(
            "error_kind",
            Str,
            "class of the error, from its text (kvlab.client.ERROR_KINDS)",
            allowed=REQUEST_ERROR_KINDS,
        ),
        _c("http_status", Int, "HTTP status code"),
        _c("prompt_tokens", Int, "usage.prompt_tokens from the server"),
        _c("output_tokens", Int, "usage.completion_tokens from the server"),
        _c("reasoning_tokens", Int, "output tokens inside the reasoning part, when split"),
        _c("cached_tokens", Int, "usage.prompt_tokens_details.cached_tokens, when reported"),
        _c("chunks", Int, "token-bearing stream chunks received"),
        _c("t_send_s", Float, "send time, seconds from the run's first send"),
        _c("t_first_s", Float, "first non-empty chunk"),
        _c("t_last_s", Float, "last token-bearing chunk"),
        _c("ttft_ms", Float, "t_first - t_send"),
        _c("tpot_ms", Float, "(t_last - t_first) / (output_tokens - 1)"),
        _c("e2e_ms", Float, "t_last - t_send"),
        _c(
            "itl_max_ms",
            Float,
            "largest ITL gap: between two network reads bringing token chunks (per read, "
            "not per token or SSE event; kvlab.client.itl_gaps_ms)",
        ),
        _c("conversation", Int, "conversation the request belongs to, 0-based (multi_turn; null for other kinds)"),
        _c("turn", Int, "turn within its conversation, 0-based (multi_turn; null for other kinds)"),
        _c(
            "count_flag", Str, "why usage.completion_tokens cannot be right (kvlab.client.count_flag); null when it can"
        ),
        _c("trace_line", Int, "kind trace: the 1-based line of the trace file the request replays"),
        _c(
            "reusable_tokens",
            Int,
            "kind trace: leading prompt tokens whose blocks an earlier request of the replay sent (beside cached_tokens)",
        ),
    ),
)

#: One row per launch attempt of a measured run: how the 0.92-vs-0.95 study counts retries.
ATTEMPTS = Table(
    "attempts",
    (
        _c("run_id", Str, "run this attempt belongs to", required=True),
        _c("attempt", Int, "1-based attempt number", required=True),
        _c("status", Str, "ok | failed", required=True, allowed=STATUSES),
        _c("failure_cause", Str, "classified failure cause"),
        _c("detail", Str, "the log line or error that decided the cause"),
        _c("fits_max_len", Int, "max model length the engine said would fit, when it said"),
        _c("elapsed_s", Float, "time the attempt took"),
        _c("backoff_s", Float, "wait before the next attempt"),
    ),
)

#: A document's stated ratio or qualitative claim, checked against its own table.
CLAIMS = Table(
    "claims",
    (
        _c("experiment", Str, "document the claim comes from (matches runs.experiment)", required=True),
        _c("claim_id", Str, "short unique name", required=True),
        _c(
            "kind",
            Str,
            "relative_speed | throughput_decay | memory | engine_choice | mechanism (why the engines "
            "differ: prefill or decode, communication or KV reads) | operations (how an engine behaves in service, "
            "or a recommended setting) | setup (what the document says it held constant)",
            required=True,
            allowed=(
                "relative_speed",
                "throughput_decay",
                "memory",
                "engine_choice",
                "mechanism",
                "operations",
                "setup",
            ),
        ),
        _c("engine", Str, "engine the claim is about (the faster one for relative_speed)", allowed=ENGINES),
        _c("context_from", Str, "context label the ratio starts from"),
        _c("context_to", Str, "context label the ratio ends at"),
        _c(
            "setting",
            Float,
            "the configuration the claim is about, where it names one (memory: the memory-utilisation target)",
        ),
        _c("metric", Str, "what the claim measures", allowed=CLAIM_METRICS),
        _c(
            "direction",
            Str,
            "which way the claim says ``metric`` goes: lower | higher (than the other engine, "
            "setting or context), none (not at all: no retries, no sharing), some (at least once), all (every case)",
            allowed=("lower", "higher", "none", "some", "all"),
        ),
        _c(
            "threshold",
            Float,
            "where a decision claim's condition starts (engine_choice: the shared fraction, the requests in flight)",
        ),
        _c("stated_value", Float, "the ratio as stated; empty for prose-only claims"),
        _c(
            "stated_precision",
            Float,
            "the precision the document wrote ``stated_value`` to (1.5 → 0.1, 3.29 → "
            "0.01): a ratio agrees within half of it",
        ),
        _c("statement", Str, "the claim in words", required=True),
        _c("citation", Str, "where it is stated", required=True),
        _c(
            "decided_by",
            Str,
            "the experiment file (data/experiments/<name>.yaml) whose runs on a GPU host would "
            "decide the claim; empty where none does yet",
        ),
    ),
)


#: The source documents, one row per document (``data/reference/documents.csv``): how the reports name a document
#: (its title, publisher and date) where its rows and claims carry only its experiment name.
DOCUMENTS = Table(
    "documents",
    (
        _c("experiment", Str, "the document's name in runs.experiment and claims.experiment", required=True),
        _c("kind", Str, "what it is: article, datasheet, paper, …", required=True),
        _c("title", Str, "its title as published, in its own language", required=True),
        _c("title_en", Str, "the title in English, where the title is in another language"),
        _c("language", Str, "the language it is written in"),
        _c("publisher", Str, "who published it; empty where the document names no publisher"),
        _c("published", Str, "when it was published, as precisely as the document says (a year, or a date)"),
        _c("note", Str, "what a reader should know about the entry (e.g. where the title comes from)"),
    ),
)

#: The latency percentiles RUNS stores for TTFT, TPOT, ITL and E2E (``<metric>_p<q>_ms``).
PERCENTILES = (50, 90, 99)


def percentiles_ms(metric: str, values) -> dict[str, float | None]:
    """RUNS' ``<metric>_p50_ms``, ``_p90_ms`` and ``_p99_ms`` of ``values`` (ms): numpy's linear-interpolation
    percentiles, None when there are no values. The one definition the client's summary and the reading of older
    runs (kvlab.store) share."""
    if not len(values):
        return {f"{metric}_p{q}_ms": None for q in PERCENTILES}
    got = np.percentile(np.asarray(values, dtype=float), PERCENTILES)
    return {f"{metric}_p{q}_ms": float(v) for q, v in zip(PERCENTILES, got)}


def run_rates(runs: pl.DataFrame) -> pl.DataFrame:
    """Each run's rates from its counts and time T (the one definition: the runner stores them with each run,
    kvlab.store fills them for runs stored before; design.md): T is the batch time, or under a load the
    steady-state window (``window_s``, whose requests the counts cover); a run without a batch time (a failed one)
    has none:

    - ``requests_per_s`` = requests_ok / T;
    - ``output_tokens_per_s`` = served_output_tokens / T (requests with a count that cannot be right left out); a
      row whose source states it without the counts (published) keeps the stated figure;
    - ``goodput_requests_per_s`` = requests_within_slo / T: successful requests meeting the experiment's SLO
      per second; null where the experiment states no SLO (or the run has no batch time).
    """
    t = (
        pl.coalesce(pl.col("window_s"), pl.col("batch_time_s"))
        if "window_s" in runs.columns
        else pl.col("batch_time_s")
    )
    t = pl.when(pl.col("batch_time_s").is_not_null()).then(t)
    output = pl.col("served_output_tokens") / t
    if "output_tokens_per_s" in runs.columns:
        output = pl.coalesce(output, pl.col("output_tokens_per_s"))
    return runs.with_columns(
        (pl.col("requests_ok") / t).alias("requests_per_s"),
        output.alias("output_tokens_per_s"),
        (pl.col("requests_within_slo") / t).alias("goodput_requests_per_s"),
    )


# --------------------------------------------------------------------------- what every study reads of the runs

#: Columns that identify one configuration apart from the engine (what two engines are compared on).
CONFIG_KEYS = ("source", "experiment", "hardware", "context_label", "context_tokens")


def ok_batch_times(runs: pl.DataFrame) -> pl.DataFrame:
    """Rows that finished and carry a batch time."""
    return runs.filter((pl.col("status") == "ok") & pl.col("batch_time_s").is_not_null())


def with_device_kind(runs: pl.DataFrame) -> pl.DataFrame:
    """``runs`` with the typed device's columns, ``device_kind``, ``accelerator`` and ``gpu_count`` (kvlab.device;
    null where the frame has none: hand-built frames)."""
    types = {"device_kind": pl.String, "accelerator": pl.String, "gpu_count": pl.Int64}
    return runs.with_columns(pl.lit(None, t).alias(c) for c, t in types.items() if c not in runs.columns)
