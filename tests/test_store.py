"""Loading everything under data/: validation errors name the file and the problem."""

import json
import shutil

import polars as pl
import pytest

from kvlab.probe import probe_summary
from kvlab import store
from kvlab.paths import DATA_DIR
from kvlab.schema import RUNS, SchemaError


@pytest.fixture
def data(tmp_path):
    shutil.copytree(DATA_DIR / "reference", tmp_path / "reference")
    return tmp_path


def test_reference_table_is_the_articles(data):
    runs = store.load_runs(data)
    pub = runs.filter(pl.col("source") == "published").sort("context_tokens", "engine")
    assert pub.select("context_label", "engine", "batch_time_s").rows() == [
        ("64K", "sglang", 150.8),
        ("64K", "vllm", 100.5),
        ("200K", "sglang", 225.3),
        ("200K", "vllm", 295.2),
    ]
    # unknowns stay empty, never guessed
    assert pub["batch_size"].null_count() == 4 and pub["output_tokens"].null_count() == 4
    assert pub["mem_util"].null_count() == 4 and pub["tp"].null_count() == 4
    assert pub["citation"].null_count() == 0


def test_every_document_is_in_the_register_and_the_register_is_no_table_of_figures(data):
    """data/reference/documents.csv names each document the reference tables and claims come from (the reports'
    provenance panels cite a document from it, by title); it is not read as published runs."""
    docs = store.load_documents(data)
    cited = set(store.load_runs(data)["experiment"]) | set(store.load_claims(data)["experiment"])
    assert sorted(docs["experiment"]) == sorted(cited) == ["article_b300", "article_kv_design"]
    assert docs.filter(pl.col("experiment") == "article_kv_design").select("title_en", "language", "published").row(
        0
    ) == ("vLLM vs SGLang performance: choosing an inference engine by its KV-cache design", "Korean", "2026")
    assert docs["publisher"].null_count() == 2  # neither names a publisher: empty, never guessed
    assert store.load_documents(data / "elsewhere").height == 0  # a data folder without a register


def test_missing_data_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        store.load_runs(tmp_path / "nope")


def test_malformed_value_names_file_and_column(data):
    f = data / "reference" / "article_b300.csv"
    f.write_text(f.read_text().replace(",100.5,", ",fast,"))
    with pytest.raises(SchemaError, match=r"article_b300\.csv: column 'batch_time_s'"):
        store.load_runs(data)


def test_unknown_engine_names_file(data):
    f = data / "reference" / "article_b300.csv"
    f.write_text(f.read_text().replace(",vllm,1,", ",trtllm,1,", 1))
    with pytest.raises(SchemaError, match=r"article_b300\.csv: column 'engine' has value 'trtllm'"):
        store.load_runs(data)


def test_missing_required_column(data):
    (data / "reference" / "other.csv").write_text("source,experiment\npublished,x\n")
    with pytest.raises(SchemaError, match=r"other\.csv: missing required column"):
        store.load_runs(data)


def test_unknown_column(data):
    f = data / "reference" / "article_b300.csv"
    lines = f.read_text().splitlines()
    f.write_text("\n".join([lines[0] + ",speed"] + [ln + ",1" for ln in lines[1:]]))
    with pytest.raises(SchemaError, match=r"unknown column\(s\) \['speed'\]"):
        store.load_runs(data)


def test_empty_required_value_names_row(data):
    f = data / "reference" / "article_b300.csv"
    f.write_text(f.read_text().replace("NVIDIA B300", "", 1))
    with pytest.raises(SchemaError, match=r"required column 'hardware' is empty in row 1"):
        store.load_runs(data)


def test_unparseable_parquet(data):
    """A run folder that cannot be read is quarantined (skipped, listed with its reason), not an error for every
    report (tests/test_reading.py has the other unreadable kinds)."""
    d = data / "runs" / "exp" / "abc"
    d.mkdir(parents=True)
    (d / "run.parquet").write_bytes(b"not parquet")
    assert store.load_runs(data).filter(pl.col("source") == "measured").height == 0
    [q] = store.quarantined(data)
    assert q.path == d and q.reason.startswith(f"{d / 'run.parquet'}: cannot be parsed as parquet: ")
    with pytest.raises(SchemaError, match=r"run\.parquet: cannot be parsed"):
        store.read_table(d / "run.parquet", RUNS)


def test_duplicate_rows_are_an_error(data):
    shutil.copy(data / "reference" / "article_b300.csv", data / "reference" / "copy.csv")
    with pytest.raises(SchemaError, match="duplicates one in"):
        store.load_runs(data)


