"""An order or a recharge the database could not record is never sent, and says so; an order intent that was never
sent is not a lost answer (session 22's audit: a full disk failed the sending mark committed after the intent, and
`status` and the hold then took the intent for one whose answer would never come).

The full disk is a real one: a tmpfs filled to its last byte (tests.reliability.storage_faults), met at the intent's
commit, or, through SQLite's statement trace, at the first write after it (the request budget's, which the client
takes before sending). An intent never marked sending is written as the release before this one left it.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Iterator

import pytest

from partnerkit import errors, senders
from partnerkit import status as status_mod
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env, load_config
from partnerkit.ordering import UnresolvedOrder, place_order, replay_command
from partnerkit.store import open_db, order_intents, transaction
from partnerkit.store.db import database_file
from partnerkit.timeutil import utcnow
from tests.conftest import account_of
from tests.receiver.test_order_intents import (  # noqa: F401 (fixtures)
    CREATE, ORDER, config, db, env, provider_orders, run, server,
)
from tests.reliability.storage_faults import fill, tiny_filesystem, truncate_wal

FULL = "database or disk is full"
LIST = "GET /api/v1/orders"
SUBMIT = ["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "10"]


@contextmanager
def _full_at_the_budget(database, disk) -> Iterator[None]:
    """The disk fills at the request budget's write, the client's last before it sends; it has room again after."""
    filled = []

    def full(statement: str) -> None:
        if statement.startswith("DELETE FROM budget_events") and not filled:
            filled.append(fill(disk))

    database.conn.set_trace_callback(full)
    try:
        yield
    finally:
        database.conn.set_trace_callback(None)
        for filler in filled:
            filler.unlink()
    assert filled, "the disk filled at the budget's write"


def _on(server, path) -> tuple:
    """The settings of the `config` fixture, with the database at `path`; the database, knowing its account."""
    client = server.clients[0]
    config = load_config(environ={
        "PARTNERKIT_DB": str(path), "PARTNERKIT_API_BASE_URL": server.base_url, "PARTNERKIT_API_KEY": client.key,
        "PARTNERKIT_API_SECRET": client.secret, "PARTNERKIT_HTTP_TIMEOUT_S": "0.5",
        "PARTNERKIT_VOUCHER_KEY": "a-test-voucher-key-of-32-bytes-!!"})
    database = open_db(config.db_path)
    account_of(database, config.api_key)  # no wallet read, and nothing written, before the intent
    return config, database


def test_a_full_disk_at_the_intent_sends_nothing_records_nothing_and_says_so(server, tmp_path):
    with tiny_filesystem(tmp_path / "disk", "4m") as disk:
        config, database = _on(server, disk / "partnerkit.db")
        try:
            truncate_wal(config.db_path)  # the next commit must grow the WAL
            filler = fill(disk)
            refused = run(config_as_env(config), *ORDER, code=1)
            recorded = database.execute("SELECT count(*) FROM order_intents").fetchone()[0]
            filler.unlink()
            again = json.loads(run(config_as_env(config), *ORDER, "--format", "json").stdout)
        finally:
            database.conn.close()
    [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert FULL in error and error.endswith(": no order was sent, and nothing of this run was recorded; run the same "
                                            "command again once the database takes writes")
    assert recorded == 0
    [order] = provider_orders(server)  # the run again placed it; the refused one sent nothing
    assert again["id"] == order.id and server.sandbox.calls[CREATE] == 1


def test_a_full_disk_after_the_intent_sends_nothing_and_names_the_intent_it_leaves(server, tmp_path):
    """The disk fills between the intent's commit and the send (the budget's write, the client's last before it):
    nothing is sent; the REFUSED mark cannot be written either, so the intent stays INTENT, and the error says so,
    with its replay, which places the order once the disk has room."""
    with tiny_filesystem(tmp_path / "disk", "4m") as disk:
        config, database = _on(server, disk / "partnerkit.db")
        try:
            with _full_at_the_budget(database, disk), PartnerClient(config, database) as client, \
                    pytest.raises(errors.StorageError) as raised:
                place_order(config, database, client, product_id=8, denomination=Decimal("100"), quantity=1)
            [intent] = [order_intents.get(database, i["id"]) for i in order_intents.open_ones(database)]
            replayed = json.loads(run(config_as_env(config), *shlex.split(replay_command(intent))[1:],
                                      "--format", "json").stdout)
            placed = order_intents.get(database, intent["id"])
        finally:
            database.conn.close()
    assert raised.value.request_sent is False and FULL in str(raised.value)
    assert str(raised.value).endswith(
        f": no order was sent; order intent #{intent['id']} stays INTENT, as the database could not record that "
        "either, and `partnerkit status` names it among the unknown outcomes until it is settled: replaying its key is "
        f"safe (it is sent then, once: `{replay_command(intent)}`), or, if the order is no longer wanted, `partnerkit "
        f"orders close {intent['id']} --without-search --note TEXT`")
    assert intent["state"] == "INTENT" and intent["sent_at"] is not None
    [order] = provider_orders(server)
    assert server.sandbox.calls[CREATE] == 1 and replayed["id"] == order.id and placed["state"] == "PLACED"


def test_a_full_disk_at_a_submits_intent_sends_nothing_records_nothing_and_says_so(server, tmp_path):
    with tiny_filesystem(tmp_path / "disk", "4m") as disk:
        config, database = _on(server, disk / "partnerkit.db")
        try:
            truncate_wal(config.db_path)
            filler = fill(disk)
            refused = run(config_as_env(config), *SUBMIT, code=1)
            recorded = database.execute("SELECT count(*) FROM recharges").fetchone()[0]
            filler.unlink()
            again = json.loads(run(config_as_env(config), *SUBMIT, "--format", "json").stdout)
        finally:
            database.conn.close()
    [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert FULL in error and error.endswith(": no recharge was sent, and nothing of this run was recorded; run the "
                                            "same command again once the database takes writes")
    assert recorded == 0 and server.sandbox.calls["POST /api/v1/recharges"] == 1 and again["status"] != "UNKNOWN"


def test_a_full_disk_after_a_submits_intent_sends_nothing_and_names_the_intent_it_leaves(server, tmp_path):
    with tiny_filesystem(tmp_path / "disk", "4m") as disk:
        config, database = _on(server, disk / "partnerkit.db")
        try:
            from reconcile.recharges import submit

            with _full_at_the_budget(database, disk), PartnerClient(config, database) as client, \
                    pytest.raises(errors.StorageError) as raised:
                submit(config, database, client, mobile_number="9876543210", operator_id=1, amount=10)
            [row] = database.execute("SELECT local_id, status FROM recharges").fetchall()
        finally:
            database.conn.close()
    local_id = row[0]
    assert raised.value.request_sent is False and FULL in str(raised.value)
    assert str(raised.value).endswith(
        f": no recharge was sent; local recharge #{local_id} stays INTENT, as the database could not remove it either, "
        "and `partnerkit status` names it among the unknown outcomes until it is settled: `partnerkit recharges "
        f"locate --local-id {local_id}` (within 5 minutes of the submit, if the provider shows none, it sends its key "
        f"then, once: the recharge is made), or, if it is no longer wanted, `partnerkit recharges close {local_id} "
        "--note TEXT`")
    assert row[1] == "INTENT" and server.sandbox.calls.get("POST /api/v1/recharges", 0) == 0


def _unsent(db, key: str, *, sender: senders.Held | None = None, ago: timedelta = timedelta(0)) -> dict:
    """An INTENT as the release before this one left it when its sending mark failed: recorded and never marked
    (`sent_at` NULL), with its sender's lock `sender` (still held: running; released: gone; None: no lock)."""
    with transaction(db) as conn:
        intent_id = order_intents.record(conn, idempotency_key=key, ref=f"ref-{key}", product_id=8,
                                         denomination=Decimal("100"), quantity=1, wallet_id=None, email=None,
                                         now=utcnow() - ago, sender_lock=sender.offset if sender else None,
                                         sender=sender.who if sender else None)
    return order_intents.get(db, intent_id)


