"""A provider record whose id names a stored recharge it is not (session 19).

The sync and the poller store the provider's recharges by id (`upsert_from_provider`). A record under the id of
a stored row whose facts that never change differ (created_at, mobile_number, face, reference_number,
client_reference) is another recharge: a provider that gave an id twice, or a `--fixed-ids` sandbox started
again beside a kept database. It used to overwrite the row with the other recharge's number, amount, status and
times. Now the row keeps what it held, the record is quarantined with the reason, and `partnerkit status` says so.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from partnerkit.client import PartnerClient
from partnerkit.client._http import RetryPolicy
from partnerkit.client._records import Recharge
from partnerkit.status import collect
from partnerkit.store import quarantine
from partnerkit.store import recharges as store
from reconcile.jobs import sync_recent
from reconcile.poller import poll_once
from reconcile.recharges import submit
from reconcile.sync import RechargePages, _partition
from tests.worker.test_known_twice import restarted_sandbox
from tests.worker.worker_helpers import START, frozen, mobile, run  # noqa: F401 (fixtures)

THEN = START + timedelta(hours=2)
# What the row keeps of its own that a quarantined read notes on it: the reason, and when.
NOTED = ("last_error", "row_updated_at")


def record(**changes) -> dict:
    """Provider recharge 100001 as the list shows it; `changes` set fields (None drops one)."""
    raw = {"id": 100001, "reference_number": "RCH2026031000100001", "status": "PROCESSING",
           "sub_status": "PENDING_AT_OPERATOR", "mobile_number": "9800000001", "country_code": "IN",
           "operator": "Airtel", "is_prepaid": True, "face": "100.00", "discount": "2.00", "payable": "98.00",
           "currency": "INR", "client_reference": "pk-0123456789abcdef0123", "created_at": "2026-03-10T10:00:00Z"}
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


# What the poller notes of a row it read (and escalates, past 30 minutes PROCESSING): not the provider's facts.
POLLED = ("last_polled_at", "next_poll_at", "escalated_at")


def untouched(before: dict, after: dict, besides: tuple[str, ...] = ()) -> bool:
    """The row as it was, but for what a quarantined read notes on it (and `besides`)."""
    ignored = NOTED + besides
    return {k: v for k, v in before.items() if k not in ignored} == {k: v for k, v in after.items() if k not in ignored}


def stored(db) -> dict:
    return store.by_provider_id(db, 100001)


REASON = ("recharge id given twice: provider id 100001 names local recharge #1 (RCH2026031000100001, created "
          "2026-03-10T10:00:00Z), this record differs: ")


@pytest.mark.parametrize("changes, differs", [
    ({"created_at": "2026-03-10T11:00:00Z"}, "created_at"),
    ({"mobile_number": "9800000002"}, "mobile_number"),
    ({"face": "150.00", "payable": "147.00"}, "face"),
    ({"reference_number": "RCH2026031100100001"}, "reference_number"),
    ({"client_reference": "pk-ffffffffffffffffffff"}, "client_reference"),
    # A fixed-ids sandbox started again: a new recharge of another number, created later, under the same id.
    ({"created_at": "2026-03-10T11:00:00Z", "mobile_number": "9800000002", "client_reference": "pk-1"},
     "created_at, mobile_number, client_reference"),
])
def test_a_record_of_another_recharge_under_a_stored_id_is_quarantined_and_the_row_kept(db, changes, differs):
    store.upsert_from_provider(db, [record()], START)
    before = stored(db)
    other = record(status="SUCCESS", updated_at="2026-03-10T11:00:05Z", operator_txn_id="OP1", **changes)
    result = store.upsert_from_provider(db, [other], THEN)
    after = stored(db)
    assert untouched(before, after), "the row keeps the provider's facts and state it held"
    assert (after["status"], after["mobile_number"], after["face_cents"]) == ("PROCESSING", "9800000001", 10000)
    assert result.rejected == [(100001, REASON + differs)] and (result.updated, result.settled) == (0, [])
    assert 100001 not in result.seen_provider_ids  # the row's own recharge was not listed
    assert after["last_error"] == REASON + differs  # `recharges show 1`
    [held] = quarantine.held(db, "recharge")
    assert (held["key"], held["reason"]) == ("recharge:100001", REASON + differs)
    assert '"mobile_number": "%s"' % other["mobile_number"] in held["raw"]  # the record as received
    assert store.given_twice(db) == [(100001, 1)]


def test_the_same_record_read_again_stays_one_quarantine_entry_and_the_true_one_updates_the_row(db):
    store.upsert_from_provider(db, [record()], START)
    before = stored(db)
    other = record(created_at="2026-03-10T11:00:00Z", mobile_number="9800000002")
    for hours in (2, 3):  # a sync every 15 minutes reads it again
        assert [p for p, _ in store.upsert_from_provider(db, [other], START + timedelta(hours=hours)).rejected] == \
            [100001]
    [held] = quarantine.held(db, "recharge")
    assert (held["first_seen_at"], held["last_seen_at"]) == ("2026-03-10T12:00:00Z", "2026-03-10T13:00:00Z")
    assert untouched(before, stored(db))

    # The row's own recharge read again (settled since): stored as before, the entry and the note go.
    settled = store.upsert_from_provider(db, [record(status="SUCCESS", updated_at="2026-03-10T10:05:00Z")], THEN)
    assert (settled.updated, settled.settled, settled.rejected) == (1, [1], [])
    row = stored(db)
    assert (row["status"], row["updated_at"], row["last_error"]) == ("SUCCESS", "2026-03-10T10:05:00Z", None)
    assert quarantine.held(db, "recharge") == [] and store.given_twice(db) == []


def test_the_true_record_read_unchanged_by_a_sync_releases_the_entry_and_the_note(db):
    """A sync hands a record stored unchanged to no upsert (`_partition`): its release clears the row's note too."""
    store.upsert_from_provider(db, [record(status="SUCCESS")], START)
    store.upsert_from_provider(db, [record(status="SUCCESS", created_at="2026-03-10T11:00:00Z")], THEN)
    assert stored(db)["last_error"].startswith(REASON)
    pages = RechargePages(db, THEN, held={100001})
    pages.add([Recharge.from_payload(record(status="SUCCESS"))])
    assert pages.close() == (1, 0)
    assert quarantine.held(db, "recharge") == [] and stored(db)["last_error"] is None


