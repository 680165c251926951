"""A quarantined wallet transaction is keyed by its id and released once a later sync stores it correctly.

The sync reads the held ids once at its start (tests/reliability/test_provider_faults.py runs the same
against the real sandbox's `money_precision` / `missing_fields` faults); a record without an id stays
held under the sha256 of its JSON, the key every transaction had before ids were keyed.
"""

from __future__ import annotations

import hashlib
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from partnerkit.store import ledger as ledger_store
from partnerkit.store import open_db, quarantine
from reconcile import ledger_writer
from reconcile.ledger import ALIASES, canonical_json, map_transaction
from reconcile.sync import sync_transactions

DAY = date(2025, 1, 15)
SYNC_1 = datetime(2025, 1, 15, 12, 0, tzinfo=timezone.utc)
SYNC_2 = datetime(2025, 1, 15, 12, 15, tzinfo=timezone.utc)
SYNC_3 = datetime(2025, 1, 15, 12, 30, tzinfo=timezone.utc)


def _tx(n: int, amount: str = "-98.00", **extra) -> dict:
    return {"id": n, "type": "RECHARGE", "amount": Decimal(amount), "currency": "INR",
            "created_at": "2025-01-15T10:00:00Z", "recharge_id": n, **extra}


def _legacy_key(raw: dict) -> str:
    """The key a transaction was held under before ids were keyed."""
    return hashlib.sha256(canonical_json(raw).encode()).hexdigest()


NO_ID = {"amount": Decimal("-5.00"), "created_at": "2025-01-15T11:00:00Z"}


class _Transactions:
    """The provider's transaction list as the client yields it (pages of parsed JSON)."""

    def __init__(self, *records: dict) -> None:
        self.records = list(records)

    def iter_transactions(self, *, from_date, to_date, limit):
        return iter(self.records)


def _held(db) -> dict[str, str]:
    return {q["key"]: q["reason"] for q in quarantine.held(db, "transaction")}


def _stored(db) -> dict[str, int]:
    return dict(db.execute("SELECT id, amount_cents FROM transactions").fetchall())


@pytest.mark.parametrize("raw,key", [
    ({"id": 5, "amount": "1.005"}, "transaction:5"),
    ({"transaction_id": 7}, "transaction:7"),                   # the alias
    ({"ID": 7, "amount": None}, "transaction:7"),               # keys in any case, as the mapping reads them
    ({"id": 7, "transaction_id": 7}, "transaction:7"),          # aliases that agree
    ({"id": 7, "transaction_id": "7"}, "transaction:7"),
    ({"id": 7, "transaction_id": 8}, None),                     # that disagree: no id to release it by
    ({"id": "T7"}, None),                                       # not an integer
    ({"id": True}, None),
    ({"id": None, "transaction_id": ""}, None),
    (NO_ID, None),
    (["T7"], None),
])
def test_a_quarantined_transaction_is_keyed_by_its_integer_id_else_its_old_sha256_key(raw, key):
    quarantined = map_transaction(raw)
    assert quarantined.key == (key or _legacy_key(raw))
    assert quarantine.key_for("transaction", raw, text=canonical_json(raw)) == quarantined.key


def test_the_store_reads_a_transaction_id_where_the_alias_mapping_does():
    assert quarantine.TRANSACTION_ID_FIELDS == ALIASES["id"]


def test_a_transaction_is_released_once_a_later_sync_stores_it_and_an_id_less_one_stays(tmp_path):
    db = open_db(tmp_path / "q.db")
    bad = _tx(5, amount="-98.005")
    assert sync_transactions(db, _Transactions(_tx(4), bad, NO_ID), DAY, DAY, now=SYNC_1) == (1, 2)
    assert _held(db) == {"transaction:5": "amount: Decimal('-98.005') has more than 2 decimal places",
                         _legacy_key(NO_ID): "no id (id | transaction_id)"}
    assert [q["key"] for q in ledger_store.quarantined(db, DAY.isoformat())] == \
        sorted(["transaction:5", _legacy_key(NO_ID)])                          # what the day's report lists

    # The provider sends transaction 5 correctly: stored, released; the record without an id stays.
    assert sync_transactions(db, _Transactions(_tx(4), _tx(5), NO_ID), DAY, DAY, now=SYNC_2) == (2, 1)
    assert _stored(db) == {"4": -9800, "5": -9800}
    assert _held(db) == {_legacy_key(NO_ID): "no id (id | transaction_id)"}
    assert [q["key"] for q in ledger_store.quarantined(db, DAY.isoformat())] == [_legacy_key(NO_ID)]

    # Re-running changes nothing.
    table = db.execute("SELECT key, reason, raw, day, first_seen_at FROM transaction_quarantine").fetchall()
    assert sync_transactions(db, _Transactions(_tx(4), _tx(5), NO_ID), DAY, DAY, now=SYNC_3) == (2, 1)
    assert _stored(db) == {"4": -9800, "5": -9800}
    assert db.execute("SELECT key, reason, raw, day, first_seen_at FROM transaction_quarantine").fetchall() == table


