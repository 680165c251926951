"""`partnerkit recharges close`: an intent whose outcome stays unknown, checked with the provider, closed by hand.

The lost answer is the sandbox's `http_500` on the submit (answered before anything is done, its replay too):
UNKNOWN, and the provider holds nothing. Closing searches as `recharges locate` does (never a send of the key), keeps
the row with who, when and why, and takes it out of `partnerkit status` and the submit hold. Our clock is frozen with
freezegun and the sandbox's (speed 0) is moved with it.
"""

from __future__ import annotations

import json
from datetime import timedelta

from partnerkit.status import collect
from partnerkit.store import recharges as store
from reconcile.recharges import submit
from reconcile.sync import sync_recharges
from tests.worker.worker_helpers import LIST, START, SUBMIT, frozen, later, mobile, run  # noqa: F401 (fixtures)


def provider_count(server, number: str) -> int:
    return sum(1 for rc in server.sandbox.recharges.values() if rc.mobile_number == number)


def never_arrived(server, config, wdb, client, number: str, amount: int = 149):
    """A submit the provider answered 500 before doing anything (as its replay): UNKNOWN, nothing there."""
    server.sandbox.settings.faults = {"http_500": {"scope": SUBMIT}}
    outcome = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=amount)
    server.sandbox.settings.faults = {}
    assert outcome.status == "UNKNOWN" and provider_count(server, number) == 0
    return outcome


def unknown_lines(config, wdb) -> list[str]:
    return [line for line in collect(config, wdb)["attention"] if "unknown outcome" in line]


def test_a_lost_answer_is_closed_after_the_search_and_leaves_status_and_the_hold(server, config, wdb, client,
                                                                                  stats, later, run):
    number = mobile(0)
    lost = never_arrived(server, config, wdb, client, number)
    later(30 * 60)
    assert len(unknown_lines(config, wdb)) == 1
    assert run("status", "--check").exit_code == 1
    held = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "149")
    assert held.exit_code == 1 and f"#{lost.local_id}" in held.output  # the hold names it
    stats.mark()
    closed = run("recharges", "close", str(lost.local_id), "--note", "support: never received (ticket 81)",
                 "--by", "asha", "--format", "json")
    assert closed.exit_code == 0, closed.output
    assert stats.calls(SUBMIT) == 0 and stats.calls(LIST) >= 1  # searched, its key never sent again
    body = json.loads(closed.stdout)
    assert body["status"] == "UNKNOWN" and body["closed_by"] == "asha" and body["closed_state"] == "closed"
    assert body["closed_note"] == "support: never received (ticket 81)"
    assert body["closed_search"].startswith("the provider showed no such recharge")
    assert f"Local recharge #{lost.local_id} ({number}, 149.00) is closed" in closed.stderr
    # Kept, and shown: who, when, why.
    shown = json.loads(run("recharges", "show", str(lost.local_id), "--format", "json").stdout)
    assert shown["status"] == "UNKNOWN" and shown["closed_at"] == "2026-03-10T10:30:00Z"
    assert shown["closed_by"] == "asha" and shown["closed_state"] == "closed"
    table = run("recharges", "show", str(lost.local_id)).stdout
    assert "closed_note" in table and "ticket 81" in table
    # Out of status: the unit's --check goes quiet for it.
    assert unknown_lines(config, wdb) == [] and collect(config, wdb)["recharges_unknown"] == 0
    assert run("status", "--check").exit_code == 0
    # Again: nothing changes, nothing sent.
    again = run("recharges", "close", str(lost.local_id), "--note", "twice")
    assert again.exit_code == 0 and "was closed by asha" in again.stderr
    # locate only searches it: --replay (which would make the recharge now) is refused.
    replay = run("recharges", "locate", "--local-id", str(lost.local_id), "--replay")
    assert replay.exit_code == 1 and "is not sent again (--replay): was closed by asha" in replay.output
    looked = run("recharges", "locate", "--local-id", str(lost.local_id))
    assert looked.exit_code == 3 and "the provider still shows no such recharge" in looked.stderr
    assert stats.calls(SUBMIT) == 0 and provider_count(server, number) == 0
    # The hold no longer holds for it: a new submit of the number and amount goes through.
    fresh = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "149")
    assert fresh.exit_code == 0, fresh.output
    assert provider_count(server, number) == 1 and store.get(wdb, lost.local_id)["status"] == "UNKNOWN"


