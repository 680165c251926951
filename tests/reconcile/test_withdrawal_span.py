"""A complete transaction read withdraws only what it certainly covered: the stored entries between the earliest
and the latest it listed (docs/reconcile.md, "Withdrawn transactions").

The provider's document does not say in which time zone it reads `from_date`/`to_date`. These stand-ins are a
provider that reads them in IST (UTC+05:30): its list of day D is [D-1 18:30Z, D 18:30Z). The sandbox's days are
UTC, so it cannot show it; the records and pages are the client's as it yields them.
"""

from __future__ import annotations

import logging
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from partnerkit.errors import BudgetExhausted
from partnerkit.store import open_db, quarantine
from partnerkit.timeutil import parse_ts
from reconcile import sync

IST = timezone(timedelta(hours=5, minutes=30))
D = date(2025, 1, 15)
T1 = datetime(2025, 1, 17, 2, 0, tzinfo=timezone.utc)
T2, T3, T4 = T1 + timedelta(minutes=15), T1 + timedelta(minutes=30), T1 + timedelta(minutes=45)


def _tx(n: int, at: str) -> dict:
    return {"id": n, "type": "RECHARGE", "amount": Decimal("-98.00"), "currency": "INR", "created_at": at,
            "recharge_id": n}


class _Walk:
    """One walk of the list: its pages newest first, read on from `start_page`; the budget runs out after
    `pages` pages when given (BudgetExhausted, as the client's walk raises it)."""

    def __init__(self, records: list[dict], limit: int, start_page: int, pages: int | None) -> None:
        self.records, self.limit, self.next_page, self.pages = records, limit, start_page, pages

    def __iter__(self):
        read = 0
        while True:
            if self.pages is not None and read == self.pages:
                raise BudgetExhausted("no room left in this hour's budget")
            page = self.records[(self.next_page - 1) * self.limit:self.next_page * self.limit]
            if not page:
                return
            yield from page
            self.next_page += 1
            read += 1


class _IstProvider:
    """The provider's transaction list, its days read in IST, newest first; `pages`: the budget's pages."""

    def __init__(self, *records: dict, pages: int | None = None) -> None:
        self.history, self.pages = {r["id"]: r for r in records}, pages

    def drop(self, ident: int) -> None:
        del self.history[ident]

    def iter_transactions(self, *, from_date, to_date, limit, start_page=1):
        start = datetime.combine(from_date, datetime.min.time(), tzinfo=IST)
        end = datetime.combine(to_date + timedelta(days=1), datetime.min.time(), tzinfo=IST)
        listed = [r for r in self.history.values() if start <= parse_ts(r["created_at"], field="created_at") < end]
        listed.sort(key=lambda r: r["created_at"], reverse=True)
        return _Walk(listed, limit, start_page, self.pages)


@pytest.fixture
def ldb(tmp_path, migrated_file):
    database = open_db(migrated_file(tmp_path / "w.db"))
    yield database
    database.conn.close()


def _ids(db) -> list[int]:
    return sorted(int(row[0]) for row in db.execute("SELECT id FROM transactions"))


def _held(db) -> dict[str, bool]:
    return quarantine.held_transaction_ids(db)


# D's UTC day holds 1-5; the provider's (IST) day D holds 0-4, its day D+1 holds 5 (D 20:00Z) and 6.
HISTORY = [_tx(0, "2025-01-14T19:00:00Z"), _tx(1, "2025-01-15T01:00:00Z"), _tx(2, "2025-01-15T09:00:00Z"),
           _tx(3, "2025-01-15T10:00:00Z"), _tx(4, "2025-01-15T12:00:00Z"), _tx(5, "2025-01-15T20:00:00Z"),
           _tx(6, "2025-01-16T03:00:00Z")]


def test_an_entry_of_the_read_days_the_provider_lists_on_its_next_day_is_not_withdrawn(ldb, caplog):
    provider = _IstProvider(*HISTORY)
    sync.sync_transactions(ldb, provider, D + timedelta(days=1), D + timedelta(days=1), now=T1)  # stores 5 and 6
    with caplog.at_level(logging.WARNING, logger="reconcile"):
        sync.sync_transactions(ldb, provider, D, D, now=T2)  # lists 0-4, not 5 (D 20:00Z, in its day D+1)
    assert _ids(ldb) == [0, 1, 2, 3, 4, 5, 6]
    assert _held(ldb) == {}
    assert "withdrawn" not in caplog.text


def test_an_entry_inside_the_listed_span_that_the_provider_dropped_is_withdrawn(ldb):
    provider = _IstProvider(*HISTORY)
    sync.sync_transactions(ldb, provider, D, D + timedelta(days=1), now=T1)  # every entry stored
    provider.drop(3)
    sync.sync_transactions(ldb, provider, D, D, now=T2)
    assert _ids(ldb) == [0, 1, 2, 4, 5, 6]
    assert _held(ldb) == {"3": True}
    sync.sync_transactions(ldb, _IstProvider(*HISTORY), D, D, now=T3)  # listed again: restored
    assert _ids(ldb) == [0, 1, 2, 3, 4, 5, 6] and _held(ldb) == {}