def test_a_record_still_unreadable_stays_held_with_its_latest_copy(tmp_path):
    db = open_db(tmp_path / "q.db")
    sync_transactions(db, _Transactions(_tx(5, amount="-98.005")), DAY, DAY, now=SYNC_1)
    sync_transactions(db, _Transactions({"id": 5, "created_at": "2025-01-15T10:00:00Z"}), DAY, DAY, now=SYNC_2)
    [held] = quarantine.held(db, "transaction")
    assert (held["key"], held["reason"], held["first_seen_at"], held["last_seen_at"]) == \
        ("transaction:5", "no amount", "2025-01-15T12:00:00Z", "2025-01-15T12:15:00Z")
    assert held["raw"] == '{"created_at":"2025-01-15T10:00:00Z","id":5}'
    assert _stored(db) == {}


@pytest.mark.parametrize("stage_rows", [2, 10_000])  # copied by the writer thread, or by the sync itself
@pytest.mark.parametrize("pages,held", [
    ([[_tx(1), _tx(5)], [_tx(2), _tx(3)]], []),                              # held at the start, stored: released
    ([[_tx(5)], [_tx(5, amount="1.005")]], ["transaction:5"]),               # stored, then its last copy unreadable
    ([[_tx(5, amount="1.005"), _tx(1)], [_tx(2)], [_tx(5)]], []),            # unreadable, then stored in one sync
    ([[_tx(5), _tx(5, amount="1.005")]], ["transaction:5"]),                 # both in one page: it stays held
])
def test_the_last_copy_a_sync_reads_decides(tmp_path, monkeypatch, stage_rows, pages, held):
    monkeypatch.setattr(ledger_writer, "STAGE_ROWS", stage_rows)
    db = open_db(tmp_path / "q.db")
    sync_transactions(db, _Transactions(_tx(5, amount="1.005")), DAY, DAY, now=SYNC_1)
    assert list(_held(db)) == ["transaction:5"]
    with ledger_writer.TransactionPages(db, "2025-01-15T12:15:00Z", held={"5"}) as writer:
        for page in pages:
            writer.add(page)
        writer.close()
    assert list(_held(db)) == held
    assert _stored(db)["5"] == -9800


def test_nothing_is_released_when_the_sync_fails_before_its_rows_are_written(tmp_path, monkeypatch):
    from partnerkit.errors import StorageError

    def broken(stage, path, stamp):
        raise StorageError("storing transactions failed: disk I/O error")

    db = open_db(tmp_path / "q.db")
    sync_transactions(db, _Transactions(_tx(5, amount="1.005")), DAY, DAY, now=SYNC_1)
    monkeypatch.setattr(ledger_store, "copy_stage", broken)
    with pytest.raises(StorageError, match="disk I/O error"):
        sync_transactions(db, _Transactions(_tx(5)), DAY, DAY, now=SYNC_2)
    assert list(_held(db)) == ["transaction:5"]
    monkeypatch.undo()
    sync_transactions(db, _Transactions(_tx(5)), DAY, DAY, now=SYNC_3)  # the next run repairs it
    assert _held(db) == {} and _stored(db) == {"5": -9800}


def test_an_entry_held_before_ids_were_keyed_is_rekeyed_and_released_like_the_others(tmp_path):
    db = open_db(tmp_path / "q.db")
    still_bad, fixed = _tx(5, amount="1.005"), _tx(6, amount="1.005")
    old = [(_legacy_key(raw), "amount: 1.005 has more than 2 decimal places", canonical_json(raw), "2025-01-15")
           for raw in (still_bad, fixed, NO_ID)]
    ledger_store.quarantine(db, old, "2025-01-14T09:00:00Z")
    sync_transactions(db, _Transactions(still_bad, _tx(6), NO_ID), DAY, DAY, now=SYNC_1)
    rows = {q["key"]: q["first_seen_at"] for q in quarantine.held(db, "transaction")}
    # Listed once, since it was first seen; transaction 6, read correctly, is released.
    assert rows == {"transaction:5": "2025-01-14T09:00:00Z", _legacy_key(NO_ID): "2025-01-14T09:00:00Z"}
    assert quarantine.rekey_transactions(db) == 0  # done once


def test_an_old_entry_of_an_id_held_again_under_its_new_key_is_dropped(tmp_path):
    db = open_db(tmp_path / "q.db")
    first, second = _tx(5, amount="1.005"), _tx(5, amount="2.005")
    for key, reason, raw, at in [(_legacy_key(first), "old", first, "2025-01-14T09:00:00Z"),
                                 ("transaction:5", "new", second, "2025-01-15T09:00:00Z")]:
        ledger_store.quarantine(db, [(key, reason, canonical_json(raw), "2025-01-15")], at)
    assert quarantine.rekey_transactions(db) == 1
    assert _held(db) == {"transaction:5": "new"}


def test_other_kinds_keep_their_keys_and_never_list_transactions(tmp_path):
    db = open_db(tmp_path / "q.db")
    sync_transactions(db, _Transactions(_tx(5, amount="1.005")), DAY, DAY, now=SYNC_1)
    quarantine.hold(db, "recharge", [("Recharge.status: missing", {"id": 5})], now=SYNC_1)
    assert [q["key"] for q in quarantine.held(db, "recharge")] == ["recharge:5"]
    assert list(_held(db)) == ["transaction:5"]
    assert quarantine.held_transaction_ids(db) == {"5": False}  # held as unreadable, not withdrawn
