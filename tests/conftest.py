"""Shared fixtures: kvlab's tiny model, the engine venvs' interpreters (skip, or fail under CI, when missing),
the data folder of real measured runs the notebook tests read, the published fit, and the fixed two-engine
prefix-sharing frames of tests/prefix_frames.py as analysed frames."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from kvlab.paths import ENGINES_DIR
from kvlab.studies.prefix_sharing import frames as prefix_sharing_frames
from kvlab.studies import sharing_frames

#: The model's fit cache (kvlab.perfmodel.fitcache) the session uses, when it made one (removed at its end).
_FIT_CACHE_DIR: str | None = None


def pytest_configure(config):
    """Point the model's fit cache at a file of this session's own unless KVLAB_FIT_CACHE is set (`make test` gives
    its two passes one): in os.environ, before any test module is collected, so every notebook kernel and
    subprocess inherits it (xdist's workers too) and no test reads or fills a developer's ~/.cache/kvlab."""
    global _FIT_CACHE_DIR
    if not os.environ.get("KVLAB_FIT_CACHE"):
        _FIT_CACHE_DIR = tempfile.mkdtemp(prefix="kvlab-test-fits-")
        os.environ["KVLAB_FIT_CACHE"] = os.path.join(_FIT_CACHE_DIR, "fits.sqlite")


def pytest_unconfigure(config):
    if _FIT_CACHE_DIR is not None:
        shutil.rmtree(_FIT_CACHE_DIR, ignore_errors=True)


ENGINE_PYTHON = ENGINES_DIR / "vllm" / "bin" / "python"
SGLANG_JAX_PYTHON = ENGINES_DIR / "sglang-jax" / "bin" / "python"
SGLANG_PYTHON = ENGINES_DIR / "sglang" / "bin" / "python"


def _required(python: Path) -> Path:
    """``python`` when it exists; otherwise fail under CI (which must have it) and skip elsewhere."""
    if not python.exists():
        reason = f"engine environment missing ({python}); run `make engines`"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return python


@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The vLLM engine venv's python (vLLM CPU build + SGLang's parser)."""
    return _required(ENGINE_PYTHON)


@pytest.fixture(scope="session")
def sglang_jax_python() -> Path:
    """The sglang-jax engine venv's python (SGLang's JAX runtime, Python >= 3.12)."""
    return _required(SGLANG_JAX_PYTHON)


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    """The PyTorch SGLang engine venv's python (SGLang 0.5.23 on CPU; `make engines-sglang`)."""
    return _required(SGLANG_PYTHON)


#: The engine test that computes most (the embedded default's sweep: two servers, six runs; four and eight with
#: FULL=1) runs last: under `make test` it then has both cores if the engine-free pass beside it has ended (since the
#: passes were balanced, 2026-12-06, both end within about a minute of each other, so it rarely has). No test waits
#: for that.
LAST_MODULES = ("test_embedded_default.py",)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name in LAST_MODULES)


@pytest.fixture(scope="session", autouse=True)
def tiny_model() -> Path:
    """kvlab's tiny local model, generated once (deterministic, no download) before any test: the shipped
    experiments name it, and validating them (side-effect free) needs it on disk."""
    from kvlab.tinymodel import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory, engine_python, tiny_model):
    """One sweep on the real vLLM CPU build, read by the engine tests of test_runner and test_studies: a killed
    harness's experiment resumed, and experiments that need the same server sharing its start (real_vllm.py)."""
    from real_vllm import shared_sweep

    return shared_sweep(tmp_path_factory.mktemp("real-vllm"))


@pytest.fixture(scope="session")
def fixture_data(tmp_path_factory) -> Path:
    """A data folder with the reference tables, the catalog and the real measured runs of tests/fixtures (the
    same on every machine, unlike data/runs), plus document variants (see notebook_data.write_fixture_data)."""
    from notebook_data import write_fixture_data

    return write_fixture_data(tmp_path_factory.mktemp("fixture") / "data")


@pytest.fixture(scope="session")
def three_contexts(tmp_path_factory) -> Path:
    """A data folder with the reference tables, the catalog and the real cpu_long_context runs at three contexts of
    tests/fixtures/long_context (measured by the current kvlab, KV pools recorded: at 3,200 tokens and 0.92 each
    engine's batch of 4 exceeds its pool)."""
    from notebook_data import write_long_context_data

    return write_long_context_data(tmp_path_factory.mktemp("three-contexts") / "data")


@pytest.fixture(scope="session")
def crossing_contexts(tmp_path_factory) -> Path:
    """As :func:`three_contexts`, with another fresh clone's runs (tests/fixtures/crossing_context), where the
    engines' measured batch times cross: report 01 has a measured crossover beside the published one."""
    from notebook_data import CROSSING_CONTEXT_RUNS, write_long_context_data

    return write_long_context_data(tmp_path_factory.mktemp("crossing-contexts") / "data", CROSSING_CONTEXT_RUNS)


@pytest.fixture(scope="session")
def built_reports(tmp_path_factory, fixture_data):
    """Every report built once, with its default parameters, from the fixture data folder (the real measured runs
    of every CPU study: what `kvlab report --data-dir` builds from them, the same on every machine, where a fresh
    clone's data/runs is empty): the folder and the reports. Shared by the notebook tests, the browser tests and
    the index tests, so each notebook is executed once for all three; a test that changes the folder works on a
    copy."""
    from kvlab import reports

    out = tmp_path_factory.mktemp("reports")
    return out, reports.build(out, parameters={"data_dir": str(fixture_data)})


@pytest.fixture(scope="session")
def fit():
    """kvlab's physical model fitted to the B300 article's published points."""
    from kvlab.perfmodel import published_fit

    return published_fit()


@pytest.fixture(scope="session")
def sharing():
    """sharing_frames.prefix_sharing of prefix_frames.sharing_runs: vLLM and sglang-jax, cache on and off."""
    from prefix_frames import sharing_runs

    return sharing_frames.prefix_sharing(sharing_runs())


@pytest.fixture(scope="session")
def study():
    """Everything report 05 computes, from prefix_frames: claims, sharing, per-request reuse, gain, turns."""
    import polars as pl
    from prefix_frames import multi_turn_frames, sharing_requests, sharing_runs

    from kvlab import store
    from kvlab.studies.prefix_sharing.frames import with_turn_runs

    runs = sharing_runs().with_columns(batch_size=pl.lit(4))
    sharing = sharing_frames.prefix_sharing(runs)
    gain = prefix_sharing_frames.caching_gain(sharing)
    mt_runs, mt_reqs = multi_turn_frames()
    return dict(
        claims=store.load_claims().filter(pl.col("experiment") == "article_kv_design"),
        sharing=sharing,
        reuse=prefix_sharing_frames.prefix_reuse_by_request(runs, sharing_requests(runs)),
        gain=gain,
        thresholds=prefix_sharing_frames.sharing_thresholds(gain),
        by_turn=with_turn_runs(
            prefix_sharing_frames.multi_turn_by_turn(mt_runs, mt_reqs), mt_runs
        ),  # as report 05 does
        turn_requests=prefix_sharing_frames.multi_turn_requests(mt_runs, mt_reqs),
    )
