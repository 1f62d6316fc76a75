"""The typed result base (kvlab.studies.result): a result's JSON reads back to the same result, field by field."""

from __future__ import annotations

import dataclasses
import json
from typing import ClassVar

import polars as pl
import pytest

from kvlab.studies.result import SCHEMA_VERSION, Answer, StudyResult, decode, encode
from kvlab.verdicts import Verdict


@dataclasses.dataclass(frozen=True)
class Point:
    engine: str
    value: float | None
    spread: tuple[float, float] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyResult(StudyResult):
    report: ClassVar[str] = "05_prefix_sharing"
    sharing: pl.DataFrame
    points: tuple[Point, ...]
    by_engine: dict[str, Point]
    threshold: float
    note: str | None = None


def toy() -> ToyResult:
    frame = pl.DataFrame(
        {"engine": ["vllm", "sglang"], "hits": [0.5, None], "runs": [3, 2], "on": [True, False]},
        schema={"engine": pl.String, "hits": pl.Float64, "runs": pl.Int32, "on": pl.Boolean},
    ).with_columns(pl.Series("ttfts", [[1.0, 2.0], []], dtype=pl.List(pl.Float64)))
    verdict = Verdict(
        "a claim", "inconclusive", "measured", "1.02×", claim_id="x", kind="speed", value=1.02, n=3, spread=(1.0, 1.1)
    )
    table = pl.DataFrame({"context": ["64K"], "engine": ["vllm"], "evidence": ["measured"]})
    return ToyResult(
        answer=Answer(("One sentence.",), table),
        verdicts=(verdict,),
        experiments=("cpu_prefix_sharing",),
        parameters={"threshold": 0.3, "data_dir": ""},
        sharing=frame,
        points=(Point("vllm", 1.5, (1.0, 2.0)), Point("sglang", None)),
        by_engine={"vllm": Point("vllm", 2.0)},
        threshold=0.3,
    )


def test_a_result_reads_back_from_its_json_field_by_field():
    r = toy()
    text = json.dumps(r.to_json())
    back = ToyResult.from_json(json.loads(text))
    assert back.sharing.equals(r.sharing) and back.sharing.schema == r.sharing.schema
    assert back.points == r.points and isinstance(back.points, tuple)
    assert back.by_engine == r.by_engine and back.threshold == 0.3 and back.note is None
    assert back.verdicts == r.verdicts and back.verdicts[0].spread == (1.0, 1.1)
    assert back.answer.sentences == r.answer.sentences and back.answer.table.equals(r.answer.table)
    assert back.to_json() == r.to_json()
    assert r.to_json()["schema_version"] == SCHEMA_VERSION and r.to_json()["report"] == "05_prefix_sharing"
    assert list(r.frames) == ["sharing"]


def test_a_result_file_of_another_version_or_report_is_refused_by_name(tmp_path):
    data = toy().to_json()
    with pytest.raises(ValueError, match="schema_version 0"):
        ToyResult.from_json({**data, "schema_version": 0})
    with pytest.raises(ValueError, match="report '01_context_scaling', not '05_prefix_sharing'"):
        ToyResult.from_json({**data, "report": "01_context_scaling"})
    with pytest.raises(ValueError, match=r"unknown fields \['nope'\]"):
        ToyResult.from_json({**data, "nope": 1})
    path = toy().write_json(tmp_path / "05.result.json")
    assert ToyResult.from_json(path).to_json() == data


def test_what_a_result_cannot_store_is_named():
    with pytest.raises(TypeError, match="cannot store a object"):
        encode(object())
    with pytest.raises(TypeError, match="expected float"):
        decode("x", float)
    assert decode(3, float) == 3.0 and isinstance(decode(3, float), float)