def _gone(db) -> senders.Held:
    """A sender's lock, released: the `orders create` that held it is gone."""
    held = senders.hold(database_file(db))
    assert held is not None, "this filesystem takes the senders' locks"
    held.release()
    return held


def test_an_intent_never_sent_whose_sender_is_gone_holds_nothing_back_and_status_names_it_apart(
        server, config, env, db):
    gone = _gone(db)
    intent = _unsent(db, "never-sent-0001", sender=gone)
    seen = status_mod.collect(config, db)
    assert seen["order_intents_unknown"] == []  # not a lost answer
    assert seen["order_intents_never_sent"] == [
        f"#{intent['id']} key never-sent-0001 ref ref-never-sent-0001 (product 8, 1 x 100.00, recorded "
        f"{intent['created_at']}; the `orders create` that recorded it (pid {os.getpid()} on {socket.gethostname()}) "
        "stopped before sending it)"]
    [line] = [line for line in seen["attention"] if "order creation(s)" in line]
    assert line.startswith(f"1 order creation(s) recorded but never sent (#{intent['id']} key never-sent-0001 ")
    assert "nothing was ordered for them and none holds a new order back" in line
    # The same order is not held back by it: nothing was placed for it.
    placed = json.loads(run(env, *ORDER, "--format", "json").stdout)
    [order] = provider_orders(server)
    assert placed["id"] == order.id and placed["idempotency_key"] != intent["idempotency_key"]
    # Closing it reads nothing from the provider and never sends its key.
    calls = dict(server.sandbox.calls)
    closed = run(env, "orders", "close", str(intent["id"]), "--note", "ordered anew", "--format", "json")
    assert json.loads(closed.stdout)["closed_search"] == ("not searched: it was never sent (its `orders create` "
                                                          "stopped before sending it)")
    assert server.sandbox.calls == calls and LIST not in calls
    seen = status_mod.collect(config, db)
    assert seen["order_intents_never_sent"] == [] and seen["attention"] == []


