"""A deterministic synthetic day: N recharges with their transactions, ~1% of records per drift kind.

Slots (i % 100) plant one drift kind each; every other record reconciles. No randomness: record i
is a function of i, so two runs of one size load byte-identical days.

Three sources, as in production:
- `worker_rows`: the recharges partnerkit submitted during the day, as the worker's submit left
  them in the store (written one at a time through the day, so not part of the timed load);
- `provider_recharges` / `provider_transactions`: the provider's lists for the day, page by page,
  as the client yields them (`Recharge` records, raw transaction dicts with Decimal money);
- `orders`: the receiver's voucher orders of the day (synced by its own order sync).
"""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from typing import Iterator

from partnerkit.client._records import Recharge

DAY = date(2025, 1, 15)
SLOTS = {0: "missing_debit", 1: "amount_mismatch", 2: "duplicate_debit", 3: "missing_refund",
         4: "unexpected_refund", 5: "orphan_transaction", 6: "stuck_processing", 7: "unknown_to_provider",
         8: "unknown_to_partner", 9: "balance_discontinuity"}
SYNCED_AT = "2025-01-16T01:00:00Z"
SETTLED_LATE = f"{DAY.isoformat()}T23:59:59Z"  # slot 3: answered 202 PROCESSING, settled FAILED later


def _times(n: int) -> list[str]:
    stamps = [f"{DAY.isoformat()}T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z" for s in range(86400)]
    return [stamps[i * 86400 // n] for i in range(n)]


def _price(i: int) -> tuple[int, int, int]:
    face = (100 + (i % 50) * 10) * 100
    discount = face * 2 // 100
    return face, discount, face - discount


def _status(slot: int) -> str:
    return "FAILED" if slot in (3, 10) else "PROCESSING" if slot == 6 else "SUCCESS"


def worker_rows(n: int) -> Iterator[tuple]:
    """Rows partnerkit's submits left (partnerkit.store.matching.BULK_RECHARGE_COLUMNS order)."""
    times = _times(n)
    for i in range(n):
        slot = i % 100
        if slot == 8:
            continue  # unknown_to_partner: submitted by someone else, partnerkit has no row
        face, discount, payable = _price(i)
        status = "PROCESSING" if slot == 3 else _status(slot)
        yield (i + 1, f"k{i:09d}", i + 1, f"RCH{i + 1:09d}", "partner", "9800000000", status, face, discount,
               payable, "INR", times[i], times[i], times[i])


def _money(paise: int) -> Decimal:
    return Decimal(paise).scaleb(-2)


def provider_recharges(n: int, page: int) -> Iterator[list[Recharge]]:
    """The provider's recharge list for the day, a page at a time (slot 7 is missing from it)."""
    times = _times(n)
    for first in range(0, n, page):
        batch = []
        for i in range(first, min(n, first + page)):
            slot = i % 100
            if slot == 7:
                continue  # unknown_to_provider
            face, discount, payable = _price(i)
            raw = {"id": i + 1, "reference_number": f"RCH{i + 1:09d}", "status": _status(slot),
                   "mobile_number": "9800000000", "face": _money(face), "discount": _money(discount),
                   "payable": _money(payable), "currency": "INR", "created_at": times[i],
                   "updated_at": SETTLED_LATE if slot == 3 else times[i]}
            batch.append(Recharge.from_payload(raw))
        yield batch


def _tx(tid: int, kind: str, amount: int, order_id, ref, rid, when: str, balance: int) -> dict:
    record = {"id": str(tid), "type": kind, "amount": _money(amount), "currency": "INR", "created_at": when,
              "balance_after": _money(balance)}
    if order_id is not None:
        record["order_id"] = order_id
    if ref is not None:
        record["reference_number"] = ref
    if rid is not None:
        record["recharge_id"] = rid
    return record


def _transactions(n: int) -> Iterator[dict]:
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
            yield _tx(tid, "RECHARGE", -amount, None, ref, rid, when, balance)
        if slot in (4, 10):  # credited back: an unexpected refund (SUCCESS) or the FAILED one's due credit
            balance += payable
            tid += 1
            yield _tx(tid, "REFUND", payable, None, ref, rid, when, balance)
        if slot == 5:
            balance -= 1000
            tid += 1
            yield _tx(tid, "RECHARGE", -1000, None, f"GHOST{i}", None, when, balance)
        if slot == 50:  # one voucher order per 100 recharges
            balance -= 50000
            tid += 1
            yield _tx(tid, "ORDER", -50000, i // 100 + 1, None, None, when, balance)


def provider_transactions(n: int, page: int) -> Iterator[list[dict]]:
    """The provider's transaction list for the day (raw dicts as the client yields them), a page at a time."""
    records = _transactions(n)
    while True:
        batch = [r for _, r in zip(range(page), records)]
        if not batch:
            return
        yield batch


def _literal(value) -> str:
    """A JSON value as the provider writes it: money as a number with its two decimals (-98.00)."""
    return str(value) if isinstance(value, (int, Decimal)) else json.dumps(value)


def provider_transaction_pages(n: int, page: int) -> Iterator[bytes]:
    """The same list as the provider sends it: each page's JSON array of records, as bytes.

    `partnerkit.money.loads` (the client's parser) reads it back into provider_transactions' dicts."""
    for batch in provider_transactions(n, page):
        records = ("{" + ", ".join(f"{json.dumps(k)}: {_literal(v)}" for k, v in r.items()) + "}" for r in batch)
        yield ("[" + ", ".join(records) + "]").encode()


def orders(n: int) -> tuple[list[tuple], list[tuple]]:
    """The day's voucher orders (one per 100 recharges; 1% of them short of vouchers) and their vouchers."""
    times = _times(n)
    rows, vouchers = [], []
    tid = 0
    for i in range(n):
        slot = i % 100
        tid += (0 if slot == 0 else 2 if slot == 2 else 1) + (slot in (4, 10)) + (slot == 5)
        if slot == 50:
            tid += 1
            oid = i // 100 + 1
            rows.append((oid, "DELIVERED", "INR", 1, 50000, tid, times[i], SYNCED_AT))
            if oid % 100 != 1:
                vouchers.append((oid, f"fp{oid}", SYNCED_AT))
    return rows, vouchers
