"""An answer that names a recharge the store already holds (session 15, findings 1 and 4).

The same recharge known twice: placed outside partnerkit (the raw client), stored by the sync with origin
'provider', then sent through partnerkit with the same Idempotency-Key, whose answer the provider replays.
The intent is merged into the synced row, and nothing is left UNKNOWN or drifting. A different recharge
under an id the store holds (a sandbox started again with a kept database re-uses its ids) is never
merged: the intent stays UNKNOWN, and the message says what it is rather than blame the database.
Our clock is frozen with freezegun and the sandbox's (speed 0) is moved with it.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.client._http import RetryPolicy
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store import meta
from partnerkit.store import recharges as store
from partnerkit.timeutil import iso
from reconcile.jobs import reconcile_day, sync_recent
from reconcile.locate import locate
from reconcile.recharges import submit
from tests.sandbox_serving import serve_sandbox
from tests.worker.worker_helpers import (  # noqa: F401 (fixtures)
    LIST, START, SUBMIT, config_for, frozen, later, mobile, run,
)

KEY, REFERENCE = "raw-key-0001", "raw-1"


def provider_count(server, number: str) -> int:
    return sum(1 for rc in server.sandbox.recharges.values() if rc.mobile_number == number)


def placed_and_synced(config, wdb, client, later, number: str) -> dict:
    """A recharge placed through the raw client (not partnerkit), then stored by the worker's sync: its row."""
    placed = client.submit_recharge(mobile_number=number, operator_id=1, amount=100, client_reference=REFERENCE,
                                    idempotency_key=KEY)
    later(60)
    sync_recent(config, wdb, client)
    row = store.by_provider_id(wdb, placed.recharge.id)
    assert (row["origin"], row["idempotency_key"], row["status"]) == ("provider", None, "SUCCESS")
    return row


def test_the_key_of_a_synced_recharge_sent_through_partnerkit_merges_into_its_row(server, config, wdb, client,
                                                                                 stats, later, run):
    """The reviewer's reproduction: one recharge, one row, known outcome, exit 0; and no false drift."""
    number = mobile(0)
    held = placed_and_synced(config, wdb, client, later, number)
    stats.mark()
    sent = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "100",
               "--client-reference", REFERENCE, "--idempotency-key", KEY, "--format", "json")
    assert sent.exit_code == 0, sent.stderr
    assert (f"It was already known as local #{held['local_id']}, synced from the provider; its key is now recorded "
            f"there, and this submit's intent (local #{held['local_id'] + 1}) is merged into it") in sent.stderr
    assert "could not be stored" not in sent.stderr and "takes writes" not in sent.stderr
    assert stats.calls(SUBMIT) == 1 and provider_count(server, number) == 1  # the replay made nothing new
    [row] = store.list_rows(wdb)
    assert row["local_id"] == held["local_id"]
    assert (row["idempotency_key"], row["origin"], row["client_reference"], row["operator_id"]) == \
        (KEY, "partner", REFERENCE, 1)
    # The synced row keeps the provider's fields; its age still counts from the provider's created_at.
    for name in ("provider_id", "reference_number", "status", "payable_cents", "provider_created_at", "raw",
                 "submitted_at"):
        assert row[name] == held[name], name
    kept = store.merged_into(wdb, held["local_id"] + 1)
    assert (kept["into"], kept["provider_id"], kept["how"], kept["holder_origin"]) == \
        (held["local_id"], held["provider_id"], "the submit's answer", "provider")
    assert (kept["intent"]["idempotency_key"], kept["intent"]["status"]) == (KEY, "INTENT")
    assert collect(config, wdb)["recharges_unknown"] == 0
    assert store.find(wdb, str(held["local_id"] + 1))["local_id"] == held["local_id"]  # `recharges show 2`

    # Idempotent: the merged intent's locate and the key given again change nothing and send nothing.
    before = store.list_rows(wdb)
    stats.mark()
    again = locate(config, wdb, client, local_id=held["local_id"] + 1)
    assert (again.status, again.local_id, again.located_by) == ("SUCCESS", held["local_id"], "already_known")
    assert again.message.startswith(f"Local recharge #{held['local_id'] + 1} was merged into local "
                                    f"#{held['local_id']} at ")
    looked = run("recharges", "locate", "--local-id", str(held["local_id"] + 1))
    resent = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "100",
                 "--client-reference", REFERENCE, "--idempotency-key", KEY)
    assert (looked.exit_code, resent.exit_code) == (0, 0)
    assert stats.calls() == 0 and store.list_rows(wdb) == before

    later(24 * 3600)  # the day has ended: its match reads a complete sync
    report = reconcile_day(config, wdb, client, START.date())
    assert report["summary"]["recharges_total"] == 1
    assert [d for d in report["drifts"] if d["subject"] == "recharge"] == []