def _row(run_id="r1"):
    return pl.DataFrame(
        {
            "source": ["measured"],
            "experiment": ["exp"],
            "run_id": [run_id],
            "hardware": ["CPU"],
            "model": ["tiny"],
            "engine": ["vllm"],
            "context_label": ["2K"],
            "context_tokens": [2048],
            "status": ["ok"],
            "batch_time_s": [1.5],
        }
    )


def test_write_run_is_atomic_and_loaded(data):
    exp = data / "runs" / "exp"
    store.write_run(exp, "k1", _row("k1"), spec={"a": 1})
    assert store.finished_run_keys(exp) == {"k1"}
    assert not [p for p in exp.iterdir() if p.name.startswith(".")]
    runs = store.load_runs(data)
    assert runs.filter(pl.col("source") == "measured")["batch_time_s"].to_list() == [1.5]


def test_write_run_failure_leaves_nothing(data):
    exp = data / "runs" / "exp"
    bad = _row().with_columns(pl.lit("maybe").alias("status"))
    with pytest.raises(SchemaError):
        store.write_run(exp, "k2", bad)
    assert not exp.exists() or not any(exp.iterdir())


def test_a_run_still_being_written_is_not_finished(data):
    """write_run fills a dot folder, then renames it: between the two, readers must not see it (pathlib's
    glob matches dot names; a killed-harness test once counted such a folder as a finished run)."""
    exp = data / "runs" / "exp"
    store.write_run(exp, "k1", _row("k1"))
    staging = exp / ".k2.abcd"
    staging.mkdir()
    _row("k2").write_parquet(staging / "run.parquet")
    assert store.finished_run_keys(exp) == {"k1"}
    assert store.run_dirs(data, "exp") == [exp / "k1"]
    assert store.load_runs(data, "exp")["run_id"].to_list() == ["k1"]


def test_clean_partial_removes_leftovers(data):
    exp = data / "runs" / "exp"
    (exp / ".kvlab-tmp.k3.abcd1234").mkdir(parents=True)
    (exp / ".kvlab-tmp.manifest.json.x.tmp").write_text("{")
    (exp / ".k4.abcd1234").mkdir()  # earlier kvlab's name for run k4's staging folder
    (exp / ".hidden").write_text("a user's")
    assert len(store.clean_partial(exp, {"k4"})) == 3
    assert [p.name for p in exp.iterdir()] == [".hidden"]


def test_runs_the_experiment_no_longer_defines_are_set_aside_and_come_back(data):
    exp = data / "runs" / "exp"
    for key in ("old", "cur"):
        store.write_run(exp, key, _row(key))
    assert store.set_aside_superseded(exp, {"cur"}) == (["old"], [])
    assert store.finished_run_keys(exp) == {"cur"}
    assert store.load_runs(data, "exp")["run_id"].to_list() == ["cur"]  # reports no longer see it
    assert (exp / "superseded" / "old" / "run.parquet").is_file()  # moved, not deleted
    assert store.set_aside_superseded(exp, {"cur"}) == ([], [])
    assert store.set_aside_superseded(exp, {"cur", "old"}) == ([], ["old"])  # defined again: reused
    assert store.finished_run_keys(exp) == {"cur", "old"}


def test_a_run_folder_that_cannot_be_read_is_set_aside_with_its_reason_never_reused(data):
    """Issue 56, item 3: an unreadable run folder is moved to quarantined/ with its reason beside it (so the sweep
    measures its run again), a second one of the same name gets a numbered name, and a superseded run that cannot be
    read is not brought back when the experiment defines it again."""
    exp = data / "runs" / "exp"
    for key in ("bad", "good", "old"):
        store.write_run(exp, key, _row(key))
    (exp / "bad" / "run.parquet").write_bytes(b"PAR1 truncated")
    [aside] = store.set_aside_unusable(exp)
    assert (aside.path, aside.kept, aside.moved_to) == (exp / "bad", None, exp / "quarantined" / "bad")
    assert aside.reason.startswith(f"{exp / 'bad' / 'run.parquet'}: cannot be parsed as parquet")
    assert (exp / "quarantined" / "bad.reason.txt").read_text().startswith(f"set aside from: {exp / 'bad'}\nreason: ")
    assert store.finished_run_keys(exp) == {"good", "old"} and store.set_aside_unusable(exp) == []
    store.write_run(exp, "bad", _row("bad"))
    (exp / "bad" / "requests.parquet").write_bytes(b"")  # measured again, and broken again
    assert [a.moved_to.name for a in store.set_aside_unusable(exp)] == ["bad.2"]
    assert store.set_aside_superseded(exp, {"good"}) == (["old"], [])
    (exp / "superseded" / "old" / "run.parquet").write_bytes(b"garbage")
    assert store.set_aside_superseded(exp, {"good", "old"}) == ([], [])  # not brought back: measured again
    assert store.finished_run_keys(exp) == {"good"}


