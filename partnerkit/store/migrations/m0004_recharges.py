"""Recharges: intents, provider copies, polling state (owned by the worker)."""

VERSION = 4
NAME = "recharges"
STATEMENTS: tuple[str, ...] = ()
