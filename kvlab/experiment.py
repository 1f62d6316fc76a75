"""Experiment specs: validated YAML in (errors name file, field and value), one frozen RunSpec per run out."""

from __future__ import annotations

import copy
import csv
import difflib
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import stat
import types
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from kvlab.device import Device
from kvlab.engines import FAILURE_CAUSES, adapter_class, get_adapter
from kvlab.engines.spec import REDACTED, EngineSpec, is_secret_env, redact_url, secret_env_value
from kvlab.paths import CATALOG_DIR
from kvlab.units import context_label, count
from kvlab.workloads import KINDS, WorkloadArgs

#: EngineSpec fields that change how kvlab reaches a server but not what it measures:
#: left out of RunSpec.key so that, e.g., a longer startup timeout does not re-run a sweep.
KEY_EXCLUDED_ENGINE_FIELDS = (
    "host",
    "port",
    "startup_timeout_s",
    "stall_timeout_s",
    "api_key_env",
    "allow_insecure_key",
)

#: Fields added after runs were first stored, with the value that reproduces the earlier behaviour:
#: at that value they are left out of RunSpec.key, so runs measured before they existed keep their
#: keys (a sweep resumes instead of re-running them). Any other value is part of the key.
KEY_OMITTED_AT_DEFAULT: dict[str, dict[str, Any]] = {
    "engine": {"report_cached_tokens": True, "reasoning_parser": None, "url": None, "dp": 1, "dtype": "auto"},
    "workload": {
        "shared_fraction": None,
        "turns": None,
        "document_tokens": None,
        "question_tokens": None,
        "reasoning_questions": None,
        "load": None,
    },
    # inside workload.load: the definitions added for agreement with the peers' benchmarks (kvlab.load.LoadSpec)
    "load": {
        "prompt_form": "token_ids",
        "phase": "together",
        "window": "steady",
        "arrivals": "drawn",
        "connections": "kept",
        "text_lengths": "exact",
        "draws": "kvlab",
        "search": None,
    },
}


#: Experiment names and engine labels: they name folders and files, so never '.', '..', a hidden name or an option.
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


#: Limits validation enforces before anything runs (docs/experiments.md, "What validation refuses"): each far above
#: what a study needs (the shipped files are under 9 KB), each low enough that validating, planning and generating a
#: run's prompts stay within a machine's memory.
MAX_FILE_BYTES = 1 << 20  # an experiment file's size
MAX_YAML_NODES = 100_000  # the file's YAML nodes with every alias expanded (a billion-laughs file has 10^9)
MAX_RUNS = 10_000  # runs of one experiment: matrix points x engines x repeats
MAX_REPEATS = 1_000  # repeats, repeats_at[].repeats, quick.repeats
MAX_BATCH_SIZE = 65_536  # requests of one run
MAX_CONTEXT_TOKENS = 1 << 24  # a request's prompt + output tokens (16,777,216; the longest native context in the
# model catalog is 1,048,576)
MAX_RUN_TOKENS = 1 << 27  # prompt + output tokens of every request of one run (134,217,728: 3.4 times
# b300_capacity's largest run, 192 requests of 204,800 tokens; one int64 array of them is 1 GiB)

#: Characters no label or value may hold: C0 and C1 controls and DEL, and the bidirectional overrides and isolates
#: that make text display in another order than it is stored ("Trojan Source", Boucher and Anderson, University of
#: Cambridge, 2021). Free text (description, assumptions) may hold tab and newline.
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_IN_TEXT_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: Top-level fields of free text.
_TEXT_FIELDS = ("description", "assumptions")


