"""Experiment specs: every bad value fails naming the file, the field and the value; expansion is stable."""

from __future__ import annotations

import copy

import pytest
import yaml
from pydantic import ValidationError

from kvlab.paths import EXPERIMENTS_DIR
from kvlab.experiment import EngineSpec, ExperimentSpec, RetrySpec, SpecError, expand, workload_spec

BASE = {
    "name": "t",
    "hardware": "CPU",
    "device": "cpu",
    "scale_factor": 32,
    "engines": {
        "vllm": {
            "name": "vllm",
            "launch": [".engines/vllm/bin/python"],
            "model": "org/some-model",
            "max_model_len": 8192,
            "tp": 2,
            "dcp": 1,
        },
        "sglang": {
            "name": "sglang",
            "launch": ["conda", "run", "-n", "sglang", "python"],
            "model": "org/some-model",
            "max_model_len": 8192,
            "tp": 2,
            "dcp": 2,
        },
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


def test_an_experiment_states_its_device_typed(tmp_path):
    """``device`` is required (the hardware label is never read for it), a kind or a mapping, and checked."""
    missing = copy.deepcopy(BASE)
    del missing["device"]
    msg = _load_error(tmp_path, missing)
    assert msg.endswith(
        ": device: Field required: say what the runs compute on, `device: cpu` or `device: gpu` "
        "(or {kind: gpu, accelerator: NVIDIA B300, count: 8}); the hardware label is free text and is "
        "not read for it"
    )
    gpu = ExperimentSpec.load(_write(tmp_path, BASE | {"hardware": "CPU x86_64", "device": "gpu"}))
    assert (gpu.device.kind, gpu.device.accelerator, gpu.device.count) == ("gpu", None, None)
    assert {(r.device.kind, r.on_cpu) for r in expand(gpu)} == {("gpu", False)}  # the label says CPU: not read
    b300 = ExperimentSpec.load(
        _write(tmp_path, BASE | {"device": {"kind": "gpu", "accelerator": "NVIDIA B300", "count": 8}})
    )
    assert (b300.device.accelerator, b300.device.count) == ("NVIDIA B300", 8)
    assert "device.kind: Input should be 'cpu' or 'gpu' (got 'tpu')" in _load_error(tmp_path, BASE | {"device": "tpu"})
    assert "device: a cpu device has no accelerator or count" in _load_error(
        tmp_path, BASE | {"device": {"kind": "cpu", "count": 2}}
    )
    assert "device.count: Input should be greater than or equal to 1 (got 0)" in _load_error(
        tmp_path, BASE | {"device": {"kind": "gpu", "count": 0}}
    )
    few = _load_error(tmp_path, BASE | {"device": {"kind": "gpu", "count": 1}})
    assert few.endswith(
        ": matrix point [engine.mem_util=0.92, workload.context_tokens=2048]: engines.sglang: tp 2 × "
        "dp 1 = 2 GPUs, more than the 1 of device.count"
    )


def test_every_shipped_experiment_states_its_device():
    kinds = {p.stem: ExperimentSpec.read(p).device for p in sorted(EXPERIMENTS_DIR.glob("*.yaml"))}
    assert {k for k, d in kinds.items() if d.kind == "gpu"} == {
        "b300_capacity",
        "b300_long_context",
        "b300_step_fit",
        "gpu_classification_70b",
        "gpu_multi_turn_rag",
        "gpu_reasoning_r1",
    }
    assert {(d.accelerator, d.count) for k, d in kinds.items() if k.startswith("b300")} == {("NVIDIA B300", 8)}
    assert [kinds[k].count for k in ("gpu_classification_70b", "gpu_multi_turn_rag", "gpu_reasoning_r1")] == [4, 1, 16]


def test_the_device_is_no_part_of_a_run_key():
    """The fixture runs (tests/fixtures, stored before the device existed) keep the keys they were stored under
    whatever device their run states: a sweep resumes them instead of measuring them again."""
    import json

    from kvlab.experiment import RunSpec

    stored = sorted((EXPERIMENTS_DIR.parent.parent / "tests" / "fixtures" / "runs").glob("*/*/spec.json"))
    assert len(stored) == 28
    for f in stored:
        saved = json.loads(f.read_text())
        fields = {k: v for k, v in saved.items() if k in RunSpec.model_fields}
        for device in ("cpu", {"kind": "gpu", "accelerator": "NVIDIA B300", "count": 8}):
            assert RunSpec.model_validate(fields | {"device": device}).key == saved["key"] == f.parent.name


def test_bfloat16_if_native_is_for_cpu_experiments_only(tmp_path):
    """The policy reads this host's CPU flags: on a GPU experiment it would follow the wrong chip."""
    gpu = _with("engines.vllm.dtype", "bfloat16-if-native") | {"hardware": "CPU-like label", "device": "gpu"}
    msg = _load_error(tmp_path, gpu)
    assert "engines.vllm.dtype: 'bfloat16-if-native'" in msg and "CPU experiments only (device is 'gpu')" in msg
    cpu = expand(ExperimentSpec.load(_write(tmp_path, _with("engines.vllm.dtype", "bfloat16-if-native"), "cpu.yaml")))
    assert {r.engine.dtype for r in cpu if r.engine_label == "vllm"} == {"bfloat16-if-native"}


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
        ("engines.vllm.dtype", "fp4", "engines.vllm.dtype"),
        ("workload.kind", "poisson", "workload.kind"),
        ("workload.output_tokens", 0, "workload.output_tokens"),
        ("retry", {"retry_on": ["meteor"]}, "retry.retry_on"),
        ("repeats", 0, "repeats"),
        ("colour", "blue", "colour: unknown field"),
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
    err = _load_error(tmp_path, data)
    assert "= 8254 tokens" in err and "max_model_len (8192)" in err


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
    data = _with(
        "matrix",
        {
            "memory": [
                {"engine.mem_util": 0.92, "workload.batch_size": 2},
                {"engine.mem_util": 0.95, "workload.batch_size": 8},
            ]
        },
    )
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
        workload_spec(kind="fixed_batch", batch_size=1, output_tokens=8)
    with pytest.raises(ValueError, match="needs a concurrency"):
        workload_spec(kind="concurrency", batch_size=8, context_tokens=100, output_tokens=8)
    w = workload_spec(kind="concurrency", batch_size=8, concurrency=2, context_tokens=100, output_tokens=8)
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
    assert {r.context_label for r in runs} == {"32K", "64K", "128K", "200K", "256K"}
    assert {r.engine.mem_util for r in runs} == {0.92, 0.95}
    assert {r.engine.name for r in runs} == {"vllm", "sglang"} and len(runs) == 2 * 2 * 5 * 3
    # one server per engine and memory setting, sized for the longest context (neither engine pads to it)
    assert {r.engine.max_model_len for r in runs} == {4096 + 64}
    assert len({r.server_key for r in runs}) == 2 * 2
    quick = expand(spec.quick_form())
    assert sorted((r.engine.name, r.engine.mem_util, r.context_label) for r in quick) == [
        ("sglang", 0.92, "128K"),
        ("sglang", 0.92, "200K"),
        ("sglang", 0.92, "64K"),
        ("sglang", 0.95, "200K"),
        ("vllm", 0.92, "128K"),
        ("vllm", 0.92, "200K"),
        ("vllm", 0.92, "64K"),
        ("vllm", 0.95, "200K"),
    ]
    # the quick form's runs are the full study's runs (same keys), so FULL=1 later reuses them
    assert {r.key for r in quick} <= {r.key for r in runs}
    # every budget holds at least one request of the longest length the server accepts (vLLM refuses to start otherwise)
    assert all(r.engine.kv_cache_bytes >= r.engine.max_model_len * 1024 for r in runs)


def test_quick_form_replaces_matrix_and_repeats_and_is_validated(tmp_path):
    data = {
        "name": "q",
        "hardware": "CPU",
        "device": "cpu",
        "engines": {"vllm": {"name": "vllm", "launch": ["python"], "model": "org/m", "max_model_len": 4096}},
        "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 1024, "output_tokens": 8},
        "matrix": {"workload.context_tokens": [1024, 2048, 4096]},
        "repeats": 3,
        "quick": {"matrix": {"workload.context_tokens": [2048]}, "repeats": 1},
    }
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = ExperimentSpec.load(path)
    assert len(expand(spec)) == 9
    quick = expand(spec.quick_form())
    assert [(r.workload.context_tokens, r.repeat) for r in quick] == [(2048, 0)]
    assert spec.quick_form().quick is None and spec.model_copy(update={"quick": None}).quick_form().repeats == 3
    data["quick"]["matrix"] = {"workload.context_tokens": [8192]}  # only the quick form is invalid
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"q.yaml: quick: matrix point .*8192 tokens exceeds max_model_len \(4096\)"):
        ExperimentSpec.load(path)


def test_sglang_engines_need_room_below_their_context_length(tmp_path):
    data = {
        "name": "s",
        "hardware": "CPU",
        "device": "cpu",
        "engines": {"j": {"name": "sglang-jax", "launch": ["python"], "model": "org/m", "max_model_len": 1024}},
        "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 1024, "output_tokens": 8},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(
        SpecError,
        match=r"engines.j.max_model_len: .* = 1024 tokens must be below max_model_len "
        r"\(1024\) for sglang-jax",
    ):
        ExperimentSpec.load(path)
    data["engines"]["j"]["max_model_len"] = 1025
    path.write_text(yaml.safe_dump(data))
    assert len(expand(ExperimentSpec.load(path))) == 1


def test_an_engine_is_asked_only_for_what_it_can_do(tmp_path):
    """dev_mode opens development endpoints only an engine that has them (EngineAdapter.dev_endpoints) can open."""
    data = {
        "name": "d",
        "hardware": "CPU",
        "device": "cpu",
        "engines": {
            "j": {"name": "sglang-jax", "launch": ["python"], "model": "org/m", "max_model_len": 1024, "dev_mode": True}
        },
        "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 512, "output_tokens": 8},
    }
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"engines.j.dev_mode: sglang-jax has no development endpoints to open"):
        ExperimentSpec.load(path)


