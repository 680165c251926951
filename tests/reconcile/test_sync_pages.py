"""reconcile.sync's page functions: the unchanged-record shortcut stores exactly what the worker's upsert stores."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from partnerkit.client._records import Recharge
from partnerkit.store import open_db
from partnerkit.store.recharges import upsert_from_provider
from reconcile.sync import store_recharge_page

NOW = datetime(2025, 1, 16, 1, 0, tzinfo=timezone.utc)
LATER = datetime(2025, 1, 16, 2, 0, tzinfo=timezone.utc)


def _record(rid: int, status: str, updated_at: str | None = "2025-01-15T10:00:05Z") -> Recharge:
    raw = {"id": rid, "reference_number": f"RCH{rid:06d}", "status": status, "mobile_number": "9800000000",
           "face": Decimal("100.00"), "discount": Decimal("2.00"), "payable": Decimal("98.00"), "currency": "INR",
           "created_at": "2025-01-15T10:00:00Z"}
    if updated_at is not None:
        raw["updated_at"] = updated_at
    return Recharge.from_payload(raw)


def _table(db) -> list[tuple]:
    return db.execute("SELECT * FROM recharges ORDER BY local_id").fetchall()


def test_page_stores_what_the_worker_upsert_stores(tmp_path):
    first = [_record(1, "SUCCESS"), _record(2, "PROCESSING"), _record(3, "SUCCESS"), _record(4, "FAILED", None)]
    second = [_record(1, "SUCCESS"),  # unchanged: skipped
              _record(2, "SUCCESS", "2025-01-15T10:09:00Z"),  # settled since: updated
              _record(3, "PROCESSING"),  # stale read of a final recharge: skipped
              _record(4, "FAILED", None),  # unchanged, no updated_at
              _record(5, "DELIVERED"),  # new (legacy status): inserted by the worker's upsert
              _record(5, "DELIVERED")]
    plain, paged = open_db(tmp_path / "plain.db"), open_db(tmp_path / "paged.db")
    for db in (plain, paged):
        upsert_from_provider(db, first, NOW)
    expected = upsert_from_provider(plain, second, LATER)
    seen, inserted = store_recharge_page(paged, second, LATER)
    assert seen == expected.seen_provider_ids == {1, 2, 3, 4, 5}
    assert inserted == expected.inserted == 1
    assert _table(paged) == _table(plain)


def _seen(db) -> list[tuple]:
    return db.execute("SELECT provider_id, seen_at FROM recharge_seen ORDER BY provider_id").fetchall()


def test_grouped_pages_store_what_page_by_page_stores(tmp_path, monkeypatch):
    """RechargePages defers the upserts, yet ends with the same rows, seen marks and counts."""
    from partnerkit.store.recharges import mark_recharges_seen
    from reconcile import sync

    monkeypatch.setattr(sync, "UPSERT_GROUP", 3)
    start = [_record(n, "PROCESSING") for n in range(1, 9)]
    pages = [[_record(1, "SUCCESS", "2025-01-15T10:01:00Z"), _record(2, "PROCESSING"), _record(9, "SUCCESS")],
             [_record(1, "FAILED", "2025-01-15T10:02:00Z"),  # names a pending record: flushes first
              _record(3, "SUCCESS", "2025-01-15T10:03:00Z"), _record(10, "DELIVERED")],
             [_record(4, "PROCESSING"), _record(5, "REVERSED", None), _record(9, "SUCCESS")],
             [_record(11, "FAILED")]]
    plain, grouped = open_db(tmp_path / "plain.db"), open_db(tmp_path / "grouped.db")
    for db in (plain, grouped):
        upsert_from_provider(db, start, NOW)
    inserted = 0
    for page in pages:
        ids, new = store_recharge_page(plain, page, LATER)
        mark_recharges_seen(plain, sorted(ids), "2025-01-16T02:00:00Z")
        inserted += new
    writer = sync.RechargePages(grouped, LATER)
    for page in pages:
        writer.add(page)
    assert writer.close() == (sum(map(len, pages)), inserted) == (10, 3)
    assert _table(grouped) == _table(plain)
    assert _seen(grouped) == _seen(plain)


def test_unchanged_records_are_found_by_the_providers_text_or_the_same_instant(tmp_path):
    from reconcile.sync import _partition

    db = open_db(tmp_path / "p.db")
    upsert_from_provider(db, [_record(1, "SUCCESS"), _record(2, "SUCCESS"), _record(3, "PROCESSING")], NOW)
    page = [_record(1, "SUCCESS"),  # the same text
            _record(2, "SUCCESS", "2025-01-15T10:00:05+00:00"),  # the same instant written another way
            _record(3, "PROCESSING", "2025-01-15T10:00:06Z"),  # a second later: the upsert must see it
            _record(4, "SUCCESS")]  # not stored yet
    seen, rest = _partition(db, page)
    assert seen == [1, 2] and [r.id for r in rest] == [3, 4]


def _tx(n: int, amount: str = "-98.00", **extra) -> dict:
    return {"id": f"T{n}", "type": "RECHARGE", "amount": Decimal(amount), "currency": "INR",
            "created_at": "2025-01-15T10:00:00Z", "reference_number": f"RCH{n:06d}", **extra}


def _transactions(db) -> list[tuple]:
    return db.execute("SELECT * FROM transactions ORDER BY id").fetchall()


@pytest.mark.parametrize("stage_rows", [3, 10_000])  # a writer thread with many stages, or one stage copied here
def test_transaction_pages_store_what_page_by_page_stores(tmp_path, monkeypatch, stage_rows):
    from reconcile import ledger_writer as sync

    monkeypatch.setattr(sync, "STAGE_ROWS", stage_rows)
    pages = [[_tx(1), _tx(2, note="kept in raw"), _tx(3, amount="-98.0")],  # shape only, shape + extras, whole raw
             [_tx(4), {"no": "id"}, _tx(1, reference_number="RCH1-LAST")],  # a quarantine; T1 again: its last copy stays
             [_tx(5, direction="DEBIT", amount="98.00")], [_tx(2, reference_number="RCH2-LAST")], [_tx(6)]]
    plain, staged = open_db(tmp_path / "plain.db"), open_db(tmp_path / "staged.db")
    for page in pages:
        sync.store_transaction_page(plain, page, "2025-01-16T01:00:00Z")
    with sync.TransactionPages(staged, "2025-01-16T01:00:00Z") as writer:
        for page in pages:
            writer.add(page)
        assert writer.close() == (8, 1)
    assert _transactions(staged) == _transactions(plain)
    assert [r[4] for r in _transactions(staged)][:2] == ["RCH1-LAST", "RCH2-LAST"]
    assert staged.execute("SELECT * FROM transaction_shapes").fetchall() == \
        plain.execute("SELECT * FROM transaction_shapes").fetchall()
    assert len(staged.execute("SELECT * FROM transaction_quarantine").fetchall()) == 1


def test_a_failed_copy_fails_the_sync_and_stops_the_writer(tmp_path, monkeypatch):
    from partnerkit.errors import StorageError
    from partnerkit.store import ledger as ledger_store
    from reconcile import ledger_writer as sync

    monkeypatch.setattr(sync, "STAGE_ROWS", 2)

    def broken(stage, path, stamp):
        raise StorageError("storing transactions failed: disk I/O error")

    monkeypatch.setattr(ledger_store, "copy_stage", broken)
    db = open_db(tmp_path / "p.db")
    with pytest.raises(StorageError, match="disk I/O error"):
        with sync.TransactionPages(db, "2025-01-16T01:00:00Z") as writer:
            for n in range(1, 9):
                writer.add([_tx(n)])
            writer.close()
    assert not [t for t in threading.enumerate() if t.name == "transaction-writer"]


class _ListOf:
    """A client whose recharge list holds these records, and these unreadable ones."""

    def __init__(self, records, unreadable=()):
        self.records, self.unreadable = records, unreadable

    def iter_recharges(self, *, from_date, to_date, limit, on_malformed=None):
        from partnerkit.errors import MalformedResponse

        for body in self.unreadable:
            on_malformed(MalformedResponse("Recharge.status: missing", body=body, field="status"))
        return iter(self.records)


def test_an_unreadable_recharge_is_quarantined_and_released_once_read_again(tmp_path):
    from partnerkit.store import quarantine
    from reconcile.sync import sync_recharges

    db = open_db(tmp_path / "p.db")
    day = NOW.date()
    bad = {"id": 2, "reference_number": "RCH000002"}  # no status
    assert sync_recharges(db, _ListOf([_record(1, "SUCCESS")], [bad]), day, day, now=NOW) == (1, 1)
    assert [(q["key"], q["reason"]) for q in quarantine.held(db, "recharge")] == \
        [("recharge:2", "recharge record unreadable: Recharge.status: missing")]
    upsert_from_provider(db, [_record(2, "SUCCESS")], NOW)  # e.g. the poller read it since
    quarantine.hold(db, "recharge", [("recharge record unreadable: again", bad)], now=NOW)
    sync_recharges(db, _ListOf([_record(1, "SUCCESS"), _record(2, "SUCCESS")]), day, day, now=LATER)
    assert quarantine.held(db, "recharge") == []  # stored unchanged, so released here


def test_a_provider_read_keeps_what_it_does_not_carry_and_final_states_settle_once(tmp_path):
    """The worker's upsert assigns an indexed column only when its value changes (store/recharges/_provider.py
    _write); what it stores must still be: absent fields keep theirs, the poll schedule stays while
    PROCESSING, the first settled_at stays, a reference_number or client_reference fills in where the row
    had none (one that differs from the row's is another recharge: tests/worker/test_recharge_identity.py)."""
    db = open_db(tmp_path / "pk.db")

    def read(status: str, updated: str, **fields) -> dict:
        raw = {"id": 7, "status": status, "mobile_number": "9800000000", "face": Decimal("100.00"),
               "payable": Decimal("98.00"), "created_at": "2025-01-15T10:00:00Z", "updated_at": updated, **fields}
        return {k: v for k, v in raw.items() if v is not None}

    def row() -> dict:
        cursor = db.execute("SELECT reference_number, client_reference, status, next_poll_at, settled_at, operator,"
                            " currency, updated_at, provider_created_at FROM recharges WHERE provider_id = 7")
        return dict(zip([c[0] for c in cursor.description], cursor.fetchone()))

    upsert_from_provider(db, [read("PROCESSING", "2025-01-15T10:00:01Z", operator="Jio")], NOW)
    db.execute("UPDATE recharges SET next_poll_at = '2025-01-16T01:00:05Z' WHERE provider_id = 7")
    upsert_from_provider(db, [read("PROCESSING", "2025-01-15T10:00:02Z", reference_number="RCH7",
                                   client_reference="mine")], NOW)
    assert row() == {"reference_number": "RCH7", "client_reference": "mine", "status": "PROCESSING",
                     "next_poll_at": "2025-01-16T01:00:05Z", "settled_at": None, "operator": "Jio",
                     "currency": "INR", "updated_at": "2025-01-15T10:00:02Z",
                     "provider_created_at": "2025-01-15T10:00:00Z"}
    upsert_from_provider(db, [read("SUCCESS", "2025-01-15T10:00:09Z")], LATER)
    settled = row()
    assert (settled["status"], settled["next_poll_at"], settled["reference_number"], settled["client_reference"]) == \
        ("SUCCESS", None, "RCH7", "mine")
    assert settled["settled_at"] == "2025-01-16T02:00:00Z"
    upsert_from_provider(db, [read("REVERSED", "2025-01-15T11:00:00Z")], LATER.replace(hour=5))
    assert row()["settled_at"] == "2025-01-16T02:00:00Z" and row()["status"] == "REVERSED"  # first settle kept
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)  # every index agrees with the table


