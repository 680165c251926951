"""Each matching rule and each drift kind, from store fixtures (rows inserted through the store functions)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from tests.reconcile.reconcile_helpers import DAY, at
from partnerkit.store import recharges as recharge_store
from partnerkit.store.ledger import record_sync
from partnerkit.store.drifts import audit_trail, drift_id, get_drift, list_drifts, open_drift, set_resolution
from reconcile import matcher
from reconcile.matcher import match_day

NEXT = DAY + timedelta(days=1)
RUN = at(2, day=NEXT)


@pytest.fixture(autouse=True, params=["one connection", "ledger side in a thread"])
def ledger_side(request, monkeypatch):
    """Every rule holds whether the day's transactions are matched on the matcher's connection or beside it."""
    monkeypatch.setattr(matcher, "PARALLEL_FROM", 50_000 if request.param == "one connection" else 0)


def run(db, now=RUN):
    return match_day(db, DAY, now=now)


def found(db) -> set[tuple[str, str, str]]:
    """(kind, subject, reference) of the drifts currently open for the day."""
    return {(d.kind, d.subject, d.reference) for d in list_drifts(db, report_date=DAY.isoformat())
            if d.resolution != "resolved"}


def one(db, kind):
    matches = [d for d in list_drifts(db, kind=kind) if d.resolution != "resolved"]
    assert len(matches) == 1, matches
    return matches[0]


# --- recharges: matched against payable, never face ------------------------------------------

@pytest.mark.parametrize("status", ["SUCCESS", "PROCESSING"])
def test_spend_recharge_with_one_debit_of_payable_matches(db, ledger, status):
    rc = ledger.recharge(status, payable="98.00", face="100.00")
    ledger.debit_recharge(rc)
    result = run(db, now=at(10, 10))  # within 30 minutes: not stuck
    assert found(db) == set()
    assert (result.matched, result.drifted, result.spend) == (1, 0, {"INR": Decimal("98.00")})


def test_legacy_delivered_is_stored_as_success_and_is_spend(db, ledger):
    rc = ledger.recharge("DELIVERED")
    ledger.debit_recharge(rc)
    assert run(db).recharge_status == {"SUCCESS": 1}
    assert found(db) == set()


def test_debit_of_face_instead_of_payable_is_amount_mismatch(db, ledger):
    rc = ledger.recharge(payable="98.00", face="100.00")
    ledger.debit_recharge(rc, amount="100.00")
    run(db)
    d = one(db, "amount_mismatch")
    assert (d.subject, d.reference, d.expected, d.actual, d.currency) == ("recharge", rc["reference_number"],
                                                                          Decimal("98.00"), Decimal("100.00"), "INR")


def test_spend_recharge_without_debit_is_missing_debit(db, ledger):
    rc = ledger.recharge()
    run(db)
    d = one(db, "missing_debit")
    assert (d.reference, d.expected, d.actual) == (rc["reference_number"], Decimal("98.00"), Decimal("0.00"))


def test_two_debits_for_one_recharge_is_duplicate_debit(db, ledger):
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.debit_recharge(rc, minute=2)
    run(db)
    assert one(db, "duplicate_debit").actual == Decimal("196.00")


@pytest.mark.parametrize("credit, drift", [
    # Judged on the net: the provider took payable twice and gave the second back, so the wallet paid
    # payable once. Neither a duplicate_debit nor an unexpected_refund stays open.
    ("98.00", None),
    ("50.00", ("duplicate_debit", "98.00", "146.00")),  # still over payable, at its net
    ("196.00", ("unexpected_refund", "98.00", "196.00")),  # more than the second debit took
])
def test_a_second_debit_credited_back_is_judged_on_the_net(db, ledger, credit, drift):
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.debit_recharge(rc, minute=2)
    ledger.credit_recharge(rc, amount=credit, minute=9)
    result = run(db)
    if drift is None:
        assert result.matched == 1 and found(db) == set()
        return
    kind, expected, actual = drift
    assert found(db) == {(kind, "recharge", rc["reference_number"])}
    d = one(db, kind)
    assert (d.expected, d.actual) == (Decimal(expected), Decimal(actual))


def test_a_late_credit_for_a_duplicate_debit_resolves_it_automatically(db, ledger):
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.debit_recharge(rc, minute=2)
    run(db)
    d = one(db, "duplicate_debit")
    ledger.credit_recharge(rc, day=DAY + timedelta(days=1))
    result = run(db, now=RUN + timedelta(days=1))
    assert result.changes["auto_resolved"] == 1 and found(db) == set()
    assert get_drift(db, d.id).resolution == "resolved"


@pytest.mark.parametrize("status", ["FAILED", "REVERSED"])
def test_a_credited_back_recharge_debited_twice_and_credited_twice_is_net_zero(db, ledger, status):
    whole, short = ledger.recharge(status), ledger.recharge(status)
    for rc in (whole, short):
        ledger.debit_recharge(rc)
        ledger.debit_recharge(rc, minute=2)
        ledger.credit_recharge(rc, minute=9)
    ledger.credit_recharge(whole, minute=10)
    run(db)
    assert found(db) == {("duplicate_debit", "recharge", short["reference_number"]),
                         ("missing_refund", "recharge", short["reference_number"])}


def test_a_debit_in_another_currency_than_the_recharge_is_amount_mismatch(db, ledger):
    rc = ledger.recharge()
    ledger.tx("-98.00", type="RECHARGE", recharge_id=rc["id"], reference_number=rc["reference_number"],
              currency="USD")
    run(db)
    d = one(db, "amount_mismatch")
    assert (d.reference, d.expected, d.actual, d.currency) == (rc["reference_number"], Decimal("98.00"),
                                                               Decimal("98.00"), "INR")
    assert d.detail == "debited 98.00 in USD, the recharge is in INR"


def test_debit_linked_by_reference_only_counts(db, ledger):
    rc = ledger.recharge()
    ledger.tx("-98.00", type="RECHARGE", reference="%s" % rc["reference_number"])
    run(db)
    assert found(db) == set()


@pytest.mark.parametrize("status", ["FAILED", "REVERSED"])
def test_credited_back_recharge_with_debit_and_credit_is_net_zero(db, ledger, status):
    rc = ledger.recharge(status)
    ledger.debit_recharge(rc)
    ledger.credit_recharge(rc, minute=5)
    result = run(db)
    assert found(db) == set()
    assert result.spend == {"INR": Decimal("98.00")} and result.refunds == {"INR": Decimal("98.00")}


@pytest.mark.parametrize("status", ["FAILED", "REVERSED"])
def test_credited_back_recharge_without_credit_is_missing_refund(db, ledger, status):
    rc = ledger.recharge(status)
    ledger.debit_recharge(rc)
    run(db)
    d = one(db, "missing_refund")
    assert (d.reference, d.expected, d.actual) == (rc["reference_number"], Decimal("98.00"), Decimal("0.00"))


def test_failed_recharge_without_any_debit_is_missing_debit(db, ledger):
    ledger.recharge("FAILED")
    run(db)
    assert one(db, "missing_debit")


def test_credit_on_a_successful_recharge_is_unexpected_refund(db, ledger):
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.credit_recharge(rc)
    run(db)
    d = one(db, "unexpected_refund")
    assert (d.expected, d.actual) == (Decimal("0.00"), Decimal("98.00"))


def test_credit_larger_than_the_debit_is_unexpected_refund(db, ledger):
    rc = ledger.recharge("FAILED")
    ledger.debit_recharge(rc)
    ledger.credit_recharge(rc, amount="150.00")
    run(db)
    assert one(db, "unexpected_refund").actual == Decimal("150.00")


def test_processing_after_thirty_minutes_is_stuck_processing_with_its_reference(db, ledger):
    rc = ledger.recharge("PROCESSING", hour=10)
    ledger.debit_recharge(rc)
    run(db, now=at(10, 29))
    assert found(db) == set()
    run(db, now=at(10, 31))
    assert one(db, "stuck_processing").reference == rc["reference_number"]


def test_a_stuck_recharge_that_settled_resolves_saying_how(db, ledger):
    """Its note said only "no longer detected": finance had to look the recharge up to learn it settled."""
    rc = ledger.recharge("PROCESSING", hour=10)
    ledger.debit_recharge(rc)
    run(db, now=at(10, 31))
    stuck = one(db, "stuck_processing")
    recharge_store.upsert_from_provider(db, [{**rc, "status": "SUCCESS"}], at(10, 40))
    run(db, now=at(10, 41))
    assert get_drift(db, stuck.id).resolution == "resolved"
    assert get_drift(db, stuck.id).resolution_note == f"no longer detected on {DAY.isoformat()} run: recharge settled SUCCESS"


def test_poller_and_matcher_record_the_same_stuck_processing_drift(db, ledger):
    rc = ledger.recharge("PROCESSING", hour=10)
    ledger.debit_recharge(rc)
    ident = open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
                       expected=Decimal("98.00"), actual=None, currency="INR", detected_at=at(10, 31))
    assert get_drift(db, ident).report_date == DAY.isoformat()
    run(db)
    assert [d.id for d in list_drifts(db, kind="stuck_processing")] == [ident]


def test_provider_only_recharge_is_unknown_to_partner(db, ledger):
    rc = ledger.recharge(origin="provider")
    ledger.debit_recharge(rc)
    run(db)
    d = one(db, "unknown_to_partner")
    assert (d.reference, d.expected, d.actual) == (rc["reference_number"], None, Decimal("98.00"))


OWN = "carries partnerkit's own client_reference: submitted by partnerkit from a database that no longer has it"


@pytest.mark.parametrize("client_reference, own", [
    ("pk-0123456789abcdef0123", True),  # reconcile.recharges.new_client_reference's shape
    ("pk-0123456789ABCDEF0123", False),  # partnerkit writes lower-case hex
    ("pk-0123456789abcdef0123456789abcdef", False),  # the shape of its Idempotency-Keys, not of its references
    ("pk-0123456789abcdef012", False),
    ("ERP-0123456789abcdef01", False),  # another system's
    (None, False),
])
def test_a_provider_only_recharge_with_partnerkits_own_client_reference_says_so(db, ledger, client_reference, own):
    rc = ledger.recharge(origin="provider", client_reference=client_reference)
    ledger.debit_recharge(rc)
    run(db)
    d = one(db, "unknown_to_partner")  # the kind is the contract's, whoever submitted it
    assert (d.id, d.reference, d.actual) == (drift_id("unknown_to_partner", "recharge", rc["reference_number"]),
                                             rc["reference_number"], Decimal("98.00"))
    if own:
        assert d.detail == f"{OWN}: a restored or copied database (client_reference {client_reference})"
    else:
        assert d.detail == "the provider has a recharge partnerkit never submitted"


def test_the_client_reference_partnerkit_generates_is_the_one_the_matcher_knows_as_its_own(db, ledger):
    """One form, named once (partnerkit.store.recharges.OWN_REFERENCE_PREFIX): the submit's generator and the
    matcher's GLOB cannot drift apart."""
    from reconcile.recharges import new_client_reference, new_idempotency_key

    ours, key = new_client_reference(), new_idempotency_key()
    for reference in (ours, key):
        ledger.debit_recharge(ledger.recharge(origin="provider", client_reference=reference))
    run(db)
    details = {d.detail for d in list_drifts(db, kind="unknown_to_partner")}
    assert details == {f"{OWN}: a restored or copied database (client_reference {ours})",
                       "the provider has a recharge partnerkit never submitted"}


