"""What a page's prose may be: short enough to read, every sentence short and said once.

The limits every report keeps (issue "One study, one folder"): at most :data:`MAX_WORDS` words on a page, tables
included; no sentence in a paragraph, list item or caption longer than :data:`MAX_SENTENCE_WORDS` words; no sentence
twice on a page. :func:`problems` reads a built page's HTML and names what breaks them; the tests run it on every
built page, and ``python -m kvlab.prose PAGE.html`` prints it for one.
"""

from __future__ import annotations

import html
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MAX_WORDS = 3000
MAX_SENTENCE_WORDS = 45
#: A repeated sentence shorter than this many words is a label ("Not measured here."), not prose said twice.
MIN_REPEAT_WORDS = 8

_BLOCK = re.compile(r"<(p|li|figcaption|caption|h[1-6]|dd|dt|blockquote|td|th)\b[^>]*>(.*?)</\1>", re.S | re.I)
#: A sentence ends at '.', '!' or '?' before a capital, a quote, a bracket, a digit or a name written lower-camel
#: ('vLLM')
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z“\"(*0-9]|[a-z][A-Z])")


def _text(fragment: str) -> str:
    fragment = re.sub(r"base64,[A-Za-z0-9+/=]+", " ", fragment)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def words(text: str) -> int:
    """Words as a reader counts them: runs of letters or digits (``1,024`` and ``TP8+DCP8`` are one word each)."""
    return len(re.findall(r"[\w][\w.,'’+×/%-]*", text))


def sentences(page: str) -> list[str]:
    """The sentences of a page's prose: paragraphs, list items and captions (not tables, code or the top bar)."""
    body = re.sub(r"<(style|script|svg|pre|code|nav)\b.*?</\1>", " ", page, flags=re.S | re.I)
    out: list[str] = []
    for tag, inner in _BLOCK.findall(body):
        if tag.lower() in ("td", "th"):
            continue
        if re.search(r"<(p|li|ul|ol|table)\b", inner, re.I):
            continue  # a container: its own blocks are read on their own
        text = _text(inner)
        out += [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    return out


@dataclass
class Problems:
    """What breaks the limits on one page."""

    words: int
    long_sentences: list[tuple[int, str]] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.words <= MAX_WORDS and not self.long_sentences and not self.repeated

    def __str__(self) -> str:
        lines = [f"words: {self.words} (at most {MAX_WORDS})"]
        lines += [f"long sentence ({n} words): {s}" for n, s in self.long_sentences]
        lines += [f"said twice: {s}" for s in self.repeated]
        return "\n".join(lines)


def problems(page: str) -> Problems:
    """The page's word count, its sentences over :data:`MAX_SENTENCE_WORDS` words and the sentences it says twice."""
    visible = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S | re.I)
    said = sentences(page)
    counts = Counter(s for s in said if words(s) >= MIN_REPEAT_WORDS)
    return Problems(
        words=words(_text(visible)),
        long_sentences=[(words(s), s) for s in said if words(s) > MAX_SENTENCE_WORDS],
        repeated=[s for s, n in counts.items() if n > 1],
    )


if __name__ == "__main__":
    status = 0
    for name in sys.argv[1:]:
        found = problems(Path(name).read_text())
        print(f"== {name}\n{found}")
        status |= not found.ok
    sys.exit(status)