def test_a_later_locate_merges_an_intent_found_by_its_client_reference_and_its_drifts_resolve(server, config, wdb,
                                                                                               client, later):
    """The submit's answer lost after the sync had stored the recharge (placed earlier with the same key): the
    night's match reports it twice. A later locate finds it by client_reference and merges it, nothing resent,
    and the next match resolves both drifts by itself."""
    number = mobile(0)
    held = placed_and_synced(config, wdb, client, later, number)
    intent = store.record_intent(wdb, idempotency_key=KEY, mobile_number=number, operator_id=1, amount=Decimal(100),
                                 client_reference=REFERENCE, submitted_at=START + timedelta(hours=1))
    store.mark_unknown(wdb, intent, "timed out", START + timedelta(hours=1))
    later(24 * 3600)
    night = reconcile_day(config, wdb, client, START.date())
    twice = [("unknown_to_partner", held["reference_number"], "pending"), ("unknown_to_provider", KEY, "pending")]
    assert sorted((d["kind"], d["reference"], d["resolution"]) for d in night["drifts"]) == twice
    found = locate(config, wdb, client, local_id=intent)  # past the key's 23 hours: it only searches
    assert (found.status, found.local_id, found.merged_from, found.located_by) == \
        ("SUCCESS", held["local_id"], intent, "client_reference")
    assert found.message.startswith("Located by client reference: ")
    assert [r["local_id"] for r in store.list_rows(wdb)] == [held["local_id"]]
    assert store.merged_into(wdb, intent)["how"] == "locate, by client reference"
    rerun = reconcile_day(config, wdb, client, START.date())
    assert sorted((d["kind"], d["reference"], d["resolution"]) for d in rerun["drifts"]) == \
        [(kind, reference, "resolved") for kind, reference, _ in twice]


@contextmanager
def restarted_sandbox(config, tmp_path):
    """The sandbox started again beside the kept database, numbering from recharge 100001 as at every start (what
    `--fixed-ids` does), and a Config pointed at it: `with restarted_sandbox(config, tmp_path) as (again, cfg)`."""
    from sandbox import SandboxSettings

    with serve_sandbox(SandboxSettings(speed=0, processing_delay_s=600, hourly_limit=100_000),
                       background=False) as again:
        yield again, config_for(again.base_url, config.api_key, config.api_secret, tmp_path, http_timeout_s="2")