def test_recharge_missing_from_the_days_complete_sync_is_unknown_to_provider(db, ledger):
    listed, missing = ledger.recharge(), ledger.recharge()
    for rc in (listed, missing):
        ledger.debit_recharge(rc)
    key = ledger.intent()
    ledger.synced([listed])
    run(db)
    assert {d.reference for d in list_drifts(db, kind="unknown_to_provider")} == {missing["reference_number"], key}


def test_absence_means_nothing_before_a_complete_sync_after_the_day(db, ledger):
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.synced([], when=at(23))  # a sync during the day: the recharge may not exist yet
    run(db)
    assert found(db) == set()


# --- orders ----------------------------------------------------------------------------------

def test_order_matches_the_order_transaction_named_by_its_transaction_id(db, ledger):
    oid = ledger.order(amount="500.00")
    ledger.debit_order(oid, "500.00")
    assert run(db).matched == 1 and found(db) == set()


def test_order_without_its_named_transaction_is_missing_debit(db, ledger):
    oid = ledger.order()
    ledger.tx("-500.00", type="ORDER")  # an unlinked debit elsewhere
    run(db)
    assert one(db, "missing_debit").reference == str(oid)


def test_order_debited_another_amount_is_amount_mismatch(db, ledger):
    oid = ledger.order(amount="500.00")
    ledger.debit_order(oid, "450.00")
    run(db)
    d = one(db, "amount_mismatch")
    assert (d.subject, d.reference, d.expected, d.actual) == ("order", str(oid), Decimal("500.00"), Decimal("450.00"))


def test_wallet_in_another_currency_is_a_conversion_not_a_mismatch(db, ledger):
    oid = ledger.order(amount="6.00", currency="USD")
    ledger.debit_order(oid, "510.00", currency="INR")
    result = run(db)
    assert found(db) == set()
    assert result.conversions == [{"order_id": oid, "transaction_id": str(oid + 500_000), "order_currency": "USD",
                                   "order_amount": Decimal("6.00"), "wallet_currency": "INR",
                                   "debited": Decimal("510.00"), "charges": Decimal("0.00")}]


