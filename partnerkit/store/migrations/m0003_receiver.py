"""Webhook inbox, orders, vouchers and the job queue (owned by the receiver)."""

VERSION = 3
NAME = "receiver"
STATEMENTS: tuple[str, ...] = ()