def test_run_key_changes_with_a_local_models_config(tmp_path):
    """Runs measured on an earlier version of a local model (kvlab's tiny model changed shape) are not reused."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"num_attention_heads": 4, "num_key_value_heads": 2}')
    data = {
        "name": "k",
        "hardware": "CPU",
        "device": "cpu",
        "engines": {"vllm": {"name": "vllm", "launch": ["python"], "model": str(model), "max_model_len": 4096}},
        "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 1024, "output_tokens": 8},
    }
    spec = ExperimentSpec.model_validate(data)
    before = expand(spec)[0].key
    assert expand(spec)[0].key == before  # stable while the model is the same
    (model / "config.json").write_text('{"num_attention_heads": 2, "num_key_value_heads": 1}')
    assert expand(spec)[0].key != before
    hub = ExperimentSpec.model_validate(data | {"engines": {"vllm": data["engines"]["vllm"] | {"model": "org/m"}}})
    assert expand(hub)[0].key == expand(hub)[0].key


def _external(url="http://gpu-node-3:8000", **engine):
    data = copy.deepcopy(BASE)
    data["engines"] = {
        "remote": {"name": "vllm", "url": url, "model": "org/some-model", "max_model_len": 8192, "tp": 8, **engine}
    }
    data["matrix"] = {"workload.context_tokens": [2048, 6400]}
    return data


def test_an_external_server_is_one_server_for_every_run_that_names_it(tmp_path):
    runs = expand(ExperimentSpec.load(_write(tmp_path, _external())))
    assert len(runs) == 4 and len({r.server_key for r in runs}) == 1
    assert all(r.engine.external and r.engine.served_name == "org/some-model" for r in runs)
    assert "external, kvlab does not start or stop it" in __import__("kvlab.plan").plan.dry_run_text(
        ExperimentSpec.load(_write(tmp_path, _external()))
    )


def test_runs_needing_different_settings_from_one_external_server_are_refused(tmp_path):
    data = _external()
    data["matrix"] = {"engine.max_model_len": [8192, 16384], "engine.prefix_caching": [True, False]}
    msg = _load_error(tmp_path, data)
    assert "engines.remote.url: the runs need the server at http://gpu-node-3:8000 started in 4 different ways" in msg
    assert "max_model_len: 16384, 8192; prefix_caching: false, true" in msg
    assert "kvlab does not start or restart a server it did not launch" in msg


@pytest.mark.parametrize(
    "launch, url, says",
    [
        ([".engines/vllm/bin/python"], "http://h:8000", "not both"),
        (None, None, "not neither"),
        (None, "gpu-node:8000", "url"),
    ],
)
def test_an_engine_is_launched_or_external_not_both(tmp_path, launch, url, says):
    data = _external(url=url)
    data["engines"]["remote"]["launch"] = launch
    assert says in _load_error(tmp_path, data)


# ---------------------------------------------------------------------------- secrets (issue 25, item 2)


@pytest.mark.parametrize(
    "args, option",
    [
        (["--api-key", "k"], "--api-key"),
        (["--api-key=k"], "--api-key"),
        (["--api_key", "k"], "--api-key"),  # vLLM's parser reads '_' as '-'
        (["--api-k", "k"], "--api-key"),
        (["--api_k=k"], "--api-key"),
        (["--ap", "k"], "--api-key"),  # argparse abbreviations
        (["--admin-api-key", "k"], "--admin-api-key"),
        (["--hf-token", "t"], "--hf-token"),
        (["--ssl-keyfile-password", "p"], "--ssl-keyfile-password"),
        (["--disaggregation-shared-secret=s"], "--disaggregation-shared-secret"),
    ],
)
def test_a_secret_option_in_extra_args_is_refused_in_any_spelling(tmp_path, args, option):
    msg = _load_error(tmp_path, _with("engines.vllm.extra_args", args))
    assert "engines.vllm: extra_args: " + option in msg and "carries a secret" in msg
    assert "(got" not in msg  # the value is never echoed


@pytest.mark.parametrize(
    "args, option",
    [
        (["--host", "0.0.0.0"], "--host"),
        (["--host=::"], "--host"),
        (["--ho", "0.0.0.0"], "--host"),  # an argparse abbreviation
        (["--port", "8000"], "--port"),
        (["--po=8000"], "--port"),
    ],
)
def test_an_option_that_moves_the_servers_listening_address_is_refused(tmp_path, args, option):
    """Issue 40 item 7: extra_args come last on the engine's command line, so `--host 0.0.0.0` there would make a
    server kvlab launches listen on every interface whatever `host` says."""
    msg = _load_error(tmp_path, _with("engines.vllm.extra_args", args))
    assert f"engines.vllm: extra_args: {option}" in msg and "give the address as host" in msg


@pytest.mark.parametrize(
    "args, says",
    [
        (["--kv-events-config", '{"publisher": "zmq"}'], "endpoint 'tcp://*:5557' (its default, when no endpoint"),
        (['--kv-events-config={"enable_kv_cache_events": true}'], "endpoint 'tcp://*:5557' (its default"),
        (
            ["--kv-events-c", '{"publisher": "zmq", "endpoint": "tcp://0.0.0.0:6000"}'],
            "would listen on every interface",
        ),
        (["--kv_events_config", '{"publisher": "zmq", "endpoint": "tcp://[::0]:6000"}'], "on every interface"),
        (
            ["--kv-events-config", '{"publisher": "zmq", "endpoint": "tcp://10.1.2.3:6000", "bind": true}'],
            "would listen on 10.1.2.3, beyond '127.0.0.1'",
        ),
        (
            ["--kv-events-config", '{"publisher": "zmq", "endpoint": "ipc:///tmp/e", "replay_endpoint": "tcp://*:1"}'],
            "replay_endpoint 'tcp://*:1' would listen on every interface",
        ),
        (
            [
                "--kv-events-config",
                '{"publisher": "zmq", "endpoint": "ipc:///e", "replay_endpoint": "tcp://10.0.0.9:1"}',
            ],
            "replay_endpoint 'tcp://10.0.0.9:1' would listen on 10.0.0.9",  # the replay socket always binds
        ),
        (["--kv-events-config.publisher", "zmq"], "endpoint 'tcp://*:5557'"),  # vLLM's dotted form
        (["--kv-events-config.enable_kv_cache_events", "true"], "endpoint 'tcp://*:5557'"),
        (["--kv-events-config", "zmq"], "takes a JSON object"),
    ],
)
def test_a_kv_events_publisher_listening_beyond_the_servers_host_is_refused(tmp_path, args, says):
    """Issue 40 item 7: vLLM's and SGLang's KV-events publisher binds tcp://*:5557 unless told otherwise."""
    msg = _load_error(tmp_path, _with("engines.vllm.extra_args", args))
    assert "engines.vllm: extra_args: --kv-events-config" in msg and says in msg


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-events-config", '{"publisher": "zmq", "endpoint": "tcp://127.0.0.1:5557", "bind": true}'],
        [
            "--kv-events-config",
            '{"publisher": "zmq", "endpoint": "tcp://localhost:5557", "replay_endpoint": "ipc://r"}',
        ],
        # a concrete address the publisher connects to (no wildcard, no bind): it listens nowhere
        ["--kv-events-config", '{"publisher": "zmq", "endpoint": "tcp://10.1.2.3:6000"}'],
        ["--kv-events-config", '{"publisher": "null"}'],  # publishes nothing, opens nothing
        ["--kv-events-config", '{"endpoint": "tcp://*:5557"}'],  # no publisher named, events off: nothing opens
        ["--kv-events-config.publisher", "zmq", "--kv-events-config.endpoint", "ipc:///tmp/kv"],
        ["--kv-events-config.enable_kv_cache_events", "false"],  # a JSON false, not the string 'false'
    ],
)
def test_a_kv_events_publisher_on_the_servers_host_or_connecting_is_kept(tmp_path, args):
    ExperimentSpec.load(_write(tmp_path, _with("engines.vllm.extra_args", args)))


