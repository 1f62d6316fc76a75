"""trace: a published request trace replayed with its exact lengths and prefix reuse (Mooncake's JSONL form).

A trace file holds one request per line: ``timestamp`` (ms from the trace's start), ``input_length``,
``output_length`` and ``hash_ids``, one id per ``block_size``-token block of the prompt, a shared id meaning a
shared prefix block (kvcache-ai/Mooncake, FAST25-release/README.md, "Trace Format"; block size 512). Each id maps to
one deterministic block of token ids, the last block cut to the remainder, so a prompt has exactly
``input_length`` tokens and two prompts share exactly the blocks their ids share. ``scale_factor`` divides lengths
and block size alike (ceilings, so ceil(L / B) = number of ids still holds): the prefix structure survives the
scaling a CPU needs. The same fields as CSV (``hash_ids`` space-separated) are read where the file ends in .csv.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from kvlab.load import Schedule
from kvlab.paths import ROOT
from kvlab.workloads.base import DEFAULT_LOW_ID, Prompt, WorkloadArgs, check_counts

#: The fields of one trace record (Mooncake's JSONL).
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
#: Tokens per hash id in Mooncake's release (FAST25-release/README.md: "The block size is 512 tokens"): a trace's
#: unit, not an engine's KV block.
MOONCAKE_ID_TOKENS = 512
#: Largest trace file read (a slice is shipped; Mooncake's whole conversation trace is 3 MB).
MAX_TRACE_BYTES = 64 << 20


@dataclass(frozen=True)
class TraceRecord:
    """One request of a trace: its 1-based line in the file and its fields."""

    line: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _int(value: Any, name: str, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < least:
        raise ValueError(f"{where}: {name} must be an integer >= {least}, got {value!r}")
    return int(value)


def check_record(raw: Any, line: int, block_size: int, where: str) -> TraceRecord:
    """One parsed line as a :class:`TraceRecord`; ValueError naming ``where`` (file:line) when a field is missing or
    of the wrong type, or when its ids do not make its length: ceil(input_length / block_size) ids exactly, as
    guidellm's mooncake loader checks (fewer cannot cover the prompt, more name blocks it does not have)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a trace record is an object with {', '.join(FIELDS)}")
    missing = [f for f in FIELDS if f not in raw]
    if missing:
        raise ValueError(f"{where}: no {', '.join(missing)} (a trace record has {', '.join(FIELDS)})")
    ts = raw["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        raise ValueError(f"{where}: timestamp must be milliseconds >= 0, got {ts!r}")
    length = _int(raw["input_length"], "input_length", where, 1)
    out = _int(raw["output_length"], "output_length", where, 1)
    ids = raw["hash_ids"]
    if not isinstance(ids, list | tuple) or not ids:
        raise ValueError(f"{where}: hash_ids must be a non-empty list of integers, got {ids!r}")
    ids = tuple(_int(h, "each of hash_ids", where, 0) for h in ids)
    need = math.ceil(length / block_size)
    if len(ids) < need:
        raise ValueError(
            f"{where}: {len(ids)} hash_ids x {block_size}-token blocks = {len(ids) * block_size} tokens cannot cover "
            f"input_length {length} (it needs {need} ids)"
        )
    if len(ids) > need:
        raise ValueError(
            f"{where}: {len(ids)} hash_ids for input_length {length} at {block_size}-token blocks: {need} would "
            f"cover it, the last {len(ids) - need} name blocks the prompt does not have"
        )
    return TraceRecord(line, float(ts), length, out, ids)


def _rows(text: str, csv_form: bool) -> list[tuple[int, Any]]:
    """(line number, parsed object) of each non-blank line (JSONL) or data row (CSV, header first)."""
    if not csv_form:
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append((n, json.loads(line)))
                except json.JSONDecodeError as exc:
                    out.append((n, ValueError(f"not JSON: {exc.msg}")))
        return out
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    for row in reader:
        n = reader.line_num
        try:
            parsed = {k: float(v) if k == "timestamp" else int(v) for k, v in row.items() if k in FIELDS[:3]}
            parsed["hash_ids"] = [int(h) for h in (row.get("hash_ids") or "").split()]
        except (TypeError, ValueError) as exc:
            parsed = ValueError(f"not numbers: {exc}")
        rows.append((n, parsed))
    return rows


def resolve(path: str | Path) -> Path:
    """A trace file named in an experiment: absolute, or relative to the project root (as engine launch paths)."""
    p = Path(path)
    return p if p.is_absolute() else ROOT / p


def read_trace(path: str | Path, block_size: int = MOONCAKE_ID_TOKENS) -> tuple[TraceRecord, ...]:
    """Every record of the trace file at ``path`` (JSONL, or CSV where it ends in .csv), checked by
    :func:`check_record`; timestamps must not go back. ValueError naming the file and line."""
    p = resolve(path)
    st = p.stat()
    return _read(str(p), st.st_mtime_ns, st.st_size, block_size)


@lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int, size: int, block_size: int) -> tuple[TraceRecord, ...]:
    if size > MAX_TRACE_BYTES:
        raise ValueError(f"{path}: {size:,} bytes, over the {MAX_TRACE_BYTES:,} a trace file may have (take a slice)")
    text = Path(path).read_text(encoding="utf-8")
    records: list[TraceRecord] = []
    for n, raw in _rows(text, path.endswith(".csv")):
        where = f"{path}:{n}"
        if isinstance(raw, ValueError):
            raise ValueError(f"{where}: {raw}")
        rec = check_record(raw, n, block_size, where)
        if records and rec.timestamp_ms < records[-1].timestamp_ms:
            raise ValueError(f"{where}: timestamp {rec.timestamp_ms:g} ms is before the line above's")
        records.append(rec)
    if not records:
        raise ValueError(f"{path}: no trace records")
    return tuple(records)


