"""The report's money figures and whether they are final: gross debits and credits, net, spend as the
document means it, the wallet's roll-forward against the provider's balance, partial and unsettled days."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.reconcile.reconcile_helpers import DAY, at
from partnerkit.config import load_config
from partnerkit.store.ledger import record_sync, record_wallet_snapshots
from partnerkit.timeutil import iso
from reconcile import matcher
from reconcile.jobs import report_day

NEXT = DAY + timedelta(days=1)
RUN = at(2, day=NEXT)  # the nightly run: the day is over


@pytest.fixture(autouse=True, params=["one connection", "ledger side in a thread"])
def ledger_side(request, monkeypatch):
    """The figures are the same whether the day's transactions are read on the matcher's connection or beside it."""
    monkeypatch.setattr(matcher, "PARALLEL_FROM", 50_000 if request.param == "one connection" else 0)


@pytest.fixture
def config(db_path, tmp_path):
    return load_config(environ={"PARTNERKIT_DB": str(db_path), "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")})


@pytest.fixture
def report_of(db, config):
    return lambda now=RUN: report_day(config, db, DAY, now=now)


def snapshot(db, when, **balances):
    record_wallet_snapshots(db, [(iso(when), str(n), currency, int(amount * 100), "{}")
                                 for n, (currency, amount) in enumerate(balances.items())])


# --- debits, credits, net and spend --------------------------------------------------------------

def test_spend_is_what_success_and_processing_recharges_and_kept_orders_cost(ledger, report_of):
    good = ledger.recharge(payable="98.50")
    ledger.debit_recharge(good)                                  # spend 98.50
    reversed_ = ledger.recharge("REVERSED")
    ledger.debit_recharge(reversed_)
    ledger.credit_recharge(reversed_)                            # credited back: not spend
    failed = ledger.recharge("FAILED")
    ledger.debit_recharge(failed)                                # not credited (missing_refund): still not spend
    twice = ledger.recharge(payable="100.00", face="102.00")
    ledger.debit_recharge(twice)
    ledger.debit_recharge(twice, minute=2)
    ledger.credit_recharge(twice, minute=3)                      # a second debit, corrected: spend 100.00
    credited = ledger.recharge(payable="50.00", face="51.00")
    ledger.debit_recharge(credited)
    ledger.credit_recharge(credited, "20.00")                    # unexpected_refund: spend 30.00, net of it
    pending = ledger.recharge("PROCESSING", payable="40.00", face="41.00")
    ledger.debit_recharge(pending)                               # PROCESSING is spend
    refunded = ledger.order("FAILED", amount="300.00")
    ledger.debit_order(refunded, "300.00")
    ledger.tx("300.00", type="REFUND", order_id=refunded)        # a refunded order: not spend
    kept = ledger.order(amount="500.00")
    ledger.debit_order(kept, "500.00")                           # spend 500.00
    ledger.tx("-12.00", type="RECHARGE", reference_number="GHOST")  # an orphan: not spend
    ledger.tx("1000.00", type="TOPUP")                           # a wallet movement: none of these

    s = report_of()["summary"]
    assert s["spend"] == {"INR": "1396.50"}                      # gross: every debit but wallet movements
    assert s["refunds"] == {"INR": "518.00"}                     # every credit but wallet movements
    assert s["net_debits"] == {"INR": "878.50"}
    assert s["spend_as_documented"] == {"INR": "768.50"}         # 98.50 + 100 + 30 + 40 + 500


def test_spend_follows_the_currency_of_the_debit_and_counts_a_conversion_charge(ledger, report_of):
    oid = ledger.order(amount="6.00", currency="USD")
    ledger.debit_order(oid, "510.00")                            # an INR wallet pays a USD order
    ledger.tx("-7.65", type="FX_FEE", order_id=oid, hour=11)     # the conversion's charge
    usd = ledger.recharge(payable="2.00", face="2.00")
    ledger.debit_recharge(usd, currency="USD")                   # amount_mismatch: debited in USD
    s = report_of()["summary"]
    assert s["spend_as_documented"] == {"INR": "517.65", "USD": "2.00"}  # 510.00 and its charge 7.65
    assert s["spend"] == {"INR": "517.65", "USD": "2.00"}


def test_spend_of_recharges_in_several_currencies_stays_in_each(ledger, report_of):
    for currency, payable in (("INR", "98.00"), ("USD", "3.00"), ("USD", "4.00")):
        ledger.debit_recharge(ledger.recharge(payable=payable, face=payable, currency=currency), currency=currency)
    failed = ledger.recharge("FAILED", payable="5.00", face="5.00", currency="USD")
    ledger.debit_recharge(failed, currency="USD")
    ledger.credit_recharge(failed, currency="USD")
    report = report_of()
    assert report["drifts"] == []
    assert report["summary"]["spend_as_documented"] == {"INR": "98.00", "USD": "7.00"}
    assert report["summary"]["spend"] == {"INR": "98.00", "USD": "12.00"}


# --- the wallet: roll-forward and the provider's balance -----------------------------------------

def chained_day(ledger):
    """A day whose entries carry balance_after: a top-up, a recharge, a FAILED one credited back."""
    ledger.tx("1000.00", type="TOPUP", balance_after="1200.00", hour=1)
    good = ledger.recharge(payable="98.50")
    ledger.debit_recharge(good, hour=9, balance_after="1101.50")
    failed = ledger.recharge("FAILED")
    ledger.debit_recharge(failed, hour=14, balance_after="1003.50")
    ledger.credit_recharge(failed, hour=14, minute=2, balance_after="1101.50")
    ledger.tx("-50.00", type="RECHARGE", reference_number="NEXT", day=NEXT, hour=0, minute=10,
              balance_after="1051.50")                       # after midnight, before the snapshot


def test_wallet_rolls_forward_and_matches_the_provider_read_after_the_day(db, ledger, report_of):
    chained_day(ledger)
    snapshot(db, at(23, day=DAY), INR=1101.50)                   # during the day: a later one is there
    snapshot(db, at(0, 30, day=NEXT), INR=1051.50, USD=20)      # the first read after the day ended
    snapshot(db, at(1, 30, day=NEXT), INR=900)                   # later: not this one
    snapshot(db, at(5, day=NEXT), INR=1)                         # after the report: never
    w = report_of()["wallets"]
    assert w["INR"] == {"opening_balance": "200.00", "credits": "1098.00", "debits": "196.50",
                        "closing_balance": "1101.50", "roll_forward_difference": "0.00",
                        "provider_balance": "1051.50", "provider_balance_at": "2025-03-15T00:30:00Z",
                        "ledger_balance_at_provider_time": "1051.50", "provider_difference": "0.00",
                        "provider_difference_status": "agrees", "provider_difference_explained_by": [],
                        "provider_difference_drift": None}
    assert w["USD"] == {"opening_balance": None, "credits": "0.00", "debits": "0.00", "closing_balance": None,
                        "roll_forward_difference": None, "provider_balance": "20.00",
                        "provider_balance_at": "2025-03-15T00:30:00Z", "ledger_balance_at_provider_time": None,
                        "provider_difference": None, "provider_difference_status": None,
                        "provider_difference_explained_by": [], "provider_difference_drift": None}


def test_a_provider_balance_the_ledger_does_not_explain_is_the_difference(db, ledger, report_of):
    chained_day(ledger)
    snapshot(db, at(0, 30, day=NEXT), INR=1541.50)               # a refund of 490.00 the list does not show
    w = report_of()["wallets"]["INR"]
    assert (w["ledger_balance_at_provider_time"], w["provider_difference"]) == ("1051.50", "490.00")


def test_a_partial_report_holds_the_latest_balance_against_the_entries_so_far(db, ledger, report_of):
    chained_day(ledger)
    snapshot(db, at(14, 30), INR=1101.50)
    w = report_of(now=at(15))["wallets"]["INR"]
    assert (w["closing_balance"], w["provider_balance"], w["provider_difference"]) == ("1101.50", "1101.50", "0.00")


def test_without_balance_after_the_balances_are_not_invented(db, ledger, report_of, config):
    good = ledger.recharge(payable="98.50")
    ledger.debit_recharge(good, hour=9)
    snapshot(db, at(0, 30, day=NEXT), INR=901.50)
    w = report_of()["wallets"]["INR"]
    assert (w["opening_balance"], w["closing_balance"], w["roll_forward_difference"]) == (None, None, None)
    assert (w["debits"], w["provider_balance"], w["provider_difference"]) == ("98.50", "901.50", None)
    page = (config.report_dir / "partnerkit-report-2025-03-14.html").read_text()
    assert page.count("not given by the provider") >= 3  # opening, closing, the ledger's balance then


def test_a_wallet_no_entry_of_the_day_moved_is_not_said_to_lack_the_providers_balances(db, ledger, report_of, config):
    """A USD wallet idle all day: its day's balances are null in the JSON, but the provider did not fail to give
    them (every entry carries balance_after), there was none. The page said "not given by the provider". The
    ledger's balance when the provider's was read is known all the same: the last USD entry, days before."""
    chained_day(ledger)
    ledger.tx("20.00", type="TOPUP", currency="USD", balance_after="20.00", day=DAY - timedelta(days=3))
    snapshot(db, at(0, 30, day=NEXT), INR=1051.50, USD=20)
    w = report_of()["wallets"]["USD"]
    assert (w["opening_balance"], w["credits"], w["debits"], w["closing_balance"]) == (None, "0.00", "0.00", None)
    assert (w["ledger_balance_at_provider_time"], w["provider_difference"], w["provider_difference_status"]) == (
        "20.00", "0.00", "agrees")
    row = (config.report_dir / "partnerkit-report-2025-03-14.html").read_text().split("<td>USD</td>")[1].split("</tr>")[0]
    assert row.count("no entry this day") == 2 and "not given by the provider" not in row  # opening, closing


def test_a_wallet_never_moved_in_the_store_is_not_compared(db, ledger, report_of, config):
    chained_day(ledger)
    snapshot(db, at(0, 30, day=NEXT), INR=1051.50, USD=20)
    w = report_of()["wallets"]["USD"]
    assert (w["ledger_balance_at_provider_time"], w["provider_difference"], w["provider_difference_status"]) == (
        None, None, None)
    row = (config.report_dir / "partnerkit-report-2025-03-14.html").read_text().split("<td>USD</td>")[1].split("</tr>")[0]
    assert row.count("no entry this day") == 2 and "no entry up to then" in row


def test_a_broken_chain_shows_in_the_roll_forward(db, ledger, report_of, config):
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", hour=1)
    ledger.tx("-100.00", type="TOPUP", balance_after="850.00", hour=3)  # 900.00 expected
    w = report_of()["wallets"]["INR"]
    assert (w["opening_balance"], w["closing_balance"], w["roll_forward_difference"]) == ("0.00", "850.00", "-50.00")
    page = (config.report_dir / "partnerkit-report-2025-03-14.html").read_text()
    # which way, in words: a signed "-50.00 away" left finance to guess
    assert "The closing balance is 50.00 below opening + credits − debits (more left the wallet" in page


# --- whether the day is final ------------------------------------------------------------------

def test_a_nightly_report_of_a_settled_day_is_complete(ledger, report_of):
    good = ledger.recharge()
    ledger.debit_recharge(good)
    ledger.nightly_read(good)
    report = report_of()
    assert (report["complete"], report["partial"], report["read_in_full"]) == (True, False, True)
    assert report["unsettled"] == {"recharges_processing": 0, "orders_pending": 0, "orders_processing": 0}
    assert report["day_read_at"] == {"recharges": "2025-03-15T01:05:00Z", "transactions": "2025-03-15T01:05:00Z"}


@pytest.mark.parametrize("reads", [
    {},                                                           # no sync read the day in full
    {"recharges": at(0, 20, day=NEXT)},                           # its transactions never
    {"recharges": at(0, 20, day=NEXT), "transactions": at(23, 45)},  # the transactions' last read before midnight
])
def test_a_settled_day_not_read_in_full_since_it_ended_is_not_complete(db, ledger, report_of, reads):
    """The store vouches for the whole day only once a read begun after it ended has listed its recharges and
    transactions: before that the last minutes' entries may be missing (a worker down since before midnight)."""
    good = ledger.recharge()
    ledger.debit_recharge(good)
    for entity, when in reads.items():
        record_sync(db, entity, from_day=DAY.isoformat(), to_day=DAY.isoformat(), started_at=iso(when), count=1,
                    days=[DAY.isoformat()], advance_to=None)
    report = report_of()
    assert (report["complete"], report["partial"], report["read_in_full"]) == (False, False, False)
    assert report["day_read_at"] == {e: iso(reads[e]) if e in reads else None for e in ("recharges", "transactions")}


def test_a_report_made_during_the_day_is_partial(ledger, report_of):
    good = ledger.recharge()
    ledger.debit_recharge(good)
    report = report_of(now=at(15))
    assert (report["complete"], report["partial"]) == (False, True)


def test_processing_recharges_and_pending_orders_leave_the_day_unsettled(ledger, report_of):
    pending = ledger.recharge("PROCESSING", hour=23)
    ledger.debit_recharge(pending, hour=23)
    for status in ("PENDING", "PENDING", "PROCESSING"):
        oid = ledger.order(status)
        ledger.debit_order(oid, "500.00")
    report = report_of(now=at(23, 10))  # not stuck yet, and the day not over
    assert (report["complete"], report["partial"]) == (False, True)
    assert report["unsettled"] == {"recharges_processing": 1, "orders_pending": 2, "orders_processing": 1}
    assert report["summary"]["matched"] == 4  # unsettled, but no drift: the page says it counts them
