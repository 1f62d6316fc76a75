"""What each report notebook displays, section by section: one module per report (``context_scaling`` … ``capacity``,
the same names as :mod:`kvlab.studies`), each a function per notebook section that takes the report's
:class:`~kvlab.studies.StudyResult` and its workbook and returns the objects the cell displays, in order (Markdown,
tables, figures via ``wb.show``). A notebook cell is one line: ``display(*pages.<report>.<section>(r, wb))``.

Pages compose; they compute nothing: every number they show is already in the study result (frames and values,
:mod:`kvlab.studies`), every sentence comes from :mod:`kvlab.narrative`, every figure from :mod:`kvlab.plots`.
"""

from __future__ import annotations

from kvlab import studies, verdicts
from kvlab.studies import StudyResult


#: A notebook's first call: refuse renamed parameters, open the workbook, compute the study with the notebook's
#: parameters; returns (workbook, result).
open_report = studies.notebook


def verdicts_and_sources(r: StudyResult, wb=None) -> list:
    """A report's last section: its verdict box (moved under the answer in the built page) and what it read (the
    provenance panel's input, taken off the page)."""
    return [verdicts.box(list(r.verdicts)), r.sources]