def test_a_success_row_is_never_closed(server, config, wdb, client, run):
    outcome = submit(config, wdb, client, mobile_number=mobile(0), operator_id=1, amount=149)
    assert outcome.status == "SUCCESS"
    refused = run("recharges", "close", str(outcome.local_id), "--note", "n")
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert f"local recharge #{outcome.local_id} is SUCCESS (recharge {outcome.recharge.id}, the provider's record)" \
        in refused.output
    assert store.closure(wdb, store.get(wdb, outcome.local_id)) is None
    missing = run("recharges", "close", "424242", "--note", "n")
    assert missing.exit_code == 1 and "no local recharge #424242" in missing.output
    blank = run("recharges", "close", str(outcome.local_id), "--note", " ")
    assert blank.exit_code == 2 and "must not be empty" in blank.output


def test_one_the_search_finds_is_linked_not_closed(server, config, wdb, client, stats, later, run):
    number = mobile(0)
    lost = never_arrived(server, config, wdb, client, number)
    row = store.get(wdb, lost.local_id)
    # The provider has it after all (made under its client_reference, as support would find it).
    made = client.submit_recharge(mobile_number=number, operator_id=1, amount=149,
                                  client_reference=row["client_reference"])
    later(30 * 60)
    stats.mark()
    result = run("recharges", "close", str(lost.local_id), "--note", "n", "--format", "json")
    assert result.exit_code == 1 and stats.calls(SUBMIT) == 0
    assert "is not closed: the provider shows it, so it is linked instead. Located by client reference" in result.stderr
    body = json.loads(result.stdout)
    assert body["id"] == made.recharge.id and body["status"] == "SUCCESS" and body["closed_at"] is None
    linked = store.get(wdb, lost.local_id)
    assert linked["provider_id"] == made.recharge.id and store.closure(wdb, linked) is None


def test_a_provider_that_cannot_be_read_refuses_and_writes_nothing(server, config, wdb, client, later, run):
    number = mobile(0)
    lost = never_arrived(server, config, wdb, client, number)
    later(30 * 60)
    server.sandbox.settings.faults = {"http_500": {"scope": LIST}}
    result = run("recharges", "close", str(lost.local_id), "--note", "n")
    server.sandbox.settings.faults = {}
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"local recharge #{lost.local_id} is not closed: the provider could not be checked" in result.output
    assert store.closure(wdb, store.get(wdb, lost.local_id)) is None and len(unknown_lines(config, wdb)) == 1
    # Without the search (support confirmed it by phone), the note says so and it is closed.
    forced = run("recharges", "close", str(lost.local_id), "--note", "support by phone", "--without-search",
                 "--format", "json")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["closed_search"] == "not searched (--without-search)"


def test_a_later_sync_that_lists_it_links_it_and_the_closure_is_overtaken(server, config, wdb, client, later, run):
    number = mobile(0)
    lost = never_arrived(server, config, wdb, client, number)
    later(30 * 60)
    assert run("recharges", "close", str(lost.local_id), "--note", "n", "--by", "asha").exit_code == 0
    row = store.get(wdb, lost.local_id)
    made = client.submit_recharge(mobile_number=number, operator_id=1, amount=149,
                                  client_reference=row["client_reference"])  # it turns up at the provider
    later(60)
    day = START.date()
    sync_recharges(wdb, client, day, day, now=START + timedelta(minutes=31))
    linked = store.get(wdb, lost.local_id)
    assert linked["provider_id"] == made.recharge.id and linked["status"] == "SUCCESS"
    shown = json.loads(run("recharges", "show", str(lost.local_id), "--format", "json").stdout)
    assert shown["closed_by"] == "asha" and shown["closed_state"] == "overtaken"