def test_a_restarted_sandbox_reusing_an_id_leaves_the_intent_unknown_and_says_why(server, config, wdb, client,
                                                                                 frozen, tmp_path, run):
    """Finding 4: the quick start run again on a restarted sandbox with the old database. The new recharge
    gets id 100001 again, which local #1 holds: not merged, not a database fault, exit 3 every time."""
    number = mobile(5)
    first = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    frozen.tick(3600)
    held = store.get(wdb, first.local_id)
    with restarted_sandbox(config, tmp_path) as (again, restarted):
        monkey = pytest.MonkeyPatch()
        for name, value in config_as_env(restarted).items():
            monkey.setenv(name, value)
        try:
            sent = CliRunner().invoke(cli, ["recharges", "submit", "--mobile", number, "--operator-id", "1",
                                            "--amount", "199"])
            with PartnerClient(restarted, wdb, retry=RetryPolicy(max_attempts=1)) as fresh:
                looked = locate(restarted, wdb, fresh, local_id=first.local_id + 1)
        finally:
            monkey.undo()
        assert again.sandbox.recharges[first.recharge.id].mobile_number == number  # the same id, a new recharge
    assert sent.exit_code == 3
    for message in (sent.stderr, looked.message):
        assert (f"But local recharge #{first.local_id} already holds recharge {first.recharge.id} and is not this "
                f"one: local #{first.local_id} was submitted under another Idempotency-Key; ") in message
        assert "created_at differs (the provider's answer 2026-03-10T11:00:00Z, " \
               f"local #{first.local_id} 2026-03-10T10:00:00Z)" in message
        assert "client_reference differs" in message
        assert "not a database fault" in message and "start a fresh database (a new PARTNERKIT_DB)" in message
        assert "A sandbox run with --fixed-ids gives the same ids at every start" in message
        assert "takes writes" not in message and "could not be stored" not in message
    assert looked.status == "UNKNOWN" and looked.message.startswith("Located by client reference: ")
    assert store.get(wdb, first.local_id) == held  # the row that held the id is untouched
    unknown = store.get(wdb, first.local_id + 1)
    assert unknown["status"] == "UNKNOWN" and unknown["provider_id"] is None
    answered = again.sandbox.recharges[first.recharge.id].reference_number
    assert unknown["last_error"].startswith(f"the provider answered recharge {first.recharge.id} ({answered}, "
                                            f"PROCESSING), but local recharge #{first.local_id} already holds that id "
                                            "and differs")
    assert store.merged_into(wdb, first.local_id + 1) is None


