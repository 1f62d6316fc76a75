"""Hostile and careless experiment files (issue 40, items 3, 4 and 8): each is refused before anything runs, by
validation and by `kvlab sweep --dry-run` alike, with exit status 2 and a message naming the file and the field;
nothing echoes a secret. Redaction covers every form a key takes in an engine's log."""

from __future__ import annotations

import copy
import os
import time

import pytest
import yaml
from typer.testing import CliRunner

from kvlab.cli import app
from kvlab.engines.spec import (
    REDACTED,
    holds_secret,
    is_secret_env,
    launch_assignment,
    redact_secrets,
    redact_text,
    secret_env_value,
    secret_forms,
)
from kvlab.experiment import MAX_FILE_BYTES, ExperimentSpec, SpecError

BASE = {
    "name": "t",
    "hardware": "CPU",
    "device": "cpu",
    "engines": {
        "vllm": {
            "name": "vllm",
            "launch": [".engines/vllm/bin/python"],
            "model": "org/some-model",
            "max_model_len": 8192,
        },
        "sglang": {
            "name": "sglang",
            "launch": [".engines/sglang/bin/python"],
            "model": "org/some-model",
            "max_model_len": 8192,
        },
    },
    "workload": {"kind": "fixed_batch", "batch_size": 4, "context_tokens": 2048, "output_tokens": 64},
    "matrix": {"engine.mem_util": [0.92, 0.95]},
}


def _with(**changes) -> dict:
    """BASE with dotted paths set (a value of None deletes the field)."""
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = data
        for k in parents:
            node = node[k]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def _refused(tmp_path, data, says: str, secret: str | None = None, env: dict | None = None) -> str:
    """``data`` (a dict, or YAML text) is refused naming the file and ``says``, by validation and by the dry run
    (exit 2); ``secret`` appears in neither message."""
    path = tmp_path / "exp.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, allow_unicode=True, sort_keys=False))
    with pytest.raises(SpecError) as err:
        ExperimentSpec.load(path)
        ExperimentSpec.load(path).check_environment(path)
    msg, says = " ".join(str(err.value).split()), " ".join(says.split())
    assert msg.startswith(f"{path}: ") and says in msg, msg
    res = CliRunner().invoke(app, ["sweep", str(path), "--dry-run"], env=env)
    out = " ".join(res.output.split())  # rich may wrap long lines
    assert res.exit_code == 2, res.output
    assert f"{path}: " in out and says in out, out
    if secret is not None:
        assert secret not in str(err.value) and secret not in res.output
    return msg


def _kept(tmp_path, data) -> ExperimentSpec:
    path = tmp_path / "kept.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return ExperimentSpec.load(path)


# ---------------------------------------------------------------------------- secrets (item 3)


@pytest.mark.parametrize(
    "url",
    ["http://alice:s3cret@127.0.0.1:8000", "https://alice:s3cret@gpu-node-3:8000/", "http://s3cret@127.0.0.1:8000"],
)
def test_credentials_in_a_url_are_refused_and_never_echoed(tmp_path, url):
    data = _with(engines__vllm__url=url, engines__vllm__launch=None)
    _refused(tmp_path, data, "engines.vllm: url: credentials in the url (user:password@host)", secret="s3cret")


def test_a_url_that_fails_its_pattern_is_not_echoed_with_its_credentials(tmp_path):
    data = _with(engines__vllm__url="http://alice:s3cret@gpu-node-3:8000/v1", engines__vllm__launch=None)
    msg = _refused(tmp_path, data, "engines.vllm.url: String should match pattern", secret="s3cret")
    assert "(got 'http://***@gpu-node-3:8000/v1')" in msg


