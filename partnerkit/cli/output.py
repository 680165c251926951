"""Output shared by every command: table (default), json or csv.

Two shapes, one function each: `emit` prints a listing (a JSON array, however many rows), and
`emit_one` what a command reports about one thing (one JSON object, never an array of one). JSON
goes to stdout alone (money as 2-decimal strings, times ISO 8601, lists as arrays); messages go to
stderr. A table or CSV cell shows a list as comma-joined text; a CSV cell a spreadsheet would run as
a formula is written as text (partnerkit.csvcell).
"""

from __future__ import annotations

import csv
import io
import time
from decimal import Decimal
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping, Sequence

import click

from partnerkit.csvcell import spreadsheet_safe
from partnerkit.money import dumps, fmt
from partnerkit.printable import printable
from partnerkit.timeutil import iso

FORMATS = ("table", "json", "csv")
PROGRESS_EVERY_S = 5.0  # how often a long walk (reconcile, orders sync) says how far it has read


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
    return printable(_cell(value))


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """"1 recharge", "2 recharges", "0 drifts": a count with its noun (plural: noun + "s" unless given)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {plural or noun + 's'}"


class Progress:
    """Prints how far a long walk has read, to stderr, at most every `every` seconds (default
    PROGRESS_EVERY_S): a busy day or a long range is minutes of pages, and silence looks like a hang."""

    def __init__(self, label: object, every: float | None = None) -> None:
        self.label, self.every = label, every
        self.last = time.monotonic()

    def __call__(self, entity: str, read: int) -> None:
        now = time.monotonic()
        if now - self.last >= (PROGRESS_EVERY_S if self.every is None else self.every):
            self.last = now
            click.echo(f"{self.label}: {entity}, {read:,} read so far", err=True)


def render(rows: Sequence[dict], columns: Sequence[str], fmt_name: str) -> str:
    """Render rows as an aligned table, CSV, or a JSON array."""
    if fmt_name == "json":
        return dumps(list(rows), indent=2)
    if fmt_name == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([spreadsheet_safe(_cell(row.get(c))) for c in columns])
        return buffer.getvalue().rstrip("\n")
    cells = [[_table_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def emit(rows: Iterable[dict], columns: Sequence[str], fmt_name: str, *, empty_message: str | None = None) -> None:
    """Print a listing in the chosen format; an empty table prints `empty_message` to stderr."""
    rows = list(rows)
    if not rows and fmt_name == "table" and empty_message:
        click.echo(empty_message, err=True)
        return
    click.echo(render(rows, columns, fmt_name))


def emit_newest(rows: Sequence[dict], limit: int, noun: str, columns: Sequence[str], fmt_name: str, *,
                empty_message: str | None = None, one: str | None = None) -> None:
    """Print a listing read with `limit + 1` rows: the first `limit`, and a note on stderr when there
    were more, in every format: a listing cut at its default limit would read as all there is, and a
    script reading JSON or CSV from stdout never sees stderr mixed in (as `transactions list` does).
    `noun` is the plural ("orders"); `one` the singular, for --limit 1 (default: `noun` without its "s")."""
    emit(rows[:limit], columns, fmt_name, empty_message=empty_message)
    if len(rows) > limit:
        shown = (f"the newest {one or noun.removesuffix('s')} is shown" if limit == 1
                 else f"the newest {limit} {noun} are shown")
        click.echo(f"{shown}; --limit N shows more", err=True)


def emit_one(record: Mapping[str, Any], fmt_name: str, *, columns: Sequence[str] | None = None,
             json_value: Any = None, rows: Sequence[dict] | None = None) -> None:
    """Print what a command reports about one thing: one JSON object, never an array of one.

    JSON prints `json_value` when it is an object (e.g. the provider's answer as it came), else the
    record. A table or CSV shows the record as one row, or the given `rows` instead (a field/value
    layout), under `columns` (default: the keys of the first row shown).
    """
    if fmt_name == "json":
        click.echo(dumps(dict(json_value if isinstance(json_value, Mapping) else record), indent=2))
        return
    shown = [dict(record)] if rows is None else list(rows)
    click.echo(render(shown, list(columns if columns is not None else shown[0] if shown else ()), fmt_name))
