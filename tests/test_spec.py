"""Experiment specs: every bad value fails naming the file, the field and the value; expansion is stable."""

from __future__ import annotations

import copy

import pytest
import yaml

from kvlab.paths import EXPERIMENTS_DIR
from kvlab.spec import EngineSpec, ExperimentSpec, RetrySpec, SpecError, WorkloadSpec, expand

BASE = {
    "name": "t",
    "hardware": "CPU",
    "scale_factor": 32,
    "engines": {
        "vllm": {"name": "vllm", "launch": [".engines/vllm/bin/python"], "model": "org/some-model",
                 "max_model_len": 8192, "tp": 2, "dcp": 1},
        "sglang": {"name": "sglang", "launch": ["conda", "run", "-n", "sglang", "python"], "model": "org/some-model",
                   "max_model_len": 8192, "tp": 2, "dcp": 2},
    },
    "workload": {"kind": "fixed_batch", "batch_size": 4, "context_tokens": 2048, "output_tokens": 64},
    "matrix": {"engine.mem_util": [0.92, 0.95], "workload.context_tokens": [2048, 6400]},
    "repeats": 2,
}


def _write(tmp_path, data, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def _load_error(tmp_path, data) -> str:
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        ExperimentSpec.load(path)
    msg = str(err.value)
    assert str(path) in msg
    return msg


def _with(path: str, value):
    data = copy.deepcopy(BASE)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return data


def test_base_expands(tmp_path):
    spec = ExperimentSpec.load(_write(tmp_path, BASE))
    runs = expand(spec)
    assert len(runs) == 2 * 2 * 2 * 2  # mem_util x context x engines x repeats
    assert len({r.key for r in runs}) == len(runs)
    assert len({r.server_key for r in runs}) == 4  # engine x mem_util; contexts share a server
    assert {r.context_label for r in runs} == {"64K", "200K"}
    assert [r.key for r in expand(ExperimentSpec.load(_write(tmp_path, BASE, "again.yaml")))] == [r.key for r in runs]


def test_key_ignores_connection_fields_but_not_settings(tmp_path):
    a = expand(ExperimentSpec.load(_write(tmp_path, BASE, "a.yaml")))
    b = expand(ExperimentSpec.load(_write(tmp_path, _with("engines.vllm.startup_timeout_s", 5), "b.yaml")))
    c = expand(ExperimentSpec.load(_write(tmp_path, _with("engines.vllm.max_model_len", 16384), "c.yaml")))
    assert [r.key for r in a] == [r.key for r in b]
    assert {r.key for r in a if r.engine_label == "vllm"}.isdisjoint({r.key for r in c if r.engine_label == "vllm"})


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("engines.vllm.mem_util", 1.5, "engines.vllm.mem_util"),
        ("engines.vllm.mem_util", 0, "engines.vllm.mem_util"),
        ("engines.vllm.tp", 0, "engines.vllm.tp"),
        ("engines.sglang.dcp", 3, "dcp (3) must divide tp (2)"),
        ("engines.vllm.name", "trtllm", "engines.vllm.name"),
        ("engines.vllm.bogus", 1, "engines.vllm.bogus: unknown field"),
        ("workload.kind", "poisson", "workload.kind"),
        ("workload.output_tokens", 0, "workload.output_tokens"),
        ("retry", {"retry_on": ["meteor"]}, "retry.retry_on"),
        ("repeats", 0, "repeats"),
        ("colour", "blue", "colour: unknown field"),
        ("engines.sglang.kv_cache_bytes", 1024, "kv_cache_bytes (1024) is a vLLM option"),
    ],
)
def test_bad_values_name_the_field(tmp_path, path, value, expected):
    msg = _load_error(tmp_path, _with(path, value))
    assert expected in msg
    if not isinstance(value, dict):
        assert repr(value) in msg or str(value) in msg


def test_matrix_value_out_of_range_names_point_and_field(tmp_path):
    msg = _load_error(tmp_path, _with("matrix", {"engine.mem_util": [0.9, 1.2]}))
    assert "engine.mem_util=1.2" in msg and "mem_util" in msg and "1.2" in msg


def test_dcp_not_dividing_tp_via_matrix(tmp_path):
    msg = _load_error(tmp_path, _with("matrix", {"engine.dcp": [1, 4]}))
    assert "dcp (4) must divide tp (2)" in msg


def test_prompt_plus_output_longer_than_max_model_len(tmp_path):
    msg = _load_error(tmp_path, _with("matrix", {"workload.context_tokens": [2048, 9000]}))
    assert "max_model_len" in msg and "9000" in msg and "8192" in msg


