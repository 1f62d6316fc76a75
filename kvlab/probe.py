"""An accuracy probe per server configuration (issue 23, item 7): the greedy (temperature 0) outputs of a fixed probe
set, compared across configurations of the same model and engine (DCP 1 vs 8, 0.92 vs 0.95, prefix cache on vs off),
so that a configuration that is fast but computes something else is seen.

The comparison and its tolerance:

- **tokens**: each output is the list of tokens the server generated, as it reports them in the stream's
  ``logprobs.tokens`` (the probe asks for the top-:data:`TOP_LOGPROBS` log-probabilities); a server that reports no
  log-probabilities (the test fixture) gives one streamed text piece per token instead.
- **the first k tokens** (:data:`PROBE_TOKENS`, 16) are compared, position by position: *identical* when all k
  agree, else *differs* with the first differing position (0-based). k = 16 because a configuration that computes
  attention wrongly (KV read from the wrong blocks, a DCP shard dropped, a cache hit on the wrong prefix) changes
  the logits from the first generated token on, so it differs within a few tokens; while greedy decoding is
  autoregressive, so one floating-point near-tie flip (a random-weight tiny model's logits are nearly flat) changes
  every token after it, and each further token compared is one more chance of such a flip: a short window keeps
  those chances few without missing a wrong computation.
- **near-ties**: where the reference reported its top-2 log-probabilities, a difference at a position whose
  top-2 margin is below :data:`MARGIN_CLEAR` nats is labelled *differs at a near-tie* (two configurations rounding
  differently there is expected), not *differs*; without log-probabilities no difference is excused.

Wiring: an experiment with ``probe: true`` has the runner send the set once per server start, after the warm-up and
before the first measured run (:func:`run_probe`), and keep :func:`record` on the start's manifest entry;
kvlab.store.load_probes reads it back and kvlab.probe.probe_summary compares configurations for report 07's map.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import polars as pl

from kvlab import httpcall, store

if TYPE_CHECKING:
    from kvlab.experiment import RunSpec

#: Tokens of each output compared (see the module docstring for why 16).
PROBE_TOKENS = 16
#: Top log-probabilities asked for per token (2: the margin between the greedy choice and the runner-up).
TOP_LOGPROBS = 2
#: A top-2 margin (nats) below this is a near-tie: a difference there may be rounding, not a wrong computation.
MARGIN_CLEAR = 0.1

#: The fixed probe set: short, distinct prompts (text; the server tokenises them with the model's tokenizer).
PROBE_PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "def fibonacci(n):",
    "One, two, three, four,",
    "The quick brown fox",
    "In 1969, the first people to walk on the Moon were",
    "Water boils at a temperature of",
    "Translate to German: good morning ->",
    "A list of prime numbers: 2, 3, 5,",
)


@dataclass(frozen=True)
class ProbeOutput:
    """One probe prompt's greedy output from one configuration: its tokens, and per token the top-2 log-probability
    margin where the server reported one (None where not)."""

    prompt: int
    tokens: tuple[str, ...]
    margins: tuple[float | None, ...]
    error: str | None = None


@dataclass(frozen=True)
class Comparison:
    """One prompt's output under a configuration against the reference configuration's."""

    prompt: int
    compared: int  # positions compared: min(k, the two lengths)
    first_diff: int | None  # 0-based; None: identical over the positions compared
    margin_at_diff: float | None  # the reference's top-2 margin there (None: not reported)

    @property
    def outcome(self) -> str:
        """'identical', 'differs', or 'differs at a near-tie' (a reported margin below :data:`MARGIN_CLEAR`)."""
        if self.first_diff is None:
            return "identical"
        if self.margin_at_diff is not None and self.margin_at_diff < MARGIN_CLEAR:
            return "differs at a near-tie"
        return "differs"


def compare(reference: ProbeOutput, other: ProbeOutput, k: int = PROBE_TOKENS) -> Comparison:
    """``other`` against ``reference`` over their first ``k`` tokens: the first position where they differ (an output
    that ends early, with fewer than k tokens, differs where it ended)."""
    a, b = reference.tokens[:k], other.tokens[:k]
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), None)
    if first is None and len(a) != len(b):
        first = n
    margin = reference.margins[first] if first is not None and first < len(reference.margins) else None
    return Comparison(reference.prompt, n, first, margin)


def compare_configs(
    outputs: Mapping[str, Sequence[ProbeOutput]], reference: str, k: int = PROBE_TOKENS
) -> list[dict[str, Any]]:
    """Each configuration's outputs (``outputs``: config name -> outputs in probe order) against ``reference``'s,
    prompt by prompt: rows of config, prompt, outcome, first_diff, compared, margin_at_diff, k."""
    ref = {o.prompt: o for o in outputs[reference]}
    rows = []
    for name, outs in outputs.items():
        if name == reference:
            continue
        for o in outs:
            if o.error or ref[o.prompt].error:
                rows.append(
                    {
                        "config": name,
                        "prompt": o.prompt,
                        "outcome": "not compared: a request failed",
                        "first_diff": None,
                        "compared": 0,
                        "margin_at_diff": None,
                        "k": k,
                    }
                )
                continue
            c = compare(ref[o.prompt], o, k)
            rows.append(
                {
                    "config": name,
                    "prompt": o.prompt,
                    "outcome": c.outcome,
                    "first_diff": c.first_diff,
                    "compared": c.compared,
                    "margin_at_diff": c.margin_at_diff,
                    "k": k,
                }
            )
    return rows


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per configuration: how many probe prompts came out each way (outcome -> count)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        counts = out.setdefault(r["config"], {})
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return out


def _margin(top: Mapping[str, float] | None) -> float | None:
    if not top or len(top) < 2:
        return None
    best = sorted(top.values(), reverse=True)
    return best[0] - best[1]


#: The most of one probe answer read (1 MiB: 16 tokens with their top-2 log-probabilities are a few KB); a longer
#: answer fails its prompt, naming the cap (kvlab.httpcall).
MAX_PROBE_BYTES = 2**20
#: Tokens an answer may report beyond its ``max_tokens`` (the client's slack, kvlab.client.CHUNK_SLACK) before the
#: prompt fails: a server that keeps streaming tokens is not an output to compare.
PROBE_TOKEN_SLACK = 16
#: One probe request's deadline (monotonic, from connecting to the answer's last byte), seconds.
PROBE_REQUEST_TIMEOUT_S = 60.0


async def greedy_output(
    session: aiohttp.ClientSession,
    base_url: str,
    model: str,
    index: int,
    prompt: str,
    *,
    max_tokens: int = PROBE_TOKENS,
    api_key: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
    deadline_s: float = PROBE_REQUEST_TIMEOUT_S,
) -> ProbeOutput:
    """One prompt's greedy output (temperature 0, exactly ``max_tokens`` tokens, top-2 log-probabilities asked for)
    from ``{base_url}/v1/completions``, streamed; never raises for a failed request (its ``error`` says why).

    The request goes through kvlab.httpcall: ``deadline_s`` in all, at most :data:`MAX_PROBE_BYTES`, and no redirect
    followed (a 3xx is a failed prompt: ``HTTP 307 (redirect to ... not followed)``); more than ``max_tokens`` +
    :data:`PROBE_TOKEN_SLACK` tokens fail it too."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "ignore_eos": True,
        "logprobs": TOP_LOGPROBS,
        **(extra_body or {}),
    }
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    tokens: list[str] = []
    margins: list[float | None] = []
    url = base_url.rstrip("/") + "/v1/completions"
    try:
        answer = await httpcall.request(
            "POST",
            url,
            deadline_s=deadline_s,
            max_bytes=MAX_PROBE_BYTES,
            headers=headers,
            data=json.dumps(body).encode(),
            session=session,
        )
        if answer.redirect:
            return ProbeOutput(index, (), (), f"HTTP {answer.status} (redirect to {answer.location!r} not followed)")
        if answer.status != 200:
            return ProbeOutput(index, (), (), f"HTTP {answer.status}")
        for raw in answer.body.splitlines():
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            obj = json.loads(line[5:])
            for choice in obj.get("choices") or []:
                lp = choice.get("logprobs") or {}
                if lp.get("tokens"):
                    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
                    tokens.extend(lp["tokens"])
                    margins.extend(_margin(t) for t in tops)
                elif choice.get("text"):
                    tokens.append(choice["text"])
                    margins.append(None)
            if len(tokens) > max_tokens + PROBE_TOKEN_SLACK:
                return ProbeOutput(
                    index,
                    (),
                    (),
                    f"more than {max_tokens + PROBE_TOKEN_SLACK} tokens for max_tokens "
                    f"{max_tokens}: the answer is not an output to compare",
                )
    except httpcall.HttpLimitError as exc:
        return ProbeOutput(index, (), (), str(exc))
    except (aiohttp.ClientError, OSError, ValueError, AttributeError, TypeError) as exc:
        return ProbeOutput(index, tuple(tokens), tuple(margins), f"{type(exc).__name__}: {str(exc)[:200]}")
    return ProbeOutput(index, tuple(tokens), tuple(margins))


