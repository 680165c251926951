"""`partnerkit transactions list|show`: the wallet transactions behind a drift, read from the store only.

The store is filled through the owners' functions (tests/reconcile/reconcile_helpers.Ledger) and, at the
end, by a real sync from the sandbox over loopback, so that `show` is held against the record the
provider itself sent.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
import requests
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.money import loads
from partnerkit.store import ledger as ledger_store
from partnerkit.store.ledger import record_sync, store_transactions, withdraw_transactions
from partnerkit.timeutil import iso
from reconcile.ledger import canonical_json
from reconcile.ledger_fast import map_page, record_json
from reconcile.ledger_writer import withdrawn_reason
from reconcile.matcher import match_day
from tests.reconcile.reconcile_helpers import DAY, at, stored_record

NEXT_DAY = DAY + timedelta(days=1)


def run(invoke, *args):
    """(exit code, stdout, stderr) of `partnerkit ...`, never a traceback."""
    result = invoke(*args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def listed(invoke, *args) -> list[dict]:
    code, out, err = run(invoke, "transactions", "list", *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def day(db, ledger):
    """A day read in full after it ended, as the nightly run does: a recharge debited twice and credited back
    two days later (by recharge_id only), an order's named debit and its refund, an orphan, a top-up."""
    rc = ledger.recharge("SUCCESS", payable="98.00")
    first = ledger.debit_recharge(rc, hour=9)
    second = ledger.debit_recharge(rc, hour=9, minute=30)
    refund = ledger.tx("98.00", type="RECHARGE_REFUND", recharge_id=rc["id"], day=DAY + timedelta(days=2))
    oid = ledger.order("FAILED", amount="500.00", hour=11)
    named = ledger.debit_order(oid, "500.00", hour=11)  # no order_id field would be needed: named by transaction_id
    order_refund = ledger.tx("500.00", type="REFUND", order_id=oid, hour=12)
    orphan = ledger.tx("-12.00", type="RECHARGE", reference_number="GHOST1", hour=14)
    topup = ledger.tx("1000.00", type="TOPUP", hour=8)
    for entity in ("recharges", "transactions"):
        record_sync(db, entity, from_day=DAY.isoformat(), to_day=DAY.isoformat(), started_at=iso(at(1, day=NEXT_DAY)),
                    count=0, days=[DAY.isoformat()], advance_to=DAY.isoformat())
    match_day(db, DAY, now=at(2, day=NEXT_DAY))
    return dict(rc=rc, first=first, second=second, refund=refund, oid=oid, named=named, order_refund=order_refund,
                orphan=orphan, topup=topup)


def test_a_day_is_listed_oldest_first_with_signed_two_decimal_amounts(invoke, day):
    rows = listed(invoke, "--date", DAY.isoformat())
    assert [r["id"] for r in rows] == [day["topup"], day["first"], day["second"], day["named"], day["order_refund"],
                                       day["orphan"]]
    first = rows[1]
    assert first == {"id": day["first"], "type": "RECHARGE", "amount": "-98.00", "currency": "INR",
                     "created_at": "2025-03-14T09:01:00Z", "balance_after": None,
                     "reference_number": day["rc"]["reference_number"], "recharge_id": day["rc"]["id"],
                     "order_id": None, "synced_at": "2025-03-14T23:00:00Z"}
    assert [r["amount"] for r in rows] == ["1000.00", "-98.00", "-98.00", "-500.00", "500.00", "-12.00"]
    code, out, err = run(invoke, "transactions", "list", "--date", DAY.isoformat())
    assert code == 0 and err == ""
    assert out.splitlines()[0].split() == ["ID", "TYPE", "AMOUNT", "CURRENCY", "CREATED_AT", "BALANCE_AFTER",
                                           "REFERENCE_NUMBER", "RECHARGE_ID", "ORDER_ID"]
    code, out, _ = run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--format", "csv")
    assert [r["amount"] for r in csv.DictReader(io.StringIO(out))] == [r["amount"] for r in rows]


