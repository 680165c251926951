"""A recharge answer under our Idempotency-Key that is another request's (session 21's API audit, HIGH).

Another program of the same partner, with the same credentials, submitted a recharge under a key first; a
submit through partnerkit under that key is answered with the original response ("replays the original
response, including the recharge id"): another number, operator and face. That recharge was never ours, so it
is never linked to our intent: the intent stays UNKNOWN with the reason, the command fails naming the key's
recharge and what to do, locate never sends that key again, and `partnerkit status` names the row. A replay of
our own request (same key, same body) still links as before. Our clock is frozen (the sandbox's speed 0).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from partnerkit import errors
from partnerkit.status import collect
from partnerkit.store import recharges as store
from reconcile.jobs import sync_recent
from reconcile.locate import locate
from reconcile.recharges import submit
from tests.worker.worker_helpers import (  # noqa: F401 (fixtures)
    LIST, START, SUBMIT, frozen, later, mobile, run,
)

KEY = "shared-key-0001"


def provider_count(server, number: str) -> int:
    return sum(1 for rc in server.sandbox.recharges.values() if rc.mobile_number == number)


def other_program(client, number: str, key: str = KEY, **body):
    """The other program: a raw signed POST /api/v1/recharges under `key`, 150 on operator 1 (not partnerkit)."""
    return client.submit_recharge(mobile_number=number, operator_id=1, amount=150, idempotency_key=key,
                                  **body).recharge


def assert_left_open(wdb, local_id: int, theirs) -> store.KeyTaken:
    """Our intent as the answer of another request leaves it: UNKNOWN, linked to nothing, the reason kept."""
    row = store.get(wdb, local_id)
    assert (row["status"], row["provider_id"], row["reference_number"]) == ("UNKNOWN", None, None)
    assert (row["face_cents"], row["payable_cents"], row["provider_created_at"]) == (None, None, None)
    assert store.by_provider_id(wdb, theirs.id) is None or store.by_provider_id(wdb, theirs.id)["local_id"] != local_id
    taken = store.key_taken(row["last_error"])
    assert taken == store.KeyTaken(theirs.id, theirs.reference_number, theirs.status, taken.differences)
    return taken


def test_a_submit_under_a_key_another_program_used_is_refused_not_claimed(server, config, wdb, client, stats, run):
    """The auditor's reproduction: exit 1, no row printed as this submit's, the intent left UNKNOWN with the reason,
    the sync links nothing to it, `status` names it, and a new submit of the number and amount is not held back."""
    theirs_number, mine = mobile(1), mobile(2)
    theirs = other_program(client, theirs_number)
    stats.mark()
    sent = run("recharges", "submit", "--mobile", mine, "--operator-id", "2", "--amount", "300",
               "--idempotency-key", KEY, "--format", "json")
    assert sent.exit_code == 1, sent.output
    assert sent.stdout == ""  # no recharge shown as this submit's
    [local] = [r["local_id"] for r in store.list_rows(wdb) if r["idempotency_key"] == KEY]
    assert sent.stderr.startswith(
        f"Error: Idempotency-Key {KEY} belongs to recharge {theirs.id} ({theirs.reference_number}, SUCCESS: "
        f"{theirs_number}, operator 1, face 150.00), not to this request (local recharge #{local}: {mine}, operator 2, "
        f"amount 300.00): mobile_number differs (local #{local} {mine}, the provider's answer {theirs_number}); "
        f"operator_id differs (local #{local} 2, the provider's answer 1); face differs (local #{local} 300.00, the "
        "provider's answer 150.00). The key was already used for another recharge, whose answer the provider "
        f"replayed: this recharge was not made under it, and recharge {theirs.id} is not linked to it.")
    assert (f"What to do: if the customer still needs it, check first that no recharge of it exists (`partnerkit "
            f"recharges locate --local-id {local}` searches the provider for it by number and client_reference, and "
            "never sends this key again), then submit it again without --idempotency-key: a new key.\n") in sent.stderr
    assert "SUCCESS: confirmed" not in sent.stderr and "wallet debited" not in sent.stderr
    assert stats.calls(SUBMIT) == 1 and provider_count(server, mine) == 0
    taken = assert_left_open(wdb, local, theirs)
    assert taken.differences.startswith(f"mobile_number differs (local #{local} {mine}, the provider's answer ")
    row = store.get(wdb, local)
    assert (row["mobile_number"], row["operator_id"], row["amount_cents"]) == (mine, 2, 30000)

    # The sync stores their recharge as one partnerkit never submitted, and links nothing to ours.
    sync_recent(config, wdb, client)
    held = store.by_provider_id(wdb, theirs.id)
    assert (held["origin"], held["mobile_number"], held["idempotency_key"]) == ("provider", theirs_number, None)
    assert_left_open(wdb, local, theirs)

    seen = collect(config, wdb)
    assert seen["recharges_unknown"] == 1
    assert seen["recharges_unknown_key_taken"] == [
        f"#{local} key {KEY} client_reference {row['client_reference']} ({mine}, 300.00): its key answered recharge "
        f"{theirs.id} ({theirs.reference_number}, SUCCESS), another recharge ({taken.differences})"]
    assert seen["recharges_unknown_locate_replays"] == []  # locate never sends its key again
    assert not [line for line in seen["attention"] if "with an unknown outcome" in line]
    [line] = [line for line in seen["attention"] if "whose Idempotency-Key was already used" in line]
    assert line.startswith(f"1 recharge(s) whose Idempotency-Key was already used for another recharge "
                           f"({seen['recharges_unknown_key_taken'][0]}): the provider answered with that recharge, so "
                           "these were not made under their key")
    assert line.endswith("then submit it again without --idempotency-key: a new key")
    shown = run("status", "--format", "json")
    assert KEY in shown.stdout and "recharges_unknown_key_taken" in shown.stdout

    # Not made: a new submit of the number and amount (a new key) is not held back by it.
    stats.mark()
    again = run("recharges", "submit", "--mobile", mine, "--operator-id", "2", "--amount", "300")
    assert again.exit_code == 0, again.stderr
    assert stats.calls(SUBMIT) == 1 and provider_count(server, mine) == 1
    assert_left_open(wdb, local, theirs)


def test_a_replay_of_another_request_found_by_locate_is_never_linked_and_never_sent_again(server, config, wdb,
                                                                                         client, stats, run):
    """An intent whose answer was lost, its key used by another program: locate's own replay (within 5 minutes)
    meets the other recharge, says so (exit 1 by the CLI), and leaves the row open. From then on locate only searches
    (exit 3: still UNKNOWN, and saying why), --replay is refused, and nothing is ever sent under that key again."""
    mine = mobile(0)
    local = store.record_intent(wdb, idempotency_key=KEY, mobile_number=mine, operator_id=2, amount=Decimal(300),
                                client_reference="pk-mine-0001", submitted_at=START)
    store.mark_unknown(wdb, local, "read timed out", START)
    theirs = other_program(client, mobile(1))
    stats.mark()
    with pytest.raises(errors.ReplayMismatch) as raised:
        locate(config, wdb, client, local_id=local)
    assert (stats.calls(LIST), stats.calls(SUBMIT)) == (1, 1)  # searched, then its key sent once (young)
    assert str(raised.value).startswith(f"Its Idempotency-Key was sent again: Idempotency-Key {KEY} belongs to "
                                        f"recharge {theirs.id} ({theirs.reference_number}, SUCCESS: ")
    assert "this recharge was not made under it" in str(raised.value)
    assert provider_count(server, mine) == 0
    assert_left_open(wdb, local, theirs)

    stats.mark()
    looked = run("recharges", "locate", "--local-id", str(local))
    assert looked.exit_code == 3, looked.stderr
    assert (stats.calls(LIST), stats.calls(SUBMIT)) == (1, 0)
    assert (f"Its key was not sent again, and --replay is refused: its Idempotency-Key {KEY} was already used for "
            f"another recharge: the provider answered recharge {theirs.id} ({theirs.reference_number}, SUCCESS), not "
            "this request (") in looked.stderr
    assert "Located" not in looked.stderr and "Do NOT submit it again with a new key" not in looked.stderr
    assert f"`partnerkit recharges locate --local-id {local}` searches" in looked.stderr

    refused = run("recharges", "locate", "--local-id", str(local), "--replay")
    assert refused.exit_code == 1 and stats.calls(SUBMIT) == 0
    assert refused.stderr.startswith(f"Error: local recharge #{local} is not sent again (--replay): its "
                                     f"Idempotency-Key {KEY} was already used for another recharge (recharge "
                                     f"{theirs.id} ({theirs.reference_number}, SUCCESS): mobile_number differs")
    # The same key given to `recharges submit` is this recharge's locate: a search, nothing sent.
    resumed = run("recharges", "submit", "--mobile", mine, "--operator-id", "2", "--amount", "300",
                  "--client-reference", "pk-mine-0001", "--idempotency-key", KEY)
    assert resumed.exit_code == 3 and stats.calls(SUBMIT) == 0
    assert "Its key was not sent again" in resumed.stderr
    assert_left_open(wdb, local, theirs)


class _CutFirstSubmit:
    """The sandbox's `malformed_json` fault on the next POST /api/v1/recharges only: its answer (a replay too) is
    cut, so the submit's answer is lost and it locates right away; the fault is off for the replay that follows."""

    def __init__(self, server) -> None:
        self.sandbox = server.sandbox
        server.app.after_request(self._after)  # registered before the sandbox serves this test's first request

    def arm(self) -> None:
        self.sandbox.settings.faults = {"malformed_json": {"scope": SUBMIT}}

    def _after(self, response):
        from flask import request

        if request.method == "POST" and request.path == "/api/v1/recharges":
            self.sandbox.settings.faults = {}  # drawn for this request already: it is still cut
        return response