@pytest.mark.parametrize("body,reason", [
    ({"wallets": [{"id": 3, "balance": Decimal("10.00")}]}, "no currency"),
    ({"wallets": [{"id": 3, "currency": 840, "balance": Decimal("10.00")}]}, "no currency"),
    ({"wallets": [{"id": 3, "currency": "INR", "balance": "ten"}]}, "is not an amount"),
    ({"wallets": [{"id": 3, "currency": "INR", "Balance": Decimal("10.001")}]}, "more than 2 decimal places"),
    ({"wallets": ["INR 10.00"]}, "not an object"),
    ("wallets unavailable", "not a list of wallets"),
])
def test_a_wallet_record_that_cannot_be_read_is_returned_with_its_reason_never_guessed(body, reason):
    from reconcile.sync import wallet_rows

    rows, bad = wallet_rows(body, "2025-01-16T01:00:00Z")
    assert rows == [] and len(bad) == 1 and reason in bad[0][0]


@pytest.mark.parametrize("body,cents", [
    ({"data": [{"ID": 1, "Currency": "inr", "available_balance": Decimal("5.50")}]}, 550),
    ([{"id": 1, "currency": "INR", "balance": "5.50"}], 550),
    ({"id": 1, "currency": "INR", "amount": 5}, 500),
])
def test_wallet_rows_read_keys_in_any_case_under_each_envelope_it_tolerates(body, cents):
    from reconcile.sync import wallet_rows

    rows, bad = wallet_rows(body, "T")
    assert bad == [] and [r[:4] for r in rows] == [("T", "1", "INR", cents)]