def test_a_kv_events_publisher_follows_the_servers_own_interface():
    from kvlab.engines.spec import kv_events_endpoint_problem

    zmq = {"publisher": "zmq"}
    assert kv_events_endpoint_problem(zmq, "0.0.0.0") is None  # the user gave the server every interface
    bound = zmq | {"bind": True}
    assert kv_events_endpoint_problem(bound | {"endpoint": "tcp://10.0.0.5:1"}, "10.0.0.5") is None
    assert kv_events_endpoint_problem(bound | {"endpoint": "tcp://127.0.0.1:1"}, "10.0.0.5") is None  # loopback
    assert "beyond '10.0.0.5'" in kv_events_endpoint_problem(bound | {"endpoint": "tcp://10.0.0.6:1"}, "10.0.0.5")


@pytest.mark.parametrize(
    "args, connector",
    [
        (["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'], "'NixlConnector'"),
        (['--kv-transfer-config={"kv_connector": "P2pNcclConnector"}'], "'P2pNcclConnector'"),
        (["--kv_transfer_c", '{"kv_connector": "LMCacheConnectorV1"}'], "'LMCacheConnectorV1'"),
        (["--kv-transfer-config.kv_connector", "MooncakeConnector"], "'MooncakeConnector'"),  # vLLM's dotted form
        (  # a MultiConnector is judged by each connector it holds
            [
                "--kv-transfer-config",
                '{"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": '
                '[{"kv_connector": "OffloadingConnector"}, {"kv_connector": "NixlConnector"}]}}',
            ],
            "'NixlConnector'",
        ),
        (  # a connector loaded from a module kvlab has not read: refused whatever its name
            ["--kv-transfer-config", '{"kv_connector": "ExampleConnector", "kv_connector_module_path": "my.mod"}'],
            "'ExampleConnector'",
        ),
    ],
)
def test_a_kv_connector_that_opens_ports_of_its_own_is_refused(tmp_path, args, connector):
    """Issue 40 item 7: a KV connector listens where its library decides (NIXL's side channel, Mooncake's ZeroMQ
    sockets), not where the spec's host says."""
    msg = _load_error(tmp_path, _with("engines.vllm.extra_args", args))
    assert f"engines.vllm: extra_args: --kv-transfer-config sets up the KV connector {connector}" in msg
    assert "start such a server outside kvlab and give its url" in msg


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-transfer-config", '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}'],
        ["--kv-transfer-config.kv_connector", "SimpleCPUOffloadConnector"],
        [
            "--kv-transfer-config",
            '{"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": '
            '[{"kv_connector": "OffloadingConnector"}, {"kv_connector": "ExampleConnector"}]}}',
        ],
    ],
)
def test_a_kv_connector_that_keeps_kv_on_the_server_is_kept(tmp_path, args):
    ExperimentSpec.load(_write(tmp_path, _with("engines.vllm.extra_args", args)))


