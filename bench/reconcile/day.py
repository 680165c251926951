"""A deterministic synthetic day: N recharges with their transactions, ~1% of records per drift kind.

Slots (i % 100) plant one drift kind each; every other record reconciles. No randomness: record i
is a function of i, so two runs of one size load byte-identical days.

`index` (keyword, 0 by default) makes the day the index-th of a history of consecutive days of the
same size that starts on DAY (bench.reconcile.history): its date is DAY + index days, and its
recharge, transaction and order ids, references and idempotency keys follow the index days before
it, as does its wallet balance (a day's first balance_after chains from the last of the day
before). Index 0 is the day bench.reconcile has always loaded, byte for byte.

Three sources, as in production:
- `worker_rows`: the recharges partnerkit submitted during the day, as the worker's submit left
  them in the store (written one at a time through the day, so not part of the timed load);
- `provider_recharges` / `provider_transactions`: the provider's lists for the day, page by page,
  as the client yields them (`Recharge` records, raw transaction dicts with Decimal money);
- `orders`: the receiver's voucher orders of the day (synced by its own order sync).
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from functools import lru_cache
from decimal import Decimal
from typing import Iterator

from partnerkit.client._records import Recharge

DAY = date(2025, 1, 15)
OPENING_BALANCE = 10_000_000_000  # paise, before the history's first day
SLOTS = {0: "missing_debit", 1: "amount_mismatch", 2: "duplicate_debit", 3: "missing_refund",
         4: "unexpected_refund", 5: "orphan_transaction", 6: "stuck_processing", 7: "unknown_to_provider",
         8: "unknown_to_partner", 9: "balance_discontinuity"}
SYNCED_AT = "2025-01-16T01:00:00Z"


def day_of(index: int = 0) -> date:
    """The date of the index-th day of a history that starts on DAY."""
    return DAY + timedelta(days=index)


def synced_at(index: int = 0) -> str:
    """When the receiver's order sync stored the day's orders: 01:00 the next day (SYNCED_AT for index 0)."""
    return f"{day_of(index + 1).isoformat()}T01:00:00Z"


def _settled_late(index: int) -> str:
    """Slot 3's updated_at: answered 202 PROCESSING, settled FAILED at the day's last second."""
    return f"{day_of(index).isoformat()}T23:59:59Z"


def _times(n: int, index: int = 0) -> list[str]:
    day = day_of(index).isoformat()
    stamps = [f"{day}T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z" for s in range(86400)]
    return [stamps[i * 86400 // n] for i in range(n)]


def _debits(slot: int) -> int:
    return 0 if slot == 0 else 2 if slot == 2 else 1


def _tx_in_slot(slot: int) -> int:
    """How many transactions record i of this slot has (see _transactions)."""
    return _debits(slot) + (slot in (4, 10)) + (slot == 5) + (slot == 50)


@lru_cache(maxsize=8)
def _offsets(n: int) -> tuple[int, int, int]:
    """(transactions, orders, wallet balance change in paise) of one day of n recharges."""
    per_slot = [_tx_in_slot(slot) for slot in range(100)]
    transactions = n // 100 * sum(per_slot) + sum(per_slot[:n % 100])
    orders = (n + 99) // 100
    change = 0
    for i in range(n):
        slot = i % 100
        face, _, payable = _price(i)
        change -= _debits(slot) * ((face if slot == 1 else payable) - (100 if slot == 9 else 0))
        change += payable if slot in (4, 10) else 0
        change -= 1000 if slot == 5 else 0
        change -= 50000 if slot == 50 else 0
    return transactions, orders, change


def _starts(n: int, index: int) -> tuple[int, int, int, int]:
    """Where the index-th day's ids start (recharges, transactions, orders) and its opening balance."""
    if index == 0:
        return 0, 0, 0, OPENING_BALANCE
    transactions, orders, change = _offsets(n)
    return index * n, index * transactions, index * orders, OPENING_BALANCE + index * change


def _price(i: int) -> tuple[int, int, int]:
    face = (100 + (i % 50) * 10) * 100
    discount = face * 2 // 100
    return face, discount, face - discount


def _status(slot: int) -> str:
    return "FAILED" if slot in (3, 10) else "PROCESSING" if slot == 6 else "SUCCESS"


def worker_rows(n: int, *, index: int = 0) -> Iterator[tuple]:
    """Rows partnerkit's submits left (partnerkit.store.bulk.BULK_RECHARGE_COLUMNS order)."""
    times = _times(n, index)
    first = _starts(n, index)[0]
    for i in range(n):
        slot = i % 100
        if slot == 8:
            continue  # unknown_to_partner: submitted by someone else, partnerkit has no row
        face, discount, payable = _price(i)
        status = "PROCESSING" if slot == 3 else _status(slot)
        rid = first + i + 1
        # Local ids leave room after each day for the rows the sync inserts (recharges partnerkit never
        # submitted take the next free local id, as in production).
        yield (2 * first + i + 1, f"k{first + i:09d}", rid, f"RCH{rid:09d}", "partner", "9800000000", status, face,
               discount, payable, "INR", times[i], times[i], times[i])