def digest(path: str | Path) -> str:
    """Short sha256 of the trace file's bytes: part of the run key, so an edited trace is measured again."""
    return hashlib.sha256(resolve(path).read_bytes()).hexdigest()[:12]


def scaled(rec: TraceRecord, factor: int) -> TraceRecord:
    """``rec`` with input and output lengths divided by ``factor`` (ceilings, the output at least 1): with the block
    size divided by ``factor`` too (which it must divide), ceil(L / B) and so every id keeps its block."""
    return TraceRecord(
        rec.line,
        rec.timestamp_ms,
        math.ceil(rec.input_length / factor),
        max(1, math.ceil(rec.output_length / factor)),
        rec.hash_ids,
    )


def block_tokens(hash_id: int, size: int, vocab_size: int, seed: int = 0, low_id: int = DEFAULT_LOW_ID) -> np.ndarray:
    """The ``size`` token ids hash id ``hash_id`` stands for: drawn from ``[low_id, vocab_size)`` by a generator
    seeded with (seed, hash_id), so one id is always one block and different ids different blocks."""
    return np.random.default_rng([seed, hash_id]).integers(low_id, vocab_size, size=size, dtype=np.int64)


def prompts(
    records: tuple[TraceRecord, ...] | list[TraceRecord],
    block_size: int,
    vocab_size: int,
    seed: int = 0,
    *,
    low_id: int = DEFAULT_LOW_ID,
) -> list[Prompt]:
    """One token-id prompt per record, in order: its ids' blocks joined and cut to exactly ``input_length`` tokens,
    asking for ``output_length``. Each carries its trace line and its reusable tokens: its leading blocks an earlier
    record of these sent (a block id implies its prefix, so the run of seen ids from the first), the last block cut."""
    check_counts(vocab_size, low_id, block_size)
    cache: dict[int, np.ndarray] = {}
    out = []
    for i, (rec, reusable) in enumerate(zip(records, reusable_tokens(records, block_size), strict=True)):
        blocks = [cache.setdefault(h, block_tokens(h, block_size, vocab_size, seed, low_id)) for h in rec.hash_ids]
        ids = np.concatenate(blocks)[: rec.input_length]
        out.append(
            Prompt(
                index=i,
                max_tokens=rec.output_length,
                token_ids=tuple(ids.tolist()),
                workload="trace",
                shared_prefix_tokens=reusable,
                trace_line=rec.line,
                reusable_tokens=reusable,
            )
        )
    return out


def reusable_tokens(records: tuple[TraceRecord, ...] | list[TraceRecord], block_size: int) -> list[int]:
    """Each record's reusable tokens in replay order: its leading blocks an earlier record sent (a block id implies
    its prefix, so the run of seen ids from the first), times ``block_size``, at most its ``input_length``."""
    seen: set[int] = set()
    out = []
    for rec in records:
        lead = next((k for k, h in enumerate(rec.hash_ids) if h not in seen), len(rec.hash_ids))
        seen.update(rec.hash_ids)
        out.append(min(lead * block_size, rec.input_length))
    return out


