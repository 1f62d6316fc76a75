"""A study's typed result: declared fields, a schema version, and a JSON form that reads back to the same result.

Each study (``kvlab/studies/<study>/``) declares one result class::

    @dataclass(frozen=True, kw_only=True)
    class PrefixSharingResult(StudyResult):
        report: ClassVar[str] = "05_prefix_sharing"
        sharing: pl.DataFrame          # one row per engine, cache setting and shared fraction
        thresholds: dict[str, Threshold]
        ...

Every frame and value a page shows is a field with its type; a page reads ``r.sharing``, never a string key.
:meth:`StudyResult.to_json` writes every field (frames with their polars schema, nested dataclasses by field) and
:meth:`StudyResult.from_json` reads it back by the class's type hints, so a result file written beside a report's
HTML is the report's whole evidence, and ``reports/index.json`` is assembled from those files.

What a field may hold: ``pl.DataFrame``, ``str``/``int``/``float``/``bool``/``None``, a dataclass whose fields are
of these kinds, and ``list``/``tuple``/``dict[str, …]``/``X | None`` of them. A field typed ``Any`` holds plain JSON.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

import polars as pl

from kvlab.verdicts import Sources, Verdict

#: Bumped when a result class's fields change in a way an older file cannot be read as; :meth:`from_json` refuses
#: a file of another version, naming both.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Answer:
    """A report's bottom line: ``sentences`` (plain Markdown-inline sentences, the first the answer itself) and,
    where it fits, ``table``: a small typed frame (e.g. context × memory setting → engine) whose ``evidence``
    column says the kind of every row (published, measured, modelled, configuration)."""

    sentences: tuple[str, ...]
    table: pl.DataFrame | None = None

    def __post_init__(self):
        if not self.sentences or not all(isinstance(s, str) and s.strip() for s in self.sentences):
            raise ValueError("an Answer needs at least one non-empty sentence")
        if self.table is not None and "evidence" not in self.table.columns:
            raise ValueError(f"an Answer's table needs an 'evidence' column (has {self.table.columns})")
        object.__setattr__(self, "sentences", tuple(self.sentences))

    def to_json(self) -> dict:
        """Its sentences, and its table as columns (in order) and rows (what the index's answer table reads)."""
        return {
            "sentences": list(self.sentences),
            "table": None
            if self.table is None
            else {"columns": self.table.columns, "rows": [list(r) for r in self.table.rows()]},
        }

    def _repr_mimebundle_(self, include=None, exclude=None):
        from kvlab.words import answer_markdown  # the words' ground sits above the result types it formats

        return {"text/markdown": answer_markdown(self), "text/plain": " ".join(self.sentences)}


# -- encoding ------------------------------------------------------------------------------------------------------

_FRAME = "__frame__"
#: The names a frame's stored dtypes may use: polars' data types and nothing else (no builtins).
_DTYPE_NAMES = {n: getattr(pl, n) for n in dir(pl.datatypes) if isinstance(getattr(pl, n, None), type)}


def _frame_json(df: pl.DataFrame) -> dict:
    return {
        _FRAME: True,
        "schema": {c: repr(t) for c, t in df.schema.items()},
        "columns": {c: df[c].to_list() for c in df.columns},
    }


def _frame_from(d: dict) -> pl.DataFrame:
    schema = {c: eval(t, {"__builtins__": {}}, _DTYPE_NAMES) for c, t in d["schema"].items()}  # noqa: S307
    return pl.DataFrame(d["columns"], schema=schema)


def encode(value: Any) -> Any:
    """``value`` as plain JSON: frames with their schema, dataclasses field by field, tuples as lists."""
    if isinstance(value, pl.DataFrame):
        return _frame_json(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:
        return None  # NaN: JSON has none
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a result file: {value!r:.80}")


def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # each class's own module resolves its annotations


def decode(value: Any, hint: Any) -> Any:
    """``value`` (plain JSON from :func:`encode`) as ``hint`` says: the inverse of :func:`encode`."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return value
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        errors = []
        for a in options:
            try:
                return decode(value, a)
            except (TypeError, ValueError, KeyError) as e:
                errors.append(e)
        raise TypeError(f"{value!r:.80} is none of {options}: {errors}")
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ValueError(f"{value!r} is not one of {typing.get_args(hint)}")
        return value
    if hint is pl.DataFrame:
        if not (isinstance(value, dict) and value.get(_FRAME)):
            raise TypeError(f"expected a stored frame, got {type(value).__name__}")
        return _frame_from(value)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {hint.__name__}, got {type(value).__name__}")
        hints = _hints(hint)
        return hint(**{k: decode(v, hints.get(k, Any)) for k, v in value.items()})
    if origin in (tuple,):
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(v, args[0]) for v in value)
        if args:
            return tuple(decode(v, a) for v, a in zip(value, args, strict=True))
        return tuple(value)
    if origin in (list, typing.Sequence, __import__("collections.abc").abc.Sequence):
        (arg,) = typing.get_args(hint) or (Any,)
        return [decode(v, arg) for v in value]
    if origin in (dict, Mapping, __import__("collections.abc").abc.Mapping):
        _, arg = typing.get_args(hint) or (str, Any)
        return {k: decode(v, arg) for k, v in value.items()}
    if hint is tuple:
        return tuple(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(hint, type) and not isinstance(value, hint):
        raise TypeError(f"expected {hint.__name__}, got {type(value).__name__} {value!r:.60}")
    return value


# -- the base of every study's result -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StudyResult:
    """What every report's result holds (its study's class adds the report's own typed fields): the answer, the
    verdicts, what it read (measured experiments, documents) and the parameters it ran with."""

    report: ClassVar[str] = ""
    answer: Answer
    verdicts: tuple[Verdict, ...]
    experiments: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "verdicts", tuple(self.verdicts))

    @property
    def sources(self) -> Sources:
        """What it read, as the report's provenance panel takes it (``display(result.sources)``)."""
        return Sources(self.experiments, self.documents)

    @property
    def frames(self) -> dict[str, pl.DataFrame]:
        """Every frame field by name, for exploring (``r.frames.keys()``); a page reads the field itself."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), pl.DataFrame)
        }

    @classmethod
    def frame_names(cls) -> tuple[str, ...]:
        """The fields declared as frames (``pl.DataFrame``, or ``pl.DataFrame | None``), in declaration order: what
        a notebook's first cell names for a user to explore."""
        hints = _hints(cls)
        return tuple(
            f.name
            for f in dataclasses.fields(cls)
            if hints[f.name] is pl.DataFrame or pl.DataFrame in typing.get_args(hints[f.name])
        )

    def to_json(self) -> dict:
        """The whole result as plain JSON: ``schema_version``, ``report`` and every field."""
        body = {f.name: encode(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}
        return {"schema_version": SCHEMA_VERSION, "report": self.report, **body}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]):
        """A result read back from :meth:`to_json`'s form (a mapping, or a path to a JSON file)."""
        if isinstance(data, (str, Path)):
            data = json.loads(Path(data).read_text())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"{cls.__name__}: result file of schema_version {data.get('schema_version')!r}; this kvlab reads "
                f"{SCHEMA_VERSION} (build the report again)"
            )
        if cls.report and data.get("report") != cls.report:
            raise ValueError(f"{cls.__name__}: the file is report {data.get('report')!r}, not {cls.report!r}")
        hints = _hints(cls)
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        if unknown := sorted(set(data) - names - {"schema_version", "report"}):
            raise ValueError(f"{cls.__name__}: unknown fields {unknown} in the result file")
        return cls(**{k: decode(data[k], hints[k]) for k in names if k in data})

    def write_json(self, path: Path) -> Path:
        """Write :meth:`to_json` to ``path`` (atomically: a temporary file renamed into place)."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, default=str))
        tmp.replace(path)
        return path
