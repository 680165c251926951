"""The provider's wallet balance against the ledger's when it was read: a difference nothing explains is a
`balance_discontinuity` drift of subject `wallet` once the store can vouch for every entry up to the read; entries
dated across the read that the chain runs through are timing; a difference not yet confirmable is said so, and
never sits under the page's all-clear (docs/reconcile.md, "The wallet against the provider's balance")."""

from __future__ import annotations

from datetime import timedelta

import pytest

from partnerkit.config import load_config
from partnerkit.store import drifts as drift_store
from partnerkit.store.ledger import record_wallet_snapshots
from partnerkit.timeutil import iso
from reconcile import matcher
from reconcile.jobs import report_day
from reconcile.sync import SyncSummary
from tests.reconcile.reconcile_helpers import DAY, at

NEXT = DAY + timedelta(days=1)
RUN = at(2, day=NEXT)


@pytest.fixture(autouse=True, params=["one connection", "ledger side in a thread"])
def ledger_side(request, monkeypatch):
    monkeypatch.setattr(matcher, "PARALLEL_FROM", 50_000 if request.param == "one connection" else 0)


@pytest.fixture
def config(db_path, tmp_path):
    return load_config(environ={"PARTNERKIT_DB": str(db_path), "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")})


@pytest.fixture
def report_of(db, config):
    return lambda now=RUN, day=DAY: report_day(config, db, day, now=now)


def page(config, day=DAY):
    return (config.report_dir / f"partnerkit-report-{day.isoformat()}.html").read_text()


def snapshot(db, when, **balances):
    record_wallet_snapshots(db, [(iso(when), str(n), currency, int(amount * 100), "{}")
                                 for n, (currency, amount) in enumerate(balances.items())])


def a_day(ledger):
    """A top-up and a recharge on DAY (balance 1101.50 at its end); the first entry after midnight at 00:10."""
    ledger.tx("1200.00", type="TOPUP", balance_after="1200.00", hour=1)
    good = ledger.recharge(payable="98.50")
    debit = ledger.debit_recharge(good, hour=9, balance_after="1101.50")
    ledger.nightly_read(good, when=at(0, 45, day=NEXT))  # DAY read in full after it ended
    return debit


def next_day_read(ledger, when):
    """The 15-minute sync's complete read of NEXT, begun at `when`."""
    ledger.read_in_full(day=NEXT, when=when)


def wallet_drifts(report):
    return [d for d in report["drifts"] if d["kind"] == "balance_discontinuity" and d["subject"] == "wallet"]


def test_money_gone_without_an_entry_is_a_wallet_drift_once_the_store_vouches_for_every_entry(db, ledger, report_of,
                                                                                            config):
    """h02 finding 1: the provider took 50.00 and deleted the entry; the report said "reconciles"."""
    last = a_day(ledger)
    snapshot(db, at(0, 5, day=NEXT), INR=1051.50)   # the first read after the day: 50.00 below the ledger
    next_day_read(ledger, at(0, 15, day=NEXT))      # a read begun after it listed every entry up to it
    report = report_of()
    reference = f"wallet INR after {last}"
    w = report["wallets"]["INR"]
    assert (w["ledger_balance_at_provider_time"], w["provider_difference"], w["provider_difference_status"]) == (
        "1101.50", "-50.00", "unexplained")
    [drift] = wallet_drifts(report)
    assert (drift["reference"], drift["expected"], drift["actual"], drift["currency"], drift["resolution"]) == (
        reference, "1101.50", "1051.50", "INR", "pending")
    assert drift["id"] == drift_store.drift_id("balance_discontinuity", "wallet", reference) == w[
        "provider_difference_drift"]
    assert f"50.00 below the ledger's: money left the wallet after transaction {last}" in drift["detail"]
    html = page(config)
    assert "every recharge, order and transaction of the day reconciles" not in html
    assert ("INR wallet: the provider's balance read at 2025-03-15T00:05:00Z is 50.00 INR below the ledger's then"
            in html)
    assert f"the balance_discontinuity drift <code>{drift['id']}</code>" in html
    assert report["counts_by_status"]["drifts"]["pending"] == 1
    # the same drift on a re-run: same id, detected_at kept
    again = wallet_drifts(report_of(now=RUN + timedelta(hours=1)))
    assert [(d["id"], d["detected_at"]) for d in again] == [(drift["id"], drift["detected_at"])]


