"""Markdown sentences for the reports, written from the data so no conclusion is typed by hand.

One module per report (``context_scaling`` for 01 … ``engine_choice`` for 06, ``capacity`` for 07) and ``common`` for what several
reports say alike; every public name is re-exported here, so notebooks call ``narrative.<function>``.
"""

from __future__ import annotations

from kvlab.narrative.common import (
    answer_markdown, citation_note, config_name, curves_caption, measured_engines_note, model_title,
    no_runs_note, setup_phrase, stand_in_note,
)
from kvlab.narrative.context_scaling import (
    context_answer, crossover_sentence, crossover_verdicts, growth_caption, growth_comparison, growth_sentences,
    model_crossover_sentence, relative_speed_sentences, speed_caption, speed_claim_verdicts,
)
from kvlab.narrative.throughput_decay import (
    DEFINITION_NAMES, claim_labels, claims_caption, consistency_sentences, consistency_table, decay_caption,
    decay_answer, decay_claim_verdicts, decay_comparison, decay_sentences, decay_table, measured_table_caption,
)
from kvlab.narrative.memory_utilisation import (
    COUNTER_NAMES, claims_list, counters_note, fits_sentence, headroom_caption, headroom_intro, headroom_sentences,
    kv_budget_simulated, memory_answer, memory_caption, memory_claim_verdicts, memory_conclusion, memory_scope, memory_setting,
    memory_study_summary, memory_table,
)
from kvlab.narrative.whatif_model import (
    at_max_sentence, band_sentence, bound_sentence, confidence, crossover_caption, fit_sentence,
    loo_sentence, model_answer, model_conclusions, model_verdicts, not_catalogued_note, oom_flag_note,
    sensitivity_sentence,
    step_cost_bullet, throughput_caption,
    whatif_headroom_caption, whatif_setup, winners_held_out,
)
from kvlab.narrative.prefix_sharing import (
    PREFIX_CLAIMS, caching_gain_caption, gain_table, hit_rate_sentence, ideal_reuse_caption, multi_turn_caption,
    multi_turn_sentence, prefix_answer, prefix_citation_note, prefix_claim_verdict, prefix_claims_table, prefix_conclusions,
    prefix_sharing_caption, prefix_verdicts, radix_vs_paged_sentence, reuse_sentences, sharing_table,
    threshold_sentence, turns_table,
)
from kvlab.narrative.engine_choice import (
    choice_answer, concurrency_caption, concurrency_sentence, disagreement, engine_choice_verdicts, evidence_basis,
    evidence_gap_sentence, evidence_rule, evidence_sentences, examples_frame, factor_evidence, factor_finding,
    factor_line, factor_metric, prefix_caption, recommendation_sentence, recommendation_verdict, tree_caption,
    tree_sentence,
)
from kvlab.narrative.capacity import (
    CAPACITY_COMMANDS, capacity_answer, capacity_sentences, capacity_table, capacity_verdicts, ceiling_caption, map_caption, map_table,
    modelled_caption, modelled_table, no_capacity_runs_note, onset_table, pareto_caption, probe_intro, probe_sentence,
    probe_table, slo_note, telemetry_caption, telemetry_note,
)