def test_an_entry_after_the_last_listed_one_waits_for_a_read_that_lists_past_it(ldb):
    provider = _IstProvider(*HISTORY)
    sync.sync_transactions(ldb, provider, D, D + timedelta(days=1), now=T1)
    provider.drop(4)  # the last entry of the provider's day D
    sync.sync_transactions(ldb, provider, D, D, now=T2)
    assert 4 in _ids(ldb) and _held(ldb) == {}, "after the last entry listed: maybe beyond the provider's day"
    sync.sync_transactions(ldb, provider, D, D + timedelta(days=1), now=T3)  # lists 0-3, 5 and 6
    assert 4 not in _ids(ldb) and _held(ldb) == {"4": True}


def test_the_span_reaches_past_the_read_days_utc_edge(ldb):
    # 0 (D-1 19:00Z) is on the UTC day before D, in the provider's day D: only a read of D can check it.
    provider = _IstProvider(_tx(9, "2025-01-14T18:45:00Z"), *HISTORY)
    sync.sync_transactions(ldb, provider, D, D, now=T1)
    provider.drop(0)
    sync.sync_transactions(ldb, provider, D - timedelta(days=1), D - timedelta(days=1), now=T2)
    assert 0 in _ids(ldb), "the provider's day D-1 ends at D-1 18:30Z: its read cannot vouch for 0"
    sync.sync_transactions(ldb, provider, D, D, now=T3)  # lists 9 (D-1 18:45Z) and 1-4
    assert 0 not in _ids(ldb) and _held(ldb) == {"0": True}


def test_a_read_in_two_parts_withdraws_within_what_both_parts_listed(ldb, monkeypatch):
    monkeypatch.setattr(sync, "TRANSACTION_PAGE", 2)
    records = HISTORY[:5] + [_tx(7, "2025-01-15T12:30:00Z"), _tx(8, "2025-01-15T13:00:00Z")]
    sync.sync_transactions(ldb, _IstProvider(*records), D, D, now=T1)
    provider = _IstProvider(*records, pages=1)
    provider.drop(7)  # newest first: on the first part's page (8, 4), above everything the second part lists
    with pytest.raises(BudgetExhausted):
        sync.sync_transactions(ldb, provider, D, D, now=T2)
    assert 7 in _ids(ldb), "a read stopped part-way withdraws nothing"
    provider.pages = None
    sync.sync_transactions(ldb, provider, D, D, now=T3)  # reads on from page 2: 3, 2, 1, 0
    assert _ids(ldb) == [0, 1, 2, 3, 4, 8]
    assert _held(ldb) == {"7": True}


def test_rows_another_read_listed_meanwhile_do_not_widen_a_read_in_two_parts(ldb, monkeypatch):
    monkeypatch.setattr(sync, "TRANSACTION_PAGE", 2)
    records = HISTORY + [_tx(7, "2025-01-15T12:30:00Z"), _tx(8, "2025-01-15T13:00:00Z"),
                         _tx(10, "2025-01-15T22:00:00Z")]
    sync.sync_transactions(ldb, _IstProvider(*records), D, D + timedelta(days=1), now=T1)  # every entry stored
    provider = _IstProvider(*records, pages=1)
    with pytest.raises(BudgetExhausted):
        sync.sync_transactions(ldb, provider, D, D, now=T2)  # its first part: 8 and 7
    with pytest.raises(BudgetExhausted):  # the next day's read, stopped too: 6 and 10 (D 22:00Z), not 5 (D 20:00Z)
        sync.sync_transactions(ldb, provider, D + timedelta(days=1), D + timedelta(days=1), now=T3)
    provider.pages = None
    sync.sync_transactions(ldb, provider, D, D, now=T4)  # reads on from page 2: 4, 3, 2, 1, 0
    assert _ids(ldb) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert _held(ldb) == {}, "5 lies in the provider's day D+1: what the other read listed is not this read's"


class _Unordered(_IstProvider):
    """A list in no time order (the document shows none for transactions): in the order the records were given."""

    def iter_transactions(self, *, from_date, to_date, limit, start_page=1):
        walk = super().iter_transactions(from_date=from_date, to_date=to_date, limit=limit, start_page=start_page)
        walk.records = [r for r in self.history.values() if r in walk.records]
        return walk


def test_a_list_in_no_time_order_withdraws_within_its_first_and_last_records_only(ldb):
    records = [_tx(3, "2025-01-15T10:00:00Z"), _tx(2, "2025-01-15T09:00:00Z"), _tx(11, "2025-01-15T09:30:00Z"),
               _tx(12, "2025-01-15T10:30:00Z"), _tx(4, "2025-01-15T12:00:00Z"), _tx(13, "2025-01-15T11:00:00Z")]
    sync.sync_transactions(ldb, _Unordered(*records), D, D, now=T1)
    provider = _Unordered(*records)
    provider.drop(11)
    provider.drop(12)
    sync.sync_transactions(ldb, provider, D, D, now=T2)  # lists 3, 2, 4, 13: first 10:00Z, last 11:00Z
    assert _held(ldb) == {"12": True}, "10:30Z lies between them; 09:30Z only between records listed in between"
    assert 11 in _ids(ldb)