def test_the_balance_chain_s_order_puts_a_whole_second_before_its_fractions_and_ids_by_value(db, ledger, invoke):
    for ident, created in (("10", "2025-03-14T10:00:00.5Z"), ("9", "2025-03-14T10:00:00Z"), ("11", "2025-03-14T10:00:00Z")):
        page = map_page([{"id": ident, "amount": "-1.00", "created_at": created}])
        store_transactions(db, page.runs, page.shapes, iso(at(23)))
    ledger.read_in_full()
    assert [r["id"] for r in listed(invoke, "--date", DAY.isoformat())] == ["9", "11", "10"]


@pytest.mark.parametrize("args, expected", [
    (["--type", "recharge"], ["first", "second", "orphan"]),
    (["--type", " Topup "], ["topup"]),
    (["--type", "refund"], ["order_refund"]),  # a type of the provider's own, stored: filtered as any other
    (["--order", "{oid}"], ["named", "order_refund"]),
    (["--reference", "GHOST1"], ["orphan"]),
])
def test_filters_of_a_day(invoke, day, args, expected):
    args = [a.format(oid=day["oid"]) for a in args]
    assert [r["id"] for r in listed(invoke, "--date", DAY.isoformat(), *args)] == [day[name] for name in expected]


def test_a_recharge_s_reference_finds_what_the_matcher_links_on_any_day(invoke, db, day):
    """The refund two days later carries only the recharge_id: linked all the same, as the matcher links it (the
    duplicate it corrects is why no duplicate_debit stands)."""
    rows = listed(invoke, "--reference", day["rc"]["reference_number"])
    assert [r["id"] for r in rows] == [day["first"], day["second"], day["refund"]]
    assert sum(Decimal(r["amount"]) for r in rows) == Decimal("-98.00")  # net: one payable, as the matcher judged
    assert not db.execute("SELECT 1 FROM drifts WHERE kind = 'duplicate_debit'").fetchone()
    on_the_day = listed(invoke, "--date", DAY.isoformat(), "--reference", day["rc"]["reference_number"])
    assert [r["id"] for r in on_the_day] == [day["first"], day["second"]]


def test_an_order_drift_s_transactions_are_those_the_matcher_counted(invoke, db, ledger, day):
    oid = ledger.order("CANCELLED", amount="200.00", hour=15)
    ledger.debit_order(oid, "200.00", hour=15)
    ledger.tx("150.00", type="REFUND", order_id=oid, hour=16)  # 50.00 short: missing_refund
    match_day(db, DAY, now=at(3, day=NEXT_DAY))
    [(expected, actual)] = db.execute("SELECT expected_cents, actual_cents FROM drifts WHERE kind = 'missing_refund'"
                                      " AND reference = ?", (str(oid),)).fetchall()
    rows = listed(invoke, "--order", str(oid))
    debits = -sum(Decimal(r["amount"]) for r in rows if r["amount"].startswith("-"))
    credits = sum(Decimal(r["amount"]) for r in rows if not r["amount"].startswith("-"))
    assert (debits * 100, credits * 100) == (expected, actual) == (20000, 15000)


def test_an_order_s_reference_code_finds_its_transactions(invoke, db, day):
    db.execute("UPDATE orders SET reference_code = 'ORD-77' WHERE id = ?", (day["oid"],))
    assert [r["id"] for r in listed(invoke, "--reference", "ORD-77")] == [day["named"], day["order_refund"]]


def test_an_order_id_given_as_the_reference_points_to_order(invoke, db, day):
    """An order drift's reference is the order's id; copied into --reference, the command names --order."""
    oid = str(day["oid"])
    code, out, err = run(invoke, "transactions", "list", "--reference", oid)
    assert (code, out) == (0, "")
    assert f"`partnerkit transactions list --order {oid}`" in err
    assert [r["id"] for r in listed(invoke, "--order", oid)] == [day["named"], day["order_refund"]]


def test_nothing_matching_on_a_day_read_in_full_is_an_empty_list(invoke, day):
    assert listed(invoke, "--date", DAY.isoformat(), "--type", "order_refund") == []  # this provider says REFUND
    code, out, err = run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--type", "ORDER_REFUND")
    assert (code, out, err) == (0, "", f"no transactions on {DAY} of type ORDER_REFUND\n")


