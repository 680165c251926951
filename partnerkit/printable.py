"""Text from outside (the provider's messages and reasons, a client's request path) made safe to print.

A line break in such text starts what reads as another line of a log or a table; an escape sequence
(ESC [ ...) sent to a terminal moves the cursor, recolours or retitles it, or hides what precedes it.
`printable` shows every character that is not printable (controls, line and paragraph separators,
bidirectional overrides) as its Python escape, `\\n`, `\\x1b`, `\\u202e`, so the text stays on one line and
reads as sent. Printable text, accents and other scripts included, is returned unchanged.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` on one line, every character that is not printable shown as its escape (`\\x1b`, `\\n`)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