async def probe(
    base_url: str,
    model: str,
    prompts: Sequence[str] = PROBE_PROMPTS,
    *,
    max_tokens: int = PROBE_TOKENS,
    api_key: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
    timeout_s: float = 600.0,
) -> list[ProbeOutput]:
    """The probe set's greedy outputs from one server configuration, one request at a time (alone in the server,
    so no batching can change its numerics between configurations). Each request has PROBE_REQUEST_TIMEOUT_S, and
    the set ``timeout_s`` in all (a prompt sent after that fails as past its deadline)."""
    end = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), trust_env=False) as session:
        return [
            await greedy_output(
                session,
                base_url,
                model,
                i,
                p,
                max_tokens=max_tokens,
                api_key=api_key,
                extra_body=extra_body,
                deadline_s=max(0.0, min(PROBE_REQUEST_TIMEOUT_S, end - time.monotonic())),
            )
            for i, p in enumerate(prompts)
        ]


# --------------------------------------------------------------------------- the record a server start keeps


def configuration(run: RunSpec) -> dict[str, Any]:
    """The server configuration ``run`` needs, in RUNS' terms (:data:`kvlab.store.PROBE_CONFIG_FIELDS`, as
    :func:`kvlab.rows.run_row` names them, so that a report joins a configuration's probe to its runs:
    :func:`kvlab.probe.probe_summary`, ``goodput_map``)."""
    e = run.engine
    return {
        "engine": e.name,
        "engine_label": run.engine_label,
        "model": e.served_model_name or Path(e.model).name,
        "tp": e.tp,
        "dcp": e.dcp,
        "dp": e.dp,
        "mem_util": e.mem_util,
        "kv_budget_bytes": e.kv_cache_bytes,
        "prefix_caching": e.prefix_caching,
    }


