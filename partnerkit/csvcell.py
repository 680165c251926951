"""CSV cells a spreadsheet reads as text, never as a formula (OWASP, "CSV Injection").

Finance opens partnerkit's CSV (listings with `--format csv`, the report's drift table) in Excel or
LibreOffice, and provider text reaches those cells: a reference_number, a transaction id, a currency
code, a vendor's failure message. A cell that starts with =, +, -, @, a tab or a carriage return is
evaluated there as a formula (=HYPERLINK(...) sends the sheet's neighbouring cells away). Such a
cell is written with a leading apostrophe, the spreadsheet's own "this is text" mark. A number keeps
its sign: -5.00 is an amount, not a formula.
"""

from __future__ import annotations

import re

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-][0-9]+(?:\.[0-9]+)?")


def spreadsheet_safe(text: str) -> str:
    """`text`, with an apostrophe in front when a spreadsheet would run it as a formula."""
    if text.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text