@pytest.fixture
def cut(server):
    return _CutFirstSubmit(server)


def test_the_locate_right_after_a_lost_answer_meets_another_request_and_says_so(server, config, wdb, client, cut,
                                                                               stats):
    """Right after the submit (its answer lost): the key's replay answers another program's recharge. Searched
    too, in the document's order (nothing of ours there): the submit raises ReplayMismatch, the row stays open."""
    theirs = other_program(client, mobile(1))
    mine = mobile(2)
    cut.arm()
    stats.mark()
    with pytest.raises(errors.ReplayMismatch) as raised:
        submit(config, wdb, client, mobile_number=mine, operator_id=2, amount=300, idempotency_key=KEY)
    assert (stats.calls(SUBMIT), stats.calls(LIST)) == (2, 1)  # the send, its key once, one page of the search
    message = str(raised.value)
    assert message.startswith("The submit's answer was lost (")
    assert f"Idempotency-Key {KEY} belongs to recharge {theirs.id}" in message
    [row] = [r for r in store.list_rows(wdb) if r["idempotency_key"] == KEY]
    assert_left_open(wdb, row["local_id"], theirs)
    assert provider_count(server, mine) == 0


def test_a_replay_of_our_own_request_still_links(server, config, wdb, client, cut, stats, run):
    """Same key, same body: the answer is ours, linked as before, whether the first send's answer was lost (the
    key replayed right after) or the request first went out another way with the same fields and client_reference
    (or none: the answer then carries none, and is compared on the rest)."""
    lost = mobile(0)
    cut.arm()
    outcome = submit(config, wdb, client, mobile_number=lost, operator_id=2, amount=300, idempotency_key=KEY)
    assert (outcome.located_by, outcome.status, outcome.recharge.mobile_number) == ("idempotency_key", "SUCCESS", lost)
    row = store.get(wdb, outcome.local_id)
    assert (row["provider_id"], row["face_cents"], row["last_error"]) == (outcome.recharge.id, 30000, None)
    assert provider_count(server, lost) == 1

    for reference in ("raw-same-1", None):
        number, key = mobile(1), f"own-key-{reference or 'none'}"
        sent = client.submit_recharge(mobile_number=number, operator_id=2, amount=300, idempotency_key=key,
                                      client_reference=reference)
        extra = ["--client-reference", reference] if reference else []
        stats.mark()
        again = run("recharges", "submit", "--mobile", number, "--operator-id", "2", "--amount", "300",
                    "--idempotency-key", key, "--format", "json", *extra)
        assert again.exit_code == 0, again.stderr
        assert "SUCCESS: confirmed by the operator, wallet debited" in again.stderr
        assert stats.calls(SUBMIT) == 1 and provider_count(server, number) == 1  # replayed, nothing new
        linked = store.by_idempotency_key(wdb, key)
        assert (linked["provider_id"], linked["status"], linked["last_error"]) == (sent.recharge.id, "SUCCESS", None)