def test_schema_conform_keeps_order_and_types():
    out = RUNS.conform(_row())
    assert out.columns == RUNS.names
    assert out.schema["context_tokens"] == pl.Int64


# --------------------------------------------------------------------------- columns recorded since (issue #22)

FIXTURE_RUNS = __import__("pathlib").Path(__file__).parent / "fixtures" / "runs"


def test_older_stored_runs_get_their_kv_budget_and_device_kind_from_spec_and_manifest(tmp_path):
    """The fixture runs were stored before kv_budget_bytes and device_kind existed (and with kv_cache_tokens, now
    retired): they read with both columns filled from each run's spec.json and its sweep's host facts."""
    import json

    shutil.copytree(FIXTURE_RUNS, tmp_path / "runs")
    raw = pl.read_parquet(next((tmp_path / "runs").glob("*/*/run.parquet")))
    assert "kv_cache_tokens" in raw.columns and "kv_budget_bytes" not in raw.columns  # really the old format
    runs = store.load_runs(tmp_path)
    assert runs.columns == RUNS.names and "kv_cache_tokens" not in runs.columns
    assert runs.height == 28 and runs["device_kind"].to_list() == ["cpu"] * 28  # 2-vCPU host, no GPU
    assert runs["gpu_count"].null_count() == 28
    budgets = runs.group_by("experiment", "kv_budget_bytes").len().sort("experiment", "kv_budget_bytes").rows()
    assert budgets == [
        ("cpu_classification", 67108864, 2),
        ("cpu_long_context", 8388608, 4),
        ("cpu_long_context", 20971520, 2),
        ("cpu_multi_turn", 67108864, 4),
        ("cpu_prefix_sharing", 67108864, 16),
    ]
    for d in store.run_dirs(tmp_path):  # each row's budget is its own spec's
        spec = json.loads((d / "spec.json").read_text())
        row = runs.filter(pl.col("run_id") == d.name)
        assert row["kv_budget_bytes"][0] == spec["engine"]["kv_cache_bytes"]


def test_backfilled_device_kind_comes_from_the_host_that_measured_the_run(tmp_path):
    """A vLLM run's kind follows its sweep's host facts (GPUs listed: gpu, with their model); sglang-jax pinned to the
    CPU stays cpu; where the sweeps disagree and do not place the run, the migration of runs stored before the typed
    device reads the kind once from the label the experiment stated then (no GPU model: not known)."""
    import json

    shutil.copytree(FIXTURE_RUNS / "cpu_classification", tmp_path / "runs" / "cpu_classification")
    manifest = tmp_path / "runs" / "cpu_classification" / "manifest.json"
    m = json.loads(manifest.read_text())
    gpu_host = {"gpus": [{"index": 0, "name": "NVIDIA H100"}], "accelerator": "1× NVIDIA H100"}
    for s in m["sweeps"]:
        s["host"] = {**s["host"], **gpu_host}
    manifest.write_text(json.dumps(m))
    cols = ("engine", "device_kind", "accelerator", "gpu_count")
    devices = {r[0]: r[1:] for r in store.load_runs(tmp_path).select(cols).rows()}
    assert devices == {"vllm": ("gpu", "NVIDIA H100", None), "sglang-jax": ("cpu", None, None)}
    m["sweeps"] = [{**m["sweeps"][0], "started_at": None}, {"host": {"gpus": []}}]  # two hosts, neither placed
    manifest.write_text(json.dumps(m))
    devices = {r[0]: r[1:] for r in store.load_runs(tmp_path).select(cols).rows()}
    assert devices == {"vllm": ("cpu", None, None), "sglang-jax": ("cpu", None, None)}  # 'CPU x86_64 (vLLM CPU …'
    for f in (tmp_path / "runs" / "cpu_classification").glob("*/run.parquet"):  # as if the label had named GPUs
        pl.read_parquet(f).with_columns(hardware=pl.lit("NVIDIA H100 x1")).write_parquet(f)
    devices = {r[0]: r[1:] for r in store.load_runs(tmp_path).select(cols).rows()}
    assert devices == {"vllm": ("gpu", None, None), "sglang-jax": ("cpu", None, None)}


