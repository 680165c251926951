"""A transaction the provider stops listing on a full read of its day is withdrawn: out of the figures and
the matching, kept in the quarantine with the reason, restored when a later read lists it again.

Against the sandbox (real HTTP): `DELETE /sandbox/transactions/ID` is the provider withdrawing an entry
(docs/sandbox.md, "Control endpoints"); putting the same record back in its history is the provider
listing it again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import requests

from partnerkit.errors import ApiError, BudgetExhausted
from partnerkit.store import ledger as ledger_store
from partnerkit.store import open_db, quarantine
from partnerkit.store.drifts import audit_trail
from partnerkit.timeutil import iso

pytest.importorskip("sandbox.testing")

from partnerkit.client._http import RetryPolicy  # noqa: E402
from reconcile import sync  # noqa: E402
from reconcile.jobs import reconcile_day  # noqa: E402
from reconcile.ledger_writer import (TransactionPages, store_transaction_page, withdraw_unlisted,  # noqa: E402
                                     withdrawn_reason)
from reconcile.recharges import submit  # noqa: E402
from tests.reconcile.reconcile_helpers import sandbox_day  # noqa: E402

YESTERDAY_10 = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
DAY = YESTERDAY_10.date()
RUN = datetime.now(timezone.utc).replace(microsecond=0)  # partnerkit's runs: RUN, RUN + 1 min, ...


def run(n: int) -> datetime:
    return RUN + timedelta(minutes=n)


@pytest.fixture
def world(tmp_path):
    """The sandbox with its clock at 10:00 yesterday; partnerkit pointed at it (no retries: a 500 stops a walk)."""
    with sandbox_day(tmp_path, YESTERDAY_10, retry=RetryPolicy(max_attempts=1)) as world:
        yield world


def control(server, method: str, path: str, **body) -> dict:
    response = requests.request(method, f"{server.base_url}/sandbox{path}", json=body or None, timeout=10)
    assert response.status_code < 300, response.text
    return response.json()


@pytest.fixture
def credited(world):
    """A SUCCESS recharge the provider credited 50.00 (an unexpected_refund), reconciled once."""
    server, config, db, client = world
    recharge = submit(config, db, client, mobile_number="9800000001", operator_id=1, amount=100, force=True).recharge
    credit = control(server, "POST", "/transactions", type="RECHARGE_REFUND", direction="CREDIT", amount="50.00",
                     recharge_id=recharge.id, reference_number=recharge.reference_number)
    report = reconcile_day(config, db, client, DAY, now=run(0))
    [drift] = [d for d in report["drifts"] if d["reference"] == recharge.reference_number]
    assert (drift["kind"], drift["actual"], drift["resolution"]) == ("unexpected_refund", "50.00", "pending")
    assert report["summary"]["refunds"] == {"INR": "50.00"}
    assert report["quarantined"] == []
    return recharge, credit, drift, report


def stored(db, ident) -> bool:
    return db.execute("SELECT 1 FROM transactions WHERE id = ?", (str(ident),)).fetchone() is not None


def withdrawn_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "withdrawn" in r.getMessage()]


def test_a_credit_the_provider_withdraws_leaves_the_figures_and_its_drift_resolves(world, credited, caplog):
    server, config, db, client = world
    recharge, credit, drift, before = credited
    control(server, "DELETE", f"/transactions/{credit['id']}")

    with caplog.at_level(logging.WARNING, logger="reconcile"):
        after = reconcile_day(config, db, client, DAY, now=run(1))

    assert not stored(db, credit["id"])
    assert after["summary"]["refunds"] == {"INR": "0.00"}
    assert after["summary"]["transactions_total"] == before["summary"]["transactions_total"] - 1
    resolved = next(d for d in after["drifts"] if d["id"] == drift["id"])
    assert (resolved["resolution"], resolved["resolution_by"]) == ("resolved", "partnerkit")
    assert resolved["resolution_note"].startswith("no longer detected")
    [held] = after["quarantined"]
    reason = (f"withdrawn: no longer listed by the provider on a full read of {DAY} (was: RECHARGE_REFUND CREDIT"
              f" 50.00 INR, reference {recharge.reference_number}, recharge {recharge.id})")
    assert (held["key"], held["reason"]) == (f"transaction:{credit['id']}", reason)
    assert '"amount":"50.00"' in held["raw"].replace(" ", "") and f'"id":{credit["id"]}' in held["raw"].replace(" ", "")
    assert withdrawn_warnings(caplog) == [f"transaction {credit['id']} {reason}"]

    # Run again: nothing more to withdraw, the same evidence, the drift stays resolved with no new audit row.
    trail = audit_trail(db, drift["id"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="reconcile"):
        again = reconcile_day(config, db, client, DAY, now=run(2))
    assert again["quarantined"] == after["quarantined"]
    assert again["summary"] == after["summary"]
    assert audit_trail(db, drift["id"]) == trail
    assert withdrawn_warnings(caplog) == []


def test_a_withdrawn_credit_listed_again_is_restored_and_its_drift_reopens(world, credited, caplog):
    server, config, db, client = world
    recharge, credit, drift, before = credited
    record = server.sandbox.transactions[credit["id"]]
    control(server, "DELETE", f"/transactions/{credit['id']}")
    reconcile_day(config, db, client, DAY, now=run(1))
    assert quarantine.held_transaction_ids(db) == {str(credit["id"]): True}

    with server.sandbox.lock:  # the provider lists the entry again
        server.sandbox.transactions[credit["id"]] = record
    with caplog.at_level(logging.WARNING, logger="reconcile"):
        restored = reconcile_day(config, db, client, DAY, now=run(2))

    assert stored(db, credit["id"])
    assert quarantine.held_transaction_ids(db) == {}
    assert restored["quarantined"] == []
    assert restored["summary"]["refunds"] == {"INR": "50.00"}
    assert restored["summary"]["transactions_total"] == before["summary"]["transactions_total"]
    back = next(d for d in restored["drifts"] if d["id"] == drift["id"])
    assert back["resolution"] == "pending"
    assert [row["action"] for row in audit_trail(db, drift["id"])] == ["detected", "auto_resolved", "reopened"]
    assert f"transaction {credit['id']} is listed by the provider again: restored" in caplog.messages


class _StoppedAfterFirstPage:
    """The client's transaction walk, with the provider answering 500 from the second page on (a real
    sandbox fault, switched on once the first page is read)."""

    def __init__(self, client, server) -> None:
        self.client, self.server, self.walk = client, server, None

    def iter_transactions(self, **options):
        self.walk = self.client.iter_transactions(**options)
        self.limit = options["limit"]
        return self

    def __iter__(self):
        for n, record in enumerate(self.walk, start=1):
            yield record
            if n == self.limit:
                self.server.sandbox.settings.faults = {"http_500": {"scope": "transactions"}}

    @property
    def next_page(self):
        return self.walk.next_page


def provider_ids(client) -> set[str]:
    return {str(t["id"]) for t in client.iter_transactions(from_date=DAY, to_date=DAY, limit=100)}


def stored_ids(db) -> set[str]:
    return {row[0] for row in db.execute("SELECT id FROM transactions WHERE created_at >= ? AND created_at < ?",
                                         (DAY.isoformat(), (DAY + timedelta(days=1)).isoformat()))}


def test_a_read_stopped_part_way_withdraws_nothing_and_the_read_that_finishes_it_does(world, credited, monkeypatch):
    server, config, db, client = world
    recharge, credit, drift, before = credited
    control(server, "DELETE", f"/transactions/{credit['id']}")
    monkeypatch.setattr(sync, "TRANSACTION_PAGE", 2)  # the day's few transactions on several pages
    assert len(provider_ids(client)) > 2

    with pytest.raises(ApiError):
        sync.sync_transactions(db, _StoppedAfterFirstPage(client, server), DAY, DAY, now=run(1))
    assert stored(db, credit["id"]), "a read that did not reach the end withdraws nothing"
    assert quarantine.held_transaction_ids(db) == {}
    assert ledger_store.walk_position(db, "transactions", DAY.isoformat(), DAY.isoformat())[0] == 2

    server.sandbox.settings.faults = {}
    sync.sync_transactions(db, client, DAY, DAY, now=run(2))  # reads on from page 2 to the end
    assert stored_ids(db) == provider_ids(client), "the first part's records are listed, not withdrawn"
    assert quarantine.held_transaction_ids(db) == {str(credit["id"]): True}
    report = reconcile_day(config, db, client, DAY, now=run(3))
    assert next(d for d in report["drifts"] if d["id"] == drift["id"])["resolution"] == "resolved"


def test_the_withdrawal_reason_names_the_entry_and_only_the_links_it_has():
    row = ("700005", None, -1200, None, "GHOST1", None, "EUR", "2026-11-22T09:00:00Z", None)
    assert withdrawn_reason(row) == ("withdrawn: no longer listed by the provider on a full read of 2026-11-22"
                                     " (was: DEBIT 12.00 EUR, reference GHOST1)")


# The same rules against a stand-in list (a fixed page of records), for the cases the sandbox cannot script.

T1 = datetime(2025, 1, 15, 12, 0, tzinfo=timezone.utc)
T2, T3 = T1 + timedelta(minutes=15), T1 + timedelta(minutes=30)
D = T1.date()


def _tx(n, day=D, **extra) -> dict:
    return {"id": n, "type": "RECHARGE", "amount": Decimal("-98.00"), "currency": "INR",
            "created_at": f"{day}T10:00:00Z", "recharge_id": 1, **extra}


class _List:
    """The provider's transaction list as the client yields it; `stop_after`: the budget runs out after so many."""

    def __init__(self, *records, stop_after: int | None = None) -> None:
        self.records, self.stop_after = list(records), stop_after

    def iter_transactions(self, *, from_date, to_date, limit):
        for n, record in enumerate(self.records):
            if n == self.stop_after:
                raise BudgetExhausted("no room left in this hour's budget")
            yield record


