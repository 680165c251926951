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
# Digits a spreadsheet turns into a number that is not them: leading zeros dropped ("0012345" -> 12345),
# and past 15 significant digits (Excel's precision) the rest zeroed ("1234567890123456789" -> 1.23457E+18).
_MANGLED_DIGITS = re.compile(r"0[0-9]+|[0-9]{16,}")


def spreadsheet_safe(text: str) -> str:
    """`text`, with an apostrophe in front when a spreadsheet would run it as a formula."""
    if text.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def spreadsheet_id(text: str) -> str:
    """An identifier (a reference finance quotes to the provider): `spreadsheet_safe`, and digits a
    spreadsheet would turn into another number get the same apostrophe, so that they stay as written.
    Only for identifiers: an amount or a count must stay a number."""
    if _MANGLED_DIGITS.fullmatch(text):
        return "'" + text
    return spreadsheet_safe(text)


# Identifiers sharing one cell (a drift's transaction ids) are separated by spaces, not commas: a spreadsheet
# reads "123,456" as the number 123456.
IDS_SEPARATOR = " "


def spreadsheet_ids(ids: list[str] | tuple[str, ...]) -> str:
    """Identifiers in one cell, separated by IDS_SEPARATOR, written as `spreadsheet_id` writes one."""
    return spreadsheet_id(IDS_SEPARATOR.join(ids)) if ids else ""
