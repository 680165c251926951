"""The hold: a recharge submit run again while its first one is unresolved is refused, nothing recorded or sent.

The kill -9 review's finding 1: `recharges submit` killed while its request was in flight leaves its intent
INTENT, and the provider has made the recharge. The operator saw no output and ran the same command again:
inside the provider's duplicate-guard window the 409 pointed to --force; after it a second recharge went
through, and the day's report matched both. Here a killed submit is left as the kill leaves it (its INTENT
committed, its request received by the sandbox, its answer never stored), and the sandbox's own recharges
say how many exist. Our clock is frozen and the sandbox's (speed 0) moved with it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner

from partnerkit import errors
from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store import open_db
from partnerkit.store import recharges as store
from partnerkit.timeutil import utcnow
from reconcile.locate import REPLAY_WINDOW
from reconcile.recharge_hold import HOLD_WINDOW
from reconcile.recharges import DuplicateSubmit, UnresolvedRecharge, submit
from tests.worker.worker_helpers import SUBMIT, Hold, frozen, later, mobile  # noqa: F401 (fixtures)

KEY, REFERENCE = "pk-killed-while-sending-0001", "pk-killed-ref-0001"


@pytest.fixture
def run(config, monkeypatch):
    for name, value in config_as_env(config).items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()

    def invoke(*args: str, code: int = 0):
        result = runner.invoke(cli, list(args))
        assert result.exit_code == code, result.output
        assert "Traceback" not in result.output
        return result

    return invoke


def made(server, number: str) -> list:
    """The sandbox's recharges of one number, oldest first."""
    with server.sandbox.lock:
        return sorted((rc for rc in server.sandbox.recharges.values() if rc.mobile_number == number),
                      key=lambda rc: rc.id)


def killed_while_sending(wdb, client, number: str, amount: int = 199, *, key: str = KEY,
                         reference: str = REFERENCE) -> int:
    """What `recharges submit` killed while its request was in flight leaves: its INTENT, committed before the
    send, and the request the provider received (and performed); the answer never reached the store."""
    local_id = store.record_intent(wdb, idempotency_key=key, mobile_number=number, operator_id=1,
                                   amount=Decimal(amount), client_reference=reference, submitted_at=utcnow())
    client.submit_recharge(mobile_number=number, operator_id=1, amount=amount, client_reference=reference,
                           idempotency_key=key)
    return local_id


def rows(wdb) -> list[tuple]:
    return wdb.execute("SELECT local_id, status, provider_id FROM recharges ORDER BY local_id").fetchall()


def test_a_killed_submit_run_again_is_refused_naming_its_intent_until_it_is_located(server, wdb, client, stats,
                                                                                    later, run):
    number = mobile(0)  # SUCCESS at once
    local_id = killed_while_sending(wdb, client, number)
    [first] = made(server, number)
    submit_args = ("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "199")
    stats.mark()
    refused = run(*submit_args, "--format", "json", code=1)
    assert refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1
    assert refused.stderr.startswith(
        f"Error: not sent: a recharge of 199.00 to {number} may already have been made: local recharge #{local_id} is "
        "INTENT, submitted 0 s ago and not answered yet: another `recharges submit` may still be sending it, or its "
        f"process died (Idempotency-Key {KEY}, client_reference {REFERENCE}); settle it with `partnerkit recharges "
        f"locate --local-id {local_id}`: it searches the provider and links what it finds; if the provider shows "
        "none, until 2026-03-10T10:05:00Z it also sends it again under its own key")
    assert refused.stderr.rstrip().endswith("If this is deliberately another recharge of the number and amount, add "
                                            "--force (force=True), which also passes the provider's duplicate guard")
    assert stats.calls(SUBMIT) == 0 and rows(wdb) == [(local_id, "INTENT", None)]  # nothing sent, nothing recorded

    # Past the provider's duplicate-guard window (the sandbox's 120 s), the old code made a second recharge here.
    later(150)
    assert "is INTENT, submitted 2 min ago and not answered yet" in run(*submit_args, code=1).stderr
    later(REPLAY_WINDOW.total_seconds())
    past = run(*submit_args, "--operator-id", "2", code=1).stderr  # whatever the operator: the number and amount
    assert "submitted 7 min ago" in past and "until 2026" not in past
    assert ("if the provider shows none, sending it again under its own key is a decision (`--replay`: the same key "
            "never makes a second recharge)") in past
    assert stats.calls(SUBMIT) == 0 and made(server, number) == [first] and len(rows(wdb)) == 1

    # Settled as the message says: the search links the recharge the killed send made, nothing is sent.
    located = json.loads(run("recharges", "locate", "--local-id", str(local_id), "--format", "json").stdout)
    assert (located["local_id"], located["id"], located["status"]) == (local_id, first.id, "SUCCESS")
    assert stats.calls(SUBMIT) == 0
    # No longer open: the same submit is a new recharge now, and the operator knows the first was made.
    again = json.loads(run(*submit_args, "--format", "json").stdout)
    assert again["local_id"] != local_id and [rc.id for rc in made(server, number)] == [first.id, again["id"]]


def test_force_submits_another_recharge_past_the_hold_and_the_providers_guard(server, wdb, client, run):
    number = mobile(0)
    local_id = killed_while_sending(wdb, client, number)
    forced = json.loads(run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "199",
                            "--force", "--format", "json").stdout)
    assert forced["status"] == "SUCCESS" and len(made(server, number)) == 2
    assert store.get(wdb, forced["local_id"])["force"] == 1
    assert store.get(wdb, local_id)["status"] == "INTENT"  # the first stays open, for locate or the sync
    # It was within the provider's window: the same request without force=true meets its guard.
    with pytest.raises(errors.DuplicateRecharge):
        client.submit_recharge(mobile_number=number, operator_id=1, amount=199, idempotency_key="pk-not-forced-01")
    assert len(made(server, number)) == 2