def _ids(db) -> list[str]:
    return [row[0] for row in db.execute("SELECT id FROM transactions ORDER BY id")]


@pytest.fixture
def ldb(tmp_path, migrated_file):
    database = open_db(migrated_file(tmp_path / "w.db"))
    yield database
    database.conn.close()


def test_a_read_the_budget_stops_withdraws_nothing(ldb):
    sync.sync_transactions(ldb, _List(_tx(1), _tx(2), _tx(3)), D, D, now=T1)
    with pytest.raises(BudgetExhausted):
        sync.sync_transactions(ldb, _List(_tx(1), _tx(2), stop_after=1), D, D, now=T2)
    assert _ids(ldb) == ["1", "2", "3"] and quarantine.held_transaction_ids(ldb) == {}
    sync.sync_transactions(ldb, _List(_tx(1)), D, D, now=T3)
    assert _ids(ldb) == ["1"] and quarantine.held_transaction_ids(ldb) == {"2": True, "3": True}


def test_a_record_listed_but_unreadable_is_not_withdrawn(ldb):
    sync.sync_transactions(ldb, _List(_tx(5)), D, D, now=T1)
    sync.sync_transactions(ldb, _List(_tx(5, amount=Decimal("-98.005"))), D, D, now=T2)
    assert _ids(ldb) == ["5"]  # the last readable copy, as before
    [held] = quarantine.held(ldb, "transaction")
    assert held["key"] == "transaction:5" and not held["reason"].startswith(quarantine.WITHDRAWN)


