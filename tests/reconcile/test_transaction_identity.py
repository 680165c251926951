"""A listed wallet transaction whose id names a stored transaction it is not (session 19).

Transactions are stored by id with an upsert. A record under a stored id whose creation time (to the second),
type or currency (each where both have one) differs is another transaction: a provider that gave an id
twice, or a `--fixed-ids` sandbox started again beside a kept database. It used to rewrite the stored entry (an
earlier day's debit became another day's). Now the stored row keeps what it held, the record is quarantined as
`transaction:<id>` with the reason, and `partnerkit status` says so. The check costs a write nothing unless it
changed fewer rows than it was handed (the upsert's DO UPDATE ... WHERE skips a clash).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import requests

from partnerkit.status import collect
from partnerkit.store import ledger as ledger_store
from partnerkit.store import open_db, quarantine
from reconcile import ledger_writer, sync
from reconcile.ledger_fast import map_page
from reconcile.ledger_writer import TransactionPages, store_transaction_page

T1 = datetime(2025, 1, 15, 12, 0, tzinfo=timezone.utc)
T2, T3, T4 = T1 + timedelta(minutes=15), T1 + timedelta(minutes=30), T1 + timedelta(minutes=45)
D = T1.date()
STAMP = "2025-01-15T12:00:00Z"


def _tx(n, **changes) -> dict:
    raw = {"id": n, "type": "RECHARGE", "amount": Decimal("-98.00"), "currency": "INR",
           "created_at": f"{D}T10:00:00Z", "recharge_id": 1, "reference_number": "RCH1"}
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


class _List:
    """The provider's transaction list as the client yields it."""

    def __init__(self, *records) -> None:
        self.records = list(records)

    def iter_transactions(self, *, from_date, to_date, limit):
        return iter(self.records)


@pytest.fixture
def ldb(tmp_path, migrated_file):
    database = open_db(migrated_file(tmp_path / "t.db"))
    yield database
    database.conn.close()


def _row(db, ident) -> tuple:
    return db.execute("SELECT * FROM transactions WHERE id = ?", (str(ident),)).fetchone()


def _synced(db, ident) -> str:
    return db.execute("SELECT synced_at FROM transactions WHERE id = ?", (str(ident),)).fetchone()[0]


def _held(db) -> dict:
    return {q["key"]: q for q in quarantine.held(db, "transaction")}


def _staged(db, records, stamp):
    """Through TransactionPages with a writer thread: every two rows a stage copied by INSERT ... SELECT."""
    with TransactionPages(db, stamp) as pages:
        for record in records:
            pages.add([record])
        return pages.close()


WRITES = [pytest.param(lambda db, records, stamp: store_transaction_page(db, records, stamp), id="page"),
          pytest.param(_staged, id="staged")]