class Trace(WorkloadArgs):
    """A trace file's records replayed: exact lengths, prefix reuse from the hash ids, its schedule or a load."""

    description = "a trace file's requests (Mooncake JSONL) at their exact lengths and shared prefix blocks"
    #: the scaled form as it stands (8-token blocks, scale 1), so any experiment's scale_factor labels it rightly
    example = {
        "kind": "trace",
        "batch_size": 2,
        "trace_file": "data/traces/mooncake_conversation_40.scaled64.jsonl",
        "block_size": 8,
    }

    kind: Literal["trace"]
    trace_file: str = Field(description="trace: the trace file (Mooncake JSONL, or CSV), relative to the project root")
    block_size: int = Field(
        MOONCAKE_ID_TOKENS, ge=1, description="trace: tokens per hash id at full scale (Mooncake's 512)"
    )
    scale_factor: int = Field(
        1, ge=1, description="trace: divides every length and the block size (which it must divide), for the CPU"
    )
    offset: int = Field(0, ge=0, description="trace: records skipped from the file's start")
    window_s: float | None = Field(
        None, gt=0, description="trace: replay only the records within this many trace seconds of the first replayed"
    )
    time_scale: float = Field(
        1.0, gt=0, description="trace: send offsets are the trace's timestamps times this (0.5: twice as fast)"
    )
    trace_digest: str | None = Field(None, description="trace: sha256 of the file (set from it, part of the run key)")

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        """Lengths from the file: prompt_tokens and output_tokens are its longest (scaled), set here."""
        if not isinstance(data, dict) or not isinstance(data.get("trace_file"), str):
            return data
        data = dict(data)
        try:
            recs = _replayed(data)
        except (OSError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        if recs:
            data["prompt_tokens"] = max(r.input_length for r in recs)
            data["output_tokens"] = max(r.output_length for r in recs)
            data["trace_digest"] = digest(data["trace_file"])
        data.pop("context_tokens", None)
        return data

    def check(self) -> None:
        if self.concurrency is not None:
            raise ValueError("kind 'trace' replays on its schedule or under `load`, not `concurrency`")
        if not self.distinct_prompts:
            raise ValueError("kind 'trace': the hash ids say what is shared; distinct_prompts false is not one")

    @property
    def records(self) -> tuple[TraceRecord, ...]:
        """The records replayed, scaled."""
        return tuple(_replayed(self.model_dump()))

    @property
    def total_tokens(self) -> int:
        return max(r.input_length + r.output_length for r in self.records)

    def generate(self, vocab_size: int, seed: int) -> list[Prompt]:
        return prompts(self.records, self.block_size // self.scale_factor, vocab_size, seed=seed)

    def replay_schedule(self) -> Schedule | None:
        """The trace's own send offsets (seconds from the first replayed record, times ``time_scale``) when no
        ``load`` is set; under a load, None (the load sends)."""
        if self.load is not None:
            return None
        recs = self.records
        return Schedule(tuple((r.timestamp_ms - recs[0].timestamp_ms) / 1000 * self.time_scale for r in recs))

    def detail(self) -> list[str]:
        how = f"its schedule x {self.time_scale:g}" if self.load is None else f"load {self.load.label()}"
        scale = f", lengths and blocks / {self.scale_factor}" if self.scale_factor > 1 else ""
        return [f"trace {self.trace_file} from record {self.offset} on {how}{scale}"]


Args = Trace


def _replayed(data: dict[str, Any]) -> list[TraceRecord]:
    """The scaled records a trace workload's fields (as given) replay; ValueError naming the field when the scale
    does not divide the block, the offset or window leaves too few records for batch_size."""
    block, factor = int(data.get("block_size", MOONCAKE_ID_TOKENS)), int(data.get("scale_factor", 1))
    if factor < 1 or block < 1 or block % factor:
        raise ValueError(f"scale_factor ({factor}) must divide block_size ({block}) so every id keeps one block")
    recs = read_trace(data["trace_file"], block)
    offset, n = int(data.get("offset", 0)), data.get("batch_size")
    window = data.get("window_s")
    chosen = list(recs[offset:])
    if window is not None and chosen:
        chosen = [r for r in chosen if r.timestamp_ms - chosen[0].timestamp_ms <= float(window) * 1000]
        if isinstance(n, int) and n != len(chosen):
            raise ValueError(
                f"batch_size ({n}) must be the {len(chosen)} records window_s {window:g} holds from record {offset}"
            )
    if isinstance(n, int) and n > len(chosen):
        raise ValueError(f"batch_size ({n}) is more than the {len(chosen)} records from record {offset} of the trace")
    chosen = chosen[:n] if isinstance(n, int) else chosen
    return [scaled(r, factor) for r in chosen]


def scaled_lines(path: str | Path, factor: int, block_size: int = MOONCAKE_ID_TOKENS) -> str:
    """The trace at ``path`` as JSONL with every length divided by ``factor`` (:func:`scaled`): its scaled form,
    read with block size ``block_size / factor`` and scale 1 it replays the very prompts the file does at
    ``scale_factor: factor``."""
    out = []
    for r in read_trace(path, block_size):
        s = scaled(r, factor)
        ts = int(s.timestamp_ms) if s.timestamp_ms == int(s.timestamp_ms) else s.timestamp_ms
        fields = (ts, s.input_length, s.output_length, list(s.hash_ids))
        out.append(json.dumps(dict(zip(FIELDS, fields))))
    return "\n".join(out) + "\n"