def test_submit_raises_unresolved_recharge_for_the_number_and_amount_only(server, config, wdb, client, stats, later):
    """The Python API, as a fork calls it: a lost answer (UNKNOWN) holds a new submit of its number and amount,
    with or without a new key of the fork's, whatever the operator; not another amount or number."""
    number = mobile(0)
    server.sandbox.settings.faults = {"http_500": {"scope": SUBMIT}}  # answered 500, its replay too: UNKNOWN
    lost = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=149)
    server.sandbox.settings.faults = {}
    assert lost.status == "UNKNOWN"
    later(30)
    stats.mark()
    for key, operator in ((None, 1), ("a-new-key-of-the-fork", 2)):
        with pytest.raises(UnresolvedRecharge, match=rf"^not sent: a recharge of 149\.00 to {number} may already "
                                                     rf"have been made: local recharge #{lost.local_id} is UNKNOWN, "
                                                     "submitted 30 s ago and its answer was lost") as info:
            submit(config, wdb, client, mobile_number=number, operator_id=operator, amount="149.00",
                   idempotency_key=key, client_reference="another-ref")
        [held] = info.value.held
        assert (held.local_id, held.idempotency_key, held.client_reference, held.state, held.age) == (
            lost.local_id, lost.idempotency_key, lost.client_reference, "UNKNOWN", timedelta(seconds=30))
        assert held.replays_until == utcnow() - timedelta(seconds=30) + REPLAY_WINDOW
        assert (info.value.mobile_number, info.value.amount) == (number, Decimal("149"))
    assert stats.calls(SUBMIT) == 0 and store.by_idempotency_key(wdb, "a-new-key-of-the-fork") is None
    # Another amount, another number: not the same recharge, sent.
    assert submit(config, wdb, client, mobile_number=number, operator_id=1, amount=150).status == "SUCCESS"
    assert submit(config, wdb, client, mobile_number=mobile(0), operator_id=1, amount=149).status == "SUCCESS"
    # Its own key is never held: that is its locate (the search finds nothing, so within 5 minutes it is sent).
    resumed = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=149,
                     idempotency_key=lost.idempotency_key)
    assert resumed.local_id == lost.local_id and resumed.status == "SUCCESS" and resumed.performed_now
    assert len(made(server, number)) == 2  # 150 and this 149: one recharge for one request


