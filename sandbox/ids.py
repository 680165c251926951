"""Record ids: where each kind's numbering begins, for one start of the sandbox (docs/sandbox.md, "Ids").

A real provider never gives an id twice. The sandbox keeps its state in memory, so each start numbers
its records afresh; a start's *id block* N keeps them apart: every id of that start is N * 10**6 above
the documented first id of its kind (recharge 100001, order 5001, transaction 700001, webhook and
delivery 1), so block 60123456 numbers recharges 60123456100001, 60123456100002, ... Block 0 is the
documented numbering itself, the same at every start (tests, the demo, `--fixed-ids`).

`serve()` takes the block from the start time, `block_at(now)`: whole seconds since 2024-01-01T00:00Z.
A later start gets a higher block, and a start's ids reach the next block only after a million records
of a kind per second it ran, so starts one after another never share an id (`serve()` outlives the
second it started in for that). The seeded wallets (ids 1 to 4) are the accounts' own and keep their
ids at every start; a wallet opened while it runs is numbered in the block.
"""
from __future__ import annotations

from datetime import datetime, timezone

FIRST_IDS = {"wallet": 1, "transaction": 700001, "recharge": 100001, "order": 5001,
             "webhook": 1, "delivery": 1}
BLOCK_SIZE = 10**6
EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)
# The highest block whose ids stay exact JSON numbers everywhere (2**53, JavaScript's safe integers),
# and far within SQLite's 64-bit INTEGER: enough seconds for the next 280 years.
MAX_BLOCK = (2**53 - 1) // BLOCK_SIZE - 1


def check_block(value) -> None:
    """ValueError unless `value` is an id block: a whole number from 0 to MAX_BLOCK."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BLOCK:
        raise ValueError(f"id_block must be a whole number from 0 to {MAX_BLOCK}, not {value!r}")


def block_at(when: datetime) -> int:
    """The id block of a sandbox started at `when` (aware): whole seconds since EPOCH, at least 1."""
    return max(1, int((when - EPOCH).total_seconds()))


def first_ids(block: int) -> dict[str, int]:
    """The first id of every kind in `block`."""
    return {kind: block * BLOCK_SIZE + first for kind, first in FIRST_IDS.items()}
