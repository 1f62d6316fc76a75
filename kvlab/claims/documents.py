"""The documents' claims that no measured study here checks on its own (the seed documents' mechanisms, operations
and set-up; issue 38): each graded with the outcome its evidence allows, naming the experiment file whose runs on a
GPU host would decide it (CLAIMS ``decided_by``).

- A claim about a GPU host's mechanism or service (decode against prefill, communication against KV reads, timeouts,
  routing stability, ease of operation) is *cannot be tested here*: no run of this host exercises it, and the claim
  table's ``decided_by`` names the experiment file that would (family *document*).
- A claim a document's own figures can check is a *consistency* verdict: "the only variable changed was the engine"
  against the document's own table, whose rows record DCP 1 for vLLM and DCP 8 for SGLang: *consistent* /
  *inconsistent*, never reproduced / contradicted.
- A setting one document recommends against another document that says the same setting caused OOM retries is
  family *document* (one document set against another, not against its own figures): *cannot be tested here*, since
  the two describe different models and GPUs without figures (:func:`setting_against_documents`).
"""

from __future__ import annotations

import polars as pl

from kvlab.claims.grading import NO_GPU_MEMORY
from kvlab.engines import engine_label, registry
from kvlab.verdicts import Verdict

#: The claim kinds this module grades (the other kinds have their own checkers).
KINDS = ("mechanism", "operations", "setup")
#: Claim ids of kind engine_choice that no measured study tests (the tree's branches the CPU studies cannot reach).
UNTESTED_CHOICES = ("deepseek_sglang", "mixed_hardware_vllm", "throughput_sglang_stability_vllm")
#: The cause of every *cannot be tested here* verdict of this module (the headline groups by it).
NEEDS_GPU_HOST = "a GPU host's mechanism or service that no run here exercises"
#: The seed documents as a sentence names them (their ids stay in the provenance panel and index.json).
DOCUMENT_NAMES = {"article_b300": "the 8×B300 article", "article_kv_design": "the KV-cache design article"}


def document_name(experiment: str) -> str:
    """A document's id in words ('article_b300' → 'the 8×B300 article'); another document as 'the other document'."""
    return DOCUMENT_NAMES.get(experiment, "the other document")


def _where(c: dict) -> str:
    name = c.get("decided_by") or ""
    return (
        f"data/experiments/{name}.yaml, run on the host the claim is about, would decide it"
        if name
        else "no experiment file decides it yet"
    )


def graded(
    claims: pl.DataFrame, all_claims: pl.DataFrame | None = None, published: pl.DataFrame | None = None
) -> list[Verdict]:
    """The verdicts of ``claims``' rows of kind mechanism, operations or setup and of the engine-choice branches no
    study measures (:data:`UNTESTED_CHOICES`), in the table's order.

    ``all_claims``: every document's claims (:func:`kvlab.store.load_claims`), for a recommended setting checked
    against another document; ``published``: the document's own table (RUNS rows, ``source`` published), for a
    set-up claim checked against it. Without them those rows are *cannot be tested here* too."""
    out = []
    rows = claims.filter(pl.col("kind").is_in(list(KINDS)) | pl.col("claim_id").is_in(list(UNTESTED_CHOICES)))
    for c in rows.iter_rows(named=True):
        v = None
        if c["kind"] == "setup" and c.get("metric") == "dcp" and published is not None:
            v = _setup_against_table(c, published)
        elif (
            c.get("metric") == "oom_retries"
            and c.get("direction") == "none"
            and c.get("setting") is not None
            and all_claims is not None
        ):
            v = setting_against_documents(c, all_claims)
        out.append(
            v
            or Verdict(
                c["statement"],
                "cannot be tested here",
                "measured",
                f"needs runs on the GPU host it is about ({c['decided_by']}.yaml)"
                if c.get("decided_by")
                else "no experiment file decides it yet",
                claim_id=c["claim_id"],
                kind=c["kind"],
                n=0,
                family="document",
                limit=NEEDS_GPU_HOST,
                scope="nothing on this host exercises it",
                reason=f"nothing measured here exercises it; {_where(c)}",
            )
        )
    return out


def _setup_against_table(c: dict, published: pl.DataFrame) -> Verdict | None:
    """'Only the engine changed' against the document's own rows: inconsistent where another configuration field
    (DCP) differs between the engines at the same context; value: the largest DCP ÷ the smallest."""
    pub = published.filter(pl.col("experiment") == c["experiment"]) if "experiment" in published.columns else published
    if pub.is_empty() or "dcp" not in pub.columns or pub["dcp"].null_count() == pub.height:
        return None
    per_engine = pub.group_by("engine").agg(pl.col("dcp").unique().sort())
    said = "; ".join(
        f"{engine_label(r['engine'])} DCP {', '.join(str(d) for d in r['dcp'])}"
        for r in sorted(per_engine.iter_rows(named=True), key=lambda r: (registry.order(r["engine"]), r["engine"]))
    )
    lo, hi = int(pub["dcp"].min()), int(pub["dcp"].max())
    differs = lo != hi
    return Verdict(
        f"{c['statement']} — against the article's own table",
        "inconsistent" if differs else "consistent",
        "published",
        f"its table: {said}",
        claim_id=c["claim_id"],
        kind=c["kind"],
        value=hi / lo,
        unit="× DCP size, largest ÷ smallest across the engines' rows",
        n=pub.height,
        family="consistency",
        scope="published table",
        reason=(
            f"the document's own rows record DCP {hi} for one engine and {lo} for the other: the decode "
            "parallelism changed with the engine, so the engine was not the only variable; "
            if differs
            else "every row records the same DCP size; "
        )
        + _where(c),
    )


def setting_against_documents(c: dict, all_claims: pl.DataFrame) -> Verdict | None:
    """A setting one document recommends (it runs without OOM retries) against another document that says the same
    setting caused OOM retries (reports 03 and 06 show it; graded here once). It sets one document against another,
    not against its own figures, so it is family *document*; the other document reports another model, GPUs and
    context without figures, and no run here exercises the recommended set-up: *cannot be tested here*. None without
    another document saying so."""
    other = all_claims.filter(
        (pl.col("experiment") != c["experiment"])
        & (pl.col("setting") == c["setting"])
        & (pl.col("metric") == "oom_retries")
        & (pl.col("direction") == "some")
    )
    if other.is_empty():
        return None
    o, u = other.row(0, named=True), c["setting"]
    return Verdict(
        f"{c['statement']} — against {document_name(o['experiment'])}: “{o['statement']}”",
        "cannot be tested here",
        "published",
        f"{u:g} recommended by one document; {u:g} caused OOM retries in the other, for another model on other GPUs",
        claim_id=c["claim_id"],
        kind=c["kind"],
        value=float(u),
        unit="memory-utilisation target",
        n=2,
        family="document",
        scope="the two documents' own words (different models, GPUs and contexts)",
        limit=NO_GPU_MEMORY,
        reason=(
            f"the other document ({o['claim_id']}) says {u:g} caused OOM retries, but for another model, GPUs and "
            f"context and without figures, so it cannot decide this advice; {_where(c)}"
        ),
    )