def test_the_key_of_an_intent_never_sent_sends_it_once(server, config, env, db):
    intent = _unsent(db, "never-sent-0002", sender=_gone(db))
    replayed = json.loads(run(env, *shlex.split(replay_command(intent))[1:], "--format", "json").stdout)
    [order] = provider_orders(server)
    assert replayed["id"] == order.id and server.sandbox.calls[CREATE] == 1
    assert order_intents.get(db, intent["id"])["state"] == "PLACED"
    assert status_mod.collect(config, db)["order_intents_never_sent"] == []


def test_an_intent_not_sent_yet_whose_sender_runs_holds_the_same_order_and_says_so(server, config, env, db):
    """Its `orders create` may still send it (an earlier release between its two commits): held, as recorded, not
    as sent, and named nowhere by `status` (it is in flight)."""
    running = senders.hold(database_file(db))
    try:
        intent = _unsent(db, "not-sent-yet-0003", sender=running)
        held = run(env, *ORDER, code=1)
        seen = status_mod.collect(config, db)
    finally:
        running.release()
    assert (f"order intent #{intent['id']} is INTENT, recorded 0 s ago and not sent yet: its `orders create` (pid "
            f"{os.getpid()} on {socket.gethostname()}) is still running and may send it any moment") in held.stderr
    assert " sent 0 s ago" not in held.stderr and server.sandbox.calls.get(CREATE, 0) == 0
    assert seen["order_intents_unknown"] == [] and seen["order_intents_never_sent"] == []


def test_an_intent_not_sent_without_a_lock_holds_for_a_quarter_hour_then_is_never_sent(server, config, db):
    """A row with no lock to ask (an older release's, a filesystem refusing such locks) keeps the time rule: one
    recorded a moment ago may still be sent, one recorded 16 minutes ago never will be."""
    old = _unsent(db, "no-lock-old-0004", ago=timedelta(minutes=16))
    young = _unsent(db, "no-lock-young-0005")
    with PartnerClient(config, db) as client, pytest.raises(UnresolvedOrder) as info:
        place_order(config, db, client, product_id=8, denomination=100, quantity=1)
    [named] = info.value.held  # the old one holds nothing back
    assert (named.intent_id, named.sent, named.sender_running) == (young["id"], False, None)
    assert ("is INTENT, recorded 0 s ago and not sent yet: another `orders create` may be about to send it, or its "
            "process stopped before sending it") in named.describe()
    seen = status_mod.collect(config, db)
    assert [entry.split()[0] for entry in seen["order_intents_never_sent"]] == [f"#{old['id']}"]
    assert seen["order_intents_unknown"] == [] and server.sandbox.calls.get(CREATE, 0) == 0