def test_only_the_days_read_lose_what_the_read_did_not_list(ldb):
    after = D + timedelta(days=1)
    first, last = _tx(3, created_at=f"{D}T09:00:00Z"), _tx(4, created_at=f"{D}T11:00:00Z")
    sync.sync_transactions(ldb, _List(first, _tx(1), last, _tx(2, day=after)), D, after, now=T1)
    sync.sync_transactions(ldb, _List(first, last), D, D, now=T2)
    assert _ids(ldb) == ["2", "3", "4"]
    assert [q["day"] for q in ledger_store.quarantined(ldb, D.isoformat())] == [D.isoformat()]
    assert ledger_store.quarantined(ldb, after.isoformat()) == []


def test_an_id_stored_as_text_is_withdrawn_and_restored_by_it(ldb):
    sync.sync_transactions(ldb, _List(_tx("T7"), _tx("T8")), D, D, now=T1)
    sync.sync_transactions(ldb, _List(_tx("T8")), D, D, now=T2)
    assert _ids(ldb) == ["T8"] and quarantine.held_transaction_ids(ldb) == {"T7": True}
    sync.sync_transactions(ldb, _List(_tx("T7"), _tx("T8")), D, D, now=T3)
    assert _ids(ldb) == ["T7", "T8"] and quarantine.held_transaction_ids(ldb) == {}


