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
from kvlab.pages.section import Section
from kvlab.studies import StudyResult

__all__ = ["Section", "open_report", "verdicts_and_sources"]


def __getattr__(name: str):
    """A report's page module, imported when first read (``pages.prefix_sharing``): being moved into the study
    folders (``kvlab/studies/<study>/page.py``), each is read from there once moved."""
    from importlib import import_module
    from importlib.util import find_spec

    if find_spec(f"kvlab.pages.{name}") is not None:
        return import_module(f"kvlab.pages.{name}")
    if name in studies.STUDIES.values() and find_spec(f"kvlab.studies.{name}.page") is not None:
        return import_module(f"kvlab.studies.{name}.page")
    raise AttributeError(f"module 'kvlab.pages' has no attribute {name!r}")


def open_report(report: str, namespace: Mapping[str, Any]):
    """A notebook's first call: refuse renamed parameters, open the workbook, compute the study with the notebook's
    parameters (:func:`kvlab.studies.notebook`); returns (workbook, result)."""
    return studies.notebook(report, namespace)


def verdicts_and_sources(r: StudyResult) -> Section:
    """A report's last section: its verdict box (moved under the answer in the built page) and what it read (the
    provenance panel's input, taken off the page)."""
    return Section([verdicts.box(list(r.verdicts)), r.sources])
