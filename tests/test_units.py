"""Token counts and context labels (kvlab.units): every format a report or figure uses."""

from kvlab import units


def test_stored_labels_are_whole_k_or_the_plain_count():
    assert [units.context_label(t) for t in (74, 1024, 65536, 204800, 1 << 20, 3000, 65536.0)] == [
        "74",
        "1K",
        "64K",
        "200K",
        "1024K",
        "3000",
        "64K",
    ]


def test_contexts_are_named_in_k_never_in_powers_of_two():
    assert [units.tokens_label(t) for t in (4096, 65536, 131072, 204800, 1 << 20, 3000)] == [
        "4K",
        "64K",
        "128K",
        "200K",
        "1M",
        "3,000",
    ]


def test_estimates_are_rounded_to_whole_k():
    assert units.k_label(127963) == "125K" and units.k_label(1 << 20) == "1,024K"
    assert units.approx_label(127963) == "125K" and units.approx_label(1027165) == "0.98M"
    assert units.approx_tokens(127963) == "≈125K tokens"  # an estimate, not a count to the token


def test_a_scaled_context_says_its_real_tokens():
    assert units.nominal_tokens("64K") == {65536, 64000} and units.nominal_tokens("3,200") == {3200}
    assert units.nominal_tokens("n/a") == set()
    assert units.scaled_context("64K", 1024) == "64K (1,024 tok)"
    assert units.scaled_context("64K", 1024, "\n") == "64K\n(1,024 tok)"
    assert units.scaled_context("64K", 65536) == "64K" == units.scaled_context("64K", None)
    assert units.scaled_context("74", 74) == "74" and units.scaled_context("n/a", 5) == "n/a"


def test_a_range_is_given_in_whole_k_and_says_what_k_is():
    assert units.token_range(110_628.8, 754_398.7) == "108K–737K tokens (K = 1,024)"
    assert units.token_range(72_125, 1_037_389) == "70K–0.99M tokens (K = 1,024)"


def test_measured_numbers_have_two_significant_figures_at_n1_and_never_e_notation():
    from kvlab.units import measured

    assert [measured(x, 1) for x in (1290.4, 464.2, 11.3, 5.74, 1.97, 0.4, 0.0523)] == [
        "1,300",
        "460",
        "11",
        "5.7",
        "2.0",
        "0.40",
        "0.052",
    ]
    assert [measured(x, 3) for x in (1290.4, 464.2, 20.2, 5.74, 0.0523)] == ["1,290", "464", "20.2", "5.74", "0.0523"]
    assert measured(0.0, 1) == measured(0.0, 3) == "0"


def test_a_time_twice_as_long_or_more_is_a_factor_not_hundreds_of_percent():
    # 1 - on/off: the cache on saved 32%, cost 21% more, or took 5.74× as long (not "474% more")
    assert [units.time_against(s) for s in (0.32, -0.21, -4.74)] == [
        "32% less batch time than",
        "21% more batch time than",
        "5.7× as much batch time as",
    ]
    assert units.time_against(-1.0, "TTFT") == "2.0× as much TTFT as"
    assert [units.apart(s) for s in (0.2, -0.31, -0.99, -4.74)] == ["20%", "31%", "99%", "5.7×"]


def test_a_count_gives_its_noun_in_the_right_number():
    assert [units.count(n, "figure") for n in (0, 1, 3, 1200)] == [
        "0 figures",
        "1 figure",
        "3 figures",
        "1,200 figures",
    ]
    assert units.count(2, "folder or manifest", "folders or manifests") == "2 folders or manifests"


def test_a_modelled_count_has_three_significant_figures():
    assert [units.modelled_count(x) for x in (2_370_790, 10_636_356, 5_334_277, 999, 0, None)] == [
        2_370_000,
        10_600_000,
        5_330_000,
        999,
        0,
        None,
    ]


def test_a_sentence_starting_with_vllm_keeps_its_name():
    """Report 01's growth caption once began a sentence 'VLLM's batch time grows 2.5×' (seen on a fresh clone)."""
    from kvlab.units import sentence_start

    assert sentence_start("vLLM's batch time grows 2.5×") == "vLLM's batch time grows 2.5×"
    assert sentence_start("the crossover is at 173K") == "The crossover is at 173K"
    assert sentence_start("") == ""


def test_the_growth_caption_never_capitalises_vllm():
    from kvlab.studies.context_scaling.words import growth_caption

    rows = [
        {
            "engine": e,
            "growth": g,
            "source": "measured",
            "n_runs": 1,
            "context_from": "64K",
            "c_from": 1024,
            "context_to": "200K",
            "c_to": 3200,
        }  # fmt: skip
        for e, g in (("sglang", 2.9), ("vllm", 2.5))
    ]
    text = growth_caption(rows, "measured", ())
    assert "VLLM" not in text and " vLLM's batch time grows 2.5× from 1,024 tokens" in text
