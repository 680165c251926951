"""What the demo prints: one progress line per step, then the day's summary, drifts and reports.

Nothing here prints a secret other than the sandbox's public demo credentials, and never a
voucher code: the demo only ever counts vouchers.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from partnerkit.store.drifts import COUNT_KINDS

Echo = Callable[[str], None]


def _default_echo(line: str) -> None:
    print(line, flush=True)


class Progress:
    """Timestamped progress lines: `[  12s] order 5003: ...`, details indented under them."""

    def __init__(self, echo: Echo = _default_echo, started: float | None = None) -> None:
        self.echo = echo
        self.started = time.monotonic() if started is None else started

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, text: str) -> None:
        self.echo(f"[{self.elapsed():4.0f}s] {text}")

    def detail(self, text: str) -> None:
        self.echo(f"        {text}")

    def blank(self) -> None:
        self.echo("")

    def section(self, title: str) -> None:
        self.echo("")
        self.echo(title)


def display_path(path: Path) -> str:
    """A path relative to the current directory when it is under it, else absolute."""
    absolute = Path(path).resolve()
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(absolute)


def command_name() -> str:
    """How the user invokes partnerkit: `partnerkit` if that is on PATH, else the script's path."""
    script = Path(sys.executable).with_name("partnerkit")
    found = shutil.which("partnerkit")
    if found and script.exists() and Path(found).resolve() == script.resolve():
        return "partnerkit"
    if script.exists():
        return display_path(script)
    return f"{os.path.basename(sys.executable)} -m partnerkit"


def _money(values: dict[str, str]) -> str:
    return ", ".join(f"{currency} {amount}" for currency, amount in sorted(values.items())) or "none"


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return lines


def print_report(echo: Echo, report: dict[str, Any], paths: Iterable[Path]) -> None:
    """The day's summary, its drifts and the report files."""
    s = report["summary"]
    by_status = report.get("counts_by_status", {})
    echo(f"Reconciliation for {report['date']} (UTC, the sandbox's day)")
    echo(f"  recharges     {s['recharges_total']:>4}   {_counts(by_status.get('recharges', {}))}")
    echo(f"  orders        {s['orders_total']:>4}   {_counts(by_status.get('orders', {}))}")
    echo(f"  transactions  {s['transactions_total']:>4}   (wallet top-ups and conversions included)")
    echo(f"  matched {s['matched']} (recharges and orders without a drift), drifted {s['drifted']}, "
         f"unmatched transactions {s['unmatched']}, quarantined {s.get('quarantined', 0)}")
    # The JSON's `spend` is every debit (its name predates the distinction): printed as what it is.
    echo(f"  debits   {_money(s.get('spend', {}))}   (gross: every debit but top-ups and conversions)")
    echo(f"  credits  {_money(s.get('refunds', {}))}   (refunds and any other credit, top-ups apart)")
    if "net_debits" in s:
        echo(f"  net      {_money(s['net_debits'])}   (debits less credits)")
    if "spend_as_documented" in s:
        echo(f"  spend    {_money(s['spend_as_documented'])}   (SUCCESS and PROCESSING recharges, orders not FAILED "
             "or CANCELLED; net of credits back)")
    for line in _not_final(report):
        echo(f"  {line}")
    drifts = report.get("drifts", [])
    echo("")
    if drifts:
        echo(f"Drifts ({len(drifts)}):")
        rows = [[d["kind"], d["subject"], d["reference"], _amount(d["expected"], d), _amount(d["actual"], d),
                 d["resolution"], d["id"]] for d in drifts]
        for line in _table(rows, ["kind", "subject", "reference", "expected", "actual", "resolution", "id"]):
            echo("  " + line)
    else:
        echo("Drifts: none")
    echo("")
    echo("Reports:")
    for path in paths:
        echo(f"  {Path(path).suffix[1:].upper():<4}  {display_path(Path(path))}")


def _amount(value: Any, drift: dict[str, Any]) -> str:
    if value is None:
        return "-"
    currency = drift.get("currency") if drift.get("kind") not in COUNT_KINDS else None  # a count: no currency
    return f"{value} {currency}" if currency else str(value)


def _not_final(report: dict[str, Any]) -> list[str]:
    """Why the figures may still change, as the report's banner says it."""
    lines = []
    if report.get("partial"):
        lines.append("partial: made before the day ended (UTC); the nightly report replaces it")
    still = {k: n for k, n in report.get("unsettled", {}).items() if n}
    if still:
        lines.append("unsettled: " + ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in still.items())
                     + "; figures may change")
    return lines


def _counts(counts: dict[str, int]) -> str:
    return "(" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")" if counts else ""


def print_next_steps(echo: Echo, env_file: Path, order_id: int | None, drift_id: str | None, day: str,
                     running: bool) -> None:
    """A few commands to try against the demo's database."""
    base = f"{command_name()} --config {display_path(env_file)}"
    echo("Try next (they read the demo's database" + ("" if running else "; the sandbox stopped with the demo")
         + "):")
    lines = [f"{base} events list",
             f"{base} orders list",
             f"{base} vouchers {order_id if order_id is not None else '<order id>'} --reveal",
             f"{base} recharges list",
             f"{base} drifts list"]
    if drift_id:
        lines.append(f"{base} drifts resolve {drift_id} --note \"refund confirmed by support\"")
    lines.append(f"{base} transactions list --date {day}")
    lines.append(f"{base} report --date {day} --format html --output /tmp/partnerkit-report.html")
    if running:
        lines.append(f"{base} webhooks deliveries")
    for line in lines:
        echo("  " + line)
    overriding = sorted(k for k in os.environ if k.startswith("PARTNERKIT_") and k != "PARTNERKIT_CONFIG")
    if overriding:  # the environment overrides a --config file; the demo itself ignored them
        echo(f"  (your shell sets {', '.join(overriding)}, which would override --config: unset them first)")
