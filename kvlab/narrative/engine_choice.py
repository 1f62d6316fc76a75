"""Report 06's sentences now live in :mod:`kvlab.studies.engine_choice.words`; what :mod:`kvlab.explore` still reads
by name (``narrative.tree_caption`` …) is re-exported here until explore reads the study folder itself."""

from __future__ import annotations

from kvlab.studies.engine_choice.words import evidence_sentences, recommendation_sentence, tree_caption, tree_sentence

__all__ = ["evidence_sentences", "recommendation_sentence", "tree_caption", "tree_sentence"]