def _money(paise: int) -> Decimal:
    return Decimal(paise).scaleb(-2)


def provider_recharges(n: int, page: int, *, index: int = 0) -> Iterator[list[Recharge]]:
    """The provider's recharge list for the day, a page at a time (slot 7 is missing from it)."""
    times = _times(n, index)
    offset, settled_late = _starts(n, index)[0], _settled_late(index)
    for first in range(0, n, page):
        batch = []
        for i in range(first, min(n, first + page)):
            slot = i % 100
            if slot == 7:
                continue  # unknown_to_provider
            face, discount, payable = _price(i)
            rid = offset + i + 1
            raw = {"id": rid, "reference_number": f"RCH{rid:09d}", "status": _status(slot),
                   "mobile_number": "9800000000", "face": _money(face), "discount": _money(discount),
                   "payable": _money(payable), "currency": "INR", "created_at": times[i],
                   "updated_at": settled_late if slot == 3 else times[i]}
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


def _transactions(n: int, index: int = 0) -> Iterator[dict]:
    times = _times(n, index)
    offset, tid, orders_before, balance = _starts(n, index)
    for i in range(n):
        slot = i % 100
        when = times[i]
        face, _, payable = _price(i)
        rid = offset + i + 1
        ref = f"RCH{rid:09d}"
        for _ in range(_debits(slot)):
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
            yield _tx(tid, "RECHARGE", -1000, None, f"GHOST{offset + i}", None, when, balance)
        if slot == 50:  # one voucher order per 100 recharges
            balance -= 50000
            tid += 1
            yield _tx(tid, "ORDER", -50000, orders_before + i // 100 + 1, None, None, when, balance)


def provider_transactions(n: int, page: int, *, index: int = 0) -> Iterator[list[dict]]:
    """The provider's transaction list for the day (raw dicts as the client yields them), a page at a time."""
    records = _transactions(n, index)
    while True:
        batch = [r for _, r in zip(range(page), records)]
        if not batch:
            return
        yield batch


def _literal(value) -> str:
    """A JSON value as the provider writes it: money as a number with its two decimals (-98.00)."""
    return str(value) if isinstance(value, (int, Decimal)) else json.dumps(value)


def provider_transaction_pages(n: int, page: int, *, index: int = 0) -> Iterator[bytes]:
    """The same list as the provider sends it: each page's JSON array of records, as bytes.

    `partnerkit.money.loads` (the client's parser) reads it back into provider_transactions' dicts."""
    for batch in provider_transactions(n, page, index=index):
        records = ("{" + ", ".join(f"{json.dumps(k)}: {_literal(v)}" for k, v in r.items()) + "}" for r in batch)
        yield ("[" + ", ".join(records) + "]").encode()


def orders(n: int, *, index: int = 0) -> tuple[list[tuple], list[tuple]]:
    """The day's voucher orders (one per 100 recharges; 1% of them short of vouchers) and their vouchers."""
    times = _times(n, index)
    _, tid, orders_before, _ = _starts(n, index)
    stored_at = synced_at(index)
    rows, vouchers = [], []
    for i in range(n):
        slot = i % 100
        tid += _debits(slot) + (slot in (4, 10)) + (slot == 5)
        if slot == 50:
            tid += 1
            oid = orders_before + i // 100 + 1
            rows.append((oid, "DELIVERED", "INR", 1, 50000, tid, times[i], stored_at))
            if oid % 100 != 1:
                vouchers.append((oid, f"fp{oid}", stored_at))
    return rows, vouchers


def settled(n: int, *, index: int = 0) -> list[Recharge]:
    """The day's PROCESSING recharges (slot 6) as the poller reads them the next morning: SUCCESS.

    A history settles each day's stuck recharges before the next (bench.reconcile.history), as the
    poller would; on its own the day leaves them PROCESSING, for its stuck_processing drifts."""
    offset = _starts(n, index)[0]
    times = _times(n, index)
    read_at = f"{day_of(index + 1).isoformat()}T00:10:00Z"
    records = []
    for i in range(6, n, 100):
        face, discount, payable = _price(i)
        rid = offset + i + 1
        records.append(Recharge.from_payload(
            {"id": rid, "reference_number": f"RCH{rid:09d}", "status": "SUCCESS", "mobile_number": "9800000000",
             "face": _money(face), "discount": _money(discount), "payable": _money(payable), "currency": "INR",
             "created_at": times[i], "updated_at": read_at, "operator_txn_id": f"OP{rid}"}))
    return records