OTHER_DAY = f"{D + timedelta(days=1)}T09:30:00Z"


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("changes, differs", [
    ({"created_at": f"{D}T10:00:01Z"}, f"created_at {D}T10:00:01Z (stored {D}T10:00:00Z)"),
    ({"type": "ORDER"}, "type ORDER (stored RECHARGE)"),
    ({"currency": "EUR"}, "currency EUR (stored INR)"),
    # A fixed-ids sandbox started again: another debit, another day, under the same id.
    ({"amount": Decimal("-20.00"), "created_at": OTHER_DAY, "type": "ORDER", "recharge_id": None},
     f"amount -20.00 (stored -98.00), created_at {OTHER_DAY} (stored {D}T10:00:00Z), type ORDER (stored RECHARGE)"),
])
def test_a_record_of_another_transaction_is_quarantined_and_the_stored_row_kept(ldb, monkeypatch, write, changes,
                                                                                  differs):
    monkeypatch.setattr(ledger_writer, "STAGE_ROWS", 2)
    write(ldb, [_tx(700001), _tx(700002)], STAMP)
    before = _row(ldb, 700001)
    result = write(ldb, [_tx(700002), _tx(700001, **changes), _tx(700003)], "2025-01-15T12:05:00Z")
    assert _row(ldb, 700001) == before, "the stored entry keeps every column, its synced_at too"
    assert _synced(ldb, 700002) == "2025-01-15T12:05:00Z" and _row(ldb, 700003) is not None  # the others stored
    if result is not None:
        assert result == (2, 1)  # (stored, quarantined)
    [held] = _held(ldb).values()
    assert held["key"] == "transaction:700001"
    assert held["reason"] == ("transaction id given twice: transaction 700001 is stored for another transaction"
                              f" (RECHARGE -98.00 INR at {D}T10:00:00Z), this record differs: {differs}")
    assert json.loads(held["raw"]) == json.loads(json.dumps(_tx(700001, **changes), default=str))
    assert held["day"] == (changes.get("created_at") or f"{D}T")[:10]
    assert ledger_store.given_twice(ldb) == ["700001"]


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("changes", [
    {"created_at": f"{D}T10:00:00.250Z"},  # the same second
    {"amount": Decimal("-20.00")},  # the provider corrects the entry's amount in place: the same entry
    {"type": None},  # compared only where both sides show one
    {"currency": None},
    {"balance_after": Decimal("1200.00"), "order_id": 5, "reference_number": "RCH2"},  # not identity facts
])
def test_the_same_transaction_read_again_is_refreshed(ldb, monkeypatch, write, changes):
    monkeypatch.setattr(ledger_writer, "STAGE_ROWS", 2)
    write(ldb, [_tx(700001)], STAMP)
    write(ldb, [_tx(700001, **changes)], "2025-01-15T12:05:00Z")
    row = dict(zip(ledger_store.ROW_COLUMNS, _row(ldb, 700001)))
    assert _held(ldb) == {}
    assert _synced(ldb, 700001) == "2025-01-15T12:05:00Z"
    for field, value in changes.items():
        if field in ("type", "currency", "order_id", "reference_number"):
            assert row[field] == value
    assert row["amount_cents"] == int(changes.get("amount", Decimal("-98.00")) * 100)
    assert row["created_at"].startswith(changes.get("created_at", f"{D}T10:00:00Z")[:23])


def test_sqlite_counts_an_updated_row_and_not_a_skipped_one(ldb):
    """What the free common path stands on: the write compares SQLite's change count with the rows handed in."""
    def store(records):
        page = map_page(records)
        return ledger_store.store_transactions(ldb, page.runs, page.shapes, STAMP)
    assert store([_tx(1), _tx(2)]) == (2, [])
    assert store([_tx(1), _tx(2, balance_after=Decimal("5.00"))]) == (2, [])  # both refreshed
    assert store([_tx(1, created_at=f"{D}T11:00:00Z"), _tx(2), _tx(3)]) == (2, ["1"])  # 1 skipped: 2 and 3 written
    assert store([_tx(4), _tx(4, created_at=f"{D}T11:00:00Z")]) == (1, ["4"])  # the same page: its first copy stays


def test_a_clash_listed_again_stays_one_entry_and_the_true_record_releases_it(ldb, caplog):
    sync.sync_transactions(ldb, _List(_tx(700001)), D, D, now=T1)
    before = _row(ldb, 700001)
    other = _tx(700001, created_at=f"{D}T11:00:00Z")
    for now in (T2, T3):
        assert sync.sync_transactions(ldb, _List(other), D, D, now=now) == (0, 1)
    [held] = _held(ldb).values()
    assert (held["first_seen_at"], held["last_seen_at"]) == ("2025-01-15T12:15:00Z", "2025-01-15T12:30:00Z")
    assert _row(ldb, 700001) == before, "not withdrawn: its id is listed, for another transaction"
    assert "quarantined 1 transaction record(s) whose id names a stored transaction they are not" in caplog.text
    assert sync.sync_transactions(ldb, _List(_tx(700001)), D, D, now=T4) == (1, 0)
    assert _held(ldb) == {} and ledger_store.given_twice(ldb) == []


def test_a_read_listing_both_under_one_id_releases_nothing(ldb):
    sync.sync_transactions(ldb, _List(_tx(700001)), D, D, now=T1)
    sync.sync_transactions(ldb, _List(_tx(700001, created_at=f"{D}T11:00:00Z")), D, D, now=T2)
    sync.sync_transactions(ldb, _List(_tx(700001), _tx(700001, created_at=f"{D}T11:00:00Z")), D, D, now=T3)
    assert list(_held(ldb)) == ["transaction:700001"] and _row(ldb, 700001)[2] == -9800