def test_sglangs_kv_transfer_options_are_refused_unless_they_keep_kv_on_the_server():
    from kvlab.engines.spec import kv_connector_problem

    def said(*args, host="127.0.0.1"):
        return kv_connector_problem("sglang", list(args), host)

    assert said("--disaggregation-mode", "prefill").startswith(
        "extra_args: --disaggregation-mode prefill moves KV over the network with sockets of its own (only null "
        "keeps KV on this server)"
    )
    assert "--hicache-storage-backend mooncake moves KV" in said("--hicache-storage-backend=mooncake")
    assert "--enable-lmcache moves KV" in said("--enable-lmcache")
    assert said("--disaggregation-mode", "null") is None and said("--hicache-storage-backend", "file") is None
    assert said("--enable-lmcache", host="0.0.0.0") is None  # the server was given every interface
    assert kv_connector_problem("sglang-jax", ["--enable-lmcache"], "127.0.0.1") is None  # not SGLang's parser
    assert kv_connector_problem("vllm", ["--enable-lmcache"], "127.0.0.1") is None


@pytest.mark.parametrize("args", [["--ssl-keyfile", "k.pem"], ["--api-server-count", "2"], ["--max-num-seqs", "4"]])
def test_options_that_only_look_like_secret_ones_are_kept(tmp_path, args):
    ExperimentSpec.load(_write(tmp_path, _with("engines.vllm.extra_args", args)))