@pytest.mark.parametrize("args", [["--date", DAY.isoformat()], ["--reference", "GHOST1"]])
def test_a_type_neither_known_nor_stored_is_a_usage_error_naming_the_types(invoke, day, args):
    """`--type CASHBACK` (or a mistyped one) printed "no transactions ... of type CASHBACK" and exit 0: a filter
    that can never match read as an empty day."""
    code, out, err = run(invoke, "transactions", "list", *args, "--type", "cashback")
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert lines[0].startswith("Usage: ") and len(lines) == 4
    assert lines[-1] == ("Error: Invalid value for '--type': 'CASHBACK' is not a transaction type: one of RECHARGE, "
                         "RECHARGE_REFUND, ORDER, ORDER_REFUND, TOPUP, ADJUSTMENT (any case), or another the provider "
                         "gives where a stored transaction has it (none listed here does)")


@pytest.mark.parametrize("read", ["before_it_ended", "part_way", "never"])
def test_an_unknown_type_is_the_usage_error_alone_whatever_the_day_s_read(invoke, ledger, read):
    """The note (or warning, or error) about how far the day was read came before the usage error of `--type FOO`:
    a usage error comes first and alone, as click's own do."""
    if read != "never":
        ledger.tx("-5.00", type="RECHARGE")
    if read == "before_it_ended":
        ledger.read_in_full()  # the 15-minute sync's read at 23:50: a note about the day
    code, out, err = run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--type", "foo")
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert lines[0].startswith("Usage: ") and len(lines) == 4, err
    assert lines[-1].startswith("Error: Invalid value for '--type': 'FOO' is not a transaction type")


def test_a_list_of_one_says_so_in_the_singular(invoke, day):
    code, _, err = run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--limit", "1")
    assert code == 0 and err == "the first of 6 transactions is shown (oldest first); --limit N shows more\n"


def test_a_day_no_sync_has_read_is_refused_rather_than_listed_empty(invoke, day):
    code, out, err = run(invoke, "transactions", "list", "--date", "2025-03-13", "--format", "json")
    assert (code, out) == (1, "")
    assert err == ("Error: no sync has read the wallet transactions of 2025-03-13: the store holds nothing of that day, "
                   "which says nothing about the provider's ledger; `partnerkit reconcile --date 2025-03-13` reads it\n")


