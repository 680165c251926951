"""The query plans of the statements some code runs: a diagnostic for the tests and the benchmarks.

A store holds months of recharges, transactions and drifts: a statement that reads the whole of a
table growing every day, on a path that runs every night, every 15 minutes, per webhook or per
`partnerkit status`, costs more each day. `recording()` asks SQLite for the plan of every statement
run on any connection opened meanwhile (EXPLAIN QUERY PLAN, with the statement's own parameters, just
before it runs, so the temp tables it reads exist) and counts each one's work in virtual-machine
instructions; `scans()` picks the plan lines that read a whole growing table. The plan test
(tests/reconcile/test_query_plans.py) and `python -m bench.reconcile.history --plans` use it.

It replaces `sqlite3.connect` for the length of the block (connections opened before it are not
seen), so it is for tests and benchmarks only, never for a running kit.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

# Tables that grow with every day of a kit's life.
GROWING = ("recharges", "transactions", "orders", "vouchers", "inbox", "jobs", "drifts", "drift_audit", "reports",
           "transaction_quarantine", "webhook_refusals", "budget_events", "wallet_snapshots", "recharge_seen",
           "sync_coverage", "order_intents")
STEP = 100  # virtual-machine instructions per unit of `Recorded.steps`
_PLANNED = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "CREATE", "REPLACE")


@dataclass
class Recorded:
    """What ran in a `recording()` block: each statement's plan (its lines), and its work in STEPs
    (counted until the next statement on the same connection; a cursor read later is counted to
    whichever statement ran last). Statements are keyed by their text, whitespace folded."""

    plans: dict[str, list[str]] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)


def _connection_class(recorded: Recorded) -> type[sqlite3.Connection]:
    class PlanConnection(sqlite3.Connection):
        current = ""

        def _explain(self, sql: str, params: Any) -> None:
            if not self.current:
                self.set_progress_handler(self._step, STEP)
            self.current = " ".join(sql.split())
            words = sql.split(None, 1)
            if not words or words[0].upper() not in _PLANNED or self.current in recorded.plans:
                return
            try:
                rows = super().execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
            except sqlite3.Error:  # e.g. a statement that fails anyway: it is about to say so itself
                return
            recorded.plans[self.current] = [row[-1] for row in rows]

        def _step(self) -> int:
            recorded.steps[self.current] = recorded.steps.get(self.current, 0) + 1
            return 0

        def execute(self, sql: str, params: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
            self._explain(sql, params)
            return super().execute(sql, params)

        def executemany(self, sql: str, rows: Any, /) -> sqlite3.Cursor:  # type: ignore[override]
            rows = list(rows)
            self._explain(sql, rows[0] if rows else ())
            return super().executemany(sql, rows)

    return PlanConnection


@contextmanager
def recording() -> Iterator[Recorded]:
    """Record the plan and the work of every statement run on connections opened inside the block."""
    recorded = Recorded()
    plain = sqlite3.connect
    factory = _connection_class(recorded)

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", factory)
        return plain(*args, **kwargs)

    sqlite3.connect = connect  # type: ignore[assignment]
    try:
        yield recorded
    finally:
        sqlite3.connect = plain  # type: ignore[assignment]


_NAMED = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?", re.IGNORECASE)
_NOT_ALIASES = {"WHERE", "ON", "JOIN", "LEFT", "INNER", "CROSS", "NATURAL", "GROUP", "ORDER", "LIMIT", "UNION",
                "USING", "SET", "VALUES", "HAVING", "WINDOW", "EXCEPT", "INTERSECT"}


def tables_of(sql: str) -> dict[str, str]:
    """The tables a statement names, by the name its plan gives them (the alias, when there is one)."""
    named = {}
    for table, alias in _NAMED.findall(sql):
        named[table] = table
        if alias and alias.upper() not in _NOT_ALIASES:
            named[alias] = table
    return named


def scans(plan: list[str], sql: str = "") -> list[str]:
    """The plan's lines that read the whole of a growing table, or the whole of one of its indexes
    (`sql`, the statement, tells which table an alias in the plan stands for)."""
    named = tables_of(sql)
    found = []
    for line in plan:
        words = line.split()
        if words[:1] == ["SCAN"] and len(words) > 1 and named.get(words[1], words[1]) in GROWING:
            found.append(line)
    return found