def test_a_quiet_wallet_is_compared_from_its_last_entry_on_an_earlier_day(db, ledger, report_of, config):
    """h02 finding 2: no USD entry on the day the money vanished; the ledger's balance then is the last one
    before it, and the difference is a drift like any other."""
    a_day(ledger)
    topup = ledger.tx("500.00", type="TOPUP", currency="USD", balance_after="500.00", day=DAY - timedelta(days=1))
    ledger.read_in_full(day=DAY - timedelta(days=1), when=at(0, 45, day=DAY))
    snapshot(db, at(0, 5, day=NEXT), INR=1101.50, USD=475)
    next_day_read(ledger, at(0, 15, day=NEXT))
    report = report_of()
    usd = report["wallets"]["USD"]
    assert (usd["closing_balance"], usd["ledger_balance_at_provider_time"], usd["provider_difference"],
            usd["provider_difference_status"]) == (None, "500.00", "-25.00", "unexplained")
    assert report["wallets"]["INR"]["provider_difference_status"] == "agrees"
    assert [(d["reference"], d["expected"], d["actual"], d["currency"]) for d in wallet_drifts(report)] == [
        (f"wallet USD after {topup}", "500.00", "475.00", "USD")]


def test_a_quiet_wallet_across_a_day_no_read_covered_is_not_confirmed(db, ledger, report_of, config):
    """The USD entry is three days old and the day between was never read: the store cannot vouch that the
    provider lists no later USD entry, so the difference is shown, not recorded."""
    a_day(ledger)
    ledger.tx("500.00", type="TOPUP", currency="USD", balance_after="500.00", day=DAY - timedelta(days=3))
    snapshot(db, at(0, 5, day=NEXT), INR=1101.50, USD=475)
    next_day_read(ledger, at(0, 15, day=NEXT))
    report = report_of()
    assert report["wallets"]["USD"]["provider_difference_status"] == "unconfirmed"
    assert wallet_drifts(report) == []


def test_a_difference_no_read_since_can_confirm_is_shown_not_recorded(db, ledger, report_of, config):
    """The report's own sync read the wallets after its walks: entries made meanwhile are in the provider's
    balance and not yet in the store. No drift; the page says so, and says no all-clear."""
    a_day(ledger)
    snapshot(db, at(0, 5, day=NEXT), INR=1051.50)   # no read of NEXT began after it
    report = report_of()
    assert report["wallets"]["INR"]["provider_difference_status"] == "unconfirmed"
    assert wallet_drifts(report) == [] and report["drifts"] == []
    html = page(config)
    assert "every recharge, order and transaction of the day reconciles" not in html
    assert "50.00 INR below the ledger's then (not yet confirmed)" in html
    assert "No drift is recorded, but the wallet balance does not reconcile: INR 50.00 below the ledger's" in html


def test_a_confirmed_difference_is_resolved_when_the_missing_entry_is_listed(db, ledger, report_of, config):
    """A later read lists the entry (the provider had only been slow to list it): the drift resolves itself."""
    a_day(ledger)
    snapshot(db, at(0, 5, day=NEXT), INR=1051.50)
    next_day_read(ledger, at(0, 15, day=NEXT))
    [drift] = wallet_drifts(report_of())
    ledger.tx("-50.00", type="ADJUSTMENT", balance_after="1051.50", day=NEXT, hour=0, minute=2)
    report = report_of(now=RUN + timedelta(hours=1))
    assert report["wallets"]["INR"]["provider_difference_status"] == "agrees"
    [resolved] = wallet_drifts(report)
    assert (resolved["id"], resolved["resolution"], resolved["resolution_by"]) == (drift["id"], "resolved",
                                                                                 "partnerkit")