def test_a_day_read_only_part_way_is_listed_with_a_warning(invoke, day):
    """The refund's day was stored by a read of the provider's list that no sync finished (no coverage)."""
    code, out, err = run(invoke, "transactions", "list", "--date", (DAY + timedelta(days=2)).isoformat(),
                         "--format", "json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [day["refund"]]
    assert err.startswith("warning: no sync has read the wallet transactions of 2025-03-16 in full")


def test_a_day_read_before_it_ended_says_from_when_the_list_is(invoke, ledger):
    ledger.tx("-5.00", type="RECHARGE")
    ledger.read_in_full()  # the 15-minute sync's read at 23:50
    code, out, err = run(invoke, "transactions", "list", "--date", DAY.isoformat())
    assert code == 0 and "-5.00" in out
    assert err.startswith("note: the latest complete read of 2025-03-14 began at 2025-03-14T23:50:00Z (partnerkit's "
                          "clock), before the day ended: transactions made after that may not be stored yet")


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_list_cut_at_the_limit_says_so_in_every_format(invoke, day, fmt):
    code, out, err = run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--limit", "2", "--format", fmt)
    assert code == 0
    assert err == "the first 2 of 6 transactions are shown (oldest first); --limit N shows more\n"
    if fmt == "json":
        assert [r["id"] for r in json.loads(out)] == [day["topup"], day["first"]]
    assert run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--limit", "6", "--format", fmt)[2] == ""


@pytest.fixture
def held(db, day):
    """The orphan withdrawn by a later full read, and a record of the day the mapping refused."""
    row = stored_record(db, day["orphan"])
    withdraw_transactions(db, [(day["orphan"], withdrawn_reason(row[0]), record_json(*row), DAY.isoformat())],
                          listed_since=iso(at(4, day=NEXT_DAY)), seen_at=iso(at(4, day=NEXT_DAY)))
    unreadable = {"id": 990001, "amount": "-1.005", "created_at": "2025-03-14T15:00:00Z"}
    ledger_store.quarantine(db, [("transaction:990001", "amount: '-1.005' has more than 2 decimal places",
                                  canonical_json(unreadable), DAY.isoformat())], iso(at(4, day=NEXT_DAY)))
    return day


def test_quarantined_records_are_listed_with_their_reason_and_named_beside_the_day(invoke, held):
    code, out, err = run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--quarantined", "--format", "json")
    assert code == 0 and err == ""
    entries = {e["id"]: e for e in json.loads(out)}
    assert list(entries) == [held["orphan"], "990001"]  # oldest first: both held at 04:00, then by key
    assert entries[held["orphan"]]["reason"] == ("withdrawn: no longer listed by the provider on a full read of "
                                                 "2025-03-14 (was: RECHARGE DEBIT 12.00 INR, reference GHOST1)")
    assert entries["990001"]["record"] == {"amount": "-1.005", "created_at": "2025-03-14T15:00:00Z", "id": 990001}
    assert entries["990001"]["reason"] == "amount: '-1.005' has more than 2 decimal places"
    code, out, err = run(invoke, "transactions", "list", "--date", DAY.isoformat(), "--format", "json")
    assert held["orphan"] not in {r["id"] for r in json.loads(out)}  # out of the figures
    assert err == (f"note: 2 transaction records of {DAY} are held in the quarantine (refused by the mapping, or "
                   f"withdrawn): `partnerkit transactions list --date {DAY} --quarantined`\n")


def test_show_gives_the_stored_row_and_the_record_as_the_provider_sent_it(invoke, db):
    sent = ('{"transaction_id": 880001, "amount": 12.5, "entry_type": "debit", "timestamp": "2025-03-14T15:30:00+05:30",'
            ' "Currency": "inr", "balance_after": 987.50, "note": "=HYPERLINK(1)", "tags": ["a", 2]}')
    record = loads(sent)
    page = map_page([record])
    store_transactions(db, page.runs, page.shapes, iso(at(23)))
    code, out, err = run(invoke, "transactions", "show", "880001", "--format", "json")
    assert code == 0 and err == ""
    shown = json.loads(out)
    assert {k: v for k, v in shown.items() if k != "record"} == {
        "id": "880001", "type": None, "amount": "-12.50", "currency": "INR", "created_at": "2025-03-14T10:00:00Z",
        "balance_after": "987.50", "reference_number": None, "recharge_id": None, "order_id": None,
        "synced_at": "2025-03-14T23:00:00Z", "state": "stored", "quarantine_reason": None, "quarantined_since": None}
    assert shown["record"] == json.loads(canonical_json(record))  # the decimals as their exact digits: "12.5"
    assert shown["record"]["amount"] == "12.5" and shown["record"]["transaction_id"] == 880001
    code, out, _ = run(invoke, "transactions", "show", "880001", "--format", "csv")
    fields = dict(csv.reader(io.StringIO(out)))
    assert fields["record"] == canonical_json(record) and fields["amount"] == "-12.50"


def test_show_a_withdrawn_transaction_gives_the_reason_and_the_record_it_had(invoke, held):
    code, out, _ = run(invoke, "transactions", "show", held["orphan"], "--format", "json")
    shown = json.loads(out)
    assert code == 0 and (shown["state"], shown["amount"]) == ("quarantined", None)
    assert shown["quarantine_reason"].startswith("withdrawn: no longer listed by the provider")
    assert shown["record"]["reference_number"] == "GHOST1" and shown["record"]["amount"] == "-12.00"
    code, out, _ = run(invoke, "transactions", "show", held["orphan"])
    assert code == 0 and "quarantined" in out and "GHOST1" in out


def test_show_a_stored_transaction_whose_latest_copy_was_unreadable_gives_both(invoke, db, held):
    """The provider listed a stored id again in a form the mapping refuses: the last readable copy stands."""
    ident = held["topup"]
    ledger_store.quarantine(db, [(f"transaction:{ident}", "no amount", json.dumps({"id": int(ident)}), DAY.isoformat())],
                            iso(at(5, day=NEXT_DAY)))
    shown = json.loads(run(invoke, "transactions", "show", ident, "--format", "json")[1])
    assert (shown["state"], shown["amount"], shown["quarantine_reason"]) == ("stored", "1000.00", "no amount")
    assert shown["quarantined_since"] == "2025-03-15T05:00:00Z" and shown["record"]["type"] == "TOPUP"
    only_held = json.loads(run(invoke, "transactions", "show", "990001", "--format", "json")[1])
    assert (only_held["state"], only_held["amount"], only_held["record"]["amount"]) == ("quarantined", None, "-1.005")


@pytest.mark.parametrize("ident", ["424242", "  ", "transaction:1"])
def test_show_an_unknown_id_is_one_line_with_exit_1(invoke, day, ident):
    code, out, err = run(invoke, "transactions", "show", ident)
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith(f"Error: no transaction with id {ident!r} is stored or quarantined")


def test_the_commands_only_read_the_store(invoke, db, db_path, held):
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = hashlib.sha256(db_path.read_bytes()).hexdigest()
    for args in (["list", "--date", DAY.isoformat()], ["list", "--date", DAY.isoformat(), "--quarantined"],
                 ["list", "--reference", "GHOST1"], ["show", held["orphan"]], ["show", held["first"]],
                 ["list", "--date", "2025-03-13"]):
        run(invoke, "transactions", *args)
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before
    assert db_path.with_name(db_path.name + "-wal").stat().st_size == 0  # not one page written


# --- against the sandbox: what the provider sent, synced for real ----------------------------------------------------

def test_what_a_real_sync_stored_is_shown_as_the_provider_listed_it(tmp_path):
    """The sandbox over loopback: a recharge and an unexpected credit, reconciled; the credit's drift reference
    leads to both transactions, `show` gives the credit's record as the provider's list sent it, and once the
    provider withdraws it, `show` and `--quarantined` say so."""
    pytest.importorskip("sandbox.testing")
    from reconcile.jobs import reconcile_day
    from reconcile.recharges import submit
    from tests.reconcile.reconcile_helpers import sandbox_day

    start = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    yesterday: date = start.date()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    with sandbox_day(tmp_path, start) as (server, config, db, client):
        recharge = submit(config, db, client, mobile_number="9800000001", operator_id=1, amount=100, force=True).recharge
        answer = requests.post(f"{server.base_url}/sandbox/transactions", timeout=10, json={
            "type": "RECHARGE_REFUND", "direction": "CREDIT", "amount": "50.00", "recharge_id": recharge.id,
            "reference_number": recharge.reference_number})
        credit_id = str(answer.json()["id"])
        report = reconcile_day(config, db, client, yesterday, now=now)
        [drift] = [d for d in report["drifts"] if d["reference"] == recharge.reference_number]
        as_listed = {str(r["id"]): r for r in client.iter_transactions(from_date=yesterday, to_date=yesterday, limit=100)}

        def invoke(*args):
            return CliRunner().invoke(cli, list(args), env={"PARTNERKIT_DB": str(config.db_path)})

        rows = listed(invoke, "--reference", drift["reference"])
        assert [Decimal(r["amount"]) for r in rows] == [-recharge.payable, Decimal("50.00")]
        assert drift["kind"] == "unexpected_refund" and drift["actual"] == rows[1]["amount"]
        shown = json.loads(run(invoke, "transactions", "show", credit_id, "--format", "json")[1])
        assert shown["record"] == json.loads(canonical_json(as_listed[credit_id]))
        assert shown["state"] == "stored" and shown["amount"] == "50.00"

        requests.delete(f"{server.base_url}/sandbox/transactions/{credit_id}", timeout=10).raise_for_status()
        reconcile_day(config, db, client, yesterday, now=now + timedelta(minutes=1))
        shown = json.loads(run(invoke, "transactions", "show", credit_id, "--format", "json")[1])
        assert shown["state"] == "quarantined" and shown["quarantine_reason"].startswith("withdrawn: ")
        assert shown["record"] == json.loads(canonical_json(as_listed[credit_id]))
        quarantined = listed(invoke, "--date", yesterday.isoformat(), "--quarantined")
        assert [e["id"] for e in quarantined] == [credit_id]