def test_a_stored_transaction_held_as_given_twice_is_not_withdrawn_by_a_read_of_its_day(ldb):
    """The clash is listed on another day; a read of the stored entry's day alone no longer lists it. Withdrawn,
    it would leave the quarantine under the same key, and the next read of the other day would store the other
    transaction under its id and release the entry: the overwrite in two steps."""
    after = D + timedelta(days=1)
    sync.sync_transactions(ldb, _List(_tx(700001), _tx(700002)), D, D, now=T1)
    sync.sync_transactions(ldb, _List(_tx(700001, created_at=OTHER_DAY)), after, after, now=T2)
    sync.sync_transactions(ldb, _List(_tx(700002)), D, D, now=T3)  # 700001 unlisted on its day
    assert _row(ldb, 700001)[7] == f"{D}T10:00:00Z"
    assert quarantine.held_transaction_ids(ldb) == {"700001": False}
    sync.sync_transactions(ldb, _List(_tx(700001, created_at=OTHER_DAY)), after, after, now=T4)
    assert _row(ldb, 700001)[7] == f"{D}T10:00:00Z" and list(_held(ldb)) == ["transaction:700001"]


def test_status_counts_them_with_the_advice(tmp_path):
    from partnerkit.config import load_config

    config = load_config(environ={"PARTNERKIT_DB": str(tmp_path / "s.db")})
    db = open_db(config.db_path)
    try:
        sync.sync_transactions(db, _List(*[_tx(n) for n in range(1, 13)]), D, D, now=T1)
        sync.sync_transactions(db, _List(*[_tx(n, created_at=f"{D}T11:00:00Z") for n in range(1, 13)]), D, D, now=T2)
        status = collect(config, db)
    finally:
        db.conn.close()
    assert status["transactions_id_given_twice"] == 12
    assert status["transactions_id_given_twice_ids"] == [str(n) for n in range(1, 11)]
    [line] = [line for line in status["attention"] if "whose id the provider lists for another transaction" in line]
    assert line.startswith("12 stored wallet transaction(s) (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...) ")
    assert "A sandbox run with --fixed-ids gives the same ids at every start" in line


# Against the sandbox (real HTTP): `--fixed-ids` numbers transactions from 700001 at every start, as the tests do.

def _debit(server, amount: str) -> dict:
    response = requests.post(f"{server.base_url}/sandbox/transactions", timeout=10,
                             json={"type": "ORDER", "direction": "DEBIT", "amount": amount})
    assert response.status_code < 300, response.text
    return response.json()


def test_a_restarted_fixed_ids_sandbox_leaves_the_first_ones_transactions_as_they_were(tmp_path):
    pytest.importorskip("sandbox.testing")
    from tests.reconcile.reconcile_helpers import sandbox_day

    first_day = (datetime.now(timezone.utc) - timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
    second_day = first_day + timedelta(days=1)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    with sandbox_day(tmp_path, first_day) as (server, config, db, client):
        first = [_debit(server, "50.00"), _debit(server, "30.00")]
        sync.sync_transactions(db, client, first_day.date(), first_day.date(), now=now)
        kept = db.execute("SELECT * FROM transactions ORDER BY id").fetchall()
    assert [str(t["id"]) for t in first] == [row[0] for row in kept][-2:]  # after the start's own entries
    with sandbox_day(tmp_path, second_day) as (server, config, db, client):
        second = _debit(server, "20.00")
        assert second["id"] == first[0]["id"]  # the same id, another transaction
        stored, held = sync.sync_transactions(db, client, second_day.date(), second_day.date(),
                                              now=now + timedelta(minutes=5))
        assert db.execute("SELECT * FROM transactions ORDER BY id").fetchall() == kept
        entry = quarantine.held_entry(db, "transaction", str(second["id"]))
        assert entry["reason"].startswith(f"transaction id given twice: transaction {second['id']} is stored for"
                                          " another transaction (ORDER -50.00")
        assert "amount -20.00 (stored -50.00)" in entry["reason"] and stored == 0 and held == len(kept) - 1
        assert str(second["id"]) in collect(config, db)["transactions_id_given_twice_ids"]
