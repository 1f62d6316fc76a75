"""Inline markup shared by the pieces of a report page (verdicts, figure captions, the index)."""

from __future__ import annotations

import html
import re


def markdown_inline(text: str) -> str:
    """The inline markdown kvlab's sentences use (``**bold**``, ``*italic*``, ```code```) as escaped HTML."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", out)
