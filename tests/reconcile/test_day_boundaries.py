"""Money across midnight: a UTC day's report when recharges, their debits, refunds and the wallet's balance
fall on either side of 00:00, or are stamped by a provider clock a few minutes off ours.

The sandbox runs on loopback with its clock frozen (speed 0) and the kit's clock frozen with freezegun;
`World.advance` moves both together (tests/reliability/provider_world.py), so a night is milliseconds.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.store.drifts import list_drifts
from reconcile.jobs import current_report, day_synced, nightly, reconcile_day
from reconcile.matcher import match_day
from reconcile.recharges import submit
from reconcile.sync import sync_range
from tests.reliability.provider_world import World

DAY = date(2025, 3, 10)
NEXT = DAY + timedelta(days=1)


def at(day: date, hour: int, minute: int = 0, second: int = 0, ms: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, second, ms * 1000, tzinfo=timezone.utc)


@pytest.fixture
def world(tmp_path):
    """The sandbox and the kit at 22:00 on DAY, one frozen clock (PROCESSING recharges settle after 50 minutes)."""
    with freeze_time(at(DAY, 22)) as frozen, World(tmp_path, frozen, start=at(DAY, 22), processing_delay_s=3000,
                                                    hourly_budget=5000) as w:
        yield w


def to(world: World, moment: datetime) -> None:
    """Move both clocks forward to `moment`."""
    world.advance((moment - world.now()).total_seconds())


def test_the_wallet_balance_is_held_against_the_ledger_when_it_was_read_not_when_the_sync_began(world):
    """A sync reads its pages for seconds (minutes on a busy day) and the wallet balances last: a recharge
    made meanwhile is in the provider's balance. The snapshot was stamped with the sync's start, so the
    ledger up to then left it out and the night's report showed a provider_difference nothing explains."""
    client = world.client()
    submit(world.config, world.db, client, mobile_number="9800000001", operator_id=1, amount=100)
    to(world, at(NEXT, 0, 15))  # the first sync after midnight: its snapshot is the one DAY's report holds

    def meanwhile(entity: str, read: int) -> None:
        if entity == "transactions":  # 20 s into the walk a customer's recharge is made
            world.advance(20)
            submit(world.config, world.db, world.client(), mobile_number="9800000002", operator_id=1, amount=50)

    synced = sync_range(world.config, world.db, client, DAY, NEXT, progress=meanwhile)
    assert synced.wallets_at == "2025-03-11T00:15:20Z"
    to(world, at(NEXT, 0, 30))
    sync_range(world.config, world.db, client, DAY, NEXT)  # the next 15-minute sync reads that debit
    to(world, at(NEXT, 1, 5))
    [report] = nightly(world.config, world.db, client)
    wallet = report["wallets"]["INR"]
    assert wallet["provider_difference"] == "0.00"  # was -48.75: the second recharge's debit
    assert wallet["provider_balance_at"] == "2025-03-11T00:15:20Z"
    assert wallet["ledger_balance_at_provider_time"] == wallet["provider_balance"]


def test_a_report_holds_the_balance_its_own_sync_read_after_the_report_time(world):
    """`partnerkit reconcile --date` (and a catch-up night) on a store without a later snapshot: the one its
    own sync reads, stamped when read, after the time the report carries, is the day's provider balance."""
    client = world.client()
    submit(world.config, world.db, client, mobile_number="9800000001", operator_id=1, amount=100)
    to(world, at(NEXT, 1, 5))
    report = reconcile_day(world.config, world.db, client, DAY,
                           progress=lambda entity, read: world.advance(10) if entity == "transactions" else None)
    assert report["generated_at"] == "2025-03-11T01:05:00Z"
    wallet = report["wallets"]["INR"]
    assert (wallet["provider_balance_at"], wallet["provider_difference"]) == ("2025-03-11T01:05:10Z", "0.00")


def test_a_catch_up_night_reads_the_refund_made_after_midnight(world):
    """A recharge submitted at 23:59:59.9 stays PROCESSING past midnight and FAILS at 00:49:59.9, credited
    back then (dated the next day). The worker was down over the midnight: the catch-up night read only
    the night's own transactions, and its report called the refunded recharge a missing_refund."""
    client = world.client()
    to(world, at(DAY, 23, 59, 59, 900))
    failing = submit(world.config, world.db, client, mobile_number="9800000006", operator_id=1, amount=50).recharge
    assert failing.status == "PROCESSING"
    to(world, at(NEXT, 1, 5))  # the worker comes back: the credit back was made at 00:49:59.9
    [report] = nightly(world.config, world.db, client)
    assert report["date"] == DAY.isoformat()
    assert report["counts_by_status"]["recharges"] == {"FAILED": 1}
    assert report["drifts"] == []  # was a missing_refund: FAILED recharge not credited back in full
    assert report["summary"]["spend_as_documented"] == {}