def test_a_run_stored_before_the_typed_device_keeps_the_kind_it_recorded(data):
    """A run that recorded device_kind (null: a server kvlab did not start) but no accelerator: a recorded kind is
    kept, a null one is derived once on reading (its spec.json's device, else its label)."""
    base = {
        "source": ["measured"],
        "experiment": ["e"],
        "model": ["m"],
        "engine": ["vllm"],
        "context_label": ["1K"],
        "context_tokens": [1024],
        "status": ["ok"],
        "started_at": [None],
    }
    for run_id, label, kind, spec in (
        ("r1", "NVIDIA B300 x8", "cpu", {}),
        ("r2", "CPU (test)", None, {}),
        ("r3", "NVIDIA B300 x8", None, {}),
        ("r4", "CPU (test)", None, {"device": {"kind": "gpu", "count": 2}}),
    ):
        d = data / "runs" / "e" / run_id
        d.mkdir(parents=True)
        pl.DataFrame(
            base | {"run_id": [run_id], "hardware": [label], "device_kind": [kind]},
            schema_overrides={"device_kind": pl.String, "started_at": pl.String},
        ).write_parquet(d / "run.parquet")
        (d / "spec.json").write_text(json.dumps({"engine": {"url": "http://10.0.0.5:8000"}} | spec))
    got = store.load_runs(data).filter(pl.col("source") == "measured").sort("run_id")
    assert got.select("run_id", "device_kind", "accelerator").rows() == [
        ("r1", "cpu", None),
        ("r2", "cpu", None),
        ("r3", "gpu", None),
        ("r4", "gpu", None),
    ]


def test_runs_stored_with_the_new_columns_are_read_as_written(data):
    run = pl.DataFrame(
        {
            "source": ["measured"],
            "experiment": ["e"],
            "run_id": ["r1"],
            "hardware": ["CPU (test)"],
            "model": ["m"],
            "engine": ["vllm"],
            "context_label": ["1K"],
            "context_tokens": [1024],
            "status": ["ok"],
            "device_kind": [None],
            "kv_budget_bytes": [None],
        },
        schema_overrides={"device_kind": pl.String, "kv_budget_bytes": pl.Int64},
    )
    store.write_run(data / "runs" / "e", "r1", run, spec={"engine": {"kv_cache_bytes": 1024, "extra_args": []}})
    row = store.load_runs(data).filter(pl.col("source") == "measured")
    assert row.select("device_kind", "kv_budget_bytes").rows() == [(None, None)]  # recorded null: not refilled


def test_published_rows_that_state_gpus_ran_on_gpus(data):
    pub = store.load_runs(data).filter(pl.col("source") == "published")
    assert pub["device_kind"].to_list() == ["gpu"] * 4 and pub["kv_budget_bytes"].null_count() == 4


def test_a_retired_column_is_dropped_and_an_unknown_device_kind_refused():
    df = RUNS.conform(
        pl.DataFrame(
            {
                "source": ["published"],
                "experiment": ["e"],
                "run_id": ["r"],
                "hardware": ["h"],
                "model": ["m"],
                "engine": ["vllm"],
                "context_label": ["1K"],
                "context_tokens": [1024],
                "status": ["ok"],
                "kv_cache_tokens": [5],
            }
        )
    )
    assert "kv_cache_tokens" not in df.columns
    with pytest.raises(SchemaError, match="column 'device_kind' has value 'tpu'"):
        RUNS.conform(df.with_columns(device_kind=pl.lit("tpu")))


def test_spec_json_redacts_secret_looking_env_values(tmp_path):
    import json

    exp = tmp_path / "e"
    store.write_run(exp, "k1", _row("k1"), spec={"engine": {"env": {"HF_TOKEN": "hf_x", "JAX_PLATFORMS": "cpu"}}})
    assert json.loads((exp / "k1" / store.SPEC_FILE).read_text())["engine"]["env"] == {
        "HF_TOKEN": "***",
        "JAX_PLATFORMS": "cpu",
    }


