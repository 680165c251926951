"""Upgrading in place: databases written by earlier releases, opened with today's partnerkit.

tests/upgrade/data holds files the old code itself wrote (its own demo's day, finance's resolution,
the old CLI's answers on them; data/README.md says which commit and how). Each test copies one into
tmp_path with its key file, so the committed file is never opened, and checks through the real CLI
(CliRunner) or the public functions that the upgrade keeps every row and that today's code reads
them as the old code did.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from partnerkit.cli import cli
from partnerkit.client import Voucher
from partnerkit.config import load_config
from partnerkit.crypto import load_cipher
from partnerkit.store import inbox, open_db, transaction
from partnerkit.store import vouchers as voucher_store
from partnerkit.store.ledger import ROW_COLUMNS
from partnerkit.store.migrations import discover
from partnerkit.vouchers import seal
from receiver.app import create_app
from receiver.signature import sign
from receiver.tokens import saved_tokens
from reconcile.jobs import report_day
from reconcile.ledger import canonical_json
from reconcile.ledger_fast import record_json
from reconcile.ledger_writer import store_transaction_page

DATA = Path(__file__).resolve().parent / "data"
RELEASES = {"v5-241f523": 5, "v8-82feab1": 8}  # fixture name -> the schema version its release wrote
DAY = date(2026, 11, 22)  # the sandbox day the old demos played
DRIFT = "d_886bc0b1b9e39cb0"  # the demo's planted missing_refund (order 5007), resolved by finance
NIGHT = datetime(2026, 11, 23, 1, 30, tzinfo=timezone.utc)  # when the nightly run re-reports that day
LATEST = discover()[-1].version


@dataclass
class Old:
    """A copy of one old release's database in tmp_path, and the CLI pointed at it."""

    name: str
    path: Path
    version: int  # what the old release wrote
    answers: dict  # what the old release's CLI answered on it (data/README.md)
    env: dict[str, str | None]

    def __call__(self, *args: str, code: int = 0) -> Result:
        """`partnerkit ARGS`: no traceback, the expected exit code."""
        result = CliRunner().invoke(cli, list(args), env=self.env)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.exit_code == code, (args, result.exit_code, result.stderr)
        return result

    def json(self, *args: str):
        return json.loads(self(*args, "--format", "json").stdout)

    def config(self):
        return load_config(environ={k: v for k, v in self.env.items() if v is not None})

    def raw(self, sql: str, *params) -> list[tuple]:
        """Read the file with plain sqlite3, without partnerkit (which would migrate it)."""
        conn = sqlite3.connect(self.path)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()