@pytest.mark.parametrize(
    "name",
    [
        "VLLM_API_KEY",
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "my_api_key",
        # KEY, TOKEN, SECRET or PASS inside a word, not only as a word of its own
        "MYKEY",
        "SSHKEY",
        "ACCESSKEY",
        "KEYFILE",
        "APIKEYS",
        "GITHUBTOKEN",
        "MYTOKENS",
        "PASSPHRASE",
        "DB_PASS",
        "PASSWD",
        "MYSECRET",
        "SECRETS",
        "CREDENTIALS_FILE",
        # an allow-listed word does not hide a secret beside it, nor one that overlaps it (issue 40)
        "HF_TOKENIZER_TOKEN",
        "KEYBOARD_KEY",
        "BYPASS_PASSWORD",
        "BYPASSWORD",
        "BYPASSWD",
        "TOKENIZERSECRET",
        # PWD, DSN, AUTH and COOKIE (issue 40)
        "MYSQL_PWD",
        "SENTRY_DSN",
        "OAUTH_CLIENT",
        "GH_AUTH",
        "SESSION_COOKIE",
    ],
)
def test_a_secret_looking_env_name_is_refused(tmp_path, name):
    msg = _load_error(tmp_path, _with("engines.sglang.env", {"JAX_PLATFORMS": "cpu", name: "s3cret"}))
    assert f"engines.sglang: env.{name}: a name that looks like a secret" in msg and "s3cret" not in msg


def test_ordinary_env_names_are_kept(tmp_path):
    """Names without KEY, TOKEN, SECRET, PASS or CREDENTIAL, and the allow-list's harmless words that contain one."""
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "JAX_COMPILATION_CACHE_DIR": "x",
        "KEYBOARD": "us",
        "XKB_KEYBOARD_LAYOUT": "us",
        "CACHE_BYPASS": "1",
        "PASSTHROUGH_MODE": "1",
        "HF_TOKENIZER_DIR": "t",
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": "p",
        # the shell's working folders, and proxies without credentials
        "PWD": "/w",
        "OLDPWD": "/",
        "HTTPS_PROXY": "http://proxy:3128",
        "no_proxy": "localhost,127.0.0.1",
    }
    ExperimentSpec.load(_write(tmp_path, _with("engines.sglang.env", env)))


