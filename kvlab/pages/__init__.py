"""What each report notebook displays, section by section: one module per report (``context_scaling`` … ``capacity``,
the same names as :mod:`kvlab.studies`), each a function per notebook section that takes the report's
:class:`~kvlab.studies.StudyResult` and its workbook and returns a :class:`~kvlab.pages.section.Section`: the
objects the cell displays, in order (Markdown, tables, figures via ``wb.show``). A notebook cell is one expression,
``pages.<report>.<section>(r, wb)``; its value displays itself.

Pages compose; they compute nothing of their own: the numbers come from the study result (frames and values,
:mod:`kvlab.studies`), the sentences from :mod:`kvlab.narrative`, the figures from :mod:`kvlab.plots`.
"""

from __future__ import annotations

from typing import Any, Mapping

from kvlab import studies, verdicts
from kvlab.pages import (
    capacity,
    context_scaling,
    engine_choice,
    memory_utilisation,
    prefix_sharing,
    throughput_decay,
    whatif_model,
)
from kvlab.pages.section import Section
from kvlab.studies import StudyResult

__all__ = [
    "Section",
    "capacity",
    "context_scaling",
    "engine_choice",
    "memory_utilisation",
    "open_report",
    "prefix_sharing",
    "throughput_decay",
    "verdicts_and_sources",
    "whatif_model",
]


def open_report(report: str, namespace: Mapping[str, Any]):
    """A notebook's first call: refuse renamed parameters, open the workbook, compute the study with the notebook's
    parameters (:func:`kvlab.studies.notebook`); returns (workbook, result)."""
    return studies.notebook(report, namespace)


def verdicts_and_sources(r: StudyResult) -> Section:
    """A report's last section: its verdict box (moved under the answer in the built page) and what it read (the
    provenance panel's input, taken off the page)."""
    return Section([verdicts.box(list(r.verdicts)), r.sources])