def test_an_intent_whose_answer_named_a_held_id_is_never_sent_again_and_status_says_what_to_do(
        server, config, wdb, client, stats, frozen, tmp_path, run):
    """Session 18: the intent left UNKNOWN by an answer naming an id local #1 holds was counted among the lost
    answers, and `status` advised `recharges locate`, which sends its key again within 5 minutes by itself (or
    with --replay), to be answered with the same id. Now `status` names it apart, with the row holding the id,
    and what to do instead; locate searches and sends nothing; --replay is refused; the hold says the same. A
    lost answer beside it is advised as before."""
    number = mobile(5)
    first = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    frozen.tick(3600)
    with restarted_sandbox(config, tmp_path) as (again, restarted):
        with PartnerClient(restarted, wdb, retry=RetryPolicy(max_attempts=1)) as fresh:
            second = submit(restarted, wdb, fresh, mobile_number=number, operator_id=1, amount=199)
        answered = again.sandbox.recharges[first.recharge.id].reference_number
    assert (second.status, second.recharge.id) == ("UNKNOWN", first.recharge.id)
    lost = store.record_intent(wdb, idempotency_key="lost-key-0001", mobile_number=mobile(7), operator_id=1,
                               amount=Decimal(100), client_reference="lost-1", submitted_at=START + timedelta(hours=1))
    store.mark_unknown(wdb, lost, "read timed out", START + timedelta(hours=1))
    shows = f"`partnerkit recharges show {first.local_id}`"
    compare = f"compare both with the provider ({shows}; support knows the answered one as {answered})"
    assert (f"What to do: {compare}: {store.HELD_ADVICE}. Its key would be answered with the same id, so "
            "`recharges locate` only searches for it and refuses --replay. Do NOT submit it again with a new "
            "key.") in second.message

    seen = collect(config, wdb)
    assert (seen["recharges_unknown"], seen["recharges_unknown_local_ids"]) == (2, [second.local_id, lost])
    assert seen["recharges_unknown_held_elsewhere"] == [
        f"#{second.local_id} key {second.idempotency_key} client_reference {second.client_reference} ({number}, "
        f"199.00): its answer named recharge {first.recharge.id} ({answered}, PROCESSING), which local "
        f"#{first.local_id} holds ({shows})"]
    until = iso(START + timedelta(hours=1, minutes=5))
    assert seen["recharges_unknown_locate_replays"] == [f"#{lost} until {until}"]  # not the held one's key
    [unknown] = [line for line in seen["attention"] if "with an unknown outcome" in line]
    assert unknown.startswith(f"1 recharge(s) with an unknown outcome (local id {lost}): `partnerkit recharges "
                              "locate --local-id N` searches the provider for each")
    assert f"by itself (#{lost} until {until}): if its first send never arrived" in unknown
    [held] = [line for line in seen["attention"] if "already holds" in line]
    assert held == (f"1 recharge(s) whose answer named a recharge id another local recharge already holds "
                    f"({seen['recharges_unknown_held_elsewhere'][0]}): their outcome stays UNKNOWN; `recharges locate` "
                    "only searches for them and refuses --replay (their key would be answered with the same id), and a "
                    "new key would be a second recharge; compare both with the provider (each entry's `partnerkit "
                    "recharges show`, and the reference number of the recharge its answer named): " + store.HELD_ADVICE)

    # Back on a provider that shows no such recharge, 0 s after the submit: locate searches, and sends nothing.
    kept = store.get(wdb, second.local_id)
    stats.mark()
    looked = locate(config, wdb, client, local_id=second.local_id)
    assert (stats.calls(SUBMIT), stats.calls(LIST)) == (0, 1)
    assert looked.status == "UNKNOWN" and provider_count(server, number) == 1
    assert (f"Its key was not sent again, and --replay is refused: an earlier answer named recharge "
            f"{first.recharge.id} ({answered}, PROCESSING), which local recharge #{first.local_id} already holds, and "
            f"the provider would answer the same id. What to do: {compare}: {store.HELD_ADVICE}.") in looked.message
    assert "--replay`" not in looked.message and "sends it again" not in looked.message
    assert store.get(wdb, second.local_id) == kept

    refused = run("recharges", "locate", "--local-id", str(second.local_id), "--replay")
    assert refused.exit_code == 1 and stats.calls(SUBMIT) == 0
    assert refused.stderr == (f"Error: local recharge #{second.local_id} is not sent again (--replay): its answer "
                              f"named recharge {first.recharge.id} ({answered}, PROCESSING), which local recharge "
                              f"#{first.local_id} already holds, and the provider would answer the same id; nothing "
                              f"was sent; {compare}, and report an id given twice to support (without --replay "
                              "locate only searches)\n")
    again_by_hand = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "199")
    assert again_by_hand.exit_code == 1 and stats.calls(SUBMIT) == 0
    assert (f"local recharge #{second.local_id} is UNKNOWN, submitted 0 s ago and its answer named recharge "
            f"{first.recharge.id} ({answered}, PROCESSING), which local recharge #{first.local_id} already holds "
            f"(Idempotency-Key {second.idempotency_key}, client_reference {second.client_reference}); {compare}: "
            f"{store.HELD_ADVICE}; `recharges locate` only searches for it (its key would be answered with the same "
            "id). If this is deliberately another") in again_by_hand.stderr
    assert store.get(wdb, second.local_id) == kept


@pytest.mark.parametrize("error, held", [
    ("the provider answered recharge 100001 (RCH2026031000100001, PROCESSING), but local recharge #1 already holds "
     "that id and differs from it (local #1 was submitted under another Idempotency-Key): not merged",
     store.HeldId(100001, "RCH2026031000100001", "PROCESSING", 1)),
    # As an earlier release kept it, without the answer's reference_number.
    ("the provider answered recharge 100001 (SUCCESS), but local recharge #12 already holds that id and differs "
     "from it (face differs (local #13 100.00, the provider's answer 150.00)): not merged",
     store.HeldId(100001, None, "SUCCESS", 12)),
    ("read timed out", None),
    ("locate step 1: HTTP 500", None),
    ("the provider answered recharge 100001 (SUCCESS) but it could not be stored: database is locked", None),
    ("the provider answered order 5001 (ref r-1), which this store already holds for order intent #1", None),
    (None, None),
])
def test_held_elsewhere_reads_the_reason_an_answer_naming_a_held_id_leaves(error, held):
    assert store.held_elsewhere(error) == held