@pytest.mark.parametrize(
    "launch, index, name",
    [
        (["env", "HF_TOKEN=hf_s3cret", "python"], 1, "HF_TOKEN"),
        (["docker", "run", "-e", "MYSQL_PWD=s3cret", "img", "python"], 3, "MYSQL_PWD"),
        (["docker", "run", "-eSENTRY_DSN=s3cret", "img", "python"], 2, "SENTRY_DSN"),
        (["podman", "run", "--env=BYPASSWORD=s3cret", "img", "python"], 2, "BYPASSWORD"),
        (["env", "HTTPS_PROXY=http://alice:s3cret@proxy:3128", "python"], 1, "HTTPS_PROXY"),
    ],
)
def test_a_launch_word_that_assigns_a_secret_is_refused(tmp_path, launch, index, name):
    _refused(
        tmp_path,
        _with(engines__vllm__launch=launch),
        f"engines.vllm: launch[{index}]: assigns {name}, which looks like a secret",
        secret="s3cret",
    )


def test_launch_words_that_assign_no_secret_are_kept(tmp_path):
    launch = ["env", "OMP_NUM_THREADS=1", "TOKENIZERS_PARALLELISM=false", "HTTPS_PROXY=http://proxy:3128", "python"]
    assert _kept(tmp_path, _with(engines__vllm__launch=launch)).engines["vllm"].launch == launch
    assert [launch_assignment(w) for w in ["A=1", "--no-capture-output", "-e", "x=y=z", "KEY"]] == [None] * 5


@pytest.mark.parametrize(
    "name, value",
    [
        ("HTTPS_PROXY", "http://alice:s3cret@proxy:3128"),
        ("https_proxy", "alice:s3cret@proxy:3128"),
        ("ALL_PROXY", "socks5h://alice:s3cret@proxy:1080"),
        ("DATABASE_URL", "postgresql://app:s3cret@db/app"),
    ],
)
def test_an_env_value_with_credentials_is_refused(tmp_path, name, value):
    _refused(
        tmp_path,
        _with(engines__sglang__env={name: value}),
        f"engines.sglang: env.{name}: the value carries credentials",
        secret="s3cret",
    )


def test_the_secret_name_rule_and_its_allow_list():
    """A secret word is excused only wholly inside an allow-listed one: BYPASS holds PASS, not PASSWORD."""
    names = [
        "MYSQL_PWD",
        "SENTRY_DSN",
        "OAUTH_TOKEN_URL",
        "GH_AUTH",
        "SESSION_COOKIE",
        "BYPASSWORD",
        "BYPASSPASS",
        "PASSTHROUGH_PASSWD",
        "TOKENIZERS_TOKEN",
        "CACHE_BYPASS",
        "PASSTHROUGH",
        "TOKENIZERS_PARALLELISM",
        "KEYBOARD",
        "PWD",
        "OLDPWD",
        "HTTPS_PROXY",
    ]
    assert [n for n in names if is_secret_env(n)] == names[:9]
    assert [secret_env_value("HTTPS_PROXY", v) for v in ("http://a:b@p:1", "a:b@p:1", "http://p:1", "p:1")] == [
        True,
        True,
        False,
        False,
    ]
    assert secret_env_value("SOME_URL", "a:b@p:1") is False  # without a scheme, only a proxy setting is read so


KEY = 'sk-kvlab\\path"q é/x'  # a backslash, a quote, a space, a non-ASCII letter and a slash


def test_every_form_a_key_takes_in_a_log_is_redacted():
    forms = {
        "raw": KEY,
        "repr": 'sk-kvlab\\\\path"q é/x',  # repr() doubles the backslash (the quote stays: repr picks '...')
        "repr of a repr": 'sk-kvlab\\\\\\\\path"q é/x',
        "json": 'sk-kvlab\\\\path\\"q \\u00e9/x',
        "json, unicode kept": 'sk-kvlab\\\\path\\"q é/x',
        "url-encoded": "sk-kvlab%5Cpath%22q%20%C3%A9%2Fx",
        "form-encoded": "sk-kvlab%5Cpath%22q+%C3%A9%2Fx",
    }
    assert set(forms.values()) <= set(secret_forms(KEY))
    log = "\n".join(f"{name}: [{form}]" for name, form in forms.items())
    assert redact_text(log, KEY) == "\n".join(f"{name}: [{REDACTED}]" for name in forms)
    assert holds_secret(log, KEY) and not holds_secret(redact_text(log, KEY), KEY)
    assert redact_text(log, None) == log