def test_a_conversion_charge_is_listed_with_its_conversion_not_a_duplicate(db, ledger):
    # "conversion charges may be added per client configuration; conversions are logged in the
    # transaction history": a charge debit carrying the order id of a converted order is the
    # conversion's, listed with it. The same charge on an order paid in its own currency is not
    # documented, so it stays a second debit.
    converted, plain = ledger.order(amount="6.00", currency="USD"), ledger.order(amount="500.00")
    ledger.debit_order(converted, "510.00", currency="INR")
    ledger.tx("-7.65", type="fx_fee", order_id=converted, minute=2)
    ledger.debit_order(plain, "500.00")
    ledger.tx("-7.65", type="FX_FEE", order_id=plain, minute=2)
    result = run(db)
    assert found(db) == {("duplicate_debit", "order", str(plain))}
    assert [(c["order_id"], c["debited"], c["charges"]) for c in result.conversions] == [
        (converted, Decimal("510.00"), Decimal("7.65"))]
    assert result.spend == {"INR": Decimal("1025.30")}  # a charge is money spent, a conversion is not


@pytest.mark.parametrize("refund", ["510.00", "517.65"])
def test_a_failed_conversion_is_refunded_with_or_without_its_charge(db, ledger, refund):
    oid = ledger.order("FAILED", amount="6.00", currency="USD")
    ledger.debit_order(oid, "510.00", currency="INR")
    ledger.tx("-7.65", type="CONVERSION_FEE", order_id=oid, minute=2)
    ledger.tx(refund, type="REFUND", order_id=oid, minute=9)
    run(db)
    assert found(db) == set()


def test_second_debit_for_an_order_is_duplicate_debit(db, ledger):
    oid = ledger.order()
    ledger.debit_order(oid, "500.00")
    ledger.tx("-500.00", type="ORDER", order_id=oid)
    run(db)
    assert one(db, "duplicate_debit").actual == Decimal("1000.00")


def test_a_second_order_debit_credited_back_leaves_the_order_matched(db, ledger):
    oid = ledger.order()
    ledger.debit_order(oid, "500.00")
    ledger.tx("-500.00", type="ORDER", order_id=oid, minute=3)
    ledger.tx("500.00", type="REFUND", order_id=oid, minute=9)
    assert run(db).matched == 1
    assert found(db) == set()


def test_a_refund_beyond_an_orders_second_debit_is_unexpected(db, ledger):
    oid = ledger.order()
    ledger.debit_order(oid, "500.00")
    ledger.tx("-500.00", type="ORDER", order_id=oid, minute=3)
    ledger.tx("800.00", type="REFUND", order_id=oid, minute=9)
    run(db)
    assert found(db) == {("unexpected_refund", "order", str(oid))}
    d = one(db, "unexpected_refund")
    assert (d.expected, d.actual) == (Decimal("500.00"), Decimal("800.00"))


def test_one_debit_for_an_order_is_never_a_duplicate_even_when_it_is_not_the_named_one(db, ledger):
    # The order names transaction 900001, the wallet shows one debit carrying its order_id under another
    # id: the named debit is missing, but one debit is not two ("1 debits for one order").
    oid = ledger.order(transaction_id=900_001)
    ledger.tx("-500.00", type="ORDER", order_id=oid)
    run(db)
    assert found(db) == {("missing_debit", "order", str(oid))}


@pytest.mark.parametrize("status", ["FAILED", "CANCELLED"])
def test_failed_or_cancelled_order_must_be_refunded(db, ledger, status):
    refunded, unrefunded = ledger.order(status), ledger.order(status)
    for oid in (refunded, unrefunded):
        ledger.debit_order(oid, "500.00")
    ledger.tx("500.00", type="REFUND", order_id=refunded)
    run(db)
    assert found(db) == {("missing_refund", "order", str(unrefunded))}


@pytest.mark.parametrize("status", ["FAILED", "CANCELLED"])
def test_failed_order_is_refunded_what_was_debited_duplicates_included(db, ledger, status):
    # "FAILED and CANCELLED orders must be refunded (credits carrying the order id, for the debited
    # amount)": both debits back is the refund in full, not an unexpected one; the named one alone is short.
    full, short = ledger.order(status), ledger.order(status)
    for oid in (full, short):
        ledger.debit_order(oid, "500.00")
        ledger.tx("-500.00", type="ORDER", order_id=oid)
        ledger.tx("500.00", type="REFUND", order_id=oid)
    ledger.tx("500.00", type="REFUND", order_id=full, day=DAY + timedelta(days=1))
    run(db)
    # Both debits refunded: the wallet is whole, nothing stays open. One refunded: the duplicate and the
    # shortfall it caused.
    assert found(db) == {("duplicate_debit", "order", str(short)), ("missing_refund", "order", str(short))}
    d = one(db, "missing_refund")
    assert (d.expected, d.actual) == (Decimal("1000.00"), Decimal("500.00"))


def test_refund_of_a_delivered_order_is_unexpected_refund(db, ledger):
    oid = ledger.order()
    ledger.debit_order(oid, "500.00")
    ledger.tx("500.00", type="REFUND", order_id=oid)
    run(db)
    assert one(db, "unexpected_refund").reference == str(oid)


def test_delivered_order_with_fewer_vouchers_than_quantity_is_voucher_shortfall(db, ledger):
    oid = ledger.order(quantity=3, vouchers=2)
    ledger.debit_order(oid, "500.00")
    run(db)
    d = one(db, "voucher_shortfall")
    assert (d.reference, d.expected, d.actual, d.measure) == (str(oid), 3, 2, "count")


def test_partially_delivered_counts_against_the_delivered_quantity(db, ledger):
    fine = ledger.order("PARTIALLY_DELIVERED", quantity=5, vouchers=2, delivered_quantity=2)
    short = ledger.order("PARTIALLY_DELIVERED", quantity=5, vouchers=0)
    for oid in (fine, short):
        ledger.debit_order(oid, "500.00")
    run(db)
    assert found(db) == {("voucher_shortfall", "order", str(short))}


# --- transactions and the wallet ----------------------------------------------------------------

def test_transaction_linked_to_nothing_is_orphan_but_a_top_up_is_not(db, ledger):
    orphan = ledger.tx("-12.00", type="RECHARGE", reference_number="NOT-OURS")
    ledger.tx("1000.00", type="TOPUP")
    result = run(db)
    assert found(db) == {("orphan_transaction", "transaction", orphan)}
    assert result.unmatched == 1


