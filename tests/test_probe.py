"""The accuracy probe (kvlab.probe): greedy outputs of a fixed probe set compared across server configurations over
their first k tokens, on the SSE fixture (whose ``diverge_at`` knob is a configuration that computes something else
from one token on) and on fixed outputs with log-probability margins."""

from __future__ import annotations

import asyncio

from kvlab import probe
from tests.support.sse_fixture import FixtureConfig, SSEServer


def test_probe_outputs_compared_across_configurations_on_the_fixture():
    prompts = probe.PROBE_PROMPTS[:3]
    with SSEServer(FixtureConfig()) as srv:
        outputs = {
            "reference": asyncio.run(probe.probe(srv.url, "fixture", prompts)),
            "same": asyncio.run(probe.probe(srv.url, "fixture", prompts)),
            # a configuration whose output differs from token 5 on (the fixture writes " u5" for " t5")
            "wrong": asyncio.run(probe.probe(srv.url, "fixture", prompts, extra_body={"fixture": {"diverge_at": 5}})),
            # differs only past the window: the first 16 tokens agree
            "late": asyncio.run(
                probe.probe(srv.url, "fixture", prompts, max_tokens=20, extra_body={"fixture": {"diverge_at": 16}})
            ),
        }
    ref = outputs["reference"][0]
    assert ref.tokens == tuple(f" t{i}" for i in range(16)) and ref.margins == (None,) * 16 and ref.error is None
    rows = probe.compare_configs(outputs, "reference")
    got = {(r["config"], r["prompt"]): (r["outcome"], r["first_diff"], r["compared"]) for r in rows}
    assert got[("same", 0)] == ("identical", None, 16)
    assert got[("wrong", 1)] == ("differs", 5, 16)  # no log-probabilities from the fixture: nothing excused
    assert got[("late", 2)] == ("identical", None, 16)  # k = 16: token 16 onwards is not compared
    assert probe.summary(rows) == {"same": {"identical": 3}, "wrong": {"differs": 3}, "late": {"identical": 3}}


def test_a_difference_at_a_near_tie_is_labelled_and_a_short_output_differs_where_it_ended():
    ref = probe.ProbeOutput(0, ("a", "b", "c", "d"), (2.0, 0.05, 1.5, None))
    assert probe.compare(ref, probe.ProbeOutput(0, ("a", "x", "y", "z"), ())).outcome == "differs at a near-tie"
    c = probe.compare(ref, probe.ProbeOutput(0, ("a", "b", "x", "d"), ()))
    assert (c.outcome, c.first_diff, c.margin_at_diff) == ("differs", 2, 1.5)  # a clear margin: not excused
    c = probe.compare(ref, probe.ProbeOutput(0, ("a", "b"), ()))
    assert (c.outcome, c.first_diff, c.compared) == ("differs", 2, 2)
    assert probe.compare(ref, probe.ProbeOutput(0, ("a", "b", "x"), ()), k=2).outcome == "identical"
    assert probe._margin({"a": -0.1, "b": -1.35}) == 1.25 and probe._margin({"a": -0.1}) is None


def test_a_failed_request_is_not_compared():
    ok = [probe.ProbeOutput(0, ("a",), (None,))]
    failed = [probe.ProbeOutput(0, (), (), "HTTP 500")]
    assert probe.compare_configs({"ref": ok, "b": failed}, "ref")[0]["outcome"] == "not compared: a request failed"