class SpecError(ValueError):
    """An experiment spec is invalid; the message names the file, the field path and the value."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that stops composing past :data:`MAX_YAML_NODES` nodes (aliases count once here; their
    expansion is counted by :func:`_check_nodes`)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._composed = 0

    def compose_node(self, parent, index):
        self._composed += 1
        if self._composed > MAX_YAML_NODES:
            raise _TooLarge(f"more than {MAX_YAML_NODES:,} YAML nodes")
        return super().compose_node(parent, index)


class _TooLarge(Exception):
    """The YAML stream is over a limit (raised while composing)."""


def _read_text(path: Path) -> str:
    """The experiment file's text: a regular file (a FIFO or device is refused without blocking on it) of at most
    :data:`MAX_FILE_BYTES`, in UTF-8. SpecError naming the file otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read experiment file: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"{path}: cannot read experiment file: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise SpecError(f"{path}: experiment file of {st.st_size:,} bytes is over the limit of {MAX_FILE_BYTES:,}")
        try:
            data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise SpecError(f"{path}: cannot read experiment file: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:  # it grew after the size was read
        raise SpecError(f"{path}: experiment file is over the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start:,} is {data[exc.start : exc.start + 1]!r})") from None


def _load_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """The experiment file as Python data, with the composed YAML node it was constructed from (its marks give each
    field's line to :func:`_format_errors`); refused (SpecError naming the file and field) when it is not a regular
    UTF-8 file within :data:`MAX_FILE_BYTES`, not valid YAML, has more than :data:`MAX_YAML_NODES` nodes once its
    aliases are expanded, a recursive alias, a key given twice in one mapping, or a control character
    (:func:`_check_nodes`)."""
    text = _read_text(path)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_nodes(path, node)
        return loader.construct_document(node), node
    except _TooLarge as exc:
        raise SpecError(f"{path}: <top level>: {exc}, over the limit of {MAX_YAML_NODES:,}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _key_text(node: yaml.Node) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else f"<{node.tag.rsplit(':', 1)[-1]} key>"


def _check_nodes(path: Path, root: yaml.Node) -> None:
    """SpecError naming the file and the field (``engines.vllm.env``, ``matrix.x[3]``) when the composed YAML has more
    than :data:`MAX_YAML_NODES` nodes with its aliases expanded (an alias is the same node object reached twice:
    counted once per reference, in time linear in the file), an alias that contains itself, a key twice in one
    mapping (YAML 1.2 forbids it; PyYAML would keep the last silently), or a control character in a key or value
    (tab and newline allowed in the free text of description and assumptions)."""
    sizes: dict[int, int] = {}  # expanded node count of each node done
    open_: set[int] = set()  # nodes whose children are being counted: reaching one again is a cycle
    stack: list[tuple[yaml.Node, str, bool]] = [(root, "", False)]
    while stack:
        node, where, done = stack.pop()
        if done:
            children = _children(node)
            sizes[id(node)] = 1 + sum(sizes[id(c)] for _, c in children)
            open_.discard(id(node))
            if sizes[id(node)] > MAX_YAML_NODES:
                raise SpecError(
                    f"{path}: {where or '<top level>'}: {sizes[id(node)]:,} YAML nodes once its aliases "
                    f"are expanded, over the limit of {MAX_YAML_NODES:,}"
                )
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_:
            raise SpecError(f"{path}: {where or '<top level>'}: an alias that contains itself (a recursive structure)")
        open_.add(id(node))
        text = where.split(".", 1)[0].split("[", 1)[0] in _TEXT_FIELDS
        if isinstance(node, yaml.ScalarNode):
            _check_chars(path, where, node.value, text)
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, _ in node.value:
                if key.tag == "tag:yaml.org,2002:merge":
                    continue
                name = _key_text(key)
                _check_chars(path, f"{where}.{name}" if where else name, name, False, key=True)
                if isinstance(key, yaml.ScalarNode) and name in seen:
                    raise SpecError(
                        f"{path}: {f'{where}.{name}' if where else name}: key given twice in one mapping "
                        f"(line {key.start_mark.line + 1}): YAML allows a key once"
                    )
                seen.add(name)
        stack.append((node, where, True))
        stack.extend(
            (child, f"{where}{part}" if part.startswith("[") or not where else f"{where}.{part}", False)
            for part, child in reversed(_children(node))
        )


def _children(node: yaml.Node) -> list[tuple[str, yaml.Node]]:
    """A node's children with the part of the field path each adds (``name`` or ``[i]``)."""
    if isinstance(node, yaml.SequenceNode):
        return [(f"[{i}]", c) for i, c in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        return [pair for k, v in node.value for pair in ((_key_text(k), k), (_key_text(k), v))]
    return []


def _check_chars(path: Path, where: str, value: str, text: bool, key: bool = False) -> None:
    bad = (_CONTROL_IN_TEXT_RE if text else _CONTROL_RE).search(value)
    if bad is not None:
        what = "key" if key else "value"
        raise SpecError(
            f"{path}: {where or '<top level>'}: the {what} holds the control character "
            f"U+{ord(bad.group(0)):04X} at position {bad.start()}: labels and values are plain text"
            + ("" if text else " (tab and newline only in description and assumptions)")
        )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


def _kind_fields(raw: Any) -> Any:
    """A workload's fields with other kinds' own fields dropped where None; ValueError naming one that is set."""
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
        return raw  # the discriminator names a missing or unknown kind
    others = {n for args in KINDS.values() for n in args.own_fields()} - set(KINDS[raw["kind"]].own_fields())
    for name in sorted(others & set(raw)):
        if raw[name] is not None:
            raise ValueError(f"{name} applies to kind(s) {_kinds_with(name)} only, not {raw['kind']!r}")
    return {k: v for k, v in raw.items() if k not in others}


def _kinds_with(name: str) -> list[str]:
    return [k for k, args in KINDS.items() if name in args.own_fields()]


#: What the client sends in one run: the ``Args`` of the kind its ``kind`` names (kvlab.workloads.KINDS),
#: a union discriminated on ``kind``. A field only other kinds have is rejected, naming the kinds that take it
#: (left out when None, as YAML written before kinds had their own fields may say).
WorkloadSpec = Annotated[
    Union[tuple(KINDS.values())],  # noqa: UP007 (a union built from the registry)
    Field(discriminator="kind"),
    BeforeValidator(_kind_fields),
]
_WORKLOAD = TypeAdapter(WorkloadSpec)


def workload_spec(**fields: Any) -> WorkloadArgs:
    """A workload of its kind's class from its fields as YAML gives them (ValidationError naming the field)."""
    return _WORKLOAD.validate_python(fields)


class RetrySpec(_Strict):
    """Relaunch policy for classified failures (the memory study counts these)."""

    max_attempts: int = Field(3, ge=1, description="launch attempts per run, first included")
    backoff_s: float = Field(5.0, ge=0, description="wait before the second attempt")
    backoff_factor: float = Field(2.0, ge=1, description="each later wait is the previous one times this")
    retry_on: list[str] = Field(
        default_factory=lambda: ["startup_oom", "kv_cache_too_small", "runtime_oom", "crash", "timeout"],
        description=f"failure causes that trigger a retry; any of {list(FAILURE_CAUSES)}",
    )

    @field_validator("retry_on")
    @classmethod
    def _causes(cls, v: list[str]) -> list[str]:
        bad = [c for c in v if c not in FAILURE_CAUSES]
        if bad:
            raise ValueError(f"unknown failure cause(s) {bad}; known: {list(FAILURE_CAUSES)}")
        return v

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return self.backoff_s * self.backoff_factor ** (attempt - 1)


class RepeatsAt(_Strict):
    """More repeats at some points of the matrix: the points whose numbers decide a verdict need n >= 3 per side
    (docs/verdicts.md), the rest of a quick form can stay at one."""

    where: dict[str, Any] = Field(
        min_length=1,
        description="the points it applies to: matrix axis or field path "
        "(e.g. workload.shared_fraction, engine) -> the value they must have",
    )
    repeats: int = Field(
        ge=1, le=MAX_REPEATS, description="runs per matching point (the most of every rule that matches)"
    )


class SloSpec(_Strict):
    """A latency target per request: goodput counts the successful requests that meet every bound it states
    (kvlab.client.within_slo), per second of the run's batch time."""

    ttft_ms: float | None = Field(None, gt=0, description="most time to first token a request may take, in ms")
    tpot_ms: float | None = Field(None, gt=0, description="most time per output token after the first, in ms")

    @model_validator(mode="after")
    def _some_bound(self) -> SloSpec:
        if self.ttft_ms is None and self.tpot_ms is None:
            raise ValueError("an slo states at least one bound: ttft_ms or tpot_ms")
        return self


class QuickSpec(_Strict):
    """The experiment's quick form (what `make report` runs by default): fewer points and repeats.

    Its runs are a subset of the full study's (same keys), so a later full sweep reuses them.
    """

    matrix: dict[str, list[Any]] | None = Field(
        None, description="the quick form's matrix, in place of the full one (same axis syntax); None keeps it"
    )
    repeats: int | None = Field(None, ge=1, le=MAX_REPEATS, description="runs per matrix point in the quick form")
    repeats_at: list[RepeatsAt] | None = Field(
        None, description="more repeats at the quick form's deciding points; None keeps the experiment's"
    )


class ExperimentSpec(_Strict):
    """A whole experiment: engines, a base workload, the matrix to sweep, repeats and retries."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="experiment name (folder under data/runs): letters, digits, "
        "'_', '.', '-', not starting with '.' or '-' (so never '.', '..' or a hidden folder)",
    )
    _full_form: ExperimentSpec | None = PrivateAttr(default=None)  # set on a quick form
    description: str = Field("", description="what the experiment asks")
    assumptions: dict[str, Any] | str = Field(
        default_factory=dict, description="what the experiment assumes where its source is silent"
    )
    scale_factor: float = Field(1.0, gt=0, description="full-scale context / this experiment's context")
    hardware: str = Field(
        description="hardware label recorded in every run, e.g. 'NVIDIA B300' or 'CPU x86_64': "
        "free text for readers, never read to decide CPU or GPU (``device`` says that)"
    )
    device: Device = Field(
        description="what the runs compute on: `cpu`, `gpu`, or a mapping {kind: gpu, accelerator: "
        "'NVIDIA B300', count: 8} with the GPU model and count where known (kvlab.device)"
    )
    engines: dict[str, EngineSpec] = Field(
        min_length=1, description="engine label -> engine spec (a list is keyed by engine name)"
    )
    workload: WorkloadSpec = Field(description="base workload; the matrix overrides its fields")
    matrix: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="axis -> values. Axes: 'engine' (engine labels; default all), 'engine.<field>', "
        "'engines.<label>.<field>', 'workload.<field>'; any other name is a linked axis whose values "
        "are mappings of such paths to values (e.g. mem_util with its KV budget)",
    )
    repeats: int = Field(1, ge=1, le=MAX_REPEATS, description="runs per matrix point")
    repeats_at: list[RepeatsAt] = Field(
        default_factory=list, description="more repeats at some points (e.g. those that decide a verdict)"
    )
    warmup: bool = Field(True, description="send one small request after each server start, not recorded")
    probe: StrictBool = Field(
        False,
        description="send kvlab.probe's fixed probe set (greedy, temperature 0) once "
        "per server start, after the warm-up and before the first measured run, and store its "
        "outputs with the server's record in the manifest (never counted in a run); the "
        "report compares them across the experiment's configurations. Not part of run keys",
    )
    telemetry: StrictBool = Field(
        True,
        description="sample the server's /metrics (or tail its log) during each run; false: no /metrics sample or "
        "log tail during a run (its counters before and after are still read; GPU readings go on; RUNS' notes say "
        "so), for a server whose cores also serve the requests: on SGLang's CPU build on one core a sample every "
        "0.5 s cost TPOT 4-5% and TTFT up to 10% (docs/performance.md). A load's queue rule needs the samples (set "
        "stop_queue_rising: null). Part of the run key only when false",
    )
    slo: SloSpec | None = Field(
        None,
        description="latency target goodput is counted against ({ttft_ms, tpot_ms}); "
        "None: no goodput. Part of the run keys when set (a new SLO re-measures)",
    )
    retry: RetrySpec = Field(default_factory=RetrySpec, description="relaunch policy on classified failures")
    quick: QuickSpec | None = Field(
        None, description="the quick form `kvlab sweep --quick` (and `make report` without FULL=1) runs"
    )

    def quick_form(self) -> ExperimentSpec:
        """This experiment as its quick form runs it (itself when it declares none)."""
        if self.quick is None:
            return self
        quick = self.model_copy(
            update={
                "matrix": self.matrix if self.quick.matrix is None else self.quick.matrix,
                "repeats": self.quick.repeats or self.repeats,
                "quick": None,
                "repeats_at": self.repeats_at if self.quick.repeats_at is None else self.quick.repeats_at,
            }
        )
        quick._full_form = self
        return quick

    def full_form(self) -> ExperimentSpec:
        """The whole study this spec belongs to: itself, or the experiment its quick form was taken from."""
        return self._full_form or self

    @field_validator("engines", mode="before")
    @classmethod
    def _engines_list(cls, v: Any) -> Any:
        if isinstance(v, list):
            out: dict[str, Any] = {}
            for i, e in enumerate(v):
                label = e.get("name") if isinstance(e, dict) else None
                if label in out:
                    raise ValueError(f"engine {label!r} listed twice (entry {i}); use a mapping label -> spec")
                out[str(label)] = e
            v = out
        if isinstance(v, dict):
            bad = [k for k in v if not re.match(NAME_PATTERN, str(k))]
            if bad:
                raise ValueError(
                    f"engine label {bad[0]!r} must match {NAME_PATTERN} (letters, digits, '_', '.', '-', "
                    "not starting with '.' or '-')"
                )
        return v

    @field_validator("matrix")
    @classmethod
    def _matrix(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for axis, values in v.items():
            if not values:
                raise ValueError(f"axis {axis!r} has no values")
        return v

    @classmethod
    def read(cls, path: str | Path) -> ExperimentSpec:
        """Read a YAML experiment and validate its fields; its runs are checked by :meth:`check_runs`."""
        path = Path(path)
        raw, node = _load_yaml(path)
        if not isinstance(raw, dict):
            raise SpecError(f"{path}: top level must be a mapping of fields, got {type(raw).__name__}")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise SpecError(_format_errors(path, exc, node=node, schema=cls)) from None

    def check_runs(self, origin: str | Path = "<spec>") -> None:
        """SpecError naming the field and value when a run of the full or the quick form is invalid
        (see :func:`expand`); reads local models' config.json, writes nothing."""
        expand(self, origin=origin)
        if self.quick is not None:
            try:
                expand(self.quick_form(), origin=origin)
            except SpecError as exc:
                raise SpecError(str(exc).replace(f"{origin}: ", f"{origin}: quick: ", 1)) from None

    def check_environment(self, origin: str | Path = "<spec>", launchers: bool = False) -> None:
        """SpecError naming the field when this machine lacks what the runs need: an API key from an environment
        variable that is not set (or is empty), what a sweep and its dry run check before anything runs; with
        ``launchers``, also a launch prefix whose program is not an executable file here (a sweep that launches
        engines on this machine; not the dry run, which may plan for another host, nor a Ray sweep, whose nodes
        launch them). Not part of :meth:`load`, which validates the file alone (``kvlab model`` reads a keyed
        experiment without its key)."""
        seen: set[tuple[str, str | None, tuple[str, ...] | None]] = set()
        for r in expand(self, origin=origin):
            e = r.engine
            if (r.engine_label, e.api_key_env, e.launch and tuple(e.launch)) in seen:
                continue
            seen.add((r.engine_label, e.api_key_env, e.launch and tuple(e.launch)))
            if e.api_key_env and not os.environ.get(e.api_key_env):
                raise SpecError(
                    f"{origin}: engines.{r.engine_label}.api_key_env: environment variable "
                    f"{e.api_key_env!r} is not set (the server's API key is read from it): set it, or "
                    "remove api_key_env if the server takes no key"
                )
            if launchers and not e.external:
                program = get_adapter(e.name).launch_prefix(e)[0]
                found = (
                    shutil.which(program)
                    if "/" not in program
                    else (os.path.isfile(program) and os.access(program, os.X_OK))
                )
                if not found:
                    where = "found on PATH" if "/" not in program else "an executable file"
                    raise SpecError(
                        f"{origin}: engines.{r.engine_label}.launch[0]: {program!r} is not {where} on "
                        "this machine (a relative path resolves against the repository root): build the "
                        "engine's environment (make engines) or give the launch prefix of this host"
                    )

    @classmethod
    def load(cls, path: str | Path) -> ExperimentSpec:
        """Read and validate a YAML experiment, including every expanded run, before anything launches.

        Side-effect free: a local model must exist (a sweep makes kvlab's tiny model in its plan step,
        kvlab.plan, before it validates).
        """
        spec = cls.read(path)
        spec.check_runs(Path(path))
        return spec


def _format_errors(
    origin: Path | str, exc: ValidationError, prefix: str = "", node: yaml.Node | None = None, schema: Any = None
) -> str:
    """One line per error: ``file: field.path: message (got value)``, then where the file's YAML says it
    (``node``, the composed document: `at line N`) and, for an unknown field, the field of ``schema`` (the type the
    error's location starts from) it is closest to (`did you mean 'repeats'?`)."""
    lines = []
    for err in exc.errors():
        parts = [*prefix.split("."), *map(str, err["loc"])] if prefix else [str(p) for p in err["loc"]]
        # a workload's errors are located under its kind's tag (workload.<kind>.field): name the field as YAML does
        parts = [p for i, p in enumerate(parts) if not (i and parts[i - 1].endswith("workload") and p in KINDS)]
        where = ".".join(parts) or "<top level>"
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        hint = ""
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
            hint = _did_you_mean(str(err["loc"][-1]), _fields_at(schema, err["loc"][:-1]))
        elif err["type"] == "missing" and parts == ["device"]:  # a file written before the device was typed
            msg = (
                "Field required: say what the runs compute on, `device: cpu` or `device: gpu` (or {kind: gpu, "
                "accelerator: NVIDIA B300, count: 8}); the hardware label is free text and is not read for it"
            )
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):  # the workload's kind
            where += ".kind"
            names = [repr(k) for k in KINDS]
            if err["type"] == "union_tag_invalid":
                msg, value = f"Input should be {', '.join(names[:-1])} or {names[-1]}", err["ctx"]["tag"]
            else:
                msg, value = "Field required", {}
        if isinstance(value, str):
            value = redact_url(value)  # credentials in a url are never echoed
        # an env entry's value is never echoed: its name may say it is a secret
        shown = "" if isinstance(value, dict) or "env" in parts[:-1] else f" (got {value!r})"
        lines.append(f"{origin}: {where}: {msg}{shown}{_line_text(node, err['loc'])}{hint}")
    return "\n".join(lines)


def _line_text(node: yaml.Node | None, loc: tuple) -> str:
    """Where the YAML document ``node`` gives the field at ``loc`` (a pydantic location): ` at line N` (its key's
    line), ` in the block at line N` (the line of the deepest key found) when the field is not in the file (missing,
    or from an alias's merge), or nothing (no document, or a field of the top level that the file lacks)."""
    if node is None:
        return ""
    found, line = True, None
    for i, part in enumerate(loc):
        if isinstance(part, str) and part in KINDS and i and loc[i - 1] == "workload":
            continue  # the workload's kind tag is no key of the YAML
        child = key = None
        if isinstance(node, yaml.MappingNode):
            key, child = next(((k, v) for k, v in node.value if _key_text(k) == str(part)), (None, None))
        elif isinstance(node, yaml.SequenceNode):
            if isinstance(part, int) and 0 <= part < len(node.value):
                child = node.value[part]
            else:  # engines given as a list: the entry whose name is the label
                child = next((e for e in node.value if isinstance(e, yaml.MappingNode) and _name_of(e) == part), None)
        if child is None:
            found = False
            break
        node, line = child, (key or child).start_mark.line + 1
    if line is None:  # the top level (a field missing from it, or the whole document)
        return ""
    return f" at line {line}" if found else f" in the block at line {line}"


def _name_of(node: yaml.MappingNode) -> str | None:
    return next((v.value for k, v in node.value if _key_text(k) == "name" and isinstance(v, yaml.ScalarNode)), None)


def _fields_at(schema: Any, loc: tuple) -> list[str]:
    """The field names the mapping at ``loc`` takes, reading the types from ``schema`` down (a model's field, a
    dict's value, a list's item, a union's models, the workload kind a tag names); empty where no model is found."""
    kinds = set(KINDS.values())
    types_ = _types(schema)
    for part in loc:
        if isinstance(part, str) and part in KINDS and kinds & set(types_):
            types_ = [KINDS[part]]
            continue
        nxt: list[Any] = []
        for t in types_:
            if _is_model(t):
                if part in t.model_fields:
                    nxt += _types(t.model_fields[part].annotation)
            elif get_origin(t) in (dict, list, tuple) and get_args(t):  # a key or an index: the item's type
                nxt += _types(get_args(t)[-1] if get_origin(t) is dict else get_args(t)[0])
        types_ = nxt
    return list(dict.fromkeys(n for t in types_ if _is_model(t) for n in t.model_fields))


def _types(tp: Any) -> list[Any]:
    """The types a value of ``tp`` may have: a union's members, an annotation's type (Optional's None left out)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _types(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return [t for a in get_args(tp) for t in _types(a)]
    return [] if tp is None or tp is type(None) else [tp]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _did_you_mean(name: str, fields: list[str]) -> str:
    """`; did you mean 'repeats'?` for the field ``name`` is closest to, else `; known fields: …` (or nothing)."""
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known fields: {', '.join(sorted(fields))}" if fields else ""


class RunSpec(_Strict):
    """One run: an engine spec, a workload and a repeat index, with the keys the runner groups by."""

    experiment: str = Field(description="experiment name")
    engine_label: str = Field(description="label of the engine in the experiment")
    engine: EngineSpec = Field(description="engine spec after matrix overrides")
    workload: WorkloadSpec = Field(description="workload after matrix overrides")
    repeat: int = Field(ge=0, description="repeat index, 0-based")
    point: dict[str, Any] = Field(description="the matrix values that chose this run (axis -> value)")
    scale_factor: float = Field(description="full-scale context / this run's context")
    hardware: str = Field(description="hardware label (free text for readers)")
    device: Device = Field(description="what the experiment says its runs compute on (kvlab.device)")
    slo: SloSpec | None = Field(None, description="the experiment's SLO (goodput), None when it states none")
    telemetry: bool = Field(True, description="the experiment's telemetry: sample the server during the run")

    @property
    def key(self) -> str:
        """Stable id: short sha256 of the canonical JSON of engine (minus connection fields), workload, repeat
        and, for a local model, its config.json (so runs of an earlier version of a local model are not reused)."""
        engine = _omit_defaults(self.engine.model_dump(mode="json", exclude=set(KEY_EXCLUDED_ENGINE_FIELDS)), "engine")
        workload = _omit_defaults(self.workload.model_dump(mode="json"), "workload")
        if isinstance(workload.get("load"), dict):
            workload["load"] = _omit_defaults(workload["load"], "load")
        payload = {"engine": engine, "workload": workload, "repeat": self.repeat}
        if self.slo is not None:  # only when set: the keys of experiments without an SLO stay as they were
            payload["slo"] = self.slo.model_dump(mode="json")
        if not self.telemetry:  # only when off: a run measured without samples is measured again with them
            payload["telemetry"] = False
        config = self.engine.local_config()
        if config is not None:  # a local model whose config changes (kvlab's tiny model did) is another model
            payload["model_config"] = _short_hash(config)
        return _short_hash(payload)

    @property
    def server_key(self) -> str:
        """Hash of what decides the server (launch prefix, args, env overrides): runs sharing it share a server.
        An external server is its URL: every run that names it uses it."""
        if self.engine.external:
            return _short_hash({"url": self.engine.url.rstrip("/"), "api_key_env": self.engine.api_key_env})
        return _short_hash(self.server_settings() | {"api_key_env": self.engine.api_key_env})

    def server_settings(self) -> dict[str, Any]:
        """What this run needs the server started with: argv (port 0) and environment overrides; for an
        external server, what it would be launched with (the same fields, a placeholder interpreter)."""
        adapter = get_adapter(self.engine.name)
        engine = (
            self.engine.model_copy(update={"launch": ["python"], "url": None}) if self.engine.external else self.engine
        )
        return {"argv": adapter.command(engine, port=0), "env": adapter.env_overrides(engine)}

    @property
    def on_cpu(self) -> bool:
        """The experiment's device is a CPU (``device: cpu``): no GPUs to ask for or to share."""
        return self.device.on_cpu

    @property
    def context_tokens(self) -> int:
        """Prompt + output tokens per request."""
        return self.workload.total_tokens

    @property
    def context_label(self) -> str:
        """The full-scale context this run stands for, e.g. '64K' for 2,048 tokens at scale 32 (K = 1024)."""
        return context_label(self.context_tokens * self.scale_factor)


def _omit_defaults(dump: dict[str, Any], part: str) -> dict[str, Any]:
    omitted = KEY_OMITTED_AT_DEFAULT[part]
    return {k: v for k, v in dump.items() if not (k in omitted and v == omitted[k])}


def _short_hash(obj: Any) -> str:
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _set_path(target: dict[str, Any], dotted: list[str], value: Any, axis: str) -> None:
    node = target
    for part in dotted[:-1]:
        if not isinstance(node.get(part), dict):
            raise KeyError(f"matrix.{axis}: no field {'.'.join(dotted)!r}")
        node = node[part]
    node[dotted[-1]] = copy.deepcopy(value)


def _apply(
    spec: ExperimentSpec, path: str, value: Any, engines: dict[str, dict], workload: dict, axis: str
) -> str | None:
    """Apply one override; returns an engine label when the path selects one."""
    if not isinstance(path, str):
        raise KeyError(f"matrix.{axis}: a field path is text like 'engine.mem_util', got {path!r}")
    parts = path.split(".")
    if path == "engine":
        if not isinstance(value, str) or value not in spec.engines:
            raise KeyError(f"matrix.{axis}: unknown engine {value!r}; experiment defines {list(spec.engines)}")
        return value
    if parts[0] == "engine" and len(parts) >= 2:
        for e in engines.values():
            _set_path(e, parts[1:], value, axis)
    elif parts[0] == "engines" and len(parts) >= 3:
        if parts[1] not in engines:
            raise KeyError(f"matrix.{axis}: unknown engine {parts[1]!r}; experiment defines {list(spec.engines)}")
        _set_path(engines[parts[1]], parts[2:], value, axis)
    elif parts[0] == "workload" and len(parts) >= 2:
        _set_path(workload, parts[1:], value, axis)
    else:
        raise KeyError(
            f"matrix.{axis}: path {path!r} must be 'engine', 'engine.<field>', 'engines.<label>.<field>' "
            "or 'workload.<field>'"
        )
    return None


def _repeats(spec: ExperimentSpec, point: dict[str, Any], matched: set[int]) -> int:
    """Runs at one matrix point: the experiment's repeats, or more where a ``repeats_at`` rule matches it (a rule
    names matrix axes, or field paths inside a linked axis, with the value the point must have)."""
    flat = dict(point)
    for value in point.values():
        if isinstance(value, dict):
            flat |= value
    n = spec.repeats
    for i, rule in enumerate(spec.repeats_at):
        if all(k in flat and flat[k] == v for k, v in rule.where.items()):
            matched.add(i)
            n = max(n, rule.repeats)
    return n


def expand(spec: ExperimentSpec, origin: str | Path = "<spec>") -> list[RunSpec]:
    """One RunSpec per (matrix point x engine x repeat), every one validated; errors name the field and value.

    Checks per run: the engine spec and workload after overrides (e.g. dcp divides tp, mem_util in
    (0, 1]), prompt + output <= max_model_len, max_model_len <= a local model's native context unless
    allow_long_context, and that a local model folder exists.
    """
    check_size(spec, origin)
    axes = list(spec.matrix.items())
    matched: set[int] = set()  # the repeats_at rules some point matched
    base_engines = {k: v.model_dump(mode="python") for k, v in spec.engines.items()}
    base_workload = spec.workload.model_dump(mode="python")
    runs: list[RunSpec] = []
    for combo in itertools.product(*(values for _, values in axes)):
        engines, workload = copy.deepcopy(base_engines), copy.deepcopy(base_workload)
        where = ", ".join(f"{a}={_shown(a, v)!r}" for (a, _), v in zip(axes, combo)) or "base"
        point, chosen = _apply_point(spec, axes, combo, engines, workload, origin)
        labels = chosen[-1:] or list(spec.engines)
        try:
            workload_spec = _WORKLOAD.validate_python(workload)
        except ValidationError as exc:
            raise SpecError(
                _format_errors(origin, exc, prefix=f"matrix point [{where}]: workload", schema=WorkloadSpec)
            ) from None
        for label in labels:
            engine = _point_engine(spec, origin, where, label, engines[label], workload_spec)
            for r in range(_repeats(spec, point | {"engine": label}, matched)):
                runs.append(
                    RunSpec(
                        experiment=spec.name,
                        engine_label=label,
                        engine=engine,
                        workload=workload_spec,
                        repeat=r,
                        point=point | {"engine": label},
                        scale_factor=spec.scale_factor,
                        hardware=spec.hardware,
                        device=spec.device,
                        slo=spec.slo,
                        telemetry=spec.telemetry,
                    )
                )
    _check_expansion(spec, origin, matched, runs)
    return runs


def _apply_point(
    spec: ExperimentSpec,
    axes: list[tuple[str, list]],
    combo: tuple,
    engines: dict[str, dict],
    workload: dict,
    origin: str | Path,
) -> tuple[dict[str, Any], list[str]]:
    """One matrix point's overrides applied to ``engines`` and ``workload`` (in place): the point (axis: value)
    and the engine labels its axes chose, in order."""
    chosen: list[str] = []
    point: dict[str, Any] = {}
    try:
        for (axis, _), value in zip(axes, combo):
            point[axis] = value
            if axis == "engine" or "." in axis:
                label = _apply(spec, axis, value, engines, workload, axis)
                if label:
                    chosen.append(label)
            elif isinstance(value, dict):
                for path, v in value.items():
                    label = _apply(spec, path, v, engines, workload, axis)
                    if label:
                        chosen.append(label)
            else:
                raise KeyError(f"matrix.{axis}: a linked axis needs mappings of field paths to values, got {value!r}")
    except KeyError as exc:
        raise SpecError(f"{origin}: {exc.args[0]}") from None
    return point, chosen


def _point_engine(
    spec: ExperimentSpec, origin: str | Path, where: str, label: str, engine: dict, workload_spec: WorkloadArgs
) -> EngineSpec:
    """Engine ``label`` at one matrix point, validated with its workload (:func:`_check_run`) and against the
    experiment's device and telemetry."""
    try:
        e = EngineSpec.model_validate(engine)
    except ValidationError as exc:
        raise SpecError(
            _format_errors(origin, exc, prefix=f"matrix point [{where}]: engines.{label}", schema=EngineSpec)
        ) from None
    _check_run(origin, where, label, e, workload_spec)
    if e.dtype == "bfloat16-if-native" and not spec.device.on_cpu:
        raise SpecError(
            f"{origin}: matrix point [{where}]: engines.{label}.dtype: 'bfloat16-if-native' follows this "
            f"host's CPU flags, so it applies to CPU experiments only (device is {spec.device.kind!r}); "
            "give bfloat16, float16 or float32"
        )
    if spec.device.count is not None and not e.external and e.gpus > spec.device.count:
        raise SpecError(
            f"{origin}: matrix point [{where}]: engines.{label}: tp {e.tp} × dp {e.dp} = "
            f"{e.gpus} GPUs, more than the {spec.device.count} of device.count"
        )
    load = workload_spec.load
    if load is not None and load.search is not None and spec.slo is None:
        raise SpecError(
            f"{origin}: matrix point [{where}]: workload.load.search finds the highest load within the SLO: "
            "the experiment states none (slo: {ttft_ms, tpot_ms})"
        )
    factor = getattr(workload_spec, "scale_factor", None) if workload_spec.kind == "trace" else None
    if factor is not None and factor > 1 and factor != spec.scale_factor:
        raise SpecError(
            f"{origin}: matrix point [{where}]: workload.scale_factor ({factor}) divides the trace's lengths, but the "
            f"experiment's scale_factor ({spec.scale_factor:g}) is what every page labels its contexts with: make "
            "them the same (a trace file already scaled is replayed with workload.scale_factor 1)"
        )
    if not spec.telemetry and load is not None and load.stop_queue_rising is not None:
        raise SpecError(
            f"{origin}: matrix point [{where}]: telemetry: false leaves workload.load.stop_queue_rising "
            f"({load.stop_queue_rising}) without the samples it reads: set it to null"
        )
    return e


def _check_expansion(spec: ExperimentSpec, origin: str | Path, matched: set[int], runs: list[RunSpec]) -> None:
    """The whole matrix expanded: every repeats_at rule matched a point, no two runs are the same run, and the
    external servers agree (:func:`_check_external`)."""
    unused = [i for i in range(len(spec.repeats_at)) if i not in matched]
    if unused:
        rule = spec.repeats_at[unused[0]]
        raise SpecError(f"{origin}: repeats_at[{unused[0]}].where: {rule.where!r} matches no point of the matrix")
    dupes = sorted(k for k, n in Counter(r.key for r in runs).items() if n > 1)
    if dupes:
        what = "a run is" if len(dupes) == 1 else f"{len(dupes):,} runs are"
        raise SpecError(f"{origin}: matrix: {what} identical to another after overrides (key {dupes[0]})")
    _check_external(origin, runs)


def _shown(path: Any, value: Any) -> Any:
    """A matrix value as an error message names its point: '***' for a secret-looking env entry (its name, or
    credentials in its value), a url's credentials redacted; a linked axis's mapping entry by entry."""
    if isinstance(value, dict):
        return {k: _shown(k, v) for k, v in value.items()}
    name = str(path).rsplit(".", 1)[-1]
    if ".env." in f".{path}" and (is_secret_env(name) or secret_env_value(name, value)):
        return REDACTED
    return redact_url(value) if isinstance(value, str) else value


def check_size(spec: ExperimentSpec, origin: str | Path = "<spec>") -> None:
    """SpecError naming the field when the experiment would have more than :data:`MAX_RUNS` runs, computed from the
    axes' lengths without expanding them: matrix points (the product) x engines per point x the most repeats any
    point gets (a bound where repeats_at raises some points only)."""
    lengths = [len(v) for v in spec.matrix.values()]
    points = math.prod(lengths)
    shape = " x ".join(f"{n:,}" for n in lengths)
    if points > MAX_RUNS:
        raise SpecError(
            f"{origin}: matrix: {points:,} points ({shape}, the product of its axes' lengths), over the "
            f"limit of {MAX_RUNS:,} runs per experiment"
        )
    picks_one = "engine" in spec.matrix or any(
        values and all(isinstance(v, dict) and "engine" in v for v in values) for values in spec.matrix.values()
    )
    engines = 1 if picks_one else len(spec.engines)
    repeats = max([spec.repeats, *(r.repeats for r in spec.repeats_at)])
    runs = points * engines * repeats
    if runs > MAX_RUNS:
        field = "repeats" if spec.repeats == repeats else "repeats_at"
        raise SpecError(
            f"{origin}: {field}: up to {runs:,} runs ({points:,} matrix points x {count(engines, 'engine')} x "
            f"{repeats:,} repeats), over the limit of {MAX_RUNS:,} runs per experiment"
        )


def _check_external(origin: str | Path, runs: list[RunSpec]) -> None:
    """SpecError when runs need different server settings from one external server (kvlab cannot restart it)."""
    by_url: dict[str, list[RunSpec]] = {}
    for r in runs:
        if r.engine.external:
            by_url.setdefault(r.engine.url.rstrip("/"), []).append(r)
    for url, group in by_url.items():
        if len({json.dumps(r.server_settings(), sort_keys=True) for r in group}) == 1:
            continue
        ignore = {*KEY_EXCLUDED_ENGINE_FIELDS, "url", "launch"}
        dumps = [r.engine.model_dump(mode="json", exclude=ignore) for r in group]
        differ = sorted(k for k in dumps[0] if len({json.dumps(d[k], sort_keys=True) for d in dumps}) > 1)
        values = "; ".join(f"{k}: {', '.join(sorted({json.dumps(d[k]) for d in dumps}))}" for k in differ)
        raise SpecError(
            f"{origin}: engines.{group[0].engine_label}.url: the runs need the server at {url} started in "
            f"{len({json.dumps(r.server_settings(), sort_keys=True) for r in group})} different ways ({values}), "
            "but kvlab does not start or restart a server it did not launch: give one url per setting, "
            "or sweep one setting"
        )


def _check_run(origin: str | Path, where: str, label: str, e: EngineSpec, w: WorkloadArgs) -> None:
    at = f"{origin}: matrix point [{where}]: engines.{label}"
    wat = f"{origin}: matrix point [{where}]: workload"
    if w.batch_size > MAX_BATCH_SIZE:
        raise SpecError(f"{wat}.batch_size: {w.batch_size:,} requests, over the limit of {MAX_BATCH_SIZE:,} per run")
    if w.total_tokens > MAX_CONTEXT_TOKENS:
        field = "context_tokens" if w.context_tokens is not None else "prompt_tokens"
        raise SpecError(
            f"{wat}.{field}: prompt ({w.prompt_len:,}) + output ({w.output_tokens:,}) = "
            f"{w.total_tokens:,} tokens per request, over the limit of {MAX_CONTEXT_TOKENS:,}"
        )
    if w.n_requests * w.total_tokens > MAX_RUN_TOKENS:
        raise SpecError(
            f"{wat}.batch_size: {w.n_requests:,} requests x {w.total_tokens:,} tokens = "
            f"{w.n_requests * w.total_tokens:,} tokens in one run, over the limit of {MAX_RUN_TOKENS:,}"
        )
    if e.max_model_len > MAX_CONTEXT_TOKENS:
        raise SpecError(f"{at}.max_model_len: {e.max_model_len:,} tokens, over the limit of {MAX_CONTEXT_TOKENS:,}")
    adapter = adapter_class(e.name)  # what the engine can do
    if e.kv_cache_bytes is not None and not adapter.kv_budget:
        raise SpecError(f"{at}.kv_cache_bytes ({e.kv_cache_bytes}): {e.name} takes no explicit KV budget")
    if e.dev_mode and not adapter.dev_endpoints:
        raise SpecError(f"{at}.dev_mode: {e.name} has no development endpoints to open")
    # an engine with a strict context (EngineAdapter.strict_context: SGLang's tokenizer manager checks
    # input + max_new_tokens >= context_len) rejects a request that fills it; vLLM accepts up to max_model_len
    if adapter.strict_context and w.total_tokens >= e.max_model_len:
        raise SpecError(
            f"{at}.max_model_len: prompt ({w.prompt_len}) + output ({w.output_tokens}) = {w.total_tokens} "
            f"tokens must be below max_model_len ({e.max_model_len}) for {e.name}: it rejects a request that fills its "
            "context length"
        )
    if w.total_tokens > e.max_model_len:
        raise SpecError(
            f"{at}.max_model_len: prompt ({w.prompt_len}) + output ({w.output_tokens}) = {w.total_tokens} "
            f"tokens exceeds max_model_len ({e.max_model_len})"
        )
    try:
        e.check_model_path()
    except ValueError as exc:
        raise SpecError(f"{at}.model: {exc} (got {e.model!r})") from None
    reads_tokenizer = None  # the load option that reads the model's tokenizer.json, and what it does with it
    if w.load is not None and w.load.prompt_form == "text":
        reads_tokenizer = "workload.load.prompt_form: 'text' decodes the prompts with"
    elif w.load is not None and w.load.draws == "random_ids":
        reads_tokenizer = "workload.load.draws: 'random_ids' draws its ids below the tokenizer's vocabulary size, from"
    if reads_tokenizer and not (Path(e.model_arg) / "tokenizer.json").is_file():
        raise SpecError(
            f"{origin}: matrix point [{where}]: {reads_tokenizer} the model's tokenizer.json, which "
            f"engines.{label}.model ({e.model!r}) has not: give a local model folder"
        )
    native = e.native_context()
    if native is not None and e.max_model_len > native and not e.allow_long_context:
        raise SpecError(
            f"{at}.max_model_len: {e.max_model_len} exceeds the model's max_position_embeddings ({native}); "
            "set allow_long_context: true to override"
        )
    known = None if native is not None else catalog_context(e.model)
    if known is not None and e.max_model_len > known[1] and not e.allow_long_context:
        raise SpecError(
            f"{at}.max_model_len: {e.max_model_len} exceeds {known[0]}'s native context ({known[1]:,} tokens, "
            f"{CATALOG_DIR / 'models.csv'}); set allow_long_context: true to override"
        )
    # what the engine's adapter refuses when it builds the command (e.g. SGLang turns kv_cache_bytes into a token
    # count from a local model's config.json, so a hub id cannot have one): refused here, not at launch
    try:
        launched = e.model_copy(update={"launch": ["python"], "url": None}) if e.external else e
        get_adapter(e.name).command(launched, port=0)
    except ValueError as exc:
        field = "kv_cache_bytes" if str(exc).startswith("kv_cache_bytes") else None
        raise SpecError(f"{at}{'.' + field if field else ''}: {exc}") from None


@lru_cache(maxsize=1)
def _catalog_contexts() -> dict[str, tuple[str, int]]:
    """Model key and every alias (lower case) -> (model, native context), from the model catalog's own columns
    (data/catalog/models.csv; read here with csv, not kvlab.perfmodel, whose import takes scipy)."""
    out: dict[str, tuple[str, int]] = {}
    try:
        with open(CATALOG_DIR / "models.csv", newline="") as f:
            for row in csv.DictReader(f):
                try:
                    entry = (row["model"], int(float(row["native_context"])))
                except (KeyError, TypeError, ValueError):
                    continue
                for name in [row["model"], *(row.get("aliases") or "").split(";")]:
                    if name.strip():
                        out.setdefault(name.strip().lower(), entry)
    except OSError:
        return {}
    return out


def catalog_context(model: str) -> tuple[str, int] | None:
    """(catalog model, native context in tokens) when the model catalog knows ``model`` by key or alias (a path
    ending in one too, as kvlab.catalog.Model.matches reads it), else None."""
    names = _catalog_contexts()
    return names.get(model.strip().lower()) or names.get(Path(model.strip()).name.lower())