@pytest.mark.parametrize("fields, named", [
    ({"reference_number": "GHOST1"}, "naming reference_number GHOST1: no such recharge or order"),
    ({"reference_number": "GHOST2", "recharge_id": 777, "order_id": 88},
     "naming reference_number GHOST2, recharge_id 777, order_id 88: no such recharge or order"),
    ({"order_id": 88}, "naming order_id 88: no such recharge or order"),
    ({}, "naming no reference_number, recharge_id or order_id"),
])
def test_an_orphan_names_what_it_claims_to_pay_for_and_when(db, ledger, fields, named):
    ledger.tx("-12.00", type="RECHARGE", hour=14, minute=5, **fields)
    run(db)
    assert one(db, "orphan_transaction").detail == f"RECHARGE debit at 2025-03-14T14:05:00Z {named}"


def test_an_orphan_credit_says_it_is_a_credit(db, ledger):
    ledger.tx("5.00", hour=9, reference_number="X-1")
    run(db)
    assert one(db, "orphan_transaction").detail == (
        "untyped credit at 2025-03-14T09:01:00Z naming reference_number X-1: no such recharge or order")


def test_balance_after_must_chain_by_the_amounts(db, ledger):
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", hour=1)
    ledger.tx("-100.00", type="TOPUP", balance_after="900.00", hour=2)
    broken = ledger.tx("-100.00", type="TOPUP", balance_after="850.00", hour=3)
    ledger.tx("-50.00", type="TOPUP", balance_after="800.00", hour=4)
    run(db)
    d = one(db, "balance_discontinuity")
    assert (d.subject, d.reference, d.expected, d.actual) == ("wallet", broken, Decimal("800.00"), Decimal("850.00"))


def read_transactions(db, *backs: int, after_it_ended: bool = True) -> None:
    """Record that a sync read the transactions of each day `back` days before DAY in full: by a read that began
    after the day ended (01:05 the next day, as the nightly run's), or while it lasted (23:45, a 15-minute sync's)."""
    for back in backs:
        day = DAY - timedelta(days=back)
        began = at(1, 5, day=day + timedelta(days=1)) if after_it_ended else at(23, 45, day=day)
        record_sync(db, "transactions", from_day=day.isoformat(), to_day=day.isoformat(),
                    started_at=began.isoformat().replace("+00:00", "Z"), count=0, days=[day.isoformat()],
                    advance_to=None)


def test_first_transaction_of_the_day_chains_from_the_previous_day(db, ledger):
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", day=DAY - timedelta(days=1), hour=23)
    first = ledger.tx("-100.00", type="TOPUP", balance_after="800.00", hour=0)
    read_transactions(db, 1)
    run(db)
    assert found(db) == {("balance_discontinuity", "wallet", first)}


@pytest.mark.parametrize("covered, judged", [
    ((), False), ((3, 2, 1), True),
    ((2, 1), False),  # the predecessor's own day never read: entries after it may be missing from the store
    ((3, 1), False),
])
def test_the_chain_is_not_judged_across_a_day_no_sync_read(db, ledger, covered, judged):
    """The store's last entry before a day never synced is not the provider's: the link across it would
    be a false break (a night the catch-up has not reached). Once every day from the predecessor's through
    the day before is read in full, it is judged."""
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", day=DAY - timedelta(days=3), hour=23)
    first = ledger.tx("-100.00", type="TOPUP", balance_after="800.00", hour=0)  # 1000 - 100 is not 800
    read_transactions(db, *covered)
    run(db)
    assert found(db) == ({("balance_discontinuity", "wallet", first)} if judged else set())


def test_a_previous_day_read_only_while_it_lasted_does_not_vouch_for_its_last_entry(db, ledger):
    """The 15-minute sync read the day before at 23:45 and the worker was down before midnight: the entries of
    23:50 are not in the store, so its last entry (23:00) is not the provider's. The link was judged anyway: a false
    balance_discontinuity carrying the unread entries' sum (expected 900.00, actual 850.00). Not judged until the
    day is read in full; once it is, the chain holds, and a real break is still found."""
    before = DAY - timedelta(days=1)
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", day=before, hour=23)
    first = ledger.tx("-100.00", type="TOPUP", balance_after="850.00", hour=0)
    read_transactions(db, 1, after_it_ended=False)
    run(db)
    assert found(db) == set()
    ledger.tx("-50.00", type="TOPUP", balance_after="950.00", day=before, hour=23, minute=50)  # read after midnight
    read_transactions(db, 1)
    run(db, now=RUN + timedelta(hours=1))
    assert found(db) == set()
    ledger.tx("-100.00", type="TOPUP", balance_after="840.00", id=first, hour=0)  # the provider's own break
    run(db, now=RUN + timedelta(hours=2))
    d = one(db, "balance_discontinuity")
    assert (d.reference, d.expected, d.actual) == (first, Decimal("850.00"), Decimal("840.00"))


def test_a_whole_second_comes_before_the_fractions_of_that_second_in_the_chain(db, ledger):
    # Stored times are ISO text ("...T02:00:00Z", "...T02:00:00.500000Z"): as text the whole second sorts
    # after its own fractions, which put the chain out of time order (two false discontinuities).
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", hour=1)
    ledger.tx("-100.00", type="TOPUP", balance_after="900.00", created_at="2025-03-14T02:00:00Z")
    ledger.tx("-100.00", type="TOPUP", balance_after="800.00", created_at="2025-03-14T02:00:00.500Z")
    ledger.tx("-50.00", type="TOPUP", balance_after="750.00", created_at="2025-03-14T02:00:01.250Z")
    run(db)
    assert found(db) == set()


def test_the_day_chains_from_the_previous_days_last_balance_in_time_not_text_order(db, ledger):
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", created_at="2025-03-13T23:59:59Z")
    ledger.tx("-100.00", type="TOPUP", balance_after="900.00", created_at="2025-03-13T23:59:59.900Z")
    ledger.tx("-100.00", type="TOPUP", balance_after="800.00", hour=0)
    read_transactions(db, 1)  # the link is judged
    run(db)
    assert found(db) == set()


def test_a_transaction_without_balance_after_is_no_break_in_the_chain(db, ledger):
    # balance_after is optional: a movement that does not show it is still a movement, not a gap in the
    # history; the next balance cannot be chained from a row that has none.
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", day=DAY - timedelta(days=1), hour=22)
    ledger.tx("-10.00", type="TOPUP", day=DAY - timedelta(days=1), hour=23)
    ledger.tx("-100.00", type="TOPUP", balance_after="890.00", hour=1)
    ledger.tx("-100.00", type="TOPUP", hour=2)
    ledger.tx("-50.00", type="TOPUP", balance_after="740.00", hour=3)
    broken = ledger.tx("-50.00", type="TOPUP", balance_after="600.00", hour=4)
    run(db)
    assert found(db) == {("balance_discontinuity", "wallet", broken)}


