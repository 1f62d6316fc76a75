"""Experiment specs: validated YAML in (errors name file, field and value), one frozen RunSpec per run out."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, StrictBool, TypeAdapter,
                      ValidationError, field_validator, model_validator)

from kvlab.engines import FAILURE_CAUSES, adapter_class, get_adapter
from kvlab.engines.spec import EngineSpec
from kvlab.units import context_label
from kvlab.workloads import KINDS, WorkloadArgs

#: EngineSpec fields that change how kvlab reaches a server but not what it measures:
#: left out of RunSpec.key so that, e.g., a longer startup timeout does not re-run a sweep.
KEY_EXCLUDED_ENGINE_FIELDS = ("host", "port", "startup_timeout_s", "stall_timeout_s", "api_key_env",
                              "allow_insecure_key")

#: Fields added after runs were first stored, with the value that reproduces the earlier behaviour:
#: at that value they are left out of RunSpec.key, so runs measured before they existed keep their
#: keys (a sweep resumes instead of re-running them). Any other value is part of the key.
KEY_OMITTED_AT_DEFAULT: dict[str, dict[str, Any]] = {
    "engine": {"report_cached_tokens": True, "reasoning_parser": None, "url": None, "dp": 1, "dtype": "auto"},
    "workload": {"shared_fraction": None, "turns": None, "document_tokens": None, "question_tokens": None,
                 "reasoning_questions": None, "load": None},
    # inside workload.load: the definitions added for agreement with the peers' benchmarks (kvlab.load.LoadSpec)
    "load": {"prompt_form": "token_ids", "phase": "together", "window": "steady"},
}


#: Experiment names and engine labels: they name folders and files, so never '.', '..', a hidden name or an option.
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


class SpecError(ValueError):
    """An experiment spec is invalid; the message names the file, the field path and the value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


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

    where: dict[str, Any] = Field(min_length=1, description="the points it applies to: matrix axis or field path "
                                  "(e.g. workload.shared_fraction, engine) -> the value they must have")
    repeats: int = Field(ge=1, description="runs per matching point (the most of every rule that matches)")


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
    repeats: int | None = Field(None, ge=1, description="runs per matrix point in the quick form")
    repeats_at: list[RepeatsAt] | None = Field(
        None, description="more repeats at the quick form's deciding points; None keeps the experiment's")