def test_entries_dated_after_the_read_that_the_chain_runs_through_are_timing(db, ledger, report_of, config):
    """h02 finding 6: the sandbox's clock (40x) stamped a debit made before the read after it. The chain runs
    from the ledger's balance then to the provider's through it: timing, not money, even when trusted."""
    a_day(ledger)
    first = ledger.tx("-60.00", type="TOPUP", balance_after="1041.50", day=NEXT, hour=0, minute=20)
    second = ledger.tx("-40.00", type="TOPUP", balance_after="1001.50", day=NEXT, hour=0, minute=40)
    snapshot(db, at(0, 5, day=NEXT), INR=1001.50)
    next_day_read(ledger, at(0, 50, day=NEXT))
    report = report_of()
    w = report["wallets"]["INR"]
    assert (w["provider_difference"], w["provider_difference_status"], w["provider_difference_explained_by"]) == (
        "-100.00", "timing", [first, second])
    assert wallet_drifts(report) == []
    html = page(config)
    assert "Not money: entries dated across the time the provider's balance was read explain" in html
    assert "every recharge, order and transaction of the day reconciles" in html


def test_a_deleted_movement_breaks_the_chain_so_a_later_entry_is_never_its_timing(db, ledger, report_of, config):
    """50.00 taken and its entry deleted before the read; after it a debit and its credit back. The balance
    after the credit is the provider's only by the deleted 50.00: the chain breaks at the debit, no timing."""
    a_day(ledger)
    ledger.tx("-50.00", type="RECHARGE", balance_after="1001.50", day=NEXT, hour=0, minute=20)  # 1051.50 - 50
    ledger.tx("50.00", type="REFUND", balance_after="1051.50", day=NEXT, hour=0, minute=21)
    snapshot(db, at(0, 5, day=NEXT), INR=1051.50)
    next_day_read(ledger, at(0, 50, day=NEXT))
    report = report_of()
    assert report["wallets"]["INR"]["provider_difference_status"] == "unexplained"
    assert len(wallet_drifts(report)) == 1


def test_entries_dated_just_before_the_read_made_after_it_are_timing(db, ledger, report_of, config):
    """A provider's clock behind ours stamps an entry it made after the read within the minute before it."""
    a_day(ledger)
    late = ledger.tx("-30.00", type="TOPUP", balance_after="1071.50", day=NEXT, hour=0, minute=4)
    snapshot(db, at(0, 5, day=NEXT), INR=1101.50)
    next_day_read(ledger, at(0, 50, day=NEXT))
    w = report_of()["wallets"]["INR"]
    assert (w["provider_difference"], w["provider_difference_status"], w["provider_difference_explained_by"]) == (
        "30.00", "timing", [late])


def test_an_idle_day_with_a_wallet_difference_is_not_no_activity(db, ledger, report_of, config):
    topup = ledger.tx("1200.00", type="TOPUP", balance_after="1200.00", day=DAY - timedelta(days=1))
    ledger.read_in_full(day=DAY - timedelta(days=1), when=at(0, 45, day=DAY))
    ledger.read_in_full(day=DAY, when=at(0, 45, day=NEXT))
    snapshot(db, at(0, 5, day=NEXT), INR=1150)
    next_day_read(ledger, at(0, 15, day=NEXT))
    report = report_of()
    assert report["summary"]["transactions_total"] == 0
    assert [d["reference"] for d in wallet_drifts(report)] == [f"wallet INR after {topup}"]
    html = page(config)
    assert "No activity" not in html and "reconciles" not in html  # the drift table instead
    assert "INR wallet: the provider's balance read at 2025-03-15T00:05:00Z is 50.00 INR below" in html