def test_a_currency_without_balances_neither_bridges_nor_breaks_another_currencys_chain(db, ledger):
    # The wallet's side copies every row of the day in chain order (currency, then time; its totals group that
    # copy), so the rows of a currency that shows no balance sit right before the next currency's: the first INR
    # row's predecessor in the copy is a EUR row, which is another wallet, not its predecessor. INR chains from its
    # own last balance of the day before (1000 - 100 = 900: no break), and the rows without a currency or a
    # balance count in the day's totals.
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", day=DAY - timedelta(days=1), hour=23)
    no_currency = ledger.tx("-7.00", type="RECHARGE", currency=None, reference_number="NOBODY-1", hour=0)
    euro = ledger.tx("-5.00", type="RECHARGE", currency="EUR", reference_number="NOBODY-2", hour=0, minute=30)
    ledger.tx("-100.00", type="TOPUP", balance_after="900.00", hour=1)
    broken = ledger.tx("-50.00", type="TOPUP", balance_after="800.00", hour=2)
    read_transactions(db, 1)  # the link to the day before is judged, and holds
    result = run(db)
    assert found(db) == {("balance_discontinuity", "wallet", broken),
                         ("orphan_transaction", "transaction", no_currency), ("orphan_transaction", "transaction", euro)}
    assert result.transactions_total == 4
    assert result.spend == {"": Decimal("7.00"), "EUR": Decimal("5.00")}
    assert result.wallets["INR"]["debits"] == Decimal("150.00") and result.wallets["EUR"]["opening"] is None


# --- stable ids, resolutions, automatic resolution ---------------------------------------------

def test_drift_ids_are_derived_from_kind_subject_and_reference(db, ledger):
    rc = ledger.recharge()
    run(db)
    assert one(db, "missing_debit").id == drift_id("missing_debit", "recharge", rc["reference_number"])
    assert drift_id("missing_debit", "recharge", "R1").startswith("d_") and len(drift_id("a", "b", "c")) == 18


def test_rerun_gives_the_same_drifts_and_keeps_resolutions(db, ledger):
    rc = ledger.recharge()
    ledger.debit_recharge(rc, amount="100.00")
    ledger.recharge()
    first = run(db)
    d = one(db, "amount_mismatch")
    set_resolution(db, d.id, "escalated", note="ticket 42", by="asha", at=RUN)
    second = run(db, now=RUN + timedelta(hours=1))
    assert first.detected_ids == second.detected_ids
    again = get_drift(db, d.id)
    assert (again.resolution, again.resolution_note, again.resolution_by) == ("escalated", "ticket 42", "asha")
    assert again.detected_at == d.detected_at
    assert [a["action"] for a in audit_trail(db, d.id)] == ["detected", "escalated"]


def test_late_refund_resolves_the_drift_automatically(db, ledger):
    rc = ledger.recharge("FAILED")
    ledger.debit_recharge(rc)
    run(db)
    d = one(db, "missing_refund")
    tid = ledger.credit_recharge(rc, day=DAY + timedelta(days=2))  # the refund arrives two days later
    result = run(db, now=RUN + timedelta(days=2))
    assert result.changes["auto_resolved"] == 1
    resolved = get_drift(db, d.id)
    assert resolved.resolution == "resolved" and resolved.resolution_by == "partnerkit"
    assert resolved.resolution_note == f"no longer detected on {DAY.isoformat()} run: credit {tid} of 98.00 received"
    assert audit_trail(db, d.id)[-1]["action"] == "auto_resolved"


def test_the_automatic_resolution_names_the_credit_or_debit_that_cleared_the_drift(db, ledger):
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.debit_recharge(rc, minute=2)
    oid = ledger.order(amount="500.00")  # its named ORDER debit not synced yet: missing_debit
    run(db)
    duplicate, missing = one(db, "duplicate_debit"), one(db, "missing_debit")
    credit = ledger.credit_recharge(rc, day=NEXT, hour=9)  # dated after the run that found them
    debit = ledger.debit_order(oid, "500.00", day=NEXT, hour=9)
    run(db, now=RUN + timedelta(days=1))
    gone = f"no longer detected on {DAY.isoformat()} run"
    assert get_drift(db, duplicate.id).resolution_note == f"{gone}: credit {credit} of 98.00 received"
    assert get_drift(db, missing.id).resolution_note == f"{gone}: debit {debit} of 500.00 received"
    assert audit_trail(db, missing.id)[-1]["note"] == f"{gone}: debit {debit} of 500.00 received"


def test_a_credit_read_after_a_run_that_saw_none_is_named_whatever_its_date(db, ledger):
    rc = ledger.recharge("FAILED")
    ledger.debit_recharge(rc)
    run(db)
    d = one(db, "missing_refund")
    # Synced after the run that found the drift, but dated before it (a provider clock behind ours, or a
    # credit the sync read after the run): that run saw no credit at all, so this one cleared it.
    tid = ledger.credit_recharge(rc, hour=11)
    run(db, now=RUN + timedelta(hours=1))
    assert get_drift(db, d.id).resolution_note == (
        f"no longer detected on {DAY.isoformat()} run: credit {tid} of 98.00 received")


def test_the_automatic_resolution_names_nothing_it_cannot_tie_to_the_run(db, ledger):
    rc = ledger.recharge("FAILED")
    ledger.debit_recharge(rc)
    ledger.credit_recharge(rc, amount="40.00", hour=10, minute=5)  # a part credited back before the run
    run(db)
    d = one(db, "missing_refund")
    assert d.actual == Decimal("40.00")
    ledger.credit_recharge(rc, amount="58.00", hour=11)  # the rest, synced after the run, dated before it
    run(db, now=RUN + timedelta(hours=1))
    assert get_drift(db, d.id).resolution_note == f"no longer detected on {DAY.isoformat()} run"


def test_an_automatically_resolved_drift_that_comes_back_is_reopened(db, ledger):
    rc = ledger.recharge()
    tid = ledger.debit_recharge(rc, amount="100.00")
    run(db)
    ident = one(db, "amount_mismatch").id
    ledger.debit_recharge(rc, id=tid)  # the provider corrects the record: same id, payable
    run(db)
    assert get_drift(db, ident).resolution == "resolved"
    ledger.debit_recharge(rc, amount="100.00", id=tid)
    run(db)
    assert get_drift(db, ident).resolution == "pending"
    assert [a["action"] for a in audit_trail(db, ident)] == ["detected", "auto_resolved", "reopened"]