def test_a_debit_dated_before_midnight_for_a_recharge_created_after_it_is_no_orphan(world):
    """The provider's ledger may stamp a debit a moment before the recharge record it pays for: at
    23:59:59.95 on DAY for a recharge created at 00:00:00.1 on NEXT (here one partnerkit did not submit,
    so only a sync brings it). DAY's report must link it, on a catch-up night too."""
    client = world.client()
    to(world, at(NEXT, 0, 0, 0, 100))
    made = client.submit_recharge(mobile_number="9800000001", operator_id=1, amount=100).recharge
    [debit] = [t for t in client.iter_transactions(from_date=NEXT, to_date=NEXT) if t.get("recharge_id") == made.id]
    world.control("PATCH", f"/transactions/{debit['id']}", {"created_at": "2025-03-10T23:59:59.950Z"})
    to(world, at(NEXT, 1, 5))
    [report] = nightly(world.config, world.db, client)
    assert report["summary"]["transactions_total"] == 3  # two opening top-ups and the debit
    assert report["drifts"] == []  # was an orphan_transaction until the next night
    assert report["spend_by_hour"]["INR"][23] == debit["amount"]


def reconcile_command(world: World, day: date):
    """`partnerkit reconcile --date DAY` against the world's sandbox and database, on the world's frozen clock."""
    env = {"PARTNERKIT_DB": str(world.config.db_path), "PARTNERKIT_API_BASE_URL": world.server.base_url,
           "PARTNERKIT_API_KEY": world.key, "PARTNERKIT_API_SECRET": world.server.clients[0].secret,
           "PARTNERKIT_REPORT_DIR": str(world.config.report_dir), "PARTNERKIT_VOUCHER_KEY": world.config.voucher_key,
           "PARTNERKIT_HOURLY_BUDGET": str(world.config.hourly_budget)}
    return CliRunner().invoke(cli, ["reconcile", "--date", day.isoformat()], env=env)


def stored_report(world: World, day: date) -> dict:
    return json.loads((world.config.report_dir / f"partnerkit-report-{day}.json").read_text())


def covered(world: World) -> dict[str, list[str]]:
    """The days each entity's syncs claim to have read in full (`sync_coverage`)."""
    rows = world.db.execute("SELECT entity, day FROM sync_coverage ORDER BY entity, day").fetchall()
    return {entity: [day for e, day in rows if e == entity] for entity in ("recharges", "transactions")}


def test_reconcile_date_reads_the_refund_the_provider_dated_the_day_after(world):
    """A recharge submitted at 23:59:59.9 FAILS at 00:49:59.9 and is credited back then, dated the next day.
    On a store that never synced that next day (a new host, a restored backup, a worker down since before
    midnight), `partnerkit reconcile --date DAY` read DAY alone and reported the refunded recharge as a
    missing_refund, as the nightly run did before it read through today."""
    to(world, at(DAY, 23, 59, 59, 900))
    failing = submit(world.config, world.db, world.client(), mobile_number="9800000006", operator_id=1,
                     amount=50).recharge
    assert failing.status == "PROCESSING"
    to(world, at(NEXT, 1, 5))  # FAILED at 00:49:59.9, credited back then; no sync has run since the submit
    result = reconcile_command(world, DAY)
    assert result.exit_code == 0, result.output
    report = stored_report(world, DAY)
    assert report["counts_by_status"]["recharges"] == {"FAILED": 1}
    assert report["drifts"] == []  # was a missing_refund: FAILED recharge not credited back in full
    assert list_drifts(world.db) == []
    assert result.stderr.splitlines()[0] == (f"{DAY}: syncing {DAY}..{NEXT} from the provider ({NEXT} so far): the "
                                             "day after too, for a credit back or a debit dated after midnight")
    # NEXT was read while it lasts: not claimed as read in full (`partnerkit report --date NEXT` still refuses).
    assert covered(world) == {"recharges": [DAY.isoformat()], "transactions": [DAY.isoformat()]}
    assert not day_synced(world.db, NEXT)


def test_reconcile_date_of_an_old_night_reads_the_day_after_it_not_everything_since(world):
    """Weeks later, on a store that never synced the night nor the day after it: the debit the provider stamped
    at 23:59:59.95 for a recharge created at 00:00:00.1 (not partnerkit's, so only a sync brings it) was an
    orphan_transaction. The day after is read, and read in full (it is over): not every day since."""
    client = world.client()
    to(world, at(NEXT, 0, 0, 0, 100))
    made = client.submit_recharge(mobile_number="9800000001", operator_id=1, amount=100).recharge
    [debit] = [t for t in client.iter_transactions(from_date=NEXT, to_date=NEXT) if t.get("recharge_id") == made.id]
    world.control("PATCH", f"/transactions/{debit['id']}", {"created_at": "2025-03-10T23:59:59.950Z"})
    later = NEXT + timedelta(days=40)
    to(world, at(later, 9))
    result = reconcile_command(world, DAY)
    assert result.exit_code == 0, result.output
    report = stored_report(world, DAY)
    assert report["summary"]["transactions_total"] == 3  # two opening top-ups and the debit
    assert report["drifts"] == []  # was an orphan_transaction
    assert result.stderr.splitlines()[0] == (f"{DAY}: syncing {DAY}..{NEXT} from the provider: the day after too, "
                                             "for a credit back or a debit dated after midnight")
    days = [DAY.isoformat(), NEXT.isoformat()]
    assert covered(world) == {"recharges": days, "transactions": days}  # NEXT is over: read in full
    assert day_synced(world.db, NEXT) and not day_synced(world.db, later)