def test_a_sync_hands_a_record_of_another_recharge_to_the_upsert_even_with_the_rows_status_and_no_updated_at(db):
    """A recharge settled at once has no updated_at: status and updated_at alone took another recharge settled at
    once under the same id for the row's, unchanged, and the sync never showed it to the upsert."""
    store.upsert_from_provider(db, [record(status="SUCCESS"), record(id=100002, status="SUCCESS",
                                                                     reference_number="RCH2")], START)
    page = [Recharge.from_payload(record(status="SUCCESS")),  # the row's own, unchanged
            Recharge.from_payload(record(id=100002, status="SUCCESS", reference_number="RCH2",
                                         created_at="2026-03-10T11:00:00Z"))]  # another, created later
    seen, rest = _partition(db, page)
    assert seen == [100001] and [r.id for r in rest] == [100002]


@pytest.mark.parametrize("created_at", ["2026-03-10T10:00:00.250Z", "2026-03-10T15:30:00+05:30",
                                        "2026-03-10T10:00:00.999999Z"])
def test_the_same_creation_second_written_another_way_is_the_same_recharge(db, created_at):
    store.upsert_from_provider(db, [record()], START)
    result = store.upsert_from_provider(db, [record(status="SUCCESS", updated_at="2026-03-10T10:05:00Z",
                                                    created_at=created_at)], THEN)
    assert (result.updated, result.rejected) == (1, []) and stored(db)["status"] == "SUCCESS"


def test_an_intent_without_provider_facts_still_links_and_its_submit_answer_agrees_with_the_list(db):
    """The rows partnerkit submitted: an open intent links by client_reference and number as before; a row the
    submit's answer linked (facts from the answer, the operator as an id) takes the list's reads of it."""
    intent = store.record_intent(db, idempotency_key="key-0000000001", mobile_number="9800000001", operator_id=1,
                                 amount=Decimal(100), client_reference="pk-0123456789abcdef0123", submitted_at=START)
    store.mark_unknown(db, intent, "read timed out", START)
    linked = store.upsert_from_provider(db, [record(reference_number=None)], THEN)
    assert (linked.linked, linked.rejected) == ([intent], [])
    assert stored(db)["local_id"] == intent and stored(db)["status"] == "PROCESSING"

    answered = store.record_intent(db, idempotency_key="key-0000000002", mobile_number="9800000003", operator_id=1,
                                   amount=Decimal(50), client_reference="pk-2", submitted_at=START)
    answer = {"id": 100002, "reference_number": "RCH2", "status": "PROCESSING", "mobile_number": "9800000003",
              "operator_id": 1, "face": Decimal("50.0"), "discount": Decimal("1.0"), "payable": Decimal("49.0"),
              "client_reference": "pk-2",
              "created_at": "2026-03-10T10:00:00.000Z"}
    store.record_response(db, answered, answer, status="PROCESSING", seen_at=START, http_status=202)
    listed = {**answer, "status": "SUCCESS", "operator": "Airtel", "updated_at": "2026-03-10T10:09:00Z",
              "face": "50.00", "created_at": "2026-03-10T10:00:00Z"}
    del listed["operator_id"]
    result = store.upsert_from_provider(db, [listed], THEN)
    assert (result.settled, result.rejected) == ([answered], [])
    assert store.get(db, answered)["status"] == "SUCCESS"