def _mismatch_that_goes_and_comes_back(db, ledger):
    """An amount_mismatch found, then gone (the provider corrected the debit), returns a function that brings
    it back and runs the day again."""
    rc = ledger.recharge()
    tid = ledger.debit_recharge(rc, amount="100.00")
    run(db)
    ident = one(db, "amount_mismatch").id

    def go(hours: int) -> None:
        ledger.debit_recharge(rc, id=tid)  # corrected: payable
        run(db, now=RUN + timedelta(hours=hours))
        assert get_drift(db, ident).resolution == "resolved"

    def come_back(hours: int) -> None:
        ledger.debit_recharge(rc, amount="100.00", id=tid)
        run(db, now=RUN + timedelta(hours=hours))

    return ident, go, come_back


def test_an_escalated_drift_auto_resolved_then_found_again_is_escalated_again(db, ledger):
    ident, go, come_back = _mismatch_that_goes_and_comes_back(db, ledger)
    escalated_at = RUN + timedelta(minutes=5)
    set_resolution(db, ident, "escalated", note="ticket 42 with support", by="asha", at=escalated_at)
    go(1)
    come_back(2)
    back = get_drift(db, ident)
    assert (back.resolution, back.resolution_note, back.resolution_by, back.resolution_at) == (
        "escalated", "ticket 42 with support", "asha", escalated_at.isoformat().replace("+00:00", "Z"))
    trail = audit_trail(db, ident)
    assert [(a["action"], a["resolution"], a["by"]) for a in trail] == [
        ("detected", "pending", "partnerkit"), ("escalated", "escalated", "asha"),
        ("auto_resolved", "resolved", "partnerkit"), ("reopened", "escalated", "partnerkit")]
    assert trail[-1]["note"].startswith(f"detected again on {DAY.isoformat()} run")


def test_an_escalation_survives_two_auto_resolutions(db, ledger):
    ident, go, come_back = _mismatch_that_goes_and_comes_back(db, ledger)
    set_resolution(db, ident, "escalated", note="ticket 42", by="asha", at=RUN)
    for hours in (1, 3):
        go(hours)
        come_back(hours + 1)
    back = get_drift(db, ident)
    assert (back.resolution, back.resolution_note, back.resolution_by) == ("escalated", "ticket 42", "asha")
    assert [a["action"] for a in audit_trail(db, ident)] == [
        "detected", "escalated", "auto_resolved", "reopened", "auto_resolved", "reopened"]


def test_a_pending_drift_auto_resolved_then_found_again_is_pending_without_the_auto_note(db, ledger):
    ident, go, come_back = _mismatch_that_goes_and_comes_back(db, ledger)
    go(1)
    come_back(2)
    back = get_drift(db, ident)
    assert (back.resolution, back.resolution_note, back.resolution_by, back.resolution_at) == ("pending", None, None,
                                                                                              None)
    assert audit_trail(db, ident)[-1]["resolution"] == "pending"


def test_a_stuck_drift_escalated_auto_resolved_and_recorded_again_by_the_poller_is_escalated(db, ledger):
    # The poller records stuck_processing through open_drift (same id as the matcher's): it must restore too.
    rc = ledger.recharge("PROCESSING")
    ident = open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
                       expected=None, actual=Decimal("98.00"), currency="INR", detected_at=at(10, 31))
    set_resolution(db, ident, "escalated", note="support ticket 9", by="asha", at=at(10, 40))
    recharge_store.upsert_from_provider(db, [{**rc, "status": "SUCCESS", "updated_at": at(11).isoformat()}], at(11))
    ledger.debit_recharge(rc)
    run(db)
    assert get_drift(db, ident).resolution == "resolved"
    open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
               expected=None, actual=Decimal("98.00"), currency="INR", detected_at=RUN + timedelta(hours=1))
    back = get_drift(db, ident)
    assert (back.resolution, back.resolution_note, back.resolution_by) == ("escalated", "support ticket 9", "asha")
    assert [(a["action"], a["resolution"]) for a in audit_trail(db, ident)][-2:] == [
        ("auto_resolved", "resolved"), ("reopened", "escalated")]


@pytest.mark.parametrize("by", ["finance", "partnerkit"])
def test_a_drift_finance_resolved_by_hand_is_not_reopened_by_a_rerun(db, ledger, by):
    # Whether partnerkit resolved a drift is read from the audit trail, not from the name in resolution_by.
    ledger.recharge()
    run(db)
    d = one(db, "missing_debit")
    set_resolution(db, d.id, "resolved", note="settled off-line", by=by, at=RUN)
    run(db, now=RUN + timedelta(hours=1))
    after = get_drift(db, d.id)
    assert (after.resolution, after.resolution_note, after.resolution_by) == ("resolved", "settled off-line", by)
    assert [a["action"] for a in audit_trail(db, d.id)] == ["detected", "resolved"]


# --- a drift found again with other figures ----------------------------------------------------

def _trail(db, ident):
    return [(a["action"], a["resolution"], a["note"], a["by"]) for a in audit_trail(db, ident)]


def _duplicate(db, ledger):
    """A recharge debited twice, matched: its duplicate_debit (expected 98.00, actual 196.00)."""
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.debit_recharge(rc, minute=2)
    run(db)
    return rc, one(db, "duplicate_debit")


@pytest.mark.parametrize("decision", ["resolved", "escalated"])
def test_a_drift_finance_decided_goes_back_to_pending_when_a_third_debit_changes_its_figures(db, ledger, decision):
    rc, d = _duplicate(db, ledger)
    set_resolution(db, d.id, decision, note="provider agreed to credit the 2nd debit, ticket 88", by="asha", at=RUN)
    ledger.debit_recharge(rc, minute=3)  # the provider debits it a third time
    result = run(db, now=RUN + timedelta(hours=1))
    after = get_drift(db, d.id)  # the same drift (ids are kind|subject|reference), pending again
    note = f"reopened (was {decision}): actual 196.00 -> 294.00: 3 debits for one recharge"
    assert (after.resolution, after.actual, after.detail) == ("pending", Decimal("294.00"), "3 debits for one recharge")
    assert (after.resolution_note, after.resolution_by, after.detected_at) == (note, "partnerkit", d.detected_at)
    assert _trail(db, d.id) == [
        ("detected", "pending", "2 debits for one recharge", "partnerkit"),
        (decision, decision, "provider agreed to credit the 2nd debit, ticket 88", "asha"),
        ("changed", "pending", note, "partnerkit")]
    assert result.changes["changed"] == 1 and found(db) == {("duplicate_debit", "recharge", rc["reference_number"])}