class ExperimentSpec(_Strict):
    """A whole experiment: engines, a base workload, the matrix to sweep, repeats and retries."""

    name: str = Field(pattern=NAME_PATTERN, description="experiment name (folder under data/runs): letters, digits, "
                      "'_', '.', '-', not starting with '.' or '-' (so never '.', '..' or a hidden folder)")
    _full_form: ExperimentSpec | None = PrivateAttr(default=None)  # set on a quick form
    description: str = Field("", description="what the experiment asks")
    assumptions: dict[str, Any] | str = Field(
        default_factory=dict, description="what the experiment assumes where its source is silent"
    )
    scale_factor: float = Field(1.0, gt=0, description="full-scale context / this experiment's context")
    hardware: str = Field(description="hardware label recorded in every run, e.g. 'NVIDIA B300' or 'CPU x86_64'")
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
    repeats: int = Field(1, ge=1, description="runs per matrix point")
    repeats_at: list[RepeatsAt] = Field(default_factory=list,
                                        description="more repeats at some points (e.g. those that decide a verdict)")
    warmup: bool = Field(True, description="send one small request after each server start, not recorded")
    probe: StrictBool = Field(False, description="send kvlab.probe's fixed probe set (greedy, temperature 0) once "
                              "per server start, after the warm-up and before the first measured run, and store its "
                              "outputs with the server's record in the manifest (never counted in a run); the "
                              "report compares them across the experiment's configurations. Not part of run keys")
    slo: SloSpec | None = Field(None, description="latency target goodput is counted against ({ttft_ms, tpot_ms}); "
                                "None: no goodput. Part of the run keys when set (a new SLO re-measures)")
    retry: RetrySpec = Field(default_factory=RetrySpec, description="relaunch policy on classified failures")
    quick: QuickSpec | None = Field(
        None, description="the quick form `kvlab sweep --quick` (and `make report` without FULL=1) runs"
    )

    def quick_form(self) -> ExperimentSpec:
        """This experiment as its quick form runs it (itself when it declares none)."""
        if self.quick is None:
            return self
        quick = self.model_copy(update={
            "matrix": self.matrix if self.quick.matrix is None else self.quick.matrix,
            "repeats": self.quick.repeats or self.repeats, "quick": None,
            "repeats_at": self.repeats_at if self.quick.repeats_at is None else self.quick.repeats_at,
        })
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
                raise ValueError(f"engine label {bad[0]!r} must match {NAME_PATTERN} (letters, digits, '_', '.', '-', "
                                 "not starting with '.' or '-')")
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
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError(f"{path}: cannot read experiment file: {exc.strerror or exc}") from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"{path}: top level must be a mapping of fields, got {type(raw).__name__}")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise SpecError(_format_errors(path, exc)) from None

    def check_runs(self, origin: str | Path = "<spec>") -> None:
        """SpecError naming the field and value when a run of the full or the quick form is invalid
        (see :func:`expand`); reads local models' config.json, writes nothing."""
        expand(self, origin=origin)
        if self.quick is not None:
            try:
                expand(self.quick_form(), origin=origin)
            except SpecError as exc:
                raise SpecError(str(exc).replace(f"{origin}: ", f"{origin}: quick: ", 1)) from None

    @classmethod
    def load(cls, path: str | Path) -> ExperimentSpec:
        """Read and validate a YAML experiment, including every expanded run, before anything launches.

        Side-effect free: a local model must exist (a sweep makes kvlab's tiny model in its plan step,
        kvlab.plan, before it validates).
        """
        spec = cls.read(path)
        spec.check_runs(Path(path))
        return spec


def _format_errors(origin: Path | str, exc: ValidationError, prefix: str = "") -> str:
    lines = []
    for err in exc.errors():
        parts = [*prefix.split("."), *map(str, err["loc"])] if prefix else [str(p) for p in err["loc"]]
        # a workload's errors are located under its kind's tag (workload.<kind>.field): name the field as YAML does
        parts = [p for i, p in enumerate(parts) if not (i and parts[i - 1].endswith("workload") and p in KINDS)]
        where = ".".join(parts) or "<top level>"
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):  # the workload's kind
            where += ".kind"
            names = [repr(k) for k in KINDS]
            if err["type"] == "union_tag_invalid":
                msg, value = f"Input should be {', '.join(names[:-1])} or {names[-1]}", err["ctx"]["tag"]
            else:
                msg, value = "Field required", {}
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"{origin}: {where}: {msg}{shown}")
    return "\n".join(lines)


class RunSpec(_Strict):
    """One run: an engine spec, a workload and a repeat index, with the keys the runner groups by."""

    experiment: str = Field(description="experiment name")
    engine_label: str = Field(description="label of the engine in the experiment")
    engine: EngineSpec = Field(description="engine spec after matrix overrides")
    workload: WorkloadSpec = Field(description="workload after matrix overrides")
    repeat: int = Field(ge=0, description="repeat index, 0-based")
    point: dict[str, Any] = Field(description="the matrix values that chose this run (axis -> value)")
    scale_factor: float = Field(description="full-scale context / this run's context")
    hardware: str = Field(description="hardware label")
    slo: SloSpec | None = Field(None, description="the experiment's SLO (goodput), None when it states none")

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
        engine = self.engine.model_copy(update={"launch": ["python"], "url": None}) if self.engine.external \
            else self.engine
        return {"argv": adapter.command(engine, port=0), "env": adapter.env_overrides(engine)}

    @property
    def on_cpu(self) -> bool:
        """The experiment's hardware is a CPU (its label starts with "CPU"): no GPUs to ask for or to share."""
        return is_cpu_hardware(self.hardware)

    @property
    def context_tokens(self) -> int:
        """Prompt + output tokens per request."""
        return self.workload.total_tokens

    @property
    def context_label(self) -> str:
        """The full-scale context this run stands for, e.g. '64K' for 2,048 tokens at scale 32 (K = 1024)."""
        return context_label(self.context_tokens * self.scale_factor)


