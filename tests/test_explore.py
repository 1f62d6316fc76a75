"""Interactive controls of reports 04 and 06: a widget in a live notebook, none in a report build."""

from __future__ import annotations

import importlib

import polars as pl
import pytest

from kvlab import explore, guide
from kvlab.studies.engine_choice import explore as choice_explore
from kvlab.studies.whatif_model import explore as whatif_explore
from kvlab.perfmodel import Assumptions, Workload
from kvlab.explore import STATIC_ENV
from kvlab.studies.engine_choice import frames as engine_choice_frames
from kvlab.studies import sharing_frames

pytest.importorskip("ipywidgets")


@pytest.fixture
def live(monkeypatch):
    """A kernel JupyterLab started for an open notebook."""
    monkeypatch.delenv(STATIC_ENV, raising=False)
    monkeypatch.setenv(explore.SESSION_ENV, "notebooks/04_whatif_model.ipynb")


def _caption(result) -> str:
    return result[0].caption


def test_whatif_controls_redraw_with_the_new_value(live, fit):
    w = whatif_explore.whatif(
        fit,
        None,
        Workload(),
        Assumptions(),
        gpu="B300",
        model="Kimi-K3",
        tp=8,
        dcp=8,
        context=204800,
        max_context=262144,
        points=6,
    )
    controls = {c.description: c for c in w.children[:-1]}
    assert list(controls) == ["GPU", "model", "TP", "DCP (SGLang)", "context"]
    assert _caption(w.result).startswith("Modelled for Kimi-K3 on 8× B300:")  # drawn once with the defaults
    assert w.result[1].data.startswith("At 200K (204,800 tokens), SGLang TP8+DCP8 takes 251 s per batch")
    controls["GPU"].value = "H200"
    assert w.kwargs["gpu"] == "H200" and _caption(w.result).startswith("Modelled for Kimi-K3 on 8× H200:")
    controls["DCP (SGLang)"].value = 4
    assert "SGLang TP8+DCP4" in w.result[1].data
    controls["TP"].value = 2
    controls["DCP (SGLang)"].value = 8  # DCP 8 does not divide TP 2: said, nothing drawn
    assert w.result[0].data == "*DCP 8 must divide TP 2: choose another DCP size.*"


def test_whatif_controls_draw_bands_from_the_sensitivity_computed_once(live, fit, monkeypatch):
    """With the report's sensitivity table every redraw has each curve's band over its assumption sets, and no
    control change refits: the sets' parameters are re-evaluated for the new configuration only."""
    calibrate = importlib.import_module("kvlab.perfmodel.calibrate")  # the package exports a function of that name

    sens = calibrate.sensitivity([Workload(8, 1024), Workload(1, 4096)])  # two sets, refitted here once
    assert sens.height == 2

    def no_refit(*args, **kwargs):
        raise AssertionError("a control change refitted the model")

    monkeypatch.setattr(calibrate, "_fit", no_refit)
    w = whatif_explore.whatif(
        fit,
        None,
        Workload(),
        Assumptions(),
        gpu="B300",
        model="Kimi-K3",
        tp=8,
        dcp=8,
        context=204800,
        max_context=262144,
        points=6,
        sens=sens,
    )
    for gpu in ("B300", "H200"):
        {c.description: c for c in w.children[:-1]}["GPU"].value = gpu
        df = w.result[0].data
        assert set(df["gpu"]) == {gpu}
        assert {"batch_time_s_lo", "batch_time_s_hi", "output_tokens_per_s_lo", "output_tokens_per_s_hi"} <= set(
            df.columns
        )
        assert df["assumption_sets"].max() == 2
        assert (df["batch_time_s_lo"] <= df["batch_time_s"]).all() and (
            df["batch_time_s"] <= df["batch_time_s_hi"]
        ).all()
        assert (df["batch_time_s_hi"] > df["batch_time_s_lo"]).any()  # the sets disagree: a band, not a line
        assert "Bands: the lowest to highest over the 2 assumption sets" in _caption(w.result)
        if gpu == "B300":  # the two sets' times at 200K, read at the context the controls chose
            assert "at 200K vLLM TP8 259 s (250–259 s), SGLang TP8+DCP8 251 s (251–267 s)." in _caption(w.result)


def test_engine_choice_controls_redraw_with_the_new_value(live, fit):
    from kvlab.schema import RUNS

    sharing, conc = (
        sharing_frames.prefix_sharing(RUNS.empty()),
        engine_choice_frames.concurrency_study(RUNS.empty()),
    )  # nothing measured
    w = choice_explore.engine_choice(guide.UserWorkload(8192, 0.4, 128, "Llama-3.1-8B"), fit, sharing, conc)
    controls = {c.description: c for c in w.children[:-1]}
    assert list(controls) == [
        "context",
        "shared",
        "in flight",
        "model",
        "GPU",
        "mixed hardware / model churn",
        "priority",
    ]
    assert "⇒ SGLang" in _caption(w.result)
    controls["shared"].value = 0.0  # no shared prefix, 128 in flight: the tree's concurrency branch
    assert w.kwargs["shared_fraction"] == 0.0 and "≥ 100 concurrent requests? yes (128) ⇒ vLLM" in _caption(w.result)
    assert w.result[2].data.startswith("**The tree says vLLM; the data here can neither confirm nor contradict it.**")


def test_no_widget_in_a_report_build(monkeypatch, fit):
    monkeypatch.setenv(explore.SESSION_ENV, "notebooks/04_whatif_model.ipynb")  # even opened in a session
    monkeypatch.setenv(STATIC_ENV, "1")
    assert not explore.interactive_enabled()
    assert whatif_explore.whatif(fit, None, Workload(), Assumptions(), gpu="B300", model="Kimi-K3", tp=8, dcp=8) is None
    assert choice_explore.engine_choice(guide.UserWorkload(), fit, pl.DataFrame(), pl.DataFrame()) is None


def test_no_widget_in_a_batch_execution(monkeypatch, fit):
    """papermill or nbconvert outside a report build: no Jupyter Server session, so no widget (a headless interact
    can hang the kernel client)."""
    monkeypatch.delenv(STATIC_ENV, raising=False)
    monkeypatch.delenv(explore.SESSION_ENV, raising=False)
    assert not explore.interactive_enabled()
    assert whatif_explore.whatif(fit, None, Workload(), Assumptions(), gpu="B300", model="Kimi-K3", tp=8, dcp=8) is None
    monkeypatch.setenv(explore.SESSION_ENV, "notebooks/04_whatif_model.ipynb")
    assert explore.interactive_enabled()