def test_no_shipped_experiment_sets_a_secret_looking_env_name():
    """Every env: name the shipped experiments set passes the check (they also load: test_shipped_experiments_load)."""
    from kvlab.engines.spec import is_secret_env

    names = {
        name
        for path in sorted(EXPERIMENTS_DIR.glob("*.yaml"))
        for engine in ExperimentSpec.load(path).engines.values()
        for name in engine.env
    }
    assert {"SGLANG_USE_CPU_ENGINE", "PYTHONPATH"} <= names
    assert [n for n in names if is_secret_env(n)] == []


@pytest.mark.parametrize(
    "where, value, refused",
    [
        ("url", "http://gpu-node-3:8000", "to gpu-node-3"),
        ("url", "http://10.0.0.7:8000", "to 10.0.0.7"),
        ("url", "https://gpu-node-3:8000", None),
        ("url", "http://127.0.0.1:8000", None),
        ("url", "http://localhost:8000", None),
        ("url", "http://[::1]:8000", None),
        ("host", "10.0.0.7", "to 10.0.0.7"),
        ("host", "127.0.0.1", None),
        ("host", "localhost", None),
        ("host", "::1", None),
        ("host", "0.0.0.0", None),
    ],
)
def test_a_key_over_http_to_another_host_needs_the_opt_in(tmp_path, where, value, refused):
    engine = dict(BASE["engines"]["vllm"], api_key_env="KVLAB_KEY", **{where: value})
    if where == "url":
        del engine["launch"]
    data = _with("engines", {"vllm": engine})
    data["matrix"] = {}
    if refused is None:
        ExperimentSpec.load(_write(tmp_path, data))
        return
    msg = _load_error(tmp_path, data)
    assert f"engines.vllm: {where}: the API key (KVLAB_KEY) would go in clear text over http:// {refused}" in msg
    data["engines"]["vllm"]["allow_insecure_key"] = True
    ExperimentSpec.load(_write(tmp_path, data))
    del data["engines"]["vllm"]["api_key_env"]  # no key, nothing to refuse
    ExperimentSpec.load(_write(tmp_path, data))