def test_an_intent_past_the_hold_no_longer_holds_and_the_409_names_it_before_force(server, config, wdb, client,
                                                                                  later):
    """24 hours after its submit an open intent lets the same recharge through (`status` still names it); a 409
    of the provider's guard then names it, with its locate, before --force."""
    number = mobile(0)
    lost = store.record_intent(wdb, idempotency_key="pk-lost-long-ago-0001", mobile_number=number, operator_id=1,
                               amount=Decimal(199), client_reference="pk-lost-ref-01", submitted_at=utcnow())
    store.mark_unknown(wdb, lost, "read timed out", utcnow())
    later(HOLD_WINDOW.total_seconds() - 60)
    with pytest.raises(UnresolvedRecharge, match="is UNKNOWN, submitted 23 h 59 min ago"):
        submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    later(61)
    assert submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199).status == "SUCCESS"
    with pytest.raises(DuplicateSubmit) as info:
        submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    text = str(info.value)
    assert text.startswith("HTTP 409 from the provider's duplicate guard (trace ")
    assert (f"a recharge of 199 to {number} was submitted recently. It may be one of this store's whose outcome is "
            f"not known: local recharge #{lost} is UNKNOWN, submitted 24 h 0 min ago and its answer was lost "
            "(Idempotency-Key pk-lost-long-ago-0001, client_reference pk-lost-ref-01); settle it with `partnerkit "
            f"recharges locate --local-id {lost}`") in text
    assert text.index(f"local recharge #{lost}") < text.index("--force")
    assert text.endswith("Settle it first. If this second recharge is intended, submit again with --force (force=True)")
    assert [r[1] for r in rows(wdb)] == ["UNKNOWN", "SUCCESS"]  # the 409's own intent removed, as before


def test_a_submit_still_sending_holds_back_the_same_one(server, config, wdb, run):
    """Two `recharges submit` of one recharge at once (a double click, two terminals): the second sends nothing."""
    number = mobile(0)
    hold = Hold(server.app)
    done: list = []

    def first() -> None:
        own = open_db(config.db_path)
        try:
            patient = replace(config, http_timeout_s=30.0)  # waits for the held answer
            with PartnerClient(patient, own) as sender:
                done.append(submit(patient, own, sender, mobile_number=number, operator_id=1, amount=199))
        finally:
            own.conn.close()

    thread = threading.Thread(target=first, daemon=True)
    thread.start()
    try:
        assert hold.held.wait(30), "the submit never reached the sandbox"
        [(local_id, state, _)] = rows(wdb)
        assert state == "INTENT"
        second = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "199", code=1)
        # The first submit holds its sender's lock (partnerkit.senders): named as running, even from this thread.
        assert (f"local recharge #{local_id} is INTENT, submitted 0 s ago and its `recharges submit` (pid "
                f"{os.getpid()} on {socket.gethostname()}) is still running, waiting for the provider's answer "
                f"(Idempotency-Key ") in second.stderr
        assert ("; once that command has ended, if it is still open, settle it with `partnerkit recharges locate "
                f"--local-id {local_id}`") in second.stderr
        # `status` does not name it yet: its answer may still come.
        assert collect(config, wdb)["recharges_unknown"] == 0
    finally:
        hold.release.set()
        thread.join(30)
    [outcome] = done
    assert outcome.status == "SUCCESS" and [rc.id for rc in made(server, number)] == [outcome.recharge.id]
    assert server.sandbox.calls[SUBMIT] == 1


def test_held_finds_open_intents_of_the_number_and_amount_since_a_time(wdb):
    """The store's query, row by row: which rows hold back 9800000000 / 199.00 since 10:00."""
    start = utcnow()
    ids = {}
    for name, (number, amount, status, submitted) in {
        "intent": ("9800000000", 199, "INTENT", start), "unknown": ("9800000000", 199, "UNKNOWN", start),
        "other-operator": ("9800000000", 199, "INTENT", start), "settled": ("9800000000", 199, "SUCCESS", start),
        "other-amount": ("9800000000", 200, "INTENT", start), "other-number": ("9800000001", 199, "INTENT", start),
        "too-old": ("9800000000", 199, "UNKNOWN", start - timedelta(seconds=1)),
    }.items():
        ids[name] = store.record_intent(wdb, idempotency_key=f"key-{name}", mobile_number=number,
                                        operator_id=2 if name == "other-operator" else 1, amount=Decimal(amount),
                                        client_reference=f"ref-{name}", submitted_at=submitted)
        wdb.execute("UPDATE recharges SET status = ? WHERE local_id = ?", (status, ids[name]))
    names = {v: k for k, v in ids.items()}
    held = store.held(wdb, mobile_number="9800000000", amount=Decimal("199.00"), since=start)
    assert [names[r["local_id"]] for r in held] == ["intent", "unknown", "other-operator"]