# One field of the provider's record (or of the row holding its id) changed at a time: each is another recharge.
# One of the request's own (mobile number, operator id, face, client_reference) makes the answer another request's
# first, whoever holds its id (test_a_replayed_answer_to_another_request_is_never_linked...).
@pytest.mark.parametrize("answer, holder, named", [
    ({"reference_number": "RCH-OTHER"}, {}, "reference_number differs"),
    ({"created_at": "2026-03-11T10:00:00Z"}, {}, "created_at differs (the provider's answer 2026-03-11T10:00:00Z, "
                                                 "local #1 2026-03-10T10:00:00Z)"),
    ({}, {"operator": "Airtel"}, None),  # the display name is compared only where both sides have one
    ({"operator": "Jio"}, {"operator": "Airtel"}, "operator differs"),
])
def test_the_answer_is_merged_only_when_the_record_agrees_with_the_row_holding_its_id(db, answer, holder, named):
    record = {"id": 100001, "reference_number": "RCH2026031000100001", "status": "SUCCESS",
              "mobile_number": "9800000001", "face": "100.00", "discount": "2.00", "payable": "98.00",
              "currency": "INR", "client_reference": REFERENCE, "created_at": "2026-03-10T10:00:00Z", **holder}
    store.upsert_from_provider(db, [record], START)
    intent = store.record_intent(db, idempotency_key=KEY, mobile_number="9800000001", operator_id=1,
                                 amount=Decimal(100), client_reference=REFERENCE, submitted_at=START, nickname="home")
    replayed = {k: v for k, v in {**record, "status": "PROCESSING", "operator_id": 1, **answer}.items()
                if k != "operator" or "operator" in answer}
    before = store.list_rows(db)
    if named is None:
        row = store.record_response(db, intent, replayed, status="PROCESSING", seen_at=START, http_status=202)
        assert (row["local_id"], row["status"], row["idempotency_key"], row["nickname"], row["http_status"]) == \
            (1, "SUCCESS", KEY, "home", 202)  # the stored SUCCESS stays: the replay is the original answer
        assert [r["local_id"] for r in store.list_rows(db)] == [1]
        return
    with pytest.raises(store.RechargeHeldElsewhere, match="provider recharge 100001 is already held by local "
                                                          "recharge #1") as raised:
        store.record_response(db, intent, replayed, status="PROCESSING", seen_at=START)
    assert any(named in difference for difference in raised.value.differences), raised.value.differences
    assert store.list_rows(db) == before and store.merged_into(db, intent) is None


@pytest.mark.parametrize("answer, named", [
    ({"mobile_number": "9800000099"}, "mobile_number differs (local #2 9800000001, the provider's answer 9800000099)"),
    ({"operator_id": 2}, "operator_id differs (local #2 1, the provider's answer 2)"),
    ({"face": "150.00", "payable": "147.00"}, "face differs (local #2 100.00, the provider's answer 150.00)"),
    ({"client_reference": "someone-else"}, "client_reference differs (local #2 raw-1, the provider's answer "
                                           "someone-else)"),
])
@pytest.mark.parametrize("synced", [True, False])
def test_a_replayed_answer_to_another_request_is_never_linked_nor_merged(db, answer, named, synced):
    """The request's own fields, each changed alone, make the answer another request's (its key used first
    elsewhere), whether the sync stored that recharge already or not: nothing written to either row, and the
    exception names the row holding it, if any."""
    record = {"id": 100001, "reference_number": "RCH2026031000100001", "status": "SUCCESS",
              "mobile_number": "9800000001", "face": "100.00", "discount": "2.00", "payable": "98.00",
              "currency": "INR", "client_reference": REFERENCE, "created_at": "2026-03-10T10:00:00Z", **answer}
    if synced:
        store.upsert_from_provider(db, [record], START)
    else:
        store.record_intent(db, idempotency_key="another-0001", mobile_number="9800000002", operator_id=1,
                            amount=Decimal(5), client_reference="unrelated", submitted_at=START)  # local #1
    intent = store.record_intent(db, idempotency_key=KEY, mobile_number="9800000001", operator_id=1,
                                 amount=Decimal(100), client_reference=REFERENCE, submitted_at=START)
    before = store.list_rows(db)
    with pytest.raises(store.AnswerOfAnotherRequest, match="provider recharge 100001 is not the request of local "
                                                           "recharge #2") as raised:
        store.record_response(db, intent, {**record, "operator_id": answer.get("operator_id", 1)}, status="SUCCESS",
                              seen_at=START, http_status=200)
    assert raised.value.differences == [named] and raised.value.holder == (1 if synced else None)
    assert store.list_rows(db) == before and store.merged_into(db, intent) is None