def _resolver(monkeypatch, answers: dict[str, list[str] | None]) -> None:
    """``socket.getaddrinfo`` answering each name of ``answers`` with its addresses (None: no such name, as this
    machine's resolver answers ``evil.localhost``), and every other name as the real one does."""
    import socket

    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host not in answers:
            return real(host, *args, **kwargs)
        if answers[host] is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        family = lambda a: socket.AF_INET6 if ":" in a else socket.AF_INET  # noqa: E731
        return [(family(a), socket.SOCK_STREAM, 6, "", (a, 0)) for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("where", ["url", "host"])
@pytest.mark.parametrize(
    "addresses, refused",
    [
        (None, True),  # what this machine's resolver says of evil.localhost: no such name
        (["192.0.2.7"], True),
        (["127.0.0.1", "192.0.2.7"], True),  # one address elsewhere is enough
        (["127.0.0.1"], False),
        (["127.0.0.2", "::1"], False),
    ],
)
def test_a_name_is_this_machine_only_where_every_address_it_resolves_to_is(
    tmp_path, monkeypatch, where, addresses, refused
):
    """Issue 56, item 2: ``*.localhost`` used to pass by its spelling, though this machine's resolver does not map it
    to the loopback (nsswitch: files, mdns, DNS): a hostile resolver would have been sent the key in clear text."""
    from kvlab.engines.spec import is_loopback, loopback_address

    _resolver(monkeypatch, {"evil.localhost": addresses})
    value = "http://evil.localhost:8000" if where == "url" else "evil.localhost"
    engine = dict(BASE["engines"]["vllm"], api_key_env="KVLAB_KEY", **{where: value})
    if where == "url":
        del engine["launch"]
    data = _with("engines", {"vllm": engine})
    data["matrix"] = {}
    assert is_loopback("evil.localhost") is not refused
    assert loopback_address("evil.localhost") == (None if refused else addresses[0])
    if not refused:
        ExperimentSpec.load(_write(tmp_path, data))
        return
    msg = _load_error(tmp_path, data)
    assert f"{where}: the API key (KVLAB_KEY) would go in clear text over http:// to evil.localhost, which is" in msg


def test_loopback_literals_need_no_resolver(monkeypatch):
    """127.0.0.0/8, ::1 and the unspecified addresses are this machine whatever a resolver says; no other literal is."""
    import socket

    from kvlab.engines.spec import loopback_address

    def no_resolver(*args, **kwargs):
        raise AssertionError("a literal was resolved")

    monkeypatch.setattr(socket, "getaddrinfo", no_resolver)
    assert [loopback_address(h) for h in ("127.0.0.1", "127.9.9.9", "[::1]", "::1", "0.0.0.0", "::")] == [
        "127.0.0.1",
        "127.9.9.9",
        "::1",
        "::1",
        "0.0.0.0",
        "::",
    ]
    assert [loopback_address(h) for h in ("10.0.0.7", "192.0.2.7", "2001:db8::1", "")] == [None] * 4


def test_allow_insecure_key_does_not_change_run_keys(tmp_path):
    data = _with("engines.vllm.api_key_env", "KVLAB_KEY")
    before = [r.key for r in expand(ExperimentSpec.load(_write(tmp_path, data)))]
    data["engines"]["vllm"]["allow_insecure_key"] = True
    assert [r.key for r in expand(ExperimentSpec.load(_write(tmp_path, data)))] == before


def test_the_cli_refuses_a_secret_with_exit_2_naming_file_and_field(tmp_path):
    from typer.testing import CliRunner

    from kvlab.cli import app

    path = _write(tmp_path, _with("engines.vllm.extra_args", ["--api_key", "s3cret"]))
    res = CliRunner().invoke(app, ["sweep", str(path), "--dry-run"])
    assert res.exit_code == 2
    out = " ".join(res.output.split())  # rich wraps long lines
    assert str(path) in out and "engines.vllm: extra_args: --api-key (given as '--api_key'" in out
    assert "s3cret" not in res.output


@pytest.mark.parametrize("name", ["SSHKEY", "PASSPHRASE"])
def test_the_cli_refuses_a_key_like_env_name_with_exit_2_naming_file_and_field(tmp_path, name):
    from typer.testing import CliRunner

    from kvlab.cli import app

    path = _write(tmp_path, _with("engines.vllm.env", {name: "s3cret"}))
    res = CliRunner().invoke(app, ["sweep", str(path), "--dry-run"])
    assert res.exit_code == 2
    out = " ".join(res.output.split())  # rich wraps long lines
    assert str(path) in out and f"engines.vllm: env.{name}: a name that looks like a secret" in out
    assert "s3cret" not in res.output


def test_secret_looking_env_values_are_redacted_in_what_is_stored():
    from kvlab.engines.spec import redact_secrets

    dumped = {
        "engine": {"env": {"HF_TOKEN": "hf_x", "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false"}},
        "sweeps": [{"servers": [{"env": {"MY_SECRET": "s", "A": "b", "SSHKEY": "k", "DBPASS": "p"}}]}],
    }
    assert redact_secrets(dumped) == {
        "engine": {"env": {"HF_TOKEN": "***", "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false"}},
        "sweeps": [{"servers": [{"env": {"MY_SECRET": "***", "A": "b", "SSHKEY": "***", "DBPASS": "***"}}]}],
    }


# ---------------------------------------------------------------------------- names (issue 25, files item 1)


@pytest.mark.parametrize("name", [".", "..", ".x", "-x", "a/b", "", "a b"])
def test_an_experiment_name_that_is_no_plain_folder_name_is_refused(tmp_path, name):
    msg = _load_error(tmp_path, _with("name", name))
    assert f": name: String should match pattern '^[A-Za-z0-9_][A-Za-z0-9_.-]*$' (got {name!r})" in msg


@pytest.mark.parametrize("name", ["x", "_x", "a..b", "cpu_long-context.v2", "9"])
def test_plain_experiment_names_are_kept(tmp_path, name):
    assert ExperimentSpec.load(_write(tmp_path, _with("name", name))).name == name


@pytest.mark.parametrize("label", [".", "..", ".hidden", "-x"])
def test_an_engine_label_that_is_no_plain_name_is_refused(tmp_path, label):
    data = copy.deepcopy(BASE)
    data["engines"] = {label: data["engines"]["vllm"]}
    data["matrix"] = {}
    msg = _load_error(tmp_path, data)
    assert f": engines: engine label {label!r} must match ^[A-Za-z0-9_][A-Za-z0-9_.-]*$" in msg


def test_the_cli_refuses_a_dot_dot_experiment_with_exit_2(tmp_path):
    from typer.testing import CliRunner

    from kvlab.cli import app

    path = _write(tmp_path, _with("name", ".."))
    res = CliRunner().invoke(app, ["sweep", str(path), "--dry-run"])
    assert res.exit_code == 2
    out = "".join(res.output.split())  # rich wraps long lines
    assert (
        "".join(f"{path}: name: String should match pattern '^[A-Za-z0-9_][A-Za-z0-9_.-]*$' (got '..')".split()) in out
    )


def test_no_shipped_experiment_opens_vllms_development_endpoints():
    """dev_mode opens /reset_prefix_cache, /sleep and /collective_rpc without the API key; kvlab isolates runs
    with a per-run cache_salt instead."""
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        spec = ExperimentSpec.read(path)
        assert not [label for label, e in spec.engines.items() if e.dev_mode], path.name
        assert "dev_mode" not in path.read_text(), path.name
    assert EngineSpec.model_fields["dev_mode"].default is False


def test_repeats_at_gives_the_deciding_points_more_repeats_and_stays_a_subset_of_the_full_study(tmp_path):
    data = copy.deepcopy(BASE) | {
        "repeats": 3,
        "quick": {
            "repeats": 1,
            "repeats_at": [{"where": {"workload.context_tokens": 6400, "engine.mem_util": 0.95}, "repeats": 3}],
        },
    }
    spec = ExperimentSpec.load(_write(tmp_path, data))
    quick = expand(spec.quick_form())
    per_point = {}
    for r in quick:
        k = (r.engine_label, r.point["engine.mem_util"], r.point["workload.context_tokens"])
        per_point[k] = per_point.get(k, 0) + 1
    # 2 engines x 4 points; only (0.95, 6400) runs three times, per engine
    assert per_point == {
        (e, m, c): 3 if (m, c) == (0.95, 6400) else 1
        for e in ("vllm", "sglang")
        for m in (0.92, 0.95)
        for c in (2048, 6400)
    }
    assert {r.key for r in quick} <= {r.key for r in expand(spec)}


def test_repeats_at_matches_fields_inside_a_linked_axis_and_engines(tmp_path):
    data = copy.deepcopy(BASE) | {
        "matrix": {
            "point": [
                {"engine.mem_util": 0.92, "workload.context_tokens": 2048},
                {"engine.mem_util": 0.95, "workload.context_tokens": 6400},
            ]
        },
        "repeats": 1,
        "repeats_at": [{"where": {"engine.mem_util": 0.95, "engine": "sglang"}, "repeats": 4}],
    }
    runs = expand(ExperimentSpec.load(_write(tmp_path, data)))
    assert sorted((r.engine_label, r.point["point"]["engine.mem_util"], r.repeat) for r in runs) == [
        ("sglang", 0.92, 0),
        ("sglang", 0.95, 0),
        ("sglang", 0.95, 1),
        ("sglang", 0.95, 2),
        ("sglang", 0.95, 3),
        ("vllm", 0.92, 0),
        ("vllm", 0.95, 0),
    ]


def test_a_repeats_at_rule_that_matches_nothing_names_itself(tmp_path):
    msg = _load_error(tmp_path, _with("repeats_at", [{"where": {"workload.context_tokens": 999}, "repeats": 3}]))
    assert "repeats_at[0].where" in msg and "matches no point" in msg


def test_slo_is_part_of_the_key_only_when_set():
    """An experiment without an slo keeps the run keys it had before slo existed (pinned); one with an slo gets
    other keys (its goodput is counted against it), carried by every run."""
    data = {
        "name": "k",
        "hardware": "CPU",
        "device": "cpu",
        "engines": {"vllm": {"name": "vllm", "launch": ["python"], "model": "org/m", "max_model_len": 4096}},
        "workload": {"kind": "fixed_batch", "batch_size": 2, "context_tokens": 1024, "output_tokens": 8},
    }
    plain = expand(ExperimentSpec.model_validate(data))[0]
    assert plain.key == "945158227cb6" and plain.slo is None  # the key before slo existed
    with_slo = expand(ExperimentSpec.model_validate(data | {"slo": {"ttft_ms": 2000, "tpot_ms": 100}}))[0]
    assert with_slo.key != plain.key and with_slo.slo.model_dump() == {"ttft_ms": 2000.0, "tpot_ms": 100.0}
    with pytest.raises(ValidationError, match="at least one bound"):
        ExperimentSpec.model_validate(data | {"slo": {}})
    with pytest.raises(ValidationError):
        ExperimentSpec.model_validate(data | {"slo": {"ttft_ms": 0}})


def test_probe_is_an_experiment_field_named_when_wrong_and_no_part_of_any_run_key(tmp_path):
    """probe: true asks for the accuracy probe per server start (kvlab.probe); it is a yes or no, not a word that
    reads as one, and turning it on re-measures nothing: run keys are the same with it and without it."""
    assert "probe: Input should be a valid boolean (got 'yes')" in _load_error(tmp_path, _with("probe", "yes"))
    assert ExperimentSpec.load(_write(tmp_path, BASE)).probe is False
    for name in ("cpu_capacity", "b300_capacity"):
        spec = ExperimentSpec.load(EXPERIMENTS_DIR / f"{name}.yaml")
        off = spec.model_copy(update={"probe": False})
        assert spec.probe is True
        for a, b in ((spec, off), (spec.quick_form(), off.quick_form())):
            assert [(r.key, r.server_key) for r in expand(a)] == [(r.key, r.server_key) for r in expand(b)]
