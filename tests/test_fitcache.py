"""The fit cache (kvlab.perfmodel.fitcache): a hit is bit for bit the fit a recomputation gives, it persists between
processes, another code version misses, and a broken store is ignored."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from kvlab.paths import DATA_DIR, ROOT
from kvlab.perfmodel import Assumptions, Params, Workload
from kvlab.perfmodel.frames import usable_rows

calibrate = importlib.import_module("kvlab.perfmodel.calibrate")  # the package's name `calibrate` is the function
fitcache = importlib.import_module("kvlab.perfmodel.fitcache")

#: In a fresh process: the published points' free and physics-only fits, each float as float.hex, and the hits and
#: misses of that process.
_FITS = """
import importlib, json
from tests.test_fitcache import fits
fitcache = importlib.import_module("kvlab.perfmodel.fitcache")
print(json.dumps({"fits": fits(), "counts": fitcache.counts}))
"""


def _points():
    runs = calibrate._published_runs(str(DATA_DIR.resolve()), "article_b300")
    return calibrate._setup(usable_rows(runs, ("published",)).to_dicts(), Workload(), Assumptions())


def fits() -> list[dict[str, str]]:
    """The free fit and the physics-only fit of the four published points, every float written exactly."""
    pts = _points()
    out = [calibrate._fit(pts, Assumptions()), calibrate._fit(pts, Assumptions(), physics=True)]
    return [{k: float.hex(v) for k, v in p.as_dict().items()} for p in out]


def _in_subprocess(cache: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _FITS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, fitcache.ENV: cache},
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache_at(tmp_path, monkeypatch):
    """Point the cache at a fresh file in ``tmp_path`` for this test (and count from zero)."""
    path = tmp_path / "cache" / "fits.sqlite"
    monkeypatch.setenv(fitcache.ENV, str(path))
    monkeypatch.setattr(fitcache, "counts", {"hit": 0, "miss": 0})
    return path


def test_a_cached_fit_is_the_recomputed_fit_bit_for_bit_in_another_process(cache_at, monkeypatch):
    monkeypatch.setenv(fitcache.ENV, "off")
    recomputed = fits()
    assert fitcache.counts == {"hit": 0, "miss": 0}
    first = _in_subprocess(str(cache_at))  # a fresh file: every fit computed and stored
    assert first["counts"] == {"hit": 0, "miss": 2}
    second = _in_subprocess(str(cache_at))  # another process: every fit read from the file
    assert second["counts"] == {"hit": 2, "miss": 0}
    assert first["fits"] == second["fits"] == recomputed
    assert {n for f in recomputed for n in f} == {f.name for f in dataclasses.fields(Params)}
    assert stat.S_IMODE(os.stat(cache_at.parent).st_mode) == 0o700


def test_another_code_version_misses(cache_at, monkeypatch):
    pts = _points()
    p = calibrate._fit(pts, Assumptions())
    assert calibrate._fit(pts, Assumptions()) == p and fitcache.counts == {"hit": 1, "miss": 1}
    monkeypatch.setattr(fitcache, "code_version", lambda: "another version of kvlab/perfmodel")
    assert calibrate._fit(pts, Assumptions()) == p and fitcache.counts == {"hit": 1, "miss": 2}


def test_the_key_sees_every_input_exactly():
    pts = _points()
    cfg, ctx, w, obs = pts[0]
    k = fitcache.key(pts, Assumptions(), Params(), ("prefill_efficiency",), False)
    assert k == fitcache.key(_points(), Assumptions(), Params(), ("prefill_efficiency",), False)
    others = [
        [(cfg, ctx, w, math.nextafter(obs, math.inf))] + pts[1:],  # one observation one ulp away
        [(dataclasses.replace(cfg, gpu=cfg.gpu.model_copy(update={"notes": "x"})), ctx, w, obs)] + pts[1:],
        [(cfg, ctx, Workload(w.batch_size, w.output_tokens + 1), obs)] + pts[1:],
    ]
    for other in others:
        assert fitcache.key(other, Assumptions(), Params(), ("prefill_efficiency",), False) != k
    assert fitcache.key(pts, Assumptions(kv_format="fp8"), Params(), ("prefill_efficiency",), False) != k
    assert fitcache.key(pts, Assumptions(), Params(dcp_layer_latency_s=31e-6), ("prefill_efficiency",), False) != k
    assert fitcache.key(pts, Assumptions(), Params(), ("prefill_efficiency",), True) != k
    with pytest.raises(TypeError):
        fitcache.canonical(object())


def test_a_corrupt_store_is_ignored(cache_at, monkeypatch):
    pts = _points()
    cache_at.parent.mkdir(mode=0o700)
    cache_at.write_bytes(b"not a database" * 100)
    with pytest.warns(RuntimeWarning, match="fit cache"):
        p = calibrate._fit(pts, Assumptions())
    assert calibrate._fit(pts, Assumptions()) == p  # no second warning: the process goes on without it
    assert cache_at.read_bytes() == b"not a database" * 100 and fitcache.counts == {"hit": 0, "miss": 0}
    monkeypatch.setenv(fitcache.ENV, "off")
    assert calibrate._fit(pts, Assumptions()) == p


def test_a_row_that_does_not_parse_is_a_miss_and_is_replaced(cache_at):
    pts = _points()
    p = calibrate._fit(pts, Assumptions())
    con = sqlite3.connect(cache_at)
    for bad in ("{not json", json.dumps({"prefill_efficiency": 1}), json.dumps([1.0])):
        with con:
            con.execute("UPDATE fits SET params = ?", (bad,))
        assert calibrate._fit(pts, Assumptions()) == p
    assert fitcache.counts == {"hit": 0, "miss": 4}
    assert calibrate._fit(pts, Assumptions()) == p and fitcache.counts["hit"] == 1
    con.close()


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.setenv(fitcache.ENV, "OFF")
    assert fitcache.location() is None
    monkeypatch.delenv(fitcache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fitcache.location() == tmp_path / "kvlab" / "fits.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fitcache.location() == tmp_path / "home" / ".cache" / "kvlab" / "fits.sqlite"


def test_a_folder_others_can_write_to_is_not_used(cache_at, monkeypatch):
    cache_at.parent.mkdir(mode=0o700)
    os.chmod(cache_at.parent, 0o777)
    with pytest.warns(RuntimeWarning, match="has mode 0777: other users can write to it"):
        calibrate._fit(_points(), Assumptions())
    assert not cache_at.exists() and fitcache.counts == {"hit": 0, "miss": 0}


def test_a_default_folder_that_cannot_be_made_is_no_cache_and_no_warning(monkeypatch, tmp_path, recwarn):
    (tmp_path / "a file").write_text("")
    monkeypatch.delenv(fitcache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a file"))  # its kvlab folder cannot be made
    monkeypatch.setattr(fitcache, "counts", {"hit": 0, "miss": 0})
    pts = _points()
    assert calibrate._fit(pts, Assumptions()) == calibrate._fit(pts, Assumptions())
    assert fitcache.counts == {"hit": 0, "miss": 0} and not [w for w in recwarn if "fit cache" in str(w.message)]


def test_the_tests_never_read_a_developer_s_cache():
    """conftest points every test, notebook kernel and subprocess at a file of the session's own."""
    assert os.environ.get(fitcache.ENV) and fitcache.location() != fitcache.default_location()