def test_stored_specs_and_manifests_hold_no_credentials():
    dumped = {
        "engine": {
            "url": "http://alice:s3cret@127.0.0.1:8000",
            "env": {"HTTPS_PROXY": "http://a:pw@p:1", "NO_PROXY": "localhost"},
        },
        "servers": [{"url": "https://u@h/"}],
        "note": "mail bob@example.com",
    }
    assert redact_secrets(dumped) == {
        "engine": {"url": "http://***@127.0.0.1:8000", "env": {"HTTPS_PROXY": "***", "NO_PROXY": "localhost"}},
        "servers": [{"url": "https://***@h/"}],
        "note": "mail bob@example.com",
    }


# ---------------------------------------------------------------------------- limits (item 4)


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"repeats": 100_000_000}, "repeats: Input should be less than or equal to 1000 (got 100000000)"),
        ({"quick": {"repeats": 5000}}, "quick.repeats: Input should be less than or equal to 1000 (got 5000)"),
        (
            {"repeats_at": [{"where": {"engine.mem_util": 0.92}, "repeats": 1001}]},
            "repeats_at.0.repeats: Input should be less than or equal to 1000",
        ),
        (
            {"matrix": {"workload.seed": list(range(120)), "workload.output_tokens": list(range(1, 101))}},
            "matrix: 12,000 points (120 x 100, the product of its axes' lengths), over the limit of 10,000 runs",
        ),
        (
            {"matrix": {"workload.seed": list(range(50)), "workload.output_tokens": list(range(1, 21))}, "repeats": 6},
            "repeats: up to 12,000 runs (1,000 matrix points x 2 engines x 6 repeats), over the limit of 10,000",
        ),
        (
            {
                "matrix": {"engine": ["vllm", "sglang"], "workload.seed": list(range(1000))},
                "repeats_at": [{"where": {"engine": "vllm"}, "repeats": 6}],
            },
            "repeats_at: up to 12,000 runs (2,000 matrix points x 1 engine x 6 repeats)",
        ),
        (
            {"workload": {**BASE["workload"], "batch_size": 100_000_000}},
            "workload.batch_size: 100,000,000 requests, over the limit of 65,536 per run",
        ),
        (
            {
                "workload": {**BASE["workload"], "context_tokens": 1_999_999_000},
                "engines": {"vllm": {**BASE["engines"]["vllm"], "max_model_len": 2_000_000_000}},
            },
            "workload.context_tokens: prompt (1,999,998,936) + output (64) = 1,999,999,000 tokens per request, over the "
            "limit of 16,777,216",
        ),
        (
            {"engines": {"vllm": {**BASE["engines"]["vllm"], "max_model_len": 20_000_000}}},
            "engines.vllm.max_model_len: 20,000,000 tokens, over the limit of 16,777,216",
        ),
        ({"workload": {**BASE["workload"], "seed": -1}}, "workload.seed: Input should be greater than or equal to 0"),
    ],
)
def test_sizes_are_capped_at_validation(tmp_path, changes, says):
    start = time.monotonic()
    _refused(tmp_path, {**BASE, **changes}, says)
    assert time.monotonic() - start < 20  # never expanded: 12,000 points are refused from the axes' lengths


def test_run_tokens_at_the_limit_are_kept_and_one_more_request_is_refused(tmp_path):
    """65,536 requests of 2,048 tokens are 134,217,728 = 2**27 tokens: kept (the limit is inclusive); one token more
    per request is refused."""
    w = {**BASE["workload"], "batch_size": 65_536, "context_tokens": 2048}
    assert _kept(tmp_path, {**BASE, "workload": w, "matrix": {"engine": ["vllm"]}}).workload.batch_size == 65_536
    _refused(
        tmp_path,
        {**BASE, "workload": {**w, "context_tokens": 2049}},
        "workload.batch_size: 65,536 requests x 2,049 tokens = 134,283,264 tokens in one run, over the limit "
        "of 134,217,728",
    )


