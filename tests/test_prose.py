"""kvlab.prose, the limits every page keeps: its sentence split, its word count and what it names as a problem, on
fixed HTML (the study tests run it on every report's page)."""

from __future__ import annotations

from kvlab import prose


def test_sentences_split_where_a_reader_stops_and_a_lower_camel_name_starts_one():
    page = (
        "<p>Measured: vLLM 0.82 s. vLLM's batch exceeded its pool. At 3,200 tokens (stands in for 200K), it "
        "waits. e.g. this stays one sentence.</p><table><tr><td>not prose. At all.</td></tr></table>"
        "<li>One item. 2 sentences here?</li><pre>code. Code.</pre>"
    )
    assert prose.sentences(page) == [
        "Measured: vLLM 0.82 s.",
        "vLLM's batch exceeded its pool.",
        "At 3,200 tokens (stands in for 200K), it waits. e.g. this stays one sentence.",
        "One item.",
        "2 sentences here?",
    ]


def test_words_are_counted_as_a_reader_counts_them():
    assert prose.words("TP8+DCP8 serves 1,024 tokens at 0.92 (vLLM's pool): 12.5% more.") == 10


def test_problems_names_a_long_sentence_and_one_said_twice():
    long = " ".join(["word"] * (prose.MAX_SENTENCE_WORDS + 1)) + "."
    twice = "This sentence of eight words is said twice."
    got = prose.problems(f"<p>{long}</p><p>{twice}</p><li>{twice}</li><p>Short. Short.</p>")
    assert got.long_sentences == [(prose.MAX_SENTENCE_WORDS + 1, long)]
    assert got.repeated == [twice]  # 'Short.' twice is a label, under MIN_REPEAT_WORDS
    assert got.words == prose.MAX_SENTENCE_WORDS + 1 + 16 + 2 and not got.ok
    assert prose.problems("<p>Fine. Also fine.</p>").ok
