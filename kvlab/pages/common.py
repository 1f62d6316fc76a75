"""What several reports' sections open with."""

from __future__ import annotations

from IPython.display import Markdown

from kvlab import narrative
from kvlab.pages.section import Section
from kvlab.studies import StudyResult


def measured_opening(r: StudyResult, wb, out: Section) -> bool:
    """A "Measured here" section's first line (reports 01 and 02): the note naming the engines measured, and True;
    or, without runs of the report's measured experiment, the note saying how to make them, and False."""
    if "measured" not in r.frames:
        experiment = r.parameters["measured_experiment"]
        out.add(Markdown(narrative.no_runs_note(f"runs of `{experiment}`", wb.data, "make report")))
        return False
    out.add(Markdown(narrative.measured_engines_note(r["measured"].to_dicts())))
    return True