@pytest.mark.parametrize("url", [None, "http://127.0.0.1:8000"])
def test_a_catalogued_hub_models_context_is_checked_for_launched_and_url_engines(tmp_path, url):
    engine = {**BASE["engines"]["vllm"], "model": "moonshotai/Kimi-K2-Instruct", "max_model_len": 300_000}
    if url:
        engine = {**engine, "url": url, "launch": None}
        del engine["launch"]
    data = {**BASE, "engines": {"vllm": engine}, "matrix": {}}
    _refused(tmp_path, data, "engines.vllm.max_model_len: 300000 exceeds Kimi-K2's native context (262,144 tokens")
    assert _kept(tmp_path, {**data, "engines": {"vllm": {**engine, "allow_long_context": True}}})


def test_an_over_long_file_a_fifo_and_a_non_utf8_file_are_refused_without_reading_them_whole(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(BASE) + "#" * MAX_FILE_BYTES + "\n")
    size = path.stat().st_size
    _refused(tmp_path, path.read_text(), f"experiment file of {size:,} bytes is over the limit of 1,048,576")
    # an axis of a million values (issue 40: a MemoryError after 88 s): the file alone is over the limit
    axis = "matrix:\n  workload.seed: [" + ", ".join(map(str, range(10**6))) + "]\n"
    text = yaml.safe_dump({k: v for k, v in BASE.items() if k != "matrix"}) + axis
    _refused(tmp_path, text, f"experiment file of {len(text):,} bytes is over the limit of 1,048,576")
    raw = tmp_path / "raw.yaml"
    raw.write_bytes(yaml.safe_dump(BASE).encode() + b"description: \xff\n")
    res = CliRunner().invoke(app, ["sweep", str(raw), "--dry-run"])
    assert res.exit_code == 2 and f"{raw}: not UTF-8 text (byte {raw.stat().st_size - 2:,} is b'\\xff')" in res.output
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # reading it would block until a writer came
    res = CliRunner().invoke(app, ["sweep", str(fifo), "--dry-run"])
    assert res.exit_code == 2 and f"{fifo}: cannot read experiment file: not a regular file" in res.output


LAUGHS = "\n".join(
    ["name: t", "hardware: CPU", "device: cpu", "assumptions:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol"]']
    + [f"  {c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
)


def test_a_billion_laughs_file_is_refused_fast(tmp_path):
    """8 levels of 9 aliases over 7 strings: about 3.5 * 10^8 nodes expanded, 80 composed. The expanded count is
    summed over the shared nodes, so refusing it takes no longer than reading the file; it stops at the first node
    over the limit: f, 1 + 9 * (1 + 9 * (1 + 9 * (1 + 9 * (1 + 9 * (1 + 7)))))."""
    start = time.monotonic()
    _refused(
        tmp_path, LAUGHS, "assumptions.f: 479,773 YAML nodes once its aliases are expanded, over the limit of 100,000"
    )
    assert time.monotonic() - start < 10


def test_aliases_within_the_limit_are_kept_and_a_recursive_one_is_refused(tmp_path):
    engine = BASE["engines"]["vllm"]
    text = yaml.safe_dump({**BASE, "engines": {}}).replace(
        "engines: {}",
        "engines:\n  vllm: &e "
        + yaml.safe_dump(engine, default_flow_style=True).strip()
        + "\n  other: {<<: *e, max_model_len: 4096}",
    )
    path = tmp_path / "aliases.yaml"
    path.write_text(text)
    spec = ExperimentSpec.load(path)
    assert spec.engines["other"] == spec.engines["vllm"].model_copy(update={"max_model_len": 4096})
    _refused(
        tmp_path,
        yaml.safe_dump(BASE) + "assumptions: &a {loop: *a}\n",
        "assumptions.loop: an alias that contains itself",
    )


@pytest.mark.parametrize(
    "text, says",
    [
        ("name: t\nname: u\n", "name: key given twice in one mapping (line "),
        (
            "engines:\n  vllm:\n    model: org/a\n    model: org/b\n",
            "engines.vllm.model: key given twice in one mapping",
        ),
        ("matrix:\n  engine.mem_util: [0.9]\n  engine.mem_util: [0.95]\n", "matrix.engine.mem_util: key given twice"),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path, text, says):
    base = {k: v for k, v in BASE.items() if k not in text.split(":", 1)[0]}
    _refused(tmp_path, yaml.safe_dump(base) + text, says)


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"hardware": "CPU\x1b[31m"}, "hardware: the value holds the control character U+001B at position 3"),
        (
            {"engines": {"vl\u202em": BASE["engines"]["vllm"]}},
            "engines.vl\u202em: the key holds the control character U+202E at position 2",
        ),
        (
            {"engines": {"vllm": {**BASE["engines"]["vllm"], "served_model_name": "a\nb"}}},
            "engines.vllm.served_model_name: the value holds the control character U+000A",
        ),
        (
            {"matrix": {"engine.mem_util\t": [0.9]}},
            "matrix.engine.mem_util\t: the key holds the control character U+0009",
        ),
        ({"description": "bell\x07"}, "description: the value holds the control character U+0007 at position 4"),
    ],
)
def test_a_label_with_a_control_character_is_refused(tmp_path, changes, says):
    _refused(tmp_path, {**BASE, **changes}, says)


