"""What one notebook cell shows: :class:`Section`, the list every study's page function returns
(``kvlab/studies/<study>/page.py``), and the section every report ends with (:func:`verdicts_and_sources`)."""

from __future__ import annotations

from IPython.display import display

from kvlab import verdicts


class Section(list):
    """The objects one notebook cell shows, in order (Markdown, tables, figures). A cell whose value is a section
    displays each of them, so a report cell is one expression: ``page.<section>(r, wb)``; a test reads the
    list instead."""

    def add(self, *items) -> None:
        """Append what the cell shows next (one call per ``display`` it replaces)."""
        self.extend(items)

    def _ipython_display_(self) -> None:
        for item in self:
            display(item)


def verdicts_and_sources(r) -> Section:
    """A report's last section: its verdict box (moved under the answer in the built page) and what it read (the
    provenance panel's input, taken off the page)."""
    return Section([verdicts.box(list(r.verdicts)), r.sources])