def record(
    outputs: Sequence[ProbeOutput],
    config: Mapping[str, Any],
    *,
    prompts: Sequence[str] = PROBE_PROMPTS,
    max_tokens: int = PROBE_TOKENS,
    sent_at: str | None = None,
    wall_s: float | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """What a server start keeps of its probe (the manifest's server entry, ``probe``): the prompts, k, the
    configuration (:func:`configuration`), when it was sent and each prompt's tokens, margins and error; ``error``:
    why the probe as a whole failed (then ``outputs`` is empty)."""
    return {
        "k": PROBE_TOKENS,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "prompts": list(prompts),
        "configuration": dict(config),
        "sent_at": sent_at,
        "wall_s": wall_s,
        "error": error,
        "outputs": [
            {"prompt": o.prompt, "tokens": list(o.tokens), "margins": list(o.margins), "error": o.error}
            for o in outputs
        ],
    }


def run_probe(
    base_url: str, model: str, config: Mapping[str, Any], *, api_key: str | None = None, timeout_s: float = 600.0
) -> dict[str, Any]:
    """Send the probe set to a ready server and return its :func:`record`; never raises (a failure is recorded)."""
    sent_at, t = datetime.now(timezone.utc).isoformat(), time.perf_counter()
    try:
        outs = asyncio.run(probe(base_url, model, api_key=api_key, timeout_s=timeout_s))
    except Exception as exc:  # noqa: BLE001 - a failed probe is recorded, it never costs the sweep a run
        return record(
            [], config, sent_at=sent_at, wall_s=time.perf_counter() - t, error=f"{type(exc).__name__}: {str(exc)[:200]}"
        )
    return record(outs, config, sent_at=sent_at, wall_s=time.perf_counter() - t)


#: Columns that identify one configuration apart from the engine (what two engines are compared on).
def probe_comparison(probes: pl.DataFrame) -> pl.DataFrame:
    """Each probed configuration's outputs against its reference's, prompt by prompt (kvlab.probe.compare_configs,
    over the first k = 16 tokens), from :func:`kvlab.store.load_probes`. Per experiment, engine and model the
    **reference** is the first configuration in the experiment file's order that was probed (the manifest's
    ``configurations``; the earliest start where it lists none). Rows: experiment, engine, model, server_key,
    reference_key, prompt, outcome ('identical', 'differs', 'differs at a near-tie', 'not compared: a request
    failed'), first_diff (0-based), compared, margin_at_diff, k; the reference's own rows are 'reference'."""
    rows = []
    for (exp, engine, model), g in probes.group_by(["experiment", "engine", "model"], maintain_order=True):
        configs = g.group_by("server_key", maintain_order=True).agg(
            pl.col("order").first(), pl.col("started_at").first()
        )
        ref = configs.sort(["order", "started_at"], nulls_last=True)["server_key"][0]
        outputs = {
            key: [
                ProbeOutput(r["prompt"], tuple(r["tokens"]), tuple(r["margins"]), r["error"])
                for r in part.sort("prompt").iter_rows(named=True)
            ]
            for (key,), part in g.group_by(["server_key"], maintain_order=True)
        }
        k = int(g["k"].drop_nulls().first() or PROBE_TOKENS)
        head = {"experiment": exp, "engine": engine, "model": model, "reference_key": ref}
        rows += [
            head
            | {
                "server_key": ref,
                "prompt": o.prompt,
                "outcome": "reference",
                "first_diff": None,
                "compared": None,
                "margin_at_diff": None,
                "k": k,
            }
            for o in outputs[ref]
        ]
        rows += [head | {"server_key": c.pop("config"), **c} for c in compare_configs(outputs, ref, k)]
    schema = {
        "experiment": pl.String,
        "engine": pl.String,
        "model": pl.String,
        "reference_key": pl.String,
        "server_key": pl.String,
        "prompt": pl.Int64,
        "outcome": pl.String,
        "first_diff": pl.Int64,
        "compared": pl.Int64,
        "margin_at_diff": pl.Float64,
        "k": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)


def probe_summary(probes: pl.DataFrame) -> pl.DataFrame:
    """One row per probed configuration (:func:`kvlab.store.load_probes`) with its configuration (RUNS' names), its
    ``role`` (reference / compared, see :func:`probe_comparison`), ``reference_key``, the prompts and how many came
    out identical, ``differs``, ``near_ties`` and ``not_compared``, ``first_diff`` (the earliest position of a clear
    difference; null: none) and ``probe``, one label: 'reference', 'identical', 'differs from token N (x of n
    prompts)', 'differs only at near-ties (x of n prompts)' or 'not compared: a probe request failed'. A clear
    difference outranks the rest: a configuration that computes something else is said so even where some of its
    prompts failed."""
    schema = {
        **_PROBE_CONFIG_SCHEMA,
        "server_key": pl.String,
        "role": pl.String,
        "reference_key": pl.String,
        "prompts": pl.Int64,
        "identical": pl.Int64,
        "differs": pl.Int64,
        "near_ties": pl.Int64,
        "not_compared": pl.Int64,
        "first_diff": pl.Int64,
        "k": pl.Int64,
        "probe": pl.String,
    }
    if probes.is_empty():
        return pl.DataFrame(schema=schema)
    cmp = probe_comparison(probes)
    rows = []
    for (exp, key), g in cmp.group_by(["experiment", "server_key"], maintain_order=True):
        config = probes.filter((pl.col("experiment") == exp) & (pl.col("server_key") == key)).row(0, named=True)
        out = g["outcome"].to_list()
        n, differs = len(out), out.count("differs")
        near, failed = out.count("differs at a near-tie"), sum(o.startswith("not compared") for o in out)
        first = g.filter(pl.col("outcome") == "differs")["first_diff"].min()
        role = "reference" if out and out[0] == "reference" else "compared"
        label = (
            "reference"
            if role == "reference"
            else f"differs from token {first} ({differs} of {n} prompts)"
            if differs
            else f"differs only at near-ties ({near} of {n} prompts)"
            if near
            else "not compared: a probe request failed"
            if failed
            else "identical"
        )
        rows.append(
            {
                **{c: config[c] for c in _PROBE_CONFIG_SCHEMA},
                "server_key": key,
                "role": role,
                "reference_key": g["reference_key"][0],
                "prompts": n,
                "identical": out.count("identical"),
                "differs": differs,
                "near_ties": near,
                "not_compared": failed,
                "first_diff": first,
                "k": g["k"][0],
                "probe": label,
            }
        )
    return pl.DataFrame(rows, schema=schema).sort(
        ["experiment", "engine", "model", "role", "server_key"], descending=[False, False, False, True, False]
    )


#: The configuration columns of :func:`probe_summary`: the experiment and the fields a probe record names, typed as
#: kvlab.store.PROBE_SCHEMA types them.
_PROBE_CONFIG_SCHEMA = {c: store.PROBE_SCHEMA[c] for c in ("experiment", *store.PROBE_CONFIG_FIELDS)}
