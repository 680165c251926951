"""Transactions, wallet snapshots, drifts and reports (owned by reconciliation)."""

VERSION = 5
NAME = "ledger"
STATEMENTS: tuple[str, ...] = ()