def test_a_late_refund_resolves_the_first_nights_missing_refund_naming_the_credit(world):
    """FAILED at 22:30 without its credit back: DAY's first night finds a missing_refund. The provider
    credits it two days later, and the night that reads the credit resolves the drift, naming it."""
    client = world.client()
    failed = submit(world.config, world.db, client, mobile_number="9800000008", operator_id=1, amount=60).recharge
    to(world, at(DAY, 22, 30))
    world.control("POST", f"/recharges/{failed.id}/settle", {"status": "FAILED", "refund": False})
    to(world, at(NEXT, 1, 5))
    [first] = nightly(world.config, world.db, client)
    assert [(d["kind"], d["reference"]) for d in first["drifts"]] == [("missing_refund", failed.reference_number)]
    to(world, at(NEXT + timedelta(days=2), 12))
    credit = world.control("POST", "/transactions", {"type": "RECHARGE_REFUND", "direction": "CREDIT",
                                                     "amount": str(failed.payable), "recharge_id": failed.id,
                                                     "reference_number": failed.reference_number})
    to(world, at(NEXT + timedelta(days=3), 1, 5))
    nightly(world.config, world.db, client)  # the two nights since, DAY matched again (an open drift)
    [drift] = list_drifts(world.db, kind="missing_refund")
    assert drift.resolution == "resolved"
    assert drift.resolution_note == (f"no longer detected on {DAY} run: credit {credit['id']} of "
                                     f"{failed.payable:.2f} received")
    assert current_report(world.db, DAY)["drifts"][0]["resolution"] == "resolved"


@pytest.mark.parametrize("provider_clock", [timedelta(minutes=-10), timedelta(minutes=10)])
def test_a_recharge_is_stuck_after_30_minutes_on_our_clock_whatever_the_providers(world, provider_clock):
    """The poller ages a recharge partnerkit sent from its own submit time (README: "on whose clock");
    the night's match aged it from the provider's created_at, so with the provider ten minutes behind a
    recharge was stuck_processing 20 minutes after it was sent, and ten minutes ahead only after 40."""
    ours = world.now() - provider_clock  # the provider's clock is `provider_clock` off ours
    sent = submit(world.config, world.db, world.client(), mobile_number="9800000008", operator_id=1, amount=60,
                  now=ours).recharge
    assert sent.created_at == ours + provider_clock

    def stuck(minutes: int) -> list[str]:
        match_day(world.db, DAY, now=ours + timedelta(minutes=minutes))
        return [d.resolution for d in list_drifts(world.db, kind="stuck_processing")]

    assert stuck(29) == []
    assert stuck(31) == ["pending"]


def test_the_credit_that_resolves_a_missing_refund_is_named_even_when_dated_before_the_run(world):
    """The note of an automatic resolution names the credit that cleared the drift, if it is dated after
    the run that last found it. The provider's clock is not ours: a credit it made after that run, on a
    clock ten minutes behind, is dated before it, and the note said only "no longer detected"."""
    client = world.client()
    failed = submit(world.config, world.db, client, mobile_number="9800000008", operator_id=1, amount=60).recharge
    world.control("POST", f"/recharges/{failed.id}/settle", {"status": "FAILED", "refund": False})
    to(world, at(NEXT, 1, 5))
    [first] = nightly(world.config, world.db, client)
    assert [d["kind"] for d in first["drifts"]] == ["missing_refund"]
    to(world, at(NEXT, 1, 10))  # credited back now, stamped 01:00 by the provider's clock
    credit = world.control("POST", "/transactions", {"type": "RECHARGE_REFUND", "direction": "CREDIT",
                                                     "amount": str(failed.payable), "recharge_id": failed.id,
                                                     "reference_number": failed.reference_number,
                                                     "created_at": "2025-03-11T01:00:00Z"})
    to(world, at(NEXT + timedelta(days=1), 1, 5))
    nightly(world.config, world.db, client)
    [drift] = list_drifts(world.db, kind="missing_refund")
    assert (drift.resolution, drift.resolution_note) == (
        "resolved", f"no longer detected on {DAY} run: credit {credit['id']} of {failed.payable:.2f} received")