def test_a_row_submitted_under_another_key_is_never_merged_into(db):
    """Two partnerkit submits whose answers name one id: a row holds one Idempotency-Key."""
    record = {"id": 100001, "reference_number": "RCH1", "status": "SUCCESS", "mobile_number": "9800000001",
              "operator_id": 1, "face": "100.00", "discount": "2.00", "payable": "98.00",
              "client_reference": REFERENCE, "created_at": "2026-03-10T10:00:00Z"}
    first = store.record_intent(db, idempotency_key="first-key-0001", mobile_number="9800000001", operator_id=1,
                                amount=Decimal(100), client_reference=REFERENCE, submitted_at=START)
    store.record_response(db, first, record, status="SUCCESS", seen_at=START)
    second = store.record_intent(db, idempotency_key=KEY, mobile_number="9800000001", operator_id=1,
                                 amount=Decimal(100), client_reference=REFERENCE, submitted_at=START)
    with pytest.raises(store.RechargeHeldElsewhere) as raised:
        store.record_response(db, second, record, status="SUCCESS", seen_at=START)
    assert raised.value.differences == [f"local #{first} was submitted under another Idempotency-Key"]
    assert store.get(db, second)["status"] == "INTENT" and store.get(db, first)["idempotency_key"] == "first-key-0001"


def test_a_local_id_given_again_after_a_merge_keeps_both_merge_records(db):
    """SQLite gives the highest local id again once its row is gone: the next intent carries the merged one's
    id, and may be merged in turn. Neither record of the two is lost; the id answers with the later."""
    def record(rid: int) -> dict:  # placed without a client_reference: the sync does not link an intent to it
        return {"id": rid, "reference_number": f"RCH{rid}", "status": "SUCCESS", "mobile_number": "9800000001",
                "face": "100.00", "discount": "2.00", "payable": "98.00", "created_at": "2026-03-10T10:00:00Z"}

    def intent(key: str) -> int:
        return store.record_intent(db, idempotency_key=key, mobile_number="9800000001", operator_id=1,
                                   amount=Decimal(100), client_reference=f"mine-{key}", submitted_at=START)

    store.upsert_from_provider(db, [record(100001)], START)
    first = intent("first-key-0001")
    assert store.record_response(db, first, record(100001), status="SUCCESS", seen_at=START)["local_id"] == 1
    second = intent("second-key-0001")
    store.upsert_from_provider(db, [record(100002)], START)
    assert store.record_response(db, second, record(100002), status="SUCCESS", seen_at=START)["local_id"] == 3
    assert first == second == 2 and store.get(db, 2) is None
    assert store.merged_into(db, 2)["into"] == 3 and store.find(db, "2")["provider_id"] == 100002
    kept = json.loads(meta.get(db, store.merged_key(2)))
    assert [(r["into"], r["intent"]["idempotency_key"]) for r in kept] == [(1, "first-key-0001"),
                                                                          (3, "second-key-0001")]
