"""A day on the sandbox (real HTTP) with every drift kind planted through its control endpoints."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import requests

from partnerkit.store.drifts import KINDS, drift_id, set_resolution

pytest.importorskip("sandbox.testing")

from reconcile.jobs import reconcile_day  # noqa: E402
from reconcile.recharges import submit  # noqa: E402
from tests.reconcile.reconcile_helpers import sandbox_day  # noqa: E402

YESTERDAY_10 = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)


@pytest.fixture
def world(tmp_path):
    """The sandbox with its clock at 10:00 yesterday, and partnerkit pointed at it."""
    with sandbox_day(tmp_path, YESTERDAY_10) as world:
        yield world


def control(server, method: str, path: str, **body) -> dict:
    """Call a sandbox control endpoint (drift planting)."""
    response = requests.request(method, f"{server.base_url}/sandbox{path}", json=body or None, timeout=10)
    assert response.status_code < 300, response.text
    return response.json()


def test_every_drift_kind_on_the_sandbox_with_the_same_ids_on_a_rerun(world):
    server, config, db, client = world
    day = YESTERDAY_10.date()

    def ours(mobile: str, **kw):
        outcome = submit(config, db, client, mobile_number=mobile, operator_id=1, amount=100, force=True, **kw)
        return outcome.recharge

    def debit_of(recharge_id: int) -> dict:
        txs = client.iter_transactions(from_date=day, to_date=day)
        return next(t for t in txs if t.get("recharge_id") == recharge_id and t["direction"] == "DEBIT")

    ours("9800000001")                                              # reconciles
    gone_debit = ours("9800000002")                                 # missing_debit
    control(server, "DELETE", f"/transactions/{debit_of(gone_debit.id)['id']}")
    face_debit = ours("9800000003")                                 # amount_mismatch (+ balance_discontinuity)
    control(server, "PATCH", f"/transactions/{debit_of(face_debit.id)['id']}", amount="100.00")
    twice = ours("9800000010")                                      # duplicate_debit
    control(server, "POST", "/transactions", type="RECHARGE", direction="DEBIT", amount=str(twice.payable),
            recharge_id=twice.id, reference_number=twice.reference_number)
    unrefunded = ours("9800000018")                                 # missing_refund
    control(server, "POST", f"/recharges/{unrefunded.id}/settle", status="FAILED", refund=False)
    credited = ours("9800000011")                                   # unexpected_refund
    control(server, "POST", "/transactions", type="REFUND", direction="CREDIT", amount=str(credited.payable),
            recharge_id=credited.id, reference_number=credited.reference_number)
    control(server, "POST", "/transactions", type="RECHARGE", direction="DEBIT", amount="12.00",
            reference_number="GHOST-1")                             # orphan_transaction
    # stuck_processing (never settles), sent 31 minutes ago on our clock: the match ages it from there, not
    # from the sandbox's created_at (its clock is at yesterday 10:00)
    stuck = ours("9800000028", now=datetime.now(timezone.utc) - timedelta(minutes=31))
    forgotten = ours("9800000012")                                  # unknown_to_provider
    control(server, "DELETE", f"/recharges/{forgotten.id}")
    client.submit_recharge(mobile_number="9800000013", operator_id=1, amount=100, force=True)  # unknown_to_partner
    client.create_order(product_id=7, denomination=10, quantity=2)  # voucher_shortfall (vouchers never fetched)
    control(server, "POST", "/transactions", type="TOPUP", direction="CREDIT", amount="500.00",
            apply=False)                                            # balance_discontinuity
    ours("9800000021")

    first = reconcile_day(config, db, client, day)
    kinds = {d["kind"] for d in first["drifts"]}
    assert kinds == set(KINDS), set(KINDS) - kinds
    references = {(d["kind"], d["reference"]) for d in first["drifts"]}
    assert ("stuck_processing", stuck.reference_number) in references
    assert ("missing_refund", unrefunded.reference_number) in references
    assert ("unknown_to_provider", forgotten.reference_number) in references
    assert ("orphan_transaction", "GHOST-1") not in references  # orphans are named by transaction id
    # The recharge the provider forgot, and the stuck one, were debited: the question for support is that debit
    # ("you debited 97.50 in transaction 700015 for a recharge you do not list"), not whether it exists at all.
    for kind, recharge in (("unknown_to_provider", forgotten), ("stuck_processing", stuck)):
        drift = next(d for d in first["drifts"] if d["kind"] == kind)
        debit = debit_of(recharge.id)
        assert (drift["expected"], drift["actual"], drift["transaction_ids"]) == (
            f"{recharge.payable:.2f}", f"{recharge.payable:.2f}", [str(debit["id"])]), drift
        assert f"debited {recharge.payable:.2f}" in drift["detail"]
        # Its whole amount is still at stake: a debit does not settle a recharge the provider does not list.
        assert first["summary"]["drift_amount_by_kind"][kind] == {"INR": f"{recharge.payable:.2f}"}

    escalated = next(d for d in first["drifts"] if d["kind"] == "duplicate_debit")
    set_resolution(db, escalated["id"], "escalated", note="support ticket", by="finance", at=datetime.now(timezone.utc))
    again = reconcile_day(config, db, client, day)
    assert sorted(d["id"] for d in again["drifts"]) == sorted(d["id"] for d in first["drifts"])
    assert next(d for d in again["drifts"] if d["id"] == escalated["id"])["resolution"] == "escalated"
    assert again["summary"]["recharges_total"] == first["summary"]["recharges_total"] == 10


def test_a_failed_recharge_whose_debit_and_credit_the_provider_lost_puts_nothing_at_stake(world):
    """A FAILED recharge shows its debit and its credit back; with both gone from the provider's list the wallet
    still nets to zero. Flagged (missing_debit, same id as ever), but it said its payable was at stake and that
    "the provider may still debit it"."""
    server, config, db, client = world
    day = YESTERDAY_10.date()
    failed = submit(config, db, client, mobile_number="9800000054", operator_id=1, amount=199, force=True).recharge
    assert failed.status == "FAILED"
    pair = [t for t in client.iter_transactions(from_date=day, to_date=day) if t.get("recharge_id") == failed.id]
    assert sorted(t["direction"] for t in pair) == ["CREDIT", "DEBIT"]
    for t in pair:
        control(server, "DELETE", f"/transactions/{t['id']}")
    report = reconcile_day(config, db, client, day)
    [drift] = report["drifts"]
    assert (drift["id"], drift["kind"], drift["expected"], drift["actual"], drift["transaction_ids"]) == (
        drift_id("missing_debit", "recharge", failed.reference_number), "missing_debit", "0.00", "0.00", [])
    assert drift["detail"] == (f"FAILED recharge with neither its debit nor its credit back (payable {failed.payable:.2f}):"
                               " the wallet nets to zero, nothing at stake")
    assert report["summary"]["drift_amount_by_kind"] == {"missing_debit": {"INR": "0.00"}}


def test_a_converted_order_with_its_charge_reconciles_on_the_sandbox(world):
    # The document: "conversion charges may be added per client configuration; conversions are logged in
    # the transaction history". The sandbox posts the charge as an FX_FEE debit with the order id.
    server, config, db, client = world
    day = YESTERDAY_10.date()
    control(server, "PATCH", "/settings", conversion_charge_pct="2")
    usd = next(w for w in client.list_wallets() if w["currency"] == "USD")
    created = client.create_order(product_id=7, denomination=10, quantity=1, wallet_id=usd["id"])
    report = reconcile_day(config, db, client, day)
    mine = {d["kind"] for d in report["drifts"] if d["reference"] == str(created.id)}
    assert mine <= {"voucher_shortfall"}, mine  # its vouchers are never fetched here; no money drift
    [conversion] = report["conversions"]
    assert (conversion["order_id"], conversion["wallet_currency"], conversion["order_currency"]) == (
        created.id, "USD", "INR")
    assert Decimal(conversion["charges"]) == (Decimal(conversion["debited"]) * 2 / 100).quantize(Decimal("0.01"))
    assert Decimal(report["summary"]["spend"]["USD"]) == Decimal(conversion["debited"]) + Decimal(conversion["charges"])


def test_a_recharge_partnerkit_submitted_after_the_backup_it_runs_on_says_so(world, tmp_path):
    """A restored (or copied) database has no record of what partnerkit submitted after the backup: the provider
    lists it, so it is unknown_to_partner (the kinds are a contract), but its detail says it is the kit's own,
    by the client_reference partnerkit generates; someone else's use of the key keeps the kind's first meaning."""
    from dataclasses import replace

    from partnerkit.client import PartnerClient
    from partnerkit.store import open_db
    from partnerkit.store.backup import backup

    server, config, db, client = world
    day = YESTERDAY_10.date()
    backup(db, tmp_path / "backup.db")
    ours = submit(config, db, client, mobile_number="9800000001", operator_id=1, amount=100).recharge
    theirs = client.submit_recharge(mobile_number="9800000013", operator_id=1, amount=100,
                                    client_reference="ERP-77").recharge
    restored = replace(config, db_path=tmp_path / "backup.db", report_dir=tmp_path / "restored-reports")
    database = open_db(restored.db_path)
    try:
        report = reconcile_day(restored, database, PartnerClient(restored, database), day)
    finally:
        database.conn.close()
    unknown = {d["reference"]: d for d in report["drifts"] if d["kind"] == "unknown_to_partner"}
    assert set(unknown) == {ours.reference_number, theirs.reference_number}
    assert unknown[ours.reference_number]["detail"] == (
        "carries partnerkit's own client_reference: submitted by partnerkit from a database that no longer has it: "
        f"a restored or copied database (client_reference {ours.client_reference})")
    assert unknown[theirs.reference_number]["detail"] == "the provider has a recharge partnerkit never submitted"
    assert unknown[ours.reference_number]["id"] == drift_id("unknown_to_partner", "recharge", ours.reference_number)