def test_a_restarted_fixed_ids_sandbox_beside_a_kept_database_quarantines_its_recharges(server, config, wdb, client,
                                                                                       frozen, tmp_path, run,
                                                                                       caplog):
    """The reproduction: recharges submitted and synced, the sandbox started again with the ids it gave before, other
    recharges submitted there (outside partnerkit: the raw client), synced twice and polled. The first rows keep
    what they held; each clash is one quarantine entry; `status` and `recharges show` say what it is."""
    firsts = [submit(config, wdb, client, mobile_number=mobile(digit), operator_id=1, amount=amount)
              for digit, amount in ((0, 100), (5, 150))]  # SUCCESS at once (no updated_at); PROCESSING
    assert [f.recharge.id for f in firsts] == [100001, 100002]
    sync_recent(config, wdb, client)
    before = store.list_rows(wdb)
    assert [(r["local_id"], r["status"]) for r in before] == [(2, "PROCESSING"), (1, "SUCCESS")]
    frozen.tick(3600)
    with restarted_sandbox(config, tmp_path) as (again, restarted):
        with PartnerClient(restarted, wdb, retry=RetryPolicy(max_attempts=1)) as fresh:
            others = [fresh.submit_recharge(mobile_number=mobile(digit), operator_id=1, amount=amount,
                                            idempotency_key=f"elsewhere-{digit}-000")
                      for digit, amount in ((1, 200), (5, 250))]
            assert [o.recharge.id for o in others] == [100001, 100002]  # the same ids, other recharges
            with caplog.at_level("WARNING", logger="reconcile.sync"):
                sync_recent(restarted, wdb, fresh)
            frozen.tick(900)
            sync_recent(restarted, wdb, fresh)
            synced = store.list_rows(wdb)
            polled = poll_once(restarted, wdb, fresh)  # reads PROCESSING local #2 under its id: the other one
    assert len(synced) == 2 and all(untouched(b, a) for b, a in zip(before, synced))
    assert polled.quarantined == [100002] and polled.settled == 0
    assert any(r.getMessage().startswith("quarantined 2 recharge record(s), not stored: recharge id given twice: "
                                         "provider id 100002 names local recharge #2") for r in caplog.records)
    assert all(untouched(b, a, POLLED) for b, a in zip(before, store.list_rows(wdb)))
    held = quarantine.held(wdb, "recharge")
    assert [h["key"] for h in held] == ["recharge:100001", "recharge:100002"]
    for entry, first in zip(held, firsts):
        created = store.get(wdb, first.local_id)["provider_created_at"]
        assert entry["reason"] == (
            f"recharge id given twice: provider id {first.recharge.id} names local recharge #{first.local_id} "
            f"({first.recharge.reference_number}, created {created}), this record differs: created_at, "
            "mobile_number, face")  # no client_reference was sent with the other: not compared
        assert store.get(wdb, first.local_id)["last_error"] == entry["reason"]
    status = collect(config, wdb)
    assert (status["recharges_id_given_twice"], status["recharges_id_given_twice_local_ids"]) == (2, [1, 2])
    [line] = [a for a in status["attention"] if "recharge record(s) quarantined, not stored" in a]
    assert line == ("2 provider recharge record(s) quarantined, not stored, because their id names another local "
                    "recharge (#1, #2), which keeps what it held: `partnerkit recharges show N` says which id and "
                    "what differs, the day's report lists the provider's record; compare both with the provider: "
                    + store.HELD_ADVICE)
    shown = run("recharges", "show", "1")
    assert shown.exit_code == 0 and "recharge id given twice: provider id 100001 names local recharge #1" in \
        shown.output