def test_free_text_may_hold_tabs_and_newlines(tmp_path):
    spec = _kept(tmp_path, {**BASE, "description": "line 1\n\tline 2\n", "assumptions": {"a": "x\ny"}})
    assert spec.description == "line 1\n\tline 2\n"


# ---------------------------------------------------------------------------- refusals that were tracebacks


def test_an_unset_api_key_variable_is_exit_2_in_the_dry_run_and_the_sweep(tmp_path):
    var = "KVLAB_TEST_H2A_UNSET_KEY"
    os.environ.pop(var, None)
    data = _with(engines__vllm__api_key_env=var)
    _refused(tmp_path, data, f"engines.vllm.api_key_env: environment variable '{var}' is not set")
    data_dir = tmp_path / "data"
    res = CliRunner().invoke(app, ["sweep", str(tmp_path / "exp.yaml"), "--data-dir", str(data_dir)])
    assert res.exit_code == 2 and "is not set" in res.output and not data_dir.exists()
    res = CliRunner().invoke(app, ["sweep", str(tmp_path / "exp.yaml"), "--dry-run"], env={var: "k-1"})
    assert res.exit_code == 0 and "VLLM_API_KEY=$KVLAB_TEST_H2A_UNSET_KEY" in res.output and "k-1" not in res.output


@pytest.mark.parametrize("url", [None, "http://127.0.0.1:30000"])
def test_sglang_with_a_hub_model_and_kv_cache_bytes_is_exit_2(tmp_path, url):
    engine = {**BASE["engines"]["sglang"], "kv_cache_bytes": 2**24}
    if url:
        engine = {k: v for k, v in engine.items() if k != "launch"} | {"url": url}
    _refused(
        tmp_path,
        {**BASE, "engines": {"sglang": engine}},
        "engines.sglang.kv_cache_bytes: kv_cache_bytes (16777216) on sglang needs a local model with a config.json",
    )


@pytest.mark.parametrize(
    "matrix, says",
    [
        ({"linked": [{1: 2}]}, "matrix.linked: a field path is text like 'engine.mem_util', got 1"),
        ({"engine": [["vllm"]]}, "matrix.engine: unknown engine ['vllm']"),
        (
            {"workload.load": [{"concurrency": 1, "arrival_seed": -1}]},
            "workload.load.arrival_seed: Input should be greater than or equal to 0",
        ),
    ],
)
def test_odd_matrix_values_are_exit_2_not_tracebacks(tmp_path, matrix, says):
    _refused(tmp_path, {**BASE, "matrix": matrix}, says)


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"scale_factor": float("inf")}, "scale_factor: Input should be a finite number (got inf)"),
        (
            {"workload": {**BASE["workload"], "temperature": float("nan")}},
            "workload.temperature: Input should be a finite number (got nan)",
        ),
        (
            {"engines": {"vllm": {**BASE["engines"]["vllm"], "startup_timeout_s": float("inf")}}},
            "engines.vllm.startup_timeout_s: Input should be a finite number (got inf)",
        ),
        (
            {"engines": {"vllm": {"name": "vllm", "url": "http://[::1:8000", "model": "m", "max_model_len": 8192}}},
            "engines.vllm: url: Invalid IPv6 URL",
        ),
        (
            {"engines": {"vllm": {**BASE["engines"]["vllm"], "model": ""}}},
            "engines.vllm.model: String should have at least 1 character",
        ),
    ],
)
def test_values_that_were_tracebacks_or_endless_waits_are_exit_2(tmp_path, changes, says):
    """scale_factor: .inf was an OverflowError (exit 1); an infinite start-up timeout waits forever."""
    _refused(tmp_path, {**BASE, **changes}, says)