def test_prompt_tokens_form_also_checked(tmp_path):
    data = _with("workload", {"kind": "fixed_batch", "batch_size": 1, "prompt_tokens": 8190, "output_tokens": 64})
    data["matrix"] = {}
    assert "8254 tokens exceeds max_model_len (8192)" in _load_error(tmp_path, data)


def test_unknown_engine_in_matrix(tmp_path):
    msg = _load_error(tmp_path, _with("matrix", {"engine": ["vllm", "tgi"]}))
    assert "unknown engine 'tgi'" in msg


def test_unknown_matrix_path(tmp_path):
    msg = _load_error(tmp_path, _with("matrix", {"workload.colour": [1]}))
    assert "colour" in msg


def test_missing_local_model(tmp_path):
    msg = _load_error(tmp_path, _with("engines.vllm.model", "data/models/does-not-exist"))
    assert "engines.vllm.model" in msg and "does-not-exist" in msg


def test_existing_local_model_resolves_against_root(tmp_path, tiny_model):
    data = _with("engines.vllm.model", "data/models/tiny-llama")
    spec = ExperimentSpec.load(_write(tmp_path, data))
    assert spec.engines["vllm"].model_arg == str(tiny_model)


def test_max_model_len_beyond_native_context(tmp_path, tiny_model):
    data = _with("engines.vllm.model", "data/models/tiny-llama")
    data["engines"]["vllm"]["max_model_len"] = 32768
    assert "max_position_embeddings" in _load_error(tmp_path, data)
    data["engines"]["vllm"]["allow_long_context"] = True
    ExperimentSpec.load(_write(tmp_path, data, "ok.yaml"))


def test_unreadable_and_bad_yaml(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError, match="nope.yaml: cannot read"):
        ExperimentSpec.load(missing)
    assert "not valid YAML" in _load_error(tmp_path, "name: [unclosed\n")
    assert "top level must be a mapping" in _load_error(tmp_path, "- a\n- b\n")


def test_linked_axis_changes_fields_together(tmp_path):
    data = _with("matrix", {"memory": [{"engine.mem_util": 0.92, "workload.batch_size": 2},
                                       {"engine.mem_util": 0.95, "workload.batch_size": 8}]})
    runs = expand(ExperimentSpec.load(_write(tmp_path, data)))
    assert {(r.engine.mem_util, r.workload.batch_size) for r in runs} == {(0.92, 2), (0.95, 8)}
    bad = _with("matrix", {"memory": [0.92]})
    assert "linked axis" in _load_error(tmp_path, bad)


def test_engine_list_form_and_duplicates(tmp_path):
    data = copy.deepcopy(BASE)
    data["engines"] = list(BASE["engines"].values())
    assert set(ExperimentSpec.load(_write(tmp_path, data)).engines) == {"vllm", "sglang"}
    data["engines"] = [BASE["engines"]["vllm"], BASE["engines"]["vllm"]]
    assert "listed twice" in _load_error(tmp_path, data)


def test_workload_rules():
    with pytest.raises(ValueError, match="exactly one of context_tokens and prompt_tokens"):
        WorkloadSpec(kind="fixed_batch", batch_size=1, output_tokens=8)
    with pytest.raises(ValueError, match="needs a concurrency"):
        WorkloadSpec(kind="concurrency", batch_size=8, context_tokens=100, output_tokens=8)
    w = WorkloadSpec(kind="concurrency", batch_size=8, concurrency=2, context_tokens=100, output_tokens=8)
    assert (w.prompt_len, w.total_tokens) == (92, 100)


def test_retry_backoff():
    r = RetrySpec(backoff_s=2, backoff_factor=3)
    assert [r.backoff(i) for i in (1, 2, 3)] == [2, 6, 18]


def test_engine_spec_frozen():
    e = EngineSpec(name="vllm", launch=["python"], model="m", max_model_len=128)
    with pytest.raises(ValueError):
        e.tp = 2


@pytest.mark.parametrize("path", sorted(EXPERIMENTS_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_experiments_load(path):
    runs = expand(ExperimentSpec.load(path))
    assert runs and all(r.workload.total_tokens <= r.engine.max_model_len for r in runs)


def test_cpu_experiment_is_scaled_from_the_article():
    spec = ExperimentSpec.load(EXPERIMENTS_DIR / "cpu_long_context.yaml")
    runs = expand(spec)
    assert {r.context_label for r in runs} == {"64K", "200K"}
    assert {r.engine.mem_util for r in runs} == {0.92, 0.95}
    assert all(r.engine.kv_cache_bytes >= 2 * r.engine.max_model_len * 1024 for r in runs)
