"""Hostile text (issue 25): what an experiment file, a server's reported version, a host's facts or a reference CSV
could carry, and the check that a page shows it as text and never makes it an element.

The suite's shared fixture data (notebook_data.write_fixture_data) carries these in every data field a reader sees,
so every page of the suite's one build holds them: tests/test_notebooks.py parses each page, tests/test_browser.py
loads each in headless Chromium and checks that no dialog fires."""

from html.parser import HTMLParser

IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert(2)</script>"
#: A link with a harmful protocol, for fields that reach markdown
LINK = "[a link](javascript:alert(3))"
#: All three, as appended to a data field
PAYLOAD = f"{IMG} {SCRIPT} {LINK}"
#: How a page shows the first two as text
IMG_TEXT = "&lt;img src=x onerror=alert(1)&gt;"
SCRIPT_TEXT = "&lt;script&gt;alert(2)&lt;/script&gt;"
#: A run folder's name that U+202E (RIGHT-TO-LEFT OVERRIDE) would show as "run-exe.png" (issue 56): the shared fixture
#: data holds a copy of a run under it, and a page shows it with the control written out, isolated in <bdi>
SPOOFED_FOLDER = "run-\u202egnp.exe"
SPOOFED_SHOWN = "<bdi>runs/cpu_multi_turn/run-[U+202E]gnp.exe</bdi>"
#: The characters that reorder text around them (kvlab.markup.BIDI_CONTROLS): none is ever on a page as it is
BIDI = ("\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)))


class _Elements(HTMLParser):
    """Every element of a page and the text inside each <script>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements, self.scripts, self._in_script = [], [], False

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def assert_no_live_payload(page: str):
    """No element the payloads would make (an <img src=x>, an onerror handler, a script calling alert, a
    javascript: link), and neither payload as raw text."""
    p = _Elements()
    p.feed(page)
    assert not [e for e in p.elements if e[0] == "img" and e[1].get("src") == "x"], "a payload <img> is live"
    assert not [e for e in p.elements if any(a.startswith("on") and "alert" in (v or "") for a, v in e[1].items())]
    assert not [s for s in p.scripts if "alert(" in s], "a payload <script> is live"
    assert not [
        e for e in p.elements if e[0] == "a" and (e[1].get("href") or "").strip().lower().startswith("javascript:")
    ], "a javascript: link is live"
    assert IMG not in page and SCRIPT not in page
    assert not [c for c in BIDI if c in page], "a bidirectional control is on the page as it is"
