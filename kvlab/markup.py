"""Inline markup shared by the pieces of a report page (verdicts, figure captions, the index), and how a name from
data is shown: escaped, its bidirectional controls made visible, isolated from the text around it."""

from __future__ import annotations

import html
import re

#: The Unicode characters that reorder text around them (the bidirectional embeddings, overrides, isolates and marks,
#: Unicode 15's Bidi_Control property): U+202E in ``run-\u202egnp.exe`` shows it as ``run-exe.png``.
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible_controls(text: str) -> str:
    """``text`` with each bidirectional control (:data:`BIDI_CONTROLS`) written as what it is, ``[U+202E]``: it
    reorders nothing and a reader sees it is there. The form has no character HTML, JavaScript or JSON give a meaning
    to, so it can replace the character anywhere in a page (:func:`controls_shown`)."""
    return BIDI_CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def name_html(text) -> str:
    """A user- or file-supplied name (a folder, an experiment, a model, an engine's version...) as HTML: escaped, its
    bidirectional controls made visible (:func:`visible_controls`) and wrapped in ``<bdi>``, so that neither it nor
    its direction can reorder the text around it."""
    return f"<bdi>{html.escape(visible_controls(str(text)))}</bdi>"


def controls_shown(page: str) -> str:
    """A whole page with every bidirectional control character made visible (:func:`visible_controls`): what every
    page kvlab writes goes through last, so a control that came in with data anywhere on it (a notebook's output, a
    table cell, an image's alt text) reorders nothing."""
    return visible_controls(page)


def markdown_inline(text: str) -> str:
    """The inline markdown kvlab's sentences use (``**bold**``, ``*italic*``, ```code```) as escaped HTML (a
    bidirectional control in it made visible: :func:`visible_controls`)."""
    out = html.escape(visible_controls(text), quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", out)
