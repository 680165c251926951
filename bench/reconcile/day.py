"""A deterministic synthetic day: N recharges with their transactions, ~1% of records per drift kind.

Slots (i % 100) plant one drift kind each; every other record reconciles. No randomness: record i
is a function of i, so two runs of one size load byte-identical days.
"""

from __future__ import annotations

from datetime import date
from typing import Iterator

DAY = date(2025, 1, 15)
SLOTS = {0: "missing_debit", 1: "amount_mismatch", 2: "duplicate_debit", 3: "missing_refund",
         4: "unexpected_refund", 5: "orphan_transaction", 6: "stuck_processing", 7: "unknown_to_provider",
         8: "unknown_to_partner", 9: "balance_discontinuity"}
SYNCED_AT = "2025-01-16T01:00:00Z"


def _times(n: int) -> list[str]:
    stamps = [f"{DAY.isoformat()}T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z" for s in range(86400)]
    return [stamps[i * 86400 // n] for i in range(n)]


def _price(i: int) -> tuple[int, int, int]:
    face = (100 + (i % 50) * 10) * 100
    discount = face * 2 // 100
    return face, discount, face - discount


def recharges(n: int) -> Iterator[tuple]:
    """Recharge rows in the worker's column order (partnerkit.store.matching.BULK_RECHARGE_COLUMNS)."""
    times = _times(n)
    for i in range(n):
        slot = i % 100
        face, discount, payable = _price(i)
        status = "FAILED" if slot in (3, 10) else "PROCESSING" if slot == 6 else "SUCCESS"
        provider_only = slot == 8
        yield (i + 1, None if provider_only else f"k{i:09d}", i + 1, f"RCH{i + 1:09d}",
               "provider" if provider_only else "partner", "9800000000", status, face, discount, payable, "INR",
               None if provider_only else times[i], times[i])


def orders_of(n: int) -> int:
    """How many voucher orders the day has beside its n recharges (1 per 100)."""
    return n // 100


def transactions(n: int, order_sink: list, voucher_sink: list) -> Iterator[tuple]:
    """The day's wallet transactions in time order, balance_after chained (orders collected on the side)."""
    times = _times(n)
    balance = 10_000_000_000
    tid = 0
    for i in range(n):
        slot = i % 100
        when = times[i]
        face, _, payable = _price(i)
        ref, rid = f"RCH{i + 1:09d}", i + 1
        debits = 0 if slot == 0 else 2 if slot == 2 else 1
        for _ in range(debits):
            amount = face if slot == 1 else payable
            balance -= amount
            if slot == 9:
                balance += 100  # a one-rupee jump the amounts do not explain
            tid += 1
            yield (str(tid), "RECHARGE", -amount, None, ref, rid, "INR", when, balance, None, SYNCED_AT)
        if slot in (4, 10):  # credited back: an unexpected refund (SUCCESS) or the FAILED one's due credit
            balance += payable
            tid += 1
            yield (str(tid), "REFUND", payable, None, ref, rid, "INR", when, balance, None, SYNCED_AT)
        if slot == 5:
            balance -= 1000
            tid += 1
            yield (str(tid), "RECHARGE", -1000, None, f"GHOST{i}", None, "INR", when, balance, None, SYNCED_AT)
        if slot == 50:  # one voucher order per 100 recharges; 1% of orders short of vouchers
            oid = i // 100 + 1
            balance -= 50000
            tid += 1
            order_sink.append((oid, "DELIVERED", "INR", 1, 50000, tid, when, SYNCED_AT))
            if oid % 100 != 1:
                voucher_sink.append((oid, f"fp{oid}", SYNCED_AT))
            yield (str(tid), "ORDER", -50000, oid, None, None, "INR", when, balance, None, SYNCED_AT)


def seen(n: int) -> Iterator[tuple[int, str]]:
    """Provider ids the day's complete sync listed (all but the unknown_to_provider slot)."""
    return ((i + 1, SYNCED_AT) for i in range(n) if i % 100 != 7)