def test_older_stored_runs_get_latency_percentiles_from_their_requests(tmp_path):
    """Runs stored before the p50/p90/p99 columns read with TTFT/TPOT/E2E percentiles computed from their stored
    requests (the summary's definitions); ITL percentiles need chunk times no older run kept: null, not 0."""
    import numpy as np

    shutil.copytree(FIXTURE_RUNS, tmp_path / "runs")
    run_dir = next((tmp_path / "runs").glob("*/*/run.parquet")).parent
    assert "ttft_p50_ms" not in pl.read_parquet(run_dir / "run.parquet").columns  # really the old format
    runs = store.load_runs(tmp_path)
    row = runs.filter(pl.col("run_id") == run_dir.name).row(0, named=True)
    reqs = pl.read_parquet(run_dir / "requests.parquet").filter(pl.col("status") == "ok")
    for metric in ("ttft", "tpot", "e2e"):
        values = reqs[f"{metric}_ms"].drop_nulls().to_list()
        for q in (50, 90, 99):
            assert row[f"{metric}_p{q}_ms"] == pytest.approx(float(np.percentile(values, q)))
    assert row["ttft_p99_ms"] == pytest.approx(pl.read_parquet(run_dir / "run.parquet")["ttft_p99_ms"][0])
    ok = runs.filter(pl.col("status") == "ok")
    assert ok["ttft_p50_ms"].null_count() == 0 and runs["itl_p50_ms"].null_count() == runs.height
    assert runs["requests_within_slo"].null_count() == runs.height  # no SLO was stated: no goodput


def test_older_stored_runs_get_their_rates_on_reading(tmp_path):
    """Runs stored before the rate columns read with them derived by schema.run_rates from their counts and batch
    time (no load, no SLO: T is the batch time, no goodput)."""
    shutil.copytree(FIXTURE_RUNS, tmp_path / "runs")
    raw = pl.read_parquet(FIXTURE_RUNS / "cpu_classification" / "55813f97ce92" / "run.parquet")
    assert "requests_per_s" not in raw.columns and raw["output_tokens_per_s"][0] is None  # the old format
    runs = store.load_runs(tmp_path)
    row = runs.filter(pl.col("run_id") == "55813f97ce92").row(0, named=True)
    assert (row["requests_ok"], row["served_output_tokens"]) == (256, 2560)
    assert row["batch_time_s"] == pytest.approx(23.691502443)
    assert row["requests_per_s"] == pytest.approx(256 / 23.691502443) == pytest.approx(10.8055620624)
    assert row["output_tokens_per_s"] == pytest.approx(2560 / 23.691502443) == pytest.approx(108.055620624)
    assert row["goodput_requests_per_s"] is None  # no SLO stated: no goodput, never 0
    ok = runs.filter(pl.col("status") == "ok")
    assert ok["requests_per_s"].null_count() == 0 and runs["goodput_requests_per_s"].null_count() == runs.height
    assert (ok["requests_per_s"] * ok["batch_time_s"] - ok["requests_ok"]).abs().max() < 1e-9


def test_telemetry_info_reads_an_older_no_sample_file_as_available_with_a_note(tmp_path):
    """Before ``note`` existed, telemetry.json said ``available: false`` for a run that got no sample: it reads as
    available (the engine exposed telemetry) with its reason as the note; a run whose engine exposed none stays not
    available; a new file is read as written."""
    import json

    shutil.copytree(FIXTURE_RUNS / "cpu_long_context", tmp_path / "runs" / "cpu_long_context")
    dirs = store.run_dirs(tmp_path)
    base = {"interval_s": 0.5, "samples": 0, "samples_ok": 0}
    (dirs[0] / "telemetry.json").write_text(json.dumps({"available": False, "reason": "no sample was taken", **base}))
    (dirs[1] / "telemetry.json").write_text(
        json.dumps({"available": False, "reason": "vLLM serves no /metrics", **base})
    )
    (dirs[2] / "telemetry.json").write_text(
        json.dumps(
            {
                "available": True,
                "reason": None,
                "note": "no sample was taken: the run ended before its first sample",
                **base,
            }
        )
    )
    info = store.load_telemetry_info(tmp_path).sort("run_id")
    got = {r["run_id"]: (r["available"], r["reason"], r["note"], r["samples"]) for r in info.iter_rows(named=True)}
    assert got == {
        dirs[0].name: (True, None, "no sample was taken", 0),
        dirs[1].name: (False, "vLLM serves no /metrics", None, 0),
        dirs[2].name: (True, None, "no sample was taken: the run ended before its first sample", 0),
    }


def test_runs_and_manifests_stored_before_the_probe_still_load_and_are_not_probed(tmp_path):
    """The fixture sweeps (no probe: their manifests' servers carry no ``probe``, list no ``configurations``) load
    as before; the probe loader finds none, so the capacity map says "not probed" for their configurations."""

    shutil.copytree(FIXTURE_RUNS, tmp_path / "runs")
    assert store.load_runs(tmp_path).height == 28
    probes = store.load_probes(tmp_path)
    assert probes.is_empty() and probes.schema == pl.Schema(store.PROBE_SCHEMA)
    assert probe_summary(probes).is_empty()