def _staged(db, records, stamp):
    with TransactionPages(db, stamp) as pages:
        pages.add(records)
        pages.close()


@pytest.mark.parametrize("late_write", [store_transaction_page, _staged])  # a row upserted, or copied from a stage
def test_a_row_an_older_read_stores_late_still_counts_as_listed_by_the_newer_one(ldb, late_write):
    # The worker's sync (begun at T1) and `partnerkit reconcile` (begun at T2) read the same day at once:
    # the worker's copy of transaction 1 lands after the newer read stored it.
    sync.sync_transactions(ldb, _List(_tx(1)), D, D, now=T2)
    late_write(ldb, [_tx(1)], iso(T1))
    assert ldb.execute("SELECT synced_at FROM transactions").fetchone()[0] == iso(T2)
    listed = (f"{D}T10:00:00Z", f"{D}T10:00:00Z")
    assert withdraw_unlisted(ldb, D, D, span=listed, listed_since=iso(T2), stored_upto=10, stamp=iso(T3)) == []
    assert _ids(ldb) == ["1"]


@pytest.mark.parametrize("stored,listed,withdrawn,guarded", [
    (3, 1, 2, False),    # a quiet day: up to WITHDRAW_ALWAYS at once, whatever the share
    (3, 0, 0, False),    # an empty answer covers no stretch of time: nothing to vouch for, nothing withdrawn
    (30, 15, 15, False),  # half of the day
    (30, 14, 0, True),   # more than half, and more than WITHDRAW_ALWAYS: taken for the provider's fault
    (30, 0, 0, True),    # an empty answer, said as loudly as before
])
def test_a_list_that_loses_most_of_its_days_at_once_withdraws_nothing(ldb, caplog, stored, listed, withdrawn,
                                                                      guarded):
    records = [_tx(n) for n in range(1, stored + 1)]
    sync.sync_transactions(ldb, _List(*records), D, D, now=T1)
    with caplog.at_level(logging.WARNING, logger="reconcile"):
        sync.sync_transactions(ldb, _List(*records[:listed]), D, D, now=T2)
    assert len(quarantine.held_transaction_ids(ldb)) == withdrawn
    assert len(_ids(ldb)) == stored - withdrawn
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ([] if not guarded else [
        f"the provider's transaction list of {D}..{D} no longer lists more than half of the {stored} stored"
        " transactions it could check (those between the first and last entries it listed): none withdrawn (a list that loses that much at once is taken for the"
        " provider's fault); the next complete read of those days checks again"])
    assert len(withdrawn_warnings(caplog)) == withdrawn
