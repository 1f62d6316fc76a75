"""What one notebook cell shows: :class:`Section`, the list every :mod:`kvlab.pages` function returns."""

from __future__ import annotations

from IPython.display import display


class Section(list):
    """The objects one notebook cell shows, in order (Markdown, tables, figures). A cell whose value is a section
    displays each of them, so a report cell is one expression: ``pages.<report>.<section>(r, wb)``; a test reads the
    list instead."""

    def add(self, *items) -> None:
        """Append what the cell shows next (one call per ``display`` it replaces)."""
        self.extend(items)

    def _ipython_display_(self) -> None:
        for item in self:
            display(item)