def test_nights_a_difference_stands_on_find_one_drift_not_one_each(db, ledger, report_of, config):
    """A catch-up run holds two nights against its one snapshot, and a wallet with no new entry shows the same
    difference night after night: the money moved once, after the same entry. One drift, on the latest day."""
    last = a_day(ledger)
    ledger.read_in_full(day=NEXT, when=at(0, 45, day=NEXT + timedelta(days=1)))
    snapshot(db, at(0, 5, day=NEXT + timedelta(days=1)), INR=1051.50)   # the catch-up's read, after both nights
    ledger.read_in_full(day=NEXT + timedelta(days=1), when=at(0, 15, day=NEXT + timedelta(days=1)))
    later = at(2, day=NEXT + timedelta(days=1))
    first, second = report_of(now=later), report_of(now=later, day=NEXT)
    assert first["wallets"]["INR"]["provider_difference_status"] == "unexplained"
    assert second["wallets"]["INR"]["provider_difference_drift"] == first["wallets"]["INR"]["provider_difference_drift"]
    [drift] = drift_store.list_drifts(db, kind="balance_discontinuity")
    assert (drift.reference, drift.report_date, drift.resolution) == (f"wallet INR after {last}", NEXT.isoformat(),
                                                                     "pending")


def test_the_read_of_the_sync_that_read_the_balance_does_not_vouch_for_it(db, ledger, report_of, config):
    """A quick sync's walk and its wallet read share a second: its coverage stamp (when it began) equals the
    snapshot's, yet its walk listed the entries before the balance was read. Only a read begun after counts."""
    a_day(ledger)
    snapshot(db, at(0, 5, day=NEXT), INR=1051.50)
    next_day_read(ledger, at(0, 5, day=NEXT))
    report = report_of()
    assert report["wallets"]["INR"]["provider_difference_status"] == "unconfirmed"
    assert wallet_drifts(report) == []


@pytest.mark.parametrize("reason,status", [
    ("unknown transaction type 'WEIRD'", "unconfirmed"),  # listed by the provider, missing from the ledger
    ("withdrawn: no longer listed by the provider on a full read of 2025-03-14", "unexplained"),
])
def test_an_unreadable_entry_of_those_days_in_quarantine_keeps_a_difference_unconfirmed(db, ledger, report_of,
                                                                                         reason, status):
    """The ledger lacks an entry the provider lists but partnerkit could not read: the money did not move without
    an entry, so no wallet drift (the report lists the held record). One no longer listed is no such explanation."""
    from partnerkit.store import quarantine

    a_day(ledger)
    quarantine.hold(db, "transaction", [(reason, {"id": "700999", "created_at": "2025-03-14T23:00:00Z",
                                                  "amount": "-50.00"})], now=RUN)
    snapshot(db, at(0, 5, day=NEXT), INR=1051.50)
    next_day_read(ledger, at(0, 15, day=NEXT))
    report = report_of()
    assert report["wallets"]["INR"]["provider_difference_status"] == status
    assert len(wallet_drifts(report)) == (status == "unexplained")


def test_an_opening_balance_dated_after_the_entries_it_precedes_is_not_money(db, ledger, report_of):
    """The sandbox's world when a test plants a past day: the opening top-up (the first id) is stamped when the
    sandbox started, after the planted day's debits whose balances follow it. The entry dated last (the top-up) is
    not the chain's end; the entry made last (by id) is, and it says the provider's balance: no wallet drift."""
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", id="700001", hour=0, minute=3, day=NEXT)
    ledger.tx("-100.00", type="ADJUSTMENT", balance_after="900.00", id="700002", hour=9)
    last = ledger.tx("-75.00", type="ADJUSTMENT", balance_after="825.00", id="700003", hour=10)
    ledger.read_in_full(day=DAY, when=at(0, 45, day=NEXT))
    snapshot(db, at(0, 5, day=NEXT), INR=825)
    next_day_read(ledger, at(0, 15, day=NEXT))
    report = report_of()
    w = report["wallets"]["INR"]
    assert (w["ledger_balance_at_provider_time"], w["provider_difference_status"],
            w["provider_difference_explained_by"]) == ("1000.00", "timing", [last])
    assert wallet_drifts(report) == []


