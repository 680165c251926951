"""Listing output shared by every command: table (default), json or csv.

JSON goes to stdout alone (money as 2-decimal strings, times ISO 8601, lists as arrays); messages
go to stderr. A table or CSV cell shows a list as comma-joined text.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

import click

from partnerkit.money import dumps, fmt
from partnerkit.timeutil import iso

FORMATS = ("table", "json", "csv")


def format_option(func: Callable) -> Callable:
    """The `--format table|json|csv` option every listing command takes."""
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                        help="Output format; json and csv go to stdout alone.")(func)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return fmt(value) or ""
    if isinstance(value, datetime):
        return iso(value) or ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)) and not any(isinstance(v, (dict, list, tuple)) for v in value):
        return ",".join(_cell(item) for item in value)  # e.g. a webhook's events: an array in JSON, one cell here
    if isinstance(value, (dict, list, tuple)):  # a job's result: JSON, not a Python repr (None, False, '...')
        return dumps(value)
    return str(value)


def _table_cell(value: Any) -> str:
    """A cell on one line: a line break or control character (a pasted note, a provider's reference)
    is shown escaped, so it can neither start what reads as another row nor reach the terminal."""
    text = _cell(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def render(rows: Sequence[dict], columns: Sequence[str], fmt_name: str, *, json_value: Any = None) -> str:
    """Render rows as an aligned table, CSV, or JSON (json_value overrides what JSON prints)."""
    if fmt_name == "json":
        return dumps(list(rows) if json_value is None else json_value, indent=2)
    if fmt_name == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in columns])
        return buffer.getvalue().rstrip("\n")
    cells = [[_table_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def emit(rows: Iterable[dict], columns: Sequence[str], fmt_name: str, *, json_value: Any = None,
         empty_message: str | None = None) -> None:
    """Print rows in the chosen format; an empty table prints `empty_message` to stderr."""
    rows = list(rows)
    if not rows and fmt_name == "table" and empty_message:
        click.echo(empty_message, err=True)
        return
    click.echo(render(rows, columns, fmt_name, json_value=json_value))
