"""A locate run after the submit: it searches first, and sends the key again only when it should.

A submit whose first send never reached the provider (the sandbox's `http_500`, answered before anything
is done) is UNKNOWN, and the provider holds nothing. Sending its Idempotency-Key again then PERFORMS the
recharge: within minutes of the submit that completes the request the customer is waiting on; later it
is the operator's decision (`--replay`). The sandbox's own count of recharges for the number says how
many exist. Our clock is frozen with freezegun and the sandbox's (speed 0) is moved with it.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from partnerkit.status import collect
from partnerkit.store import recharges as store
from partnerkit.timeutil import iso
from reconcile.poller import poll_once
from reconcile.locate import locate
from reconcile.recharges import RechargeInputError, submit
from tests.worker.worker_helpers import START, SUBMIT, frozen, later, mobile, run  # noqa: F401 (fixtures)


def provider_count(server, number: str) -> int:
    return sum(1 for rc in server.sandbox.recharges.values() if rc.mobile_number == number)


def never_arrived(server, config, wdb, client, number: str, amount: int = 149):
    """A submit the provider answered 500 before doing anything (as its replay): UNKNOWN, nothing there."""
    server.sandbox.settings.faults = {"http_500": {"scope": SUBMIT}}
    outcome = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=amount)
    server.sandbox.settings.faults = {}
    assert outcome.status == "UNKNOWN" and provider_count(server, number) == 0
    return outcome


def test_past_the_window_locate_only_searches_and_says_a_replay_would_perform_it(server, config, wdb, client,
                                                                                  stats, later):
    number = mobile(0)
    lost = never_arrived(server, config, wdb, client, number)
    later(10 * 60)
    stats.mark()
    outcome = locate(config, wdb, client, local_id=lost.local_id)
    assert outcome.status == "UNKNOWN" and not outcome.performed_now
    assert stats.calls(SUBMIT) == 0 and provider_count(server, number) == 0   # read only: nothing sent
    assert f"Local recharge #{lost.local_id} ({number}, 149.00) is UNKNOWN: the provider shows no such recharge (" \
        in outcome.message
    assert ("Nothing was sent. If its first send never reached the provider, sending its Idempotency-Key again "
            "would perform the recharge now, 10 min after it was asked for: only if the customer still wants it and "
            f"was not served another way, run `partnerkit recharges locate --local-id {lost.local_id} --replay`. "
            "Otherwise leave it: the day's report lists it as `unknown_to_provider`") in outcome.message
    assert "Do NOT submit it again with a new key" in outcome.message


def test_replay_performs_it_once_says_so_and_keeps_the_note(server, config, wdb, client, stats, later):
    number = mobile(5)  # PROCESSING at once, SUCCESS when the sandbox settles it
    lost = never_arrived(server, config, wdb, client, number)
    submitted = store.get(wdb, lost.local_id)["submitted_at"]
    later(10 * 60)
    stats.mark()
    done = locate(config, wdb, client, local_id=lost.local_id, replay=True)
    assert done.performed_now and done.status == "PROCESSING" and done.located_by == "idempotency_key"
    assert stats.calls(SUBMIT) == 1 and provider_count(server, number) == 1
    created = iso(done.recharge.created_at)
    assert done.message.startswith(f"The replay performed it now (created at {created}, 10 min after the submit at "
                                   f"{submitted}): the first send never reached the provider")
    assert "Located" not in done.message
    note = store.get(wdb, lost.local_id)["last_error"]
    sent = iso(START + timedelta(minutes=10))
    assert note.startswith(f"performed by a later replay: the same Idempotency-Key sent again at {sent} made recharge "
                           f"{done.recharge.id} (created at {created}")
    # A second --replay sends nothing: the row is linked.
    again = locate(config, wdb, client, local_id=lost.local_id, replay=True)
    assert again.located_by == "already_known" and stats.calls(SUBMIT) == 1 and provider_count(server, number) == 1
    # The note outlives the poller's reads, which otherwise clear last_error.
    later(601)
    poll_once(config, wdb, client)
    row = store.get(wdb, lost.local_id)
    assert row["status"] == "SUCCESS" and row["last_error"] == note


def test_within_five_minutes_locate_sends_the_key_again_by_itself_and_says_it_performed_it(server, config, wdb,
                                                                                           client, stats, later):
    number = mobile(0)
    lost = never_arrived(server, config, wdb, client, number)
    later(2 * 60)
    stats.mark()
    done = locate(config, wdb, client, local_id=lost.local_id)
    assert done.performed_now and done.status == "SUCCESS"
    assert stats.calls(SUBMIT) == 1 and provider_count(server, number) == 1
    assert done.message.startswith("The replay performed it now (the provider showed no such recharge a moment "
                                   "before the replay)")


def test_a_customer_served_by_another_submit_is_never_recharged_again_by_locate(server, config, wdb, client, stats,
                                                                              later):
    """The reviewer's case (F1): the first submit never arrived, the customer was served by a second one (forced:
    the first is still open), and the operator follows the advice to locate the first. Within the window too,
    nothing is sent."""
    number = mobile(0)
    lost = never_arrived(server, config, wdb, client, number)
    served = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=149, force=True)
    assert served.status == "SUCCESS" and provider_count(server, number) == 1
    later(2 * 60 + 5)
    stats.mark()
    outcome = locate(config, wdb, client, local_id=lost.local_id)
    assert outcome.status == "UNKNOWN" and stats.calls(SUBMIT) == 0 and provider_count(server, number) == 1
    assert (f"It does show 1 other recharge(s) of {number} for 149.00 made since this one was asked for "
            f"({served.recharge.id} SUCCESS created {iso(served.recharge.created_at)}): the customer was probably "
            "served by it.") in outcome.message
    assert "was not served by the recharge above, run `partnerkit recharges locate" in outcome.message


def test_the_command_replays_only_when_told_and_exits_as_documented(server, config, wdb, client, stats, later, run):
    number = mobile(0)
    server.sandbox.settings.faults = {"http_500": {"scope": SUBMIT}}
    first = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "149")
    server.sandbox.settings.faults = {}
    assert first.exit_code == 3 and "Until 2026-03-10T10:05:00Z (5 minutes after the submit)" in first.stderr
    attention = collect(config, wdb)["attention"]
    assert ("1 recharge(s) with an unknown outcome (local id 1): `partnerkit recharges locate --local-id N` searches "
            "the provider for each and links what it finds; if the provider shows none, it sends one submitted under "
            "5 minutes ago again under its own Idempotency-Key by itself (#1 until 2026-03-10T10:05:00Z)") in attention[0]
    later(30 * 60)
    assert ("if the provider shows none, sending it again under its own Idempotency-Key is a decision (`--replay` "
            "performs it now if its first send never arrived)") in collect(config, wdb)["attention"][0]
    stats.mark()
    looked = run("recharges", "locate", "--local-id", "1")
    assert looked.exit_code == 3 and "30 min after it was asked for" in looked.stderr
    assert stats.calls(SUBMIT) == 0 and provider_count(server, number) == 0
    replayed = run("recharges", "locate", "--local-id", "1", "--replay", "--format", "json")
    assert replayed.exit_code == 0, replayed.output
    body = json.loads(replayed.stdout)
    assert body["status"] == "SUCCESS" and body["last_error"].startswith("performed by a later replay:")
    assert replayed.stderr.startswith("The replay performed it now (created at 2026-03-10T10:30:00Z, 30 min after")
    again = run("recharges", "locate", "--local-id", "1", "--replay")
    assert again.exit_code == 0 and stats.calls(SUBMIT) == 1 and provider_count(server, number) == 1
    refused = run("recharges", "locate", "--mobile", number, "--amount", "149", "--replay")
    assert refused.exit_code == 2 and "--replay needs --local-id N" in refused.output


def left_by_an_unchecked_key(wdb, number: str, key: str) -> int:
    """The row a submit left before it checked its key as the client does: the intent recorded, then the
    client refused the key before sending, and the row marked UNKNOWN (findings-dev F1)."""
    local_id = store.record_intent(wdb, idempotency_key=key, mobile_number=number, operator_id=1, amount=149,
                                   client_reference="pk-left-behind-0001", submitted_at=START)
    store.mark_unknown(wdb, local_id, "interrupted while sending", START)
    return local_id


@pytest.mark.parametrize("after_s, args", [
    (60, ()),                 # within the window: locate would search, then send the key again by itself
    (30 * 60, ("--replay",)),  # later, the operator asks for the replay
])
def test_an_intent_whose_key_the_client_refuses_is_closed_as_never_sent(server, config, wdb, stats, later, run,
                                                                       after_s, args):
    """No request carrying such a key can have gone out (the client checks every key before sending), so
    locate neither searches nor replays: it removes the intent as a refused submit's, and says so in one line."""
    number = mobile(0)
    local_id = left_by_an_unchecked_key(wdb, number, "my key 0001")
    assert collect(config, wdb)["recharges_unknown"] == 1
    later(after_s)
    stats.mark()
    closed = run("recharges", "locate", "--local-id", str(local_id), *args)
    assert closed.exit_code == 1 and "Traceback" not in closed.output
    [line] = closed.output.splitlines()
    assert line.startswith(f"Error: local recharge #{local_id} ({number}, 149.00) was never sent: its "
                           "Idempotency-Key 'my key 0001' is one the client refuses to send (Idempotency-Key must be "
                           "visible ASCII without spaces (it is sent as a header)), so no request carrying it can have "
                           "reached the provider. Its intent is removed")
    assert line.endswith("submit it again without --idempotency-key (a new key is safe here, since the first was "
                         "never sent).")
    assert stats.calls() == 0 and provider_count(server, number) == 0
    assert store.get(wdb, local_id) is None and collect(config, wdb)["recharges_unknown"] == 0
    again = run("recharges", "locate", "--local-id", str(local_id))
    assert again.exit_code == 1 and again.output.strip() == f"Error: no local recharge #{local_id}"


def test_a_locate_by_number_closes_such_an_intent_too(server, config, wdb, client, stats):
    number = mobile(0)
    local_id = left_by_an_unchecked_key(wdb, number, "clé-0001-order")
    with pytest.raises(RechargeInputError, match=rf"local recharge #{local_id} .* was never sent"):
        locate(config, wdb, client, mobile_number=number, amount="149")
    assert store.list_rows(wdb) == [] and stats.calls() == 0