def is_cpu_hardware(label: str) -> bool:
    """Whether an experiment's hardware label names a CPU (it starts with "CPU")."""
    return label.strip().upper().startswith("CPU")


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
    parts = path.split(".")
    if path == "engine":
        if value not in spec.engines:
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
    axes = list(spec.matrix.items())
    matched: set[int] = set()  # the repeats_at rules some point matched
    base_engines = {k: v.model_dump(mode="python") for k, v in spec.engines.items()}
    base_workload = spec.workload.model_dump(mode="python")
    runs: list[RunSpec] = []
    for combo in itertools.product(*(values for _, values in axes)):
        engines, workload = copy.deepcopy(base_engines), copy.deepcopy(base_workload)
        chosen: list[str] = []
        point: dict[str, Any] = {}
        where = ", ".join(f"{a}={v!r}" for (a, _), v in zip(axes, combo)) or "base"
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
                    raise KeyError(
                        f"matrix.{axis}: a linked axis needs mappings of field paths to values, got {value!r}"
                    )
        except KeyError as exc:
            raise SpecError(f"{origin}: {exc.args[0]}") from None
        labels = chosen[-1:] or list(spec.engines)
        try:
            workload_spec = _WORKLOAD.validate_python(workload)
        except ValidationError as exc:
            raise SpecError(_format_errors(origin, exc, prefix=f"matrix point [{where}]: workload")) from None
        for label in labels:
            try:
                engine = EngineSpec.model_validate(engines[label])
            except ValidationError as exc:
                raise SpecError(_format_errors(origin, exc, prefix=f"matrix point [{where}]: engines.{label}")) from None
            _check_run(origin, where, label, engine, workload_spec)
            if engine.dtype == "bfloat16-if-native" and not is_cpu_hardware(spec.hardware):
                raise SpecError(
                    f"{origin}: matrix point [{where}]: engines.{label}.dtype: 'bfloat16-if-native' follows this "
                    f"host's CPU flags, so it applies to CPU experiments only (hardware is {spec.hardware!r}); "
                    "give bfloat16, float16 or float32"
                )
            for r in range(_repeats(spec, point | {"engine": label}, matched)):
                runs.append(
                    RunSpec(
                        experiment=spec.name, engine_label=label, engine=engine, workload=workload_spec,
                        repeat=r, point=point | {"engine": label}, scale_factor=spec.scale_factor,
                        hardware=spec.hardware, slo=spec.slo,
                    )
                )
    unused = [i for i in range(len(spec.repeats_at)) if i not in matched]
    if unused:
        rule = spec.repeats_at[unused[0]]
        raise SpecError(f"{origin}: repeats_at[{unused[0]}].where: {rule.where!r} matches no point of the matrix")
    keys = [r.key for r in runs]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise SpecError(f"{origin}: matrix: {len(dupes)} run(s) are identical after overrides (key {dupes[0]})")
    _check_external(origin, runs)
    return runs


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
    if w.load is not None and w.load.prompt_form == "text" and not (Path(e.model_arg) / "tokenizer.json").is_file():
        raise SpecError(f"{origin}: matrix point [{where}]: workload.load.prompt_form: 'text' decodes the prompts with "
                        f"the model's tokenizer.json, which engines.{label}.model ({e.model!r}) has not: give a local "
                        "model folder")
    native = e.native_context()
    if native is not None and e.max_model_len > native and not e.allow_long_context:
        raise SpecError(
            f"{at}.max_model_len: {e.max_model_len} exceeds the model's max_position_embeddings ({native}); "
            "set allow_long_context: true to override"
        )
