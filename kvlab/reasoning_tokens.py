"""Reasoning runs: each answer's output tokens split into reasoning and answer (the questions are the
reasoning workload kind's, kvlab.workloads.reasoning).

A server with a reasoning parser (``--reasoning-parser``) streams the reasoning as
``reasoning_content`` apart from the answer; without one the model's ``<think>…</think>`` is
part of the text and :func:`split_think` separates it. Token counts come, in
order of preference, from the server's ``usage.completion_tokens_details.reasoning_tokens``,
from the model's own tokenizer applied to each part, or — when neither is at hand — from the
share of streamed chunks (parser) or characters (tags), and each record says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tokenizers import Tokenizer


#: How a split was counted, most exact first.
SPLIT_METHODS = ("usage", "tokenizer", "chunks", "chars", "none")


def local_token_counter(model_dir: str | Path) -> Callable[[str], int] | None:
    """A text → token count function from a local model's ``tokenizer.json``; None when there is none."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None

    tok = Tokenizer.from_file(str(path))
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids) if text else 0


def split_think(text: str, open_tag: str = "<think>", close_tag: str = "</think>") -> tuple[str, str]:
    """Split model output into (reasoning, answer) when no reasoning parser ran on the server.

    Text up to ``close_tag`` (after an optional leading ``open_tag``) is reasoning; an
    ``open_tag`` never closed makes all of it reasoning (output cut off while thinking);
    text without tags is all answer.
    """
    stripped = text.lstrip()
    end = text.find(close_tag)
    if end >= 0:
        reasoning = text[:end]
        start = reasoning.find(open_tag)
        if start >= 0:
            reasoning = reasoning[start + len(open_tag) :]
        return reasoning, text[end + len(close_tag) :]
    if stripped.startswith(open_tag):
        return stripped[len(open_tag) :], ""
    return "", text


@dataclass(frozen=True)
class Split:
    """One response's output tokens, split into reasoning and answer, and how they were counted."""

    reasoning_tokens: int | None
    answer_tokens: int | None
    method: str  # one of SPLIT_METHODS


def split_record(record, count_tokens: Callable[[str], int] | None = None) -> Split:
    """Reasoning and answer tokens of one :class:`kvlab.client.RequestRecord`.

    The two parts always add up to the server's ``output_tokens`` (when it reported one), so a
    run's totals stay exact even where the split itself is an estimate.
    """
    n = record.output_tokens
    if record.status != "ok" or n is None:
        return Split(None, None, "none")
    if record.reasoning_tokens is not None:  # the server counted it
        return Split(record.reasoning_tokens, n - record.reasoning_tokens, "usage")
    if record.reasoning_chunks or record.reasoning_text:  # the server's parser split the stream
        reasoning, answer = record.reasoning_text or "", record.text or ""
        if count_tokens is None:
            share = record.reasoning_chunks / record.chunks if record.chunks else 0.0
            r = round(n * share)
            return Split(r, n - r, "chunks")
    elif record.text is not None:  # no parser: the tags are in the text
        reasoning, answer = split_think(record.text)
        if count_tokens is None:
            total = len(reasoning) + len(answer)
            r = round(n * len(reasoning) / total) if total else 0
            return Split(r, n - r, "chars")
    else:
        return Split(None, None, "none")
    r_tok, a_tok = count_tokens(reasoning), count_tokens(answer)
    # Tokenising the parts apart can differ from the model's own stream by a token at the seam
    # (and the tags themselves): scale to the server's total so the parts add up.
    total = r_tok + a_tok
    r = round(n * r_tok / total) if total else 0
    return Split(r, n - r, "tokenizer")


def account(records: list, count_tokens: Callable[[str], int] | None = None) -> tuple[list, str]:
    """Records with ``reasoning_tokens`` filled from :func:`split_record`, and the method(s) used."""
    out, methods = [], []
    for r in records:
        s = split_record(r, count_tokens)
        if s.method != "none":
            methods.append(s.method)
        out.append(replace(r, reasoning_tokens=s.reasoning_tokens))
    used = sorted(set(methods), key=SPLIT_METHODS.index)
    return out, "+".join(used) if used else "none"


def describe(method: str) -> str:
    """A run note saying how reasoning tokens were counted."""
    text = {
        "usage": "server usage.completion_tokens_details.reasoning_tokens",
        "tokenizer": "the model's tokenizer on each part, scaled to usage.completion_tokens",
        "chunks": "share of streamed reasoning chunks x usage.completion_tokens (estimate)",
        "chars": "share of characters before </think> x usage.completion_tokens (estimate)",
        "none": "no reasoning split available",
    }
    return "reasoning tokens counted by " + "; ".join(text[m] for m in method.split("+"))


__all__ = ["SPLIT_METHODS", "Split", "account", "describe", "local_token_counter", "split_record", "split_think"]