def _copy(name: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "partnerkit.db"
    shutil.copyfile(DATA / f"{name}.db", path)
    shutil.copyfile(DATA / f"{name}.db.voucher.key", directory / "partnerkit.db.voucher.key")
    for file in (path, directory / "partnerkit.db.voucher.key"):
        file.chmod(0o600)  # git keeps 0644; partnerkit warns about a key file others can read
    return path


@pytest.fixture(params=sorted(RELEASES))
def old(request, tmp_path) -> Old:
    name = request.param
    path = _copy(name, tmp_path / "db")
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PARTNERKIT_")}
    env.update(PARTNERKIT_DB=str(path), PARTNERKIT_REPORT_DIR=str(tmp_path / "reports"), PARTNERKIT_LOG_LEVEL="WARNING")
    answers = json.loads((DATA / f"{name}.old-cli.json").read_text())
    return Old(name, path, RELEASES[name], answers, env)


@pytest.fixture
def db(old):
    database = open_db(old.path)
    yield database
    database.conn.close()


def _tables(old: Old) -> dict[str, int]:
    names = [n for (n,) in old.raw("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return {name: old.raw(f"SELECT COUNT(*) FROM {name}")[0][0] for name in names}


def test_the_fixture_is_what_the_old_release_wrote(old):
    assert old.raw("PRAGMA user_version") == [(old.version,)]
    assert old.raw("PRAGMA integrity_check") == [("ok",)]


def test_migration_reaches_the_latest_version_and_keeps_every_row(old):
    before = _tables(old)
    old("status")  # the first command after the upgrade migrates
    assert old.raw("PRAGMA user_version") == [(LATEST,)]
    after = _tables(old)
    assert {name: after[name] for name in before} == before
    assert before["inbox"] == 23 and before["vouchers"] == 62 and before["transactions"] == 16
    columns = [row[1] for row in old.raw("PRAGMA table_info(transactions)")]
    assert "shape" in columns
    assert old.raw("SELECT COUNT(*) FROM transactions WHERE shape IS NOT NULL OR raw IS NULL") == [(0,)]


def test_status_works_on_the_upgraded_database(old):
    status = old.json("status")
    assert status["events_stored"] == 23
    assert status["open_drifts"] == 0  # finance resolved the only one
    assert status["voucher_fetch_backlog"] == 0 and status["voucher_fetch_parked"] == 0
    assert status["recharges_processing"] == 0


def test_vouchers_reveal_gives_back_the_codes_the_old_release_stored(old):
    stored = {order: codes for order, codes in old.answers["vouchers"].items() if codes}
    assert sum(map(len, stored.values())) == 62
    for order, codes in stored.items():
        assert old.json("vouchers", order, "--reveal") == codes, order


def test_vouchers_read_again_after_the_upgrade_are_not_stored_twice(old, db):
    """A fetch that re-reads an old order (catch-up-orders re-queues one) meets the old fingerprints."""
    cipher = load_cipher(old.config())
    stored = {int(order): codes for order, codes in old.answers["vouchers"].items() if codes}
    with transaction(db) as conn:
        added = sum(voucher_store.add(conn, order, [seal(cipher, order, Voucher.from_payload(v)) for v in codes],
                                      now=NIGHT) for order, codes in stored.items())
    assert added == 0
    assert voucher_store.total(db) == 62


@pytest.mark.parametrize("command, key", [
    (("orders", "list"), "orders"),
    (("events", "list", "--limit", "1000"), "events"),
    (("recharges", "list"), "recharges"),
    (("drifts", "list"), "drifts"),
    (("drifts", "history", DRIFT), "drift_history"),
])
def test_listings_show_the_old_rows_as_the_old_release_did(old, command, key):
    shown, answered = old.json(*command), old.answers[key]
    # A listing's JSON is a contract that adds fields, never drops or changes one (drifts list added detected_at,
    # resolution_at and detail after its old columns; a fork adding a provider field adds one to recharges list).
    assert len(shown) == len(answered) and all(set(row) >= set(was) for row, was in zip(shown, answered))
    assert [{k: row[k] for k in was} for row, was in zip(shown, answered)] == answered


def test_orders_show_lists_each_order_with_its_old_events(old):
    events = old.answers["events"]
    for order in old.answers["orders"]:
        shown = old.json("orders", "show", str(order["id"]))
        assert {k: shown[k] for k in order if k in shown} == order
        assert [e["dedup_key"] for e in shown["events"]] == [e["dedup_key"] for e in events
                                                              if e["order_id"] == order["id"]]


def test_finance_resolution_survives(old):
    [drift] = old.json("drifts", "list")
    assert (drift["id"], drift["resolution"], drift["resolution_by"]) == (DRIFT, "resolved", "finance-anna")
    assert drift["resolution_note"] == "refund confirmed by support, ticket 4411"
    history = old.json("drifts", "history", DRIFT)
    assert [(h["action"], h["by"]) for h in history] == [("detected", "partnerkit"), ("resolved", "finance-anna")]


def _kept(new: dict, old: dict) -> dict:
    """`new` with only the fields `old` has: the report JSON is a contract that adds fields, never drops or changes one."""
    return {k: new[k] for k in old if k in new}


def test_the_stored_report_is_still_readable(old):
    again = old.json("report", "--date", DAY.isoformat())
    stored = old.answers["report"]
    drifts = [_kept(new, was) for new, was in zip(again["drifts"], stored["drifts"], strict=True)]
    assert {**_kept(again, stored), "summary": _kept(again["summary"], stored["summary"]), "drifts": drifts} == stored
    # a drift's fields added since (their order after the old ones: tests/reconcile/test_report.py)
    assert all(set(new) - set(was) <= {"transaction_ids"} for new, was in zip(again["drifts"], stored["drifts"]))
    # the drift table's counts and amounts, recounted from the drifts when the stored report is read: added, never
    # changed
    assert set(again["summary"]) - set(stored["summary"]) <= {"drifts_by_kind_and_resolution", "drift_amount_by_kind"}
    assert again["summary"]["drift_amount_by_kind"] == {}  # its one drift is resolved: nothing at stake
    assert set(again) - set(old.answers["report"]) == {"resolutions_as_of"}  # when the drift table was read
    csv = old("report", "--date", DAY.isoformat(), "--format", "csv").stdout
    assert DRIFT in csv and "refund confirmed by support, ticket 4411" in csv


def test_rematching_the_day_gives_the_same_drifts_and_keeps_the_resolution(old, db):
    stored = old.answers["report"]
    again = report_day(old.config(), db, DAY, now=NIGHT)
    assert [d["id"] for d in again["drifts"]] == [d["id"] for d in stored["drifts"]] == [DRIFT]
    assert _kept(again["summary"], stored["summary"]) == stored["summary"]
    assert again["summary"]["spend_as_documented"] == {"INR": "11157.04"}  # FAILED and REVERSED debits are not spend
    assert again["counts_by_status"] == stored["counts_by_status"]
    [drift] = again["drifts"]
    assert (drift["resolution"], drift["resolution_note"]) == ("resolved", "refund confirmed by support, ticket 4411")
    assert old.json("report", "--date", DAY.isoformat())["generated_at"] == "2026-11-23T01:30:00Z"
    assert len(old.json("drifts", "history", DRIFT)) == 2  # re-detection is not a new decision


def _stored_rows(db) -> list[tuple]:
    return db.execute(f"SELECT {', '.join(ROW_COLUMNS)} FROM transactions ORDER BY id").fetchall()


def _shaped(row: tuple) -> dict:
    """The same transaction as a record today's sync stores by its shape (alias keys only, a signed
    Decimal amount, the stored timestamp): every value is what its column holds."""
    ident, kind, paise, order_id, reference, recharge_id, currency, created, balance = row
    record = {"id": int(ident), "type": kind, "amount": Decimal(paise).scaleb(-2), "currency": currency,
              "created_at": created, "order_id": order_id, "recharge_id": recharge_id,
              "reference_number": reference}
    if balance is not None:
        record["balance_after"] = Decimal(balance).scaleb(-2)
    return {k: v for k, v in record.items() if v is not None}


def test_old_transactions_are_matched_exactly_like_ones_stored_today(old, db):
    old_rows = db.execute(f"SELECT {', '.join(ROW_COLUMNS)}, shape, raw FROM transactions").fetchall()
    assert all(row[-2] is None for row in old_rows)  # the old form: whole raw JSON, no shape
    for row in old_rows:
        assert record_json(row[:-2], None, row[-1]) == canonical_json(json.loads(row[-1], parse_float=Decimal))
    as_old = report_day(old.config(), db, DAY, now=NIGHT)
    rows = _stored_rows(db)

    db.execute("DELETE FROM transactions")
    stored, quarantined = store_transaction_page(db, [_shaped(row) for row in rows], "2026-11-23T01:30:00Z")
    assert (stored, quarantined) == (16, 0)
    assert db.execute("SELECT COUNT(*) FROM transactions WHERE shape IS NOT NULL AND raw IS NULL").fetchone() == (16,)
    assert _stored_rows(db) == rows
    as_new = report_day(old.config(), db, DAY, now=NIGHT)
    assert as_new["summary"] == as_old["summary"]
    assert as_new["drifts"] == as_old["drifts"]


def test_the_upgraded_database_serves_the_account_whose_wallets_it_last_synced(old, sandbox_server):
    """m0012 adopts the account on the upgrade: the wallets of the newest snapshot (the old demo's client alpha,
    wallets 1 and 2). Alpha's key is then taken on its first call; another account's key is refused."""
    old("status")  # the first command after the upgrade migrates
    assert old.raw("SELECT wallet_id, currency, source FROM account_wallets ORDER BY wallet_id") == [
        ("1", "INR", "snapshot"), ("2", "USD", "snapshot")]
    assert old.raw("SELECT COUNT(*) FROM account_keys") == [(0,)]

    def as_client(name: str, *args: str) -> Result:
        client = next(c for c in sandbox_server.clients if c.name == name)
        env = {**old.env, "PARTNERKIT_API_BASE_URL": sandbox_server.base_url, "PARTNERKIT_API_KEY": client.key,
               "PARTNERKIT_API_SECRET": client.secret}
        result = CliRunner().invoke(cli, list(args), env=env)
        assert "Traceback" not in result.output
        return result

    refused = as_client("beta", "webhooks", "list")
    assert refused.exit_code == 2 and "belongs to another provider account" in refused.stderr
    assert sandbox_server.sandbox.calls["GET /api/v1/webhooks"] == 0
    assert as_client("alpha", "webhooks", "list").exit_code == 0
    assert old.raw("SELECT how FROM account_keys") == [("wallets",)]
    assert _tables(old)["recharges"] == 4  # nothing of the old day touched


def _deliver(app, config, token, body: bytes):
    """POST `body` as the provider does: signed now with the webhook's token, naming its webhook id."""
    now = int(datetime.now(timezone.utc).timestamp())
    headers = {"Content-Type": "application/json", "X-Timestamp": str(now), "X-Signature": sign(token.token, now, body),
               "X-Webhook-ID": token.webhook_id}
    return app.test_client().post(config.webhook_path, data=body, headers=headers)


def test_a_webhook_redelivered_after_the_upgrade_is_a_duplicate(old):
    config = old.config()
    app = create_app(config)  # migrates, and reads the token the old `webhooks register` sealed
    db = open_db(old.path)
    try:
        cipher = load_cipher(config)
        [token] = saved_tokens(db, cipher)
        key, order_id = db.execute("SELECT dedup_key, order_id FROM inbox WHERE event_type = 'order.delivered' "
                                   "ORDER BY id LIMIT 1").fetchone()
        body = inbox.body_of(db, cipher, key)
        status = db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()

        answer = _deliver(app, config, token, body)
        assert (answer.status_code, answer.get_json()) == (200, {"status": "duplicate"})
        assert db.execute("SELECT COUNT(*) FROM inbox").fetchone() == (23,)
        assert db.execute("SELECT duplicate_count FROM inbox WHERE dedup_key = ?", (key,)).fetchone() == (1,)
        assert db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone() == status

        fresh = body.replace(key.encode(), b"evt_after_the_upgrade_0001")
        assert _deliver(app, config, token, fresh).get_json() == {"status": "accepted"}
        assert inbox.body_of(db, cipher, "evt_after_the_upgrade_0001") == fresh
        [(stored,)] = db.execute("SELECT body FROM inbox WHERE dedup_key = 'evt_after_the_upgrade_0001'").fetchall()
        assert not inbox.is_clear(stored)  # a new body is sealed, beside the old clear ones
    finally:
        db.conn.close()
        app.extensions["partnerkit_receiver"].close()
    assert old.json("status")["duplicates_absorbed"] == 1


def test_keys_rewrap_seals_the_old_clear_bodies_byte_for_byte(old):
    clear = dict(old.raw("SELECT dedup_key, body FROM inbox"))
    assert len(clear) == 23 and all(inbox.is_clear(body) for body in clear.values())
    before = old.json("keys", "status")
    assert before["webhook_bodies_in_clear"] == 23
    assert (before["values_unreadable"], before["values_previous_key"]) == (0, 0)

    assert "23 webhook bodies" in old("keys", "rewrap").stderr
    after = old.json("keys", "status")
    assert after["webhook_bodies_in_clear"] == 0
    assert after["values_current_key"] == before["values_current_key"] + 23
    assert not any(inbox.is_clear(body) for (body,) in old.raw("SELECT body FROM inbox"))
    db = open_db(old.path)
    try:
        cipher = load_cipher(old.config())
        assert {key: inbox.body_of(db, cipher, key) for key in clear} == clear
    finally:
        db.conn.close()
    assert old.json("vouchers", "5001", "--reveal") == old.answers["vouchers"]["5001"]


NEWER_REFUSED = [
    ("status",), ("events", "list"), ("orders", "list"), ("orders", "show", "5001"), ("vouchers", "5001", "--reveal"),
    ("drifts", "list"), ("drifts", "resolve", DRIFT, "--note", "x"), ("report", "--date", DAY.isoformat()),
    ("keys", "status"), ("keys", "rewrap"), ("recharges", "list"), ("worker", "--once"),
]


@pytest.fixture
def newer(tmp_path) -> Old:
    """A database one schema version ahead of this partnerkit (as a later release would leave it)."""
    path = _copy("v8-82feab1", tmp_path / "newer")
    open_db(path).conn.close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {LATEST + 1}")
    conn.close()
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PARTNERKIT_")}
    env.update(PARTNERKIT_DB=str(path), PARTNERKIT_REPORT_DIR=str(tmp_path / "reports"),
               PARTNERKIT_API_BASE_URL="http://127.0.0.1:9", PARTNERKIT_API_KEY="pk_test",
               PARTNERKIT_API_SECRET="sk_test_0123456789")
    return Old("newer", path, LATEST + 1, {}, env)


@pytest.mark.parametrize("command", NEWER_REFUSED, ids=" ".join)
def test_an_older_partnerkit_refuses_a_newer_database_in_one_line(newer, command):
    before = newer.raw("SELECT COUNT(*), SUM(duplicate_count) FROM inbox")
    result = newer(*command, code=1)
    assert result.stdout == ""
    assert result.stderr == (f"Error: database schema version {LATEST + 1} is newer than this partnerkit "
                             f"({LATEST}); upgrade partnerkit\n")
    assert newer.raw("PRAGMA user_version") == [(LATEST + 1,)]
    assert newer.raw("SELECT COUNT(*), SUM(duplicate_count) FROM inbox") == before


def test_the_refusal_is_one_line_from_the_real_process_too(newer):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")},
           **{k: v for k, v in newer.env.items() if v is not None}}
    done = subprocess.run([sys.executable, "-m", "partnerkit", "events", "list"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [f"Error: database schema version {LATEST + 1} is newer than this partnerkit "
                                        f"({LATEST}); upgrade partnerkit"]


def test_a_backup_taken_by_the_new_release_is_of_the_database_as_the_old_one_left_it(old, tmp_path):
    """`partnerkit backup` run after installing the new release, before anything else opened the file,
    must copy it unmigrated: going back means restoring that copy, which the old release can open."""
    schema = old.raw("SELECT type, name, sql FROM sqlite_master ORDER BY name")
    destination = tmp_path / "before-upgrade.db"
    old("backup", str(destination))
    conn = sqlite3.connect(destination)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (old.version,)
        assert conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall() == schema
        assert conn.execute("SELECT COUNT(*) FROM vouchers").fetchone() == (62,)
    finally:
        conn.close()
    assert old.raw("PRAGMA user_version") == [(old.version,)]  # nor is the live file migrated by it


def test_a_newer_database_can_still_be_backed_up(newer, tmp_path):
    destination = tmp_path / "newer-copy.db"
    newer("backup", str(destination))
    conn = sqlite3.connect(destination)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (LATEST + 1,)
    finally:
        conn.close()