def test_a_pending_drift_whose_figures_change_keeps_its_state_and_gains_an_audit_row(db, ledger):
    rc, d = _duplicate(db, ledger)
    ledger.debit_recharge(rc, minute=3)
    run(db, now=RUN + timedelta(hours=1))
    after = get_drift(db, d.id)
    assert (after.resolution, after.resolution_note, after.actual) == ("pending", None, Decimal("294.00"))
    assert _trail(db, d.id)[-1] == ("changed", "pending", "actual 196.00 -> 294.00: 3 debits for one recharge",
                                    "partnerkit")


@pytest.mark.parametrize("decision", ["pending", "resolved", "escalated"])
def test_a_rerun_with_the_same_figures_adds_nothing(db, ledger, decision):
    rc, d = _duplicate(db, ledger)
    ledger.debit_recharge(rc, minute=3)
    run(db, now=RUN + timedelta(hours=1))  # a change, then a decision on the new figures
    if decision != "pending":
        set_resolution(db, d.id, decision, note="checked 294.00", by="asha", at=RUN + timedelta(hours=2))
    before, trail = get_drift(db, d.id), audit_trail(db, d.id)
    result = run(db, now=RUN + timedelta(hours=3))
    after = get_drift(db, d.id)
    assert audit_trail(db, d.id) == trail and result.changes == {"new": 0, "reopened": 0, "changed": 0,
                                                                 "restated": 0, "auto_resolved": 0, "newer": 0}
    assert (after.resolution, after.resolution_note, after.resolution_by, after.resolution_at) == (
        before.resolution, before.resolution_note, before.resolution_by, before.resolution_at)


def test_an_escalated_duplicate_credited_then_debited_again_is_pending_not_escalated(db, ledger):
    # The escalation asked for a credit of the 2nd debit; it came (auto-resolved), then a 3rd debit: a new problem.
    rc, d = _duplicate(db, ledger)
    set_resolution(db, d.id, "escalated", note="ticket 42", by="bob", at=RUN)
    ledger.credit_recharge(rc, minute=9)
    run(db, now=RUN + timedelta(hours=1))
    assert get_drift(db, d.id).resolution == "resolved"
    ledger.debit_recharge(rc, minute=10)
    run(db, now=RUN + timedelta(hours=2))
    back = get_drift(db, d.id)
    note = "reopened (was resolved): 2 debits for one recharge -> 3 debits for one recharge, not all credited back"
    assert (back.resolution, back.resolution_note, back.resolution_by) == ("pending", note, "partnerkit")
    assert [a[0] for a in _trail(db, d.id)] == ["detected", "escalated", "auto_resolved", "changed"]


def test_after_a_figure_change_a_drift_that_goes_and_comes_back_is_pending_not_its_old_escalation(db, ledger):
    rc = ledger.recharge()
    tid = ledger.debit_recharge(rc, amount="100.00")
    run(db)
    ident = one(db, "amount_mismatch").id
    set_resolution(db, ident, "escalated", note="ticket 42", by="bob", at=RUN)
    ledger.debit_recharge(rc, amount="101.00", id=tid)  # the provider rewrites the debit: other figures
    run(db, now=RUN + timedelta(hours=1))
    assert get_drift(db, ident).resolution == "pending"
    ledger.debit_recharge(rc, id=tid)  # corrected to payable: gone
    run(db, now=RUN + timedelta(hours=2))
    ledger.debit_recharge(rc, amount="101.00", id=tid)  # back, with the figures it had when it went
    run(db, now=RUN + timedelta(hours=3))
    back = get_drift(db, ident)
    assert (back.resolution, back.resolution_note, back.resolution_by) == ("pending", None, None)
    assert [(a["action"], a["resolution"]) for a in audit_trail(db, ident)] == [
        ("detected", "pending"), ("escalated", "escalated"), ("changed", "pending"), ("auto_resolved", "resolved"),
        ("reopened", "pending")]


def test_the_poller_recording_a_stuck_drift_with_other_figures_reopens_it(db, ledger):
    rc = ledger.recharge("PROCESSING")
    ident = open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
                       expected=Decimal("98.00"), actual=None, currency="INR", detected_at=at(10, 31))
    set_resolution(db, ident, "escalated", note="support ticket 9", by="asha", at=at(10, 40))
    open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
               expected=Decimal("98.00"), actual=None, currency="INR", detected_at=at(10, 45))  # same: nothing
    assert [a["action"] for a in audit_trail(db, ident)] == ["detected", "escalated"]
    open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
               expected=Decimal("97.00"), actual=None, currency="INR", detected_at=at(10, 50))
    after = get_drift(db, ident)
    assert (after.resolution, after.expected) == ("pending", Decimal("97.00"))
    assert audit_trail(db, ident)[-1]["note"] == "reopened (was escalated): expected 98.00 -> 97.00"


def test_a_resolved_drift_whose_detail_alone_reads_differently_stays_resolved(db, ledger):
    # A release that words a detail better (the orphan's now names what it claims to pay for) must not put
    # every drift finance resolved back in front of them: the text is refreshed, nothing reopened or audited.
    rc, d = _duplicate(db, ledger)
    set_resolution(db, d.id, "resolved", note="credit promised, ticket 7", by="asha", at=RUN)
    db.execute("UPDATE drifts SET detail = 'worded by an older release' WHERE id = ?", (d.id,))
    db.conn.commit()
    run(db, now=RUN + timedelta(hours=1))
    after = get_drift(db, d.id)
    assert (after.resolution, after.resolution_note, after.resolution_by) == ("resolved", "credit promised, ticket 7",
                                                                              "asha")
    assert after.detail == d.detail != "worded by an older release"
    assert [a[0] for a in _trail(db, d.id)] == ["detected", "resolved"]


# --- figures shown where none was, or nothing left at stake: restated, not reopened ------------

def test_unknown_to_provider_shows_the_debit_the_provider_took_or_that_there_is_none(db, ledger):
    """The question for support is the debit: "you debited 98.00 in transaction T for a recharge you do not list".
    It had actual null and no transaction id, and the page said the customer may have been charged nothing."""
    from partnerkit.store.matching import drift_transactions

    debited, untouched = ledger.recharge(), ledger.recharge()
    debit = ledger.debit_recharge(debited)
    ledger.synced([])
    run(db)
    drifts = {d.reference: d for d in list_drifts(db, kind="unknown_to_provider")}
    assert (drifts[debited["reference_number"]].actual, drifts[untouched["reference_number"]].actual) == (
        Decimal("98.00"), Decimal("0.00"))
    assert drifts[debited["reference_number"]].detail == (
        f"recharge {debited['id']} missing from the provider's list, yet the wallet was debited 98.00 for it")
    assert drifts[untouched["reference_number"]].detail == (
        f"recharge {untouched['id']} missing from the provider's list, and no wallet debit for it")
    assert drift_transactions(db, kind="unknown_to_provider") == {drifts[debited["reference_number"]].id: [debit]}