def own_sync(read_at):
    """What the report's own sync says of its wallet read (reconcile.sync.sync_range): the balances were read at
    `read_at`, after its walks, which began at the report's `now`."""
    summary = SyncSummary(DAY.isoformat(), DAY.isoformat())
    summary.wallets_at = iso(read_at)
    return summary


def a_clock_ahead(ledger):
    """The demo's last minutes (its sandbox runs 40x): a debit, then the debit of an order whose refund the provider
    deleted, both made before the balances were read at 23:01 and dated after it. The helper stamps every entry as
    listed by a read begun at 23:00."""
    ledger.tx("1200.00", type="TOPUP", balance_after="1200.00", hour=1)
    first = ledger.tx("-100.00", type="TOPUP", balance_after="1100.00", hour=23, minute=20)
    last = ledger.tx("-490.00", type="TOPUP", balance_after="610.00", hour=23, minute=40)
    return first, last


@pytest.mark.parametrize("provider,expected", [
    (1100, ("610.00", "490.00", "unconfirmed", [])),  # the refund of the last debit deleted from the list, kept
    (610, ("610.00", "0.00", "agrees", [])),          # nothing deleted
])
def test_entries_the_reports_own_sync_listed_were_made_before_its_read_of_the_balance(db, ledger, config, provider,
                                                                                     expected):
    """h09, the demo's order 5007: the report's own sync read the balances after its walks had listed every entry
    above. Walked forward from the entry dated last before the read, the chain reached the provider's balance after
    the first debit and the report called the deleted refund "timing" (-10,630.00 in the demo). Listed before the
    read, the last debit was made before it: the ledger's balance then is after it, and the 490.00 is what it is."""
    a_clock_ahead(ledger)
    snapshot(db, at(23, 1), INR=provider)
    report = report_day(config, db, DAY, now=at(23), synced=own_sync(at(23, 1)))
    w = report["wallets"]["INR"]
    assert (w["ledger_balance_at_provider_time"], w["provider_difference"], w["provider_difference_status"],
            w["provider_difference_explained_by"]) == expected
    assert wallet_drifts(report) == []  # no read begun after the balance was read vouches for the entries yet


def test_entries_listed_only_by_a_read_begun_after_the_walks_may_still_be_timing(db, ledger, config):
    """The same entries, listed by a read that began after the report's own walks (another process's sync, at
    23:00 while the walks began at 22:59): they may have been made after the balance was read, so the chain
    through them is timing, as without the report's sync."""
    first, last = a_clock_ahead(ledger)
    snapshot(db, at(23), INR=610)
    w = report_day(config, db, DAY, now=at(22, 59), synced=own_sync(at(23)))["wallets"]["INR"]
    assert (w["ledger_balance_at_provider_time"], w["provider_difference_status"],
            w["provider_difference_explained_by"]) == ("1200.00", "timing", [first, last])


def test_an_entry_the_reports_own_sync_listed_is_never_read_back_as_made_after_the_read(db, ledger, config):
    """A clock like ours: the debit of an order is dated in the minute before the read, and its refund was deleted.
    Read back, the balance before the debit is the provider's: timing for a clock behind ours. The report's own
    walks listed the debit before the balance was read, so it was made before it: not timing."""
    ledger.tx("1200.00", type="TOPUP", balance_after="1200.00", hour=1)
    ledger.tx("-490.00", type="TOPUP", balance_after="710.00", hour=23)
    snapshot(db, at(23, 1), INR=1200)
    w = report_day(config, db, DAY, now=at(23), synced=own_sync(at(23, 1)))["wallets"]["INR"]
    assert (w["ledger_balance_at_provider_time"], w["provider_difference"], w["provider_difference_status"]) == (
        "710.00", "490.00", "unconfirmed")