def test_a_sweep_refuses_a_launch_program_that_is_not_here_and_the_dry_run_plans_it(tmp_path):
    """A missing interpreter was a FileNotFoundError traceback once the sweep launched; the dry run may plan for
    another host (conda there, not here), so only the sweep checks it."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_with(engines__vllm__launch=["/nonexistent/kvlab/python"], matrix={})))
    data_dir = tmp_path / "data"
    res = CliRunner().invoke(app, ["sweep", str(path), "--data-dir", str(data_dir)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and not data_dir.exists()
    assert (
        f"{path}: engines.vllm.launch[0]: '/nonexistent/kvlab/python' is not an executable file on this machine" in out
    )
    assert CliRunner().invoke(app, ["sweep", str(path), "--dry-run"]).exit_code == 0
    path.write_text(yaml.safe_dump(_with(engines__vllm__launch=["kvlab-no-such-program", "python"], matrix={})))
    res = CliRunner().invoke(app, ["sweep", str(path), "--data-dir", str(data_dir)])
    assert res.exit_code == 2 and "engines.vllm.launch[0]: 'kvlab-no-such-program' is not found on PATH" in res.output


@pytest.mark.parametrize(
    "args, says",
    [
        (["model", "{bad}"], "{bad}: name: key given twice in one mapping (line 2)"),
        (["model", "--gpu", "NOPE"], "invalid input: hardware 'NOPE' is not in"),
        (["model", "--tp", "0"], "invalid input: tp 0 and dcp 1: both >= 1 and tp % dcp == 0 required"),
        (["report", "-p", "x=[1"], "'x=[1': the value is not a YAML literal"),
    ],
)
def test_the_other_commands_refuse_bad_input_with_exit_2(tmp_path, args, says):
    """`kvlab model` on an invalid experiment, an unknown GPU or an impossible setting, and `kvlab report -p` with a
    value that is no YAML literal, were tracebacks (exit 1)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nname: u\n")
    res = CliRunner().invoke(app, [a.replace("{bad}", str(bad)) for a in args])
    assert res.exit_code == 2, res.output
    assert says.replace("{bad}", str(bad)) in " ".join(res.output.split()), res.output


@pytest.mark.parametrize(
    "matrix, says",
    [
        ({"engine.env.HF_TOKEN": ["s3cret"]}, "matrix point [engine.env.HF_TOKEN='***']: engines.vllm: env.HF_TOKEN"),
        (
            {"proxy": [{"engines.vllm.env.HTTPS_PROXY": "http://a:s3cret@p:1"}]},
            "matrix point [proxy={'engines.vllm.env.HTTPS_PROXY': '***'}]: engines.vllm: env.HTTPS_PROXY: the value carries",
        ),
        ({"engine.url": ["http://a:s3cret@h:1"]}, "matrix point [engine.url='http://***@h:1']"),
    ],
)
def test_a_matrix_point_named_in_an_error_shows_no_secret(tmp_path, matrix, says):
    _refused(tmp_path, {**BASE, "matrix": matrix}, says, secret="s3cret")


@pytest.mark.parametrize("dry_run", [True, False])
def test_one_experiment_name_twice_in_a_sweep_is_exit_2(tmp_path, dry_run):
    """The sweep raised campaign's ValueError (a traceback, exit 1); the dry run listed both."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for path in (a, b):
        path.write_text(yaml.safe_dump(BASE))
    res = CliRunner().invoke(
        app, ["sweep", str(a), str(b), *(["--dry-run"] if dry_run else ["--data-dir", str(tmp_path / "data")])]
    )
    assert res.exit_code == 2, res.output
    assert f"{b}: name: 't' is also the name of {a}: one sweep takes each experiment once" in " ".join(
        res.output.split()
    )
    assert not (tmp_path / "data").exists()
