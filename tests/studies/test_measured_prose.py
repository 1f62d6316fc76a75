"""Reports 01 and 02's pages within the prose limits (issue 53 item 5: at most 3,000 words, no sentence over 45
words, none said twice), on the older quick runs of tests/fixtures/runs and on the real three-context CPU runs of
tests/fixtures/long_context, where a batch exceeded the KV pool at 3,200 tokens (their sentences ran to 49-64 words
before they were split). The verdict box's headline is kvlab.verdicts', outside these studies: left out of the
sentence check."""

from __future__ import annotations

import pytest

from kvlab import prose
from support import pages


@pytest.mark.parametrize("data", ["fixture_data", "three_contexts"])
@pytest.mark.parametrize("report", ["01", "02"])
def test_the_page_keeps_the_prose_limits(report, data, request):
    whole, text = pages.page_texts(report, {"data_dir": str(request.getfixturevalue(data))})
    assert prose.problems(whole).words <= prose.MAX_WORDS
    got = prose.problems(text)
    assert got.long_sentences == [] and got.repeated == [], got


def test_a_measured_crossover_states_no_assumption_the_published_one_stated(crossing_contexts):
    """On a fresh clone's runs whose engines crossed (2026-12-07), report 01 said each interpolation's assumption
    twice, under the published and under the measured crossover: said once now, and the page keeps its limits."""
    whole, text = pages.page_texts("01", {"data_dir": str(crossing_contexts)})
    assert "measured (linear): the engines' batch times meet at" in text  # the runs still cross
    assert text.count("Assumption: batch time grows linearly with context") == 1
    got = prose.problems(text)
    assert got.long_sentences == [] and got.repeated == [], got
    assert prose.problems(whole).words <= prose.MAX_WORDS
