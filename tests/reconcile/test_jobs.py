"""Syncs (every page, idempotent, incremental, quarantine) and the nightly trigger with catch-up (freezegun)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace

import pytest
from freezegun import freeze_time

from partnerkit.config import load_config
from partnerkit.store import ledger as ledger_store
from partnerkit.store import recharges as recharge_store
from partnerkit.store import reports as report_store
from partnerkit.store.drifts import list_drifts
from partnerkit.errors import BudgetExhausted
from reconcile.jobs import day_synced, nightly, nightly_job, reconcile_day, report_day, sync_recent, sync_window
from tests.standin import StandIn


class FakeProvider(StandIn):
    """An in-memory provider: recharges and transactions filtered by day, read page by page."""

    def __init__(self):
        self.recharges: list[dict] = []
        self.transactions: list[dict] = []
        self.calls: list[tuple] = []

    def add_day(self, day: date, n: int = 3, bad: int = 0) -> None:
        for i in range(n):
            rid = len(self.recharges) + 1
            when = f"{day.isoformat()}T{10 + i:02d}:00:00Z"
            self.recharges.append({"id": rid, "reference_number": f"RCH{rid}", "status": "SUCCESS",
                                   "mobile_number": "9800000000", "face": Decimal("100.00"),
                                   "discount": Decimal("2.00"), "payable": Decimal("98.00"), "currency": "INR",
                                   "created_at": when})
            self.transactions.append({"transaction_id": 9000 + rid, "Type": "RECHARGE", "amount": "98.00",
                                      "entry_type": "DEBIT", "recharge_id": rid, "currency": "INR",
                                      "timestamp": when})
        for i in range(bad):
            self.transactions.append({"what": "is this", "created_at": f"{day.isoformat()}T12:00:0{i}Z"})

    @staticmethod
    def _in(record: dict, from_date, to_date) -> bool:
        when = str(record.get("created_at") or record.get("timestamp"))[:10]
        return from_date.isoformat() <= when <= to_date.isoformat()

    def iter_recharges(self, *, from_date, to_date, limit, on_malformed=None):
        self.calls.append(("recharges", from_date, to_date))
        return iter([r for r in self.recharges if self._in(r, from_date, to_date)])

    def iter_transactions(self, *, from_date, to_date, limit):
        self.calls.append(("transactions", from_date, to_date))
        return iter([t for t in self.transactions if self._in(t, from_date, to_date)])

    def list_orders(self, *, page, limit):
        return SimpleNamespace(items=[], has_more=False)

    def list_wallets(self):
        return {"wallets": [{"id": 1, "currency": "INR", "balance": "1000.00"}]}


@pytest.fixture
def config(db_path, tmp_path):
    return load_config(environ={"PARTNERKIT_DB": str(db_path), "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"),
                                "PARTNERKIT_DUE_HOUR_UTC": "1"})


@pytest.fixture
def provider(db):
    """Four days of recharges partnerkit submitted itself (origin 'partner'), with their debits."""
    fake = FakeProvider()
    for day in (date(2025, 3, 10), date(2025, 3, 11), date(2025, 3, 12), date(2025, 3, 13)):
        fake.add_day(day)
    for record in fake.recharges:
        when = datetime.fromisoformat(record["created_at"].replace("Z", "+00:00"))
        local = recharge_store.record_intent(db, idempotency_key=f"key-{record['id']}-0000", mobile_number="9800000000",
                                             operator_id=1, amount=record["face"], client_reference=f"cr{record['id']}",
                                             submitted_at=when)
        recharge_store.record_response(db, local, record, status="SUCCESS", seen_at=when)
    return fake


@pytest.mark.parametrize("reported, first_day, latest, due, beyond", [
    ([], None, "2025-03-13", ["2025-03-13"], []),  # a new store: the latest night
    ([], "2025-03-14", "2025-03-13", ["2025-03-13"], []),  # first synced today: yesterday still
    (["2025-03-13"], "2025-03-10", "2025-03-13", ["2025-03-10", "2025-03-11", "2025-03-12"], []),
    (["2025-03-10", "2025-03-12"], "2025-03-10", "2025-03-13", ["2025-03-11", "2025-03-13"], []),  # a hole
    (["2025-01-01"], "2025-01-01", "2025-03-13", [f"2025-02-{d:02d}" for d in range(11, 29)]
     + [f"2025-03-{d:02d}" for d in range(1, 14)], [f"2025-01-{d:02d}" for d in range(2, 32)]
     + [f"2025-02-{d:02d}" for d in range(1, 11)]),  # 31 nights due, the 40 before them beyond reach
])
def test_nights_to_report(reported, first_day, latest, due, beyond):
    found = report_store.nights_to_report(reported, first_day, date.fromisoformat(latest))
    assert [[d.isoformat() for d in part] for part in found] == [due, beyond]


@pytest.mark.parametrize("now, latest", [("2025-03-14T00:59", "2025-03-12"), ("2025-03-14T01:00", "2025-03-13")])
def test_the_latest_due_night_turns_at_the_due_hour(now, latest):
    moment = datetime.fromisoformat(now).replace(tzinfo=timezone.utc)
    assert report_store.latest_due_night(moment, 1).isoformat() == latest


def test_night_ranges_name_runs_of_nights():
    nights = [date(2025, 3, d) for d in (2, 3, 4, 7, 9, 10)]
    assert report_store.night_ranges(nights) == ["2025-03-02..2025-03-04", "2025-03-07", "2025-03-09..2025-03-10"]


def test_nightly_reports_the_previous_day_at_the_due_hour_only(config, db, provider):
    with freeze_time("2025-03-14T00:59:00Z"):
        first = nightly(config, db, provider)
    assert [r["date"] for r in first] == ["2025-03-12"]
    with freeze_time("2025-03-14T00:59:30Z"):
        assert nightly(config, db, provider) == []
    with freeze_time("2025-03-14T01:00:00Z"):
        reports = nightly(config, db, provider)
    assert [r["date"] for r in reports] == ["2025-03-13"]
    assert reports[0]["summary"]["recharges_total"] == 3 and reports[0]["summary"]["matched"] == 3
    assert (config.report_dir / "partnerkit-report-2025-03-13.html").exists()


def test_nightly_catches_up_every_missed_night(config, db, provider):
    with freeze_time("2025-03-11T01:00:00Z"):
        assert [r["date"] for r in nightly(config, db, provider)] == ["2025-03-10"]
    with freeze_time("2025-03-14T02:30:00Z"):  # the box was down for two nights
        caught_up = nightly(config, db, provider)
    assert [r["date"] for r in caught_up] == ["2025-03-11", "2025-03-12", "2025-03-13"]
    assert report_store.report_dates(db) == ["2025-03-10", "2025-03-11", "2025-03-12", "2025-03-13"]
    # One sync for the gap, through today: a credit back made after the last night's midnight counts.
    assert ("recharges", date(2025, 3, 11), date(2025, 3, 14)) in provider.calls


def test_rerunning_a_date_gives_the_same_drifts(config, db, provider):
    provider.transactions.pop()  # 2025-03-13's last recharge loses its debit
    with freeze_time("2025-03-14T01:00:00Z"):
        first = nightly(config, db, provider)[0]
    db.execute("DELETE FROM reports")  # force the same night again
    with freeze_time("2025-03-14T03:00:00Z"):
        again = nightly(config, db, provider)[0]
    assert [d["id"] for d in first["drifts"]] == [d["id"] for d in again["drifts"]]
    assert [d["kind"] for d in again["drifts"]] == ["missing_debit"]
    assert first["drifts"][0]["detected_at"] == again["drifts"][0]["detected_at"]


def test_unreadable_transactions_are_quarantined_and_reported(config, db, provider):
    provider.add_day(date(2025, 3, 13), n=0, bad=2)
    with freeze_time("2025-03-14T01:00:00Z"):
        report = nightly(config, db, provider)[0]
    assert report["summary"]["quarantined"] == 2
    assert {q["reason"] for q in report["quarantined"]} == {"no id (id | transaction_id)"}
    assert report["summary"]["transactions_total"] == 3


def test_sync_is_idempotent_and_incremental_after_the_first_run(config, db, provider):
    count = lambda: db.execute("SELECT COUNT(*) FROM transactions").fetchone()[0]  # noqa: E731
    with freeze_time("2025-03-13T12:00:00Z"):
        sync_recent(config, db, provider)  # first run: today only
        assert count() == 3
        sync_recent(config, db, provider)  # then from the watermark (2025-03-12, the last complete day)
        assert count() == 6
        sync_recent(config, db, provider)
        assert count() == 6
    assert ledger_store.get_watermark(db, "recharges") == "2025-03-12"
    provider.calls.clear()
    with freeze_time("2025-03-14T12:00:00Z"):
        summary = sync_recent(config, db, provider)
    assert ("recharges", date(2025, 3, 12), date(2025, 3, 14)) in provider.calls
    assert summary.wallets == 1 and summary.recharges == 6
    assert ledger_store.get_watermark(db, "transactions") == "2025-03-13"


def test_late_refund_found_by_a_later_night_resolves_the_earlier_drift(config, db, provider):
    provider.recharges[-1]["status"] = "FAILED"  # 2025-03-13: debited, not yet credited back
    with freeze_time("2025-03-14T01:00:00Z"):
        nightly(config, db, provider)
    [drift] = list_drifts(db, kind="missing_refund")
    provider.transactions.append({"id": "late-1", "amount": "98.00", "direction": "CREDIT", "recharge_id": 12,
                                  "currency": "INR", "created_at": "2025-03-15T09:00:00Z"})
    with freeze_time("2025-03-16T01:00:00Z"):
        nightly(config, db, provider)
    [after] = list_drifts(db, kind="missing_refund")
    assert after.id == drift.id and after.resolution == "resolved"
    assert after.resolution_note == "no longer detected on 2025-03-13 run: credit late-1 of 98.00 received"


@pytest.mark.parametrize("early", ["today", "a future day", "yesterday, unsynced, before the due hour"])
def test_an_early_report_leaves_the_night_due(config, db, provider, early):
    """Only a report made after its day ended, by a sync, marks the day reported; the nightly run
    then syncs and reports it whole. (A report of today or of a future day used to stop every
    nightly report until that date.)"""
    with freeze_time("2025-03-13T18:00:00Z"):
        if early == "today":
            reconcile_day(config, db, provider, date(2025, 3, 13))
        elif early == "a future day":
            reconcile_day(config, db, provider, date(2025, 3, 20))
    if early.startswith("yesterday"):
        with freeze_time("2025-03-14T00:30:00Z"):  # `partnerkit report` before the nightly run
            report_day(config, db, date(2025, 3, 13), save=False)
    with freeze_time("2025-03-14T01:00:00Z"):
        reports = nightly(config, db, provider)
    assert [r["date"] for r in reports] == ["2025-03-13"]
    assert reports[0]["summary"]["recharges_total"] == 3 and reports[0]["generated_at"] == "2025-03-14T01:00:00Z"
    with freeze_time("2025-03-14T02:00:00Z"):
        assert nightly(config, db, provider) == []  # and reported once


def test_the_nightly_job_logs_a_summary_not_the_drift_table(config, db, provider):
    provider.transactions.pop()  # one missing_debit
    with freeze_time("2025-03-14T01:00:00Z"):
        [line] = nightly_job(config, db, provider)
    assert line["date"] == "2025-03-13" and line["drifts"] == 1 and line["drifts_by_kind"] == {"missing_debit": 1}
    assert line["spend"] == {"INR": "196.00"} and line["recharges_total"] == 3
    assert line["files"] == [str(config.report_dir / f"partnerkit-report-2025-03-13.{f}") for f in ("json", "csv", "html")]
    [drift] = list_drifts(db)
    assert drift.id not in json.dumps(line)  # a day of 100k drifts would otherwise be one 35 MB log line


def test_reconcile_day_reports_its_progress_per_entity(config, db, provider):
    calls = []
    report = reconcile_day(config, db, provider, date(2025, 3, 12), now=datetime(2025, 3, 13, 2, tzinfo=timezone.utc),
                           progress=lambda entity, read: calls.append((entity, read)))
    # The day and the day after it (3 recharges and their debits each); this provider has no orders.
    assert calls == [("recharges", 6), ("orders", 0), ("transactions", 6)]
    assert report["summary"]["recharges_total"] == 3 and report["summary"]["transactions_total"] == 3


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@pytest.mark.parametrize("night, now, stored, through, claim", [
    # Today: today so far, claimed (the day asked for, as before).
    ("2025-03-14", "2025-03-14T18:00", {}, "2025-03-14", "2025-03-14"),
    # Yesterday (the nightly run on time): today so far too, not claimed as read in full.
    ("2025-03-13", "2025-03-14T01:05", {}, "2025-03-14", "2025-03-13"),
    # Months ago: the day after it, read in full (it is over); not every day through today.
    ("2025-01-10", "2025-03-14T01:05", {}, "2025-01-11", "2025-01-11"),
    # The day after is stored, read in full an hour or more after it ended: not read again.
    ("2025-01-10", "2025-03-14T01:05", {"recharges": "2025-01-12T01:00:00Z", "transactions": "2025-01-12T01:00:00Z"},
     "2025-01-10", "2025-01-10"),
    # Read while it lasted, or too soon after it ended, or its recharges only: read again.
    ("2025-01-10", "2025-03-14T01:05", {"recharges": "2025-01-11T18:00:00Z", "transactions": "2025-01-11T18:00:00Z"},
     "2025-01-11", "2025-01-11"),
    ("2025-01-10", "2025-03-14T01:05", {"recharges": "2025-01-12T00:30:00Z", "transactions": "2025-01-12T00:30:00Z"},
     "2025-01-11", "2025-01-11"),
    ("2025-01-10", "2025-03-14T01:05", {"recharges": "2025-01-12T01:00:00Z"}, "2025-01-11", "2025-01-11"),
])
def test_a_night_is_synced_through_the_day_after_it_never_past_today(db, night, now, stored, through, claim):
    day_after = (date.fromisoformat(night) + timedelta(days=1)).isoformat()
    for entity, synced_at in stored.items():
        ledger_store.record_sync(db, entity, from_day=day_after, to_day=day_after, started_at=synced_at, count=0,
                                 days=[day_after], advance_to=None)
    assert sync_window(db, date.fromisoformat(night), _utc(now)) == (date.fromisoformat(through),
                                                                     date.fromisoformat(claim))


def test_reconcile_date_reads_the_day_after_unless_the_store_holds_it_read_in_full(config, db, provider):
    with freeze_time("2025-03-14T01:00:00Z"):
        nightly(config, db, provider)  # 2025-03-13, through today's first hour
    assert provider.calls == [("recharges", date(2025, 3, 13), date(2025, 3, 14)),
                              ("transactions", date(2025, 3, 13), date(2025, 3, 14))]
    assert day_synced(db, date(2025, 3, 13)) and not day_synced(db, date(2025, 3, 14))  # read while it lasted
    provider.calls.clear()
    later = _utc("2025-03-16T09:00")
    reconcile_day(config, db, provider, date(2025, 3, 12), now=later)  # 03-13 is stored, read after it ended
    reconcile_day(config, db, provider, date(2025, 3, 13), now=later)  # 03-14 was read only while it lasted
    assert provider.calls == [("recharges", date(2025, 3, 12), date(2025, 3, 12)),
                              ("transactions", date(2025, 3, 12), date(2025, 3, 12)),
                              ("recharges", date(2025, 3, 13), date(2025, 3, 14)),
                              ("transactions", date(2025, 3, 13), date(2025, 3, 14))]
    assert ledger_store.coverage(db, "transactions", "2025-03-14") == "2025-03-16T09:00:00Z"


def test_a_read_of_the_night_and_the_day_after_stopped_part_way_claims_neither(config, db, provider):
    class Stopping(FakeProvider):
        def iter_transactions(self, *, from_date, to_date, limit):  # the night's pages, then the hour is spent
            self.calls.append(("transactions", from_date, to_date))
            yield from [t for t in self.transactions if self._in(t, from_date, from_date)]
            raise BudgetExhausted("no room in this hour's budget")

    stopping = Stopping()
    stopping.recharges, stopping.transactions = provider.recharges, provider.transactions
    with pytest.raises(BudgetExhausted):
        reconcile_day(config, db, stopping, date(2025, 3, 12), now=_utc("2025-03-16T09:00"))
    assert stopping.calls[-1] == ("transactions", date(2025, 3, 12), date(2025, 3, 13))
    assert ledger_store.coverage(db, "transactions", "2025-03-12") is None
    assert ledger_store.coverage(db, "transactions", "2025-03-13") is None
    assert not day_synced(db, date(2025, 3, 13))


def test_the_15_minute_sync_skips_transactions_of_days_read_in_full_after_they_ended(config, db, provider):
    with freeze_time("2025-03-13T23:50:00Z"):
        sync_recent(config, db, provider)  # first run: today only, before it ends
    provider.calls.clear()
    with freeze_time("2025-03-14T00:10:00Z"):
        sync_recent(config, db, provider)  # from the watermark (the 12th); the 13th was read while it lasted
    assert ("transactions", date(2025, 3, 12), date(2025, 3, 14)) in provider.calls
    with freeze_time("2025-03-14T01:00:00Z"):
        nightly(config, db, provider)  # reads the 13th in full, an hour after it ended
    provider.calls.clear()
    provider.add_day(date(2025, 3, 14), n=2)
    with freeze_time("2025-03-14T01:15:00Z"):
        summary = sync_recent(config, db, provider)
    assert ("recharges", date(2025, 3, 13), date(2025, 3, 14)) in provider.calls  # a status can change late
    assert ("transactions", date(2025, 3, 14), date(2025, 3, 14)) in provider.calls  # a ledger entry cannot
    assert summary.transactions == 2
    assert ledger_store.coverage(db, "transactions", "2025-03-13") == "2025-03-14T01:00:00Z"


@pytest.mark.parametrize("recent_at, read_again", [
    ("2025-03-14T01:00:00Z", False),  # the two jobs came due together, sync-recent first: its read is the night's
    ("2025-03-14T00:50:00Z", True),  # before the night was due: the night as it stood before it settled
])
def test_the_nightly_run_reads_again_only_what_no_read_begun_since_the_night_was_due_covers(config, db, provider,
                                                                                          recent_at, read_again):
    with freeze_time("2025-03-14T00:30:00Z"):
        sync_recent(config, db, provider)  # the first run reads today: the watermark moves to the 13th
    with freeze_time(recent_at):
        sync_recent(config, db, provider)  # the 13th and the 14th, every page
    provider.calls.clear()
    with freeze_time("2025-03-14T01:00:00Z"):
        [report] = nightly(config, db, provider)
    night = (date(2025, 3, 13), date(2025, 3, 14))
    assert provider.calls == ([("recharges", *night), ("transactions", *night)] if read_again else [])
    assert report["date"] == "2025-03-13" and report["summary"]["matched"] == 3


def test_sync_recent_skips_its_turn_while_another_sync_of_the_worker_runs(config, db, provider):
    from reconcile import jobs

    with jobs._SYNCING:  # the nightly run's sync, in another scheduler thread
        with freeze_time("2025-03-14T01:00:00Z"):
            assert sync_recent(config, db, provider) == {"skipped": "another sync of this worker is running"}
    assert provider.calls == []  # not one page read twice
    with freeze_time("2025-03-14T01:15:00Z"):
        sync_recent(config, db, provider)  # the next turn runs
    assert ("recharges", date(2025, 3, 14), date(2025, 3, 14)) in provider.calls


def test_a_later_credit_for_a_recharge_of_a_clean_day_is_reported(config, db, provider):
    with freeze_time("2025-03-14T01:00:00Z"):
        assert nightly(config, db, provider)[0]["drifts"] == []  # 2025-03-13 matched clean
    provider.transactions.append({"transaction_id": 9999, "type": "REFUND", "amount": "98.00", "recharge_id": 12,
                                  "currency": "INR", "timestamp": "2025-03-15T09:00:00Z"})
    with freeze_time("2025-03-16T01:00:00Z"):
        nightly(config, db, provider)
    # The SUCCESS recharge RCH12 of 2025-03-13 was credited back: an unexpected_refund, on some day's report.
    assert [d.reference for d in list_drifts(db, kind="unexpected_refund")] == ["RCH12"]


def _ghost_debits(provider: FakeProvider, debits: dict[date, tuple[str, str]]) -> None:
    """EUR debits nobody placed (orphans), each with its balance_after: {day: (amount, balance_after)}."""
    for n, (day, (amount, balance)) in enumerate(sorted(debits.items())):
        provider.transactions.append({"id": 700_001 + n, "type": "RECHARGE", "amount": amount, "direction": "DEBIT",
                                      "currency": "EUR", "created_at": f"{day.isoformat()}T10:00:00Z",
                                      "balance_after": balance, "reference_number": f"GHOST-{day.isoformat()}"})


def _kinds(db) -> list[tuple[str, str]]:
    return sorted((d.kind, d.report_date) for d in list_drifts(db) if d.resolution != "resolved")


@pytest.mark.parametrize("third_balance, discontinuity", [("952.00", False), ("950.00", True)])
def test_a_night_reconciled_by_hand_does_not_hide_the_nights_before_it(config, db, third_balance, discontinuity):
    """The last nightly report was 03-13; during an outage finance reconciled 03-17 by hand. The catch-up used
    to start after the newest report (03-17), so 03-14..03-16 were never synced nor reported, and 03-17's
    balance chain linked its entry to 03-13's across the hole: a false balance_discontinuity."""
    provider = FakeProvider()
    _ghost_debits(provider, {date(2025, 3, 13): ("12.00", "988.00"), date(2025, 3, 15): ("17.00", "971.00"),
                             date(2025, 3, 17): ("19.00", third_balance)})
    reconcile_day(config, db, provider, date(2025, 3, 13), now=datetime(2025, 3, 14, 1, tzinfo=timezone.utc))
    reconcile_day(config, db, provider, date(2025, 3, 17), now=datetime(2025, 3, 18, 9, tzinfo=timezone.utc))
    # 03-14..03-16 never synced: the link from 03-17 back to 03-13 is not judged (the store's hole, not the provider's).
    assert _kinds(db) == [("orphan_transaction", "2025-03-13"), ("orphan_transaction", "2025-03-17")]
    with freeze_time("2025-03-20T01:00:00Z"):
        reported = [r["date"] for r in nightly(config, db, provider)]
    assert reported == ["2025-03-14", "2025-03-15", "2025-03-16", "2025-03-18", "2025-03-19"]  # oldest first
    assert report_store.report_dates(db) == [f"2025-03-{d}" for d in range(13, 20)]
    # The hole synced, 03-17 was matched again: its link to 03-15 is judged, and holds unless the provider's breaks.
    assert _kinds(db) == sorted([("orphan_transaction", "2025-03-13"), ("orphan_transaction", "2025-03-15"),
                                 ("orphan_transaction", "2025-03-17"),
                                 *([("balance_discontinuity", "2025-03-17")] if discontinuity else [])])
    with freeze_time("2025-03-20T02:00:00Z"):
        assert nightly(config, db, provider) == []  # every night reported once


def test_nights_older_than_the_catch_up_are_named_in_a_warning(config, db, caplog):
    provider = FakeProvider()
    _ghost_debits(provider, {date(2025, 1, 27): ("12.00", "988.00")})  # the account's first day: it holds a debit
    reconcile_day(config, db, provider, date(2025, 1, 27), now=datetime(2025, 1, 28, 1, tzinfo=timezone.utc))
    with freeze_time("2025-03-20T01:00:00Z"), caplog.at_level("WARNING", logger="reconcile.jobs"):
        reported = [r["date"] for r in nightly(config, db, provider)]
    assert reported[0] == "2025-02-17" and reported[-1] == "2025-03-19" and len(reported) == 31
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warning.getMessage() == ("20 night(s) older than the 31 the nightly run catches up were never reported: "
                                    "2025-01-28..2025-02-16; `partnerkit reconcile --date D` reports each")