def test_a_stuck_recharge_shows_its_debit(db, ledger):
    rc = ledger.recharge("PROCESSING", hour=10)
    ledger.debit_recharge(rc)
    ledger.credit_recharge(rc, amount="18.00", minute=5)
    run(db, now=at(10, 31))
    d = one(db, "stuck_processing")
    assert (d.expected, d.actual) == (Decimal("98.00"), Decimal("80.00"))  # what the wallet is out for it
    assert d.detail == ("still PROCESSING after 30 minutes: escalate to support with reference_number;"
                        " the wallet was debited 98.00 for it, credited back 18.00")


def _as_an_older_release_stored_it(db, ident: str, **figures) -> None:
    """The drift's figures as the release before this one wrote them (it showed no actual for these kinds, and a
    FAILED recharge's missing_debit at its payable)."""
    for column, cents in figures.items():
        db.execute(f"UPDATE drifts SET {column} = ? WHERE id = ?", (cents, ident))
    db.conn.commit()


@pytest.mark.parametrize("decision", ["resolved", "escalated"])
def test_an_upgrade_that_shows_the_debit_of_an_unknown_recharge_keeps_finances_decision(db, ledger, decision):
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    ledger.synced([])
    run(db)
    d = one(db, "unknown_to_provider")
    _as_an_older_release_stored_it(db, d.id, actual_cents=None)
    set_resolution(db, d.id, decision, note="support: it exists, list fixed", by="asha", at=RUN)
    result = run(db, now=RUN + timedelta(hours=1))
    after = get_drift(db, d.id)
    assert (after.resolution, after.resolution_note, after.resolution_by, after.actual) == (
        decision, "support: it exists, list fixed", "asha", Decimal("98.00"))
    assert _trail(db, d.id)[-1] == ("restated", decision, f"actual none -> 98.00: {after.detail}", "partnerkit")
    assert (result.changes["changed"], result.changes["restated"]) == (0, 1)


def test_a_debit_that_appears_for_a_recharge_the_provider_does_not_list_is_news(db, ledger):
    rc = ledger.recharge()
    ledger.synced([])
    run(db)
    d = one(db, "unknown_to_provider")
    set_resolution(db, d.id, "resolved", note="never charged", by="asha", at=RUN)
    ledger.debit_recharge(rc)  # the provider did take the money
    run(db, now=RUN + timedelta(hours=1))
    after = get_drift(db, d.id)
    assert (after.resolution, after.actual) == ("pending", Decimal("98.00"))
    assert after.resolution_note.startswith("reopened (was resolved): actual 0.00 -> 98.00: ")


def test_a_stuck_drift_finance_escalated_keeps_its_escalation_when_the_match_shows_its_debit(db, ledger):
    """The poller records stuck_processing with no actual; the match shows the debit (now, or once it lands):
    neither is a new fact about a recharge still PROCESSING, and neither may undo finance's escalation, nor the
    escalation survive a go-and-come-back (the restated rows are partnerkit's own)."""
    rc = ledger.recharge("PROCESSING", hour=10)
    ident = open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
                       expected=Decimal("98.00"), actual=None, currency="INR", detected_at=at(10, 31))
    set_resolution(db, ident, "escalated", note="support ticket 9", by="asha", at=at(10, 40))
    run(db, now=at(10, 45))  # no debit yet: no actual, as the poller wrote it
    assert (get_drift(db, ident).actual, [a[0] for a in _trail(db, ident)]) == (None, ["detected", "escalated"])
    ledger.debit_recharge(rc, hour=10, minute=50)
    run(db, now=at(10, 55))  # its debit landed: 98.00
    ledger.credit_recharge(rc, amount="18.00", hour=10, minute=56)
    run(db, now=at(10, 58))  # part of it credited back (an unexpected_refund of its own): 80.00
    open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
               expected=Decimal("98.00"), actual=None, currency="INR", detected_at=at(11))  # keeps 80.00
    d = get_drift(db, ident)
    assert (d.resolution, d.resolution_note, d.actual) == ("escalated", "support ticket 9", Decimal("80.00"))
    stated = "still PROCESSING after 30 minutes: escalate to support with reference_number; the wallet was debited"
    assert [(a[0], a[1], a[2]) for a in _trail(db, ident)][1:] == [
        ("escalated", "escalated", "support ticket 9"),
        ("restated", "escalated", f"actual none -> 98.00: {stated} 98.00 for it"),
        ("restated", "escalated", f"actual 98.00 -> 80.00: {stated} 98.00 for it, credited back 18.00")]
    recharge_store.upsert_from_provider(db, [{**rc, "status": "SUCCESS", "updated_at": at(11, 5).isoformat()}],
                                        at(11, 5))
    run(db, now=at(11, 10))
    assert get_drift(db, ident).resolution == "resolved"
    open_drift(db, kind="stuck_processing", subject="recharge", reference=rc["reference_number"],
               expected=Decimal("98.00"), actual=None, currency="INR", detected_at=at(11, 15))
    back = get_drift(db, ident)
    assert (back.resolution, back.resolution_note, back.resolution_by) == ("escalated", "support ticket 9", "asha")


def test_a_failed_recharge_with_neither_debit_nor_credit_puts_nothing_at_stake(db, ledger):
    """The wallet is right (FAILED is not spend, nothing taken): flagged, since the document says it shows the debit
    and its credit back, but at its net, with words of its own; before, expected was its payable, all "at stake"."""
    rc = ledger.recharge("FAILED")
    run(db)
    d = one(db, "missing_debit")
    assert (d.id, d.expected, d.actual) == (drift_id("missing_debit", "recharge", rc["reference_number"]),
                                            Decimal("0.00"), Decimal("0.00"))
    assert d.detail == ("FAILED recharge with neither its debit nor its credit back (payable 98.00):"
                        " the wallet nets to zero, nothing at stake")


@pytest.mark.parametrize("decision", ["resolved", "escalated"])
def test_an_upgrade_that_states_a_failed_missing_debit_at_its_net_keeps_finances_decision(db, ledger, decision):
    rc = ledger.recharge("FAILED")
    run(db)
    d = one(db, "missing_debit")
    _as_an_older_release_stored_it(db, d.id, expected_cents=9800)
    set_resolution(db, d.id, decision, note="provider confirmed FAILED", by="asha", at=RUN)
    run(db, now=RUN + timedelta(hours=1))
    after = get_drift(db, d.id)
    assert (after.resolution, after.resolution_note, after.expected) == (
        decision, "provider confirmed FAILED", Decimal("0.00"))
    assert _trail(db, d.id)[-1][:2] == ("restated", decision)
    assert _trail(db, d.id)[-1][2].startswith("expected 98.00 -> 0.00: FAILED recharge with neither")
    assert rc["reference_number"] == after.reference
