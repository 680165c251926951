"""Locating a recharge after a submit timeout: same key, then client_reference, then face and time.

Every test asserts how many recharges the provider holds for the number (the sandbox's own count):
partnerkit never re-sends with a new key on its own. The provider's faults are the sandbox's
(docs/sandbox.md, "Provider faults"): `http_500` answers before anything is done (the first send never
arrived), `slow` does the work and answers past the client's timeout. tests/worker/test_locate_later.py
has the locate that runs later, and its replay.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from partnerkit.store import recharges as store
from partnerkit.timeutil import parse_ts, utcnow
from reconcile.locate import locate
from reconcile.recharges import submit
from tests.worker.worker_helpers import LIST, SUBMIT, make_config, mobile
from tests.conftest import account_of


def provider_count(server, number: str) -> int:
    sb = server.sandbox
    return sum(1 for rc in sb.recharges.values() if rc.mobile_number == number)


def quick_config(server, tmp_path):
    """A 0.5 s client timeout, for the sandbox's `slow` fault to outlast."""
    return make_config(server, tmp_path, http_timeout_s="0.5")


def test_a_timed_out_submit_is_located_by_its_key_without_a_second_recharge(server, tmp_path, wdb, stats):
    """The provider answers after the client has given up; the same key replays the original."""
    from partnerkit.client import PartnerClient
    from partnerkit.client._http import RetryPolicy

    number = mobile(5)
    server.sandbox.settings.update({"response_delay_s": 2.0, "response_delay_numbers": [number]})
    config = make_config(server, tmp_path, http_timeout_s="0.5")
    with PartnerClient(config, wdb, retry=RetryPolicy(max_attempts=3)) as client:
        outcome = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    assert outcome.located_by == "idempotency_key" and outcome.status == "PROCESSING"
    assert "answer was lost" in outcome.message
    assert provider_count(server, number) == 1
    assert stats.calls(SUBMIT) == 2  # the original and one replay under the same key, never a new key
    row = store.get(wdb, outcome.local_id)
    assert row["provider_id"] == outcome.recharge.id and row["status"] == "PROCESSING"


def test_a_500_after_commit_is_located_by_its_key(config, wdb, client, server, stats):
    number = mobile(9)  # sandbox: the recharge is created, the answer is a bare 500
    outcome = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    assert outcome.located_by == "idempotency_key"
    assert provider_count(server, number) == 1 and stats.calls(SUBMIT) == 2


def test_located_by_client_reference_when_the_key_replay_also_fails(server, tmp_path, wdb, stats):
    from partnerkit.client import PartnerClient

    number = mobile(0)
    server.sandbox.settings.faults = {"slow": {"scope": SUBMIT, "seconds": 1}}  # done, answered too late
    config = quick_config(server, tmp_path)
    with PartnerClient(config, wdb) as client:
        outcome = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199,
                         client_reference="order-4711")
    assert outcome.located_by == "client_reference" and outcome.status == "SUCCESS"
    assert store.get(wdb, outcome.local_id)["client_reference"] == "order-4711"
    assert provider_count(server, number) == 1 and stats.calls(SUBMIT) == 2  # the send and its key's replay


def test_located_by_face_and_time_when_no_client_reference_came_back(config, wdb, client, server, stats):
    number = mobile(5)
    created = client.submit_recharge(mobile_number=number, operator_id=1, amount=199)  # no client_reference
    local_id = store.record_intent(wdb, idempotency_key="pk-lost-key-0001", mobile_number=number, operator_id=1,
                                   amount=created.recharge.face, client_reference="pk-never-arrived",
                                   submitted_at=created.recharge.created_at)
    store.mark_unknown(wdb, local_id, "timeout", created.recharge.created_at)
    stats.mark()
    outcome = locate(config, wdb, client, local_id=local_id)
    assert outcome.located_by == "face_and_time" and outcome.recharge.id == created.recharge.id
    assert provider_count(server, number) == 1 and stats.calls(SUBMIT) == 0  # found by searching: nothing sent


def test_nothing_found_stays_unknown_and_says_what_to_do(config, wdb, client, server, stats):
    number = mobile(5)
    server.sandbox.settings.faults = {"http_500": {"scope": SUBMIT}}  # answered before anything is done
    outcome = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    assert outcome.status == "UNKNOWN" and outcome.located_by is None
    assert stats.calls(SUBMIT) == 2 and provider_count(server, number) == 0  # the send and one replay, both 500
    row = store.get(wdb, outcome.local_id)
    until = (parse_ts(row["submitted_at"]) + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    assert outcome.message.startswith("The submit's answer was lost (")
    assert "is UNKNOWN: the provider shows no such recharge (search by number and client_reference" in outcome.message
    assert "Do NOT submit it again with a new key. Do not tell the customer it failed yet." in outcome.message
    assert (f"Until {until} (5 minutes after the submit) `partnerkit recharges locate --local-id {outcome.local_id}` "
            "searches and, if the provider then shows no such recharge, sends it again under the same "
            f"Idempotency-Key ({row['idempotency_key']})") in outcome.message
    assert "After that, locate only searches, and sending it is your decision (`--replay`)." in outcome.message


def test_manual_locate_by_number_and_amount_uses_the_open_intent(config, wdb, client, server):
    number = mobile(0)
    lost = store.record_intent(wdb, idempotency_key="pk-shop-1-key-01", mobile_number=number, operator_id=1,
                               amount=249, client_reference="shop-1", submitted_at=utcnow())
    store.mark_unknown(wdb, lost, "timeout", utcnow())
    created = client.submit_recharge(mobile_number=number, operator_id=1, amount=249, client_reference="shop-1",
                                     idempotency_key="pk-shop-1-key-01")
    found = locate(config, wdb, client, mobile_number=number, amount="249")
    assert found.local_id == lost and found.located_by == "client_reference"
    assert found.recharge.id == created.recharge.id
    # Without a local intent, locate only reports what the provider has.
    other = mobile(0)
    client.submit_recharge(mobile_number=other, operator_id=1, amount=99, client_reference="elsewhere")
    report = locate(config, wdb, client, mobile_number=other, amount="99")
    assert report.status == "NOT_RECORDED" and "1 matching recharge" in report.message
    assert store.find(wdb, str(report.recharge.id)) is None


def test_locate_refuses_an_unknown_local_id(config, wdb, client):
    with pytest.raises(ValueError, match="no local recharge #99"):
        locate(config, wdb, client, local_id=99)


def test_a_key_near_the_end_of_its_24_hours_is_not_replayed(config, wdb, client, server, stats):
    """The provider keeps a key 24 hours on its own clock. Ours may be behind it: a replay sent at
    23.5 hours by our clock can reach a provider that has already forgotten the key, and then it
    is a new request, a second real recharge. Near the end, locate searches instead."""
    number = mobile(0)
    created = client.submit_recharge(mobile_number=number, operator_id=1, amount=199,
                                     idempotency_key="pk-edge-key-0001", client_reference="edge-1")
    submitted = created.recharge.created_at
    local_id = store.record_intent(wdb, idempotency_key="pk-edge-key-0001", mobile_number=number, operator_id=1,
                                   amount=created.recharge.face, client_reference="edge-1", submitted_at=submitted)
    store.mark_unknown(wdb, local_id, "timeout", submitted)
    server.advance(24 * 3600 + 40 * 60)  # the provider's clock is 40 minutes ahead of ours
    stats.mark()
    outcome = locate(config, wdb, client, local_id=local_id, now=submitted + timedelta(hours=23, minutes=30))
    assert stats.calls(SUBMIT) == 0 and provider_count(server, number) == 1
    assert outcome.located_by == "client_reference" and outcome.recharge.id == created.recharge.id


def test_nothing_found_past_the_replay_window_says_to_call_support_not_to_replay(config, wdb, client, server, stats):
    submitted = utcnow() - timedelta(hours=23, minutes=10)
    local_id = store.record_intent(wdb, idempotency_key="pk-old-key-00001", mobile_number=mobile(0), operator_id=1,
                                   amount=199, client_reference="old-1", submitted_at=submitted)
    store.mark_unknown(wdb, local_id, "timeout", submitted)
    outcome = locate(config, wdb, client, local_id=local_id)
    assert outcome.status == "UNKNOWN" and stats.calls(SUBMIT) == 0
    assert "too old to replay safely" in outcome.message and "pk-old-key-00001" in outcome.message
    assert "again in a few minutes" not in outcome.message


def test_a_recharge_found_by_search_with_a_status_the_document_does_not_name_is_linked_and_polled(httpserver, tmp_path):
    """Step 2 finds the recharge, but its status is none the document names: it is linked as
    PROCESSING (the poller reads it again), not an error out of locate that leaves it UNKNOWN."""
    from partnerkit.client import PartnerClient
    from partnerkit.store import open_db
    from tests.client.client_payloads import recharge
    from tests.worker.worker_helpers import config_for

    config = config_for(httpserver.url_for("").rstrip("/"), "pk_test_key", "sk_test_secret_0123456789", tmp_path)
    db = open_db(config.db_path)
    account_of(db, config.api_key)  # the server below answers the recharge list only
    submitted = utcnow() - timedelta(hours=23, minutes=30)  # past the key's replay window: search only
    local_id = store.record_intent(db, idempotency_key="pk-old-key-0001", mobile_number="9876543210", operator_id=1,
                                   amount=100, client_reference="order-4711", submitted_at=submitted)
    store.mark_unknown(db, local_id, "timeout", submitted)
    httpserver.expect_request("/api/v1/recharges", method="GET").respond_with_json(
        [recharge(id=7003, reference_number="RCH7003", status="QUEUED", client_reference="order-4711",
                  created_at=submitted.isoformat().replace("+00:00", "Z"))])
    with PartnerClient(config, db) as client:
        outcome = locate(config, db, client, local_id=local_id)
    row = store.get(db, local_id)
    assert outcome.located_by == "client_reference" and outcome.status == row["status"] == "PROCESSING"
    assert row["provider_id"] == 7003 and row["reference_number"] == "RCH7003"


def test_the_key_of_an_unknown_recharge_given_again_replays_it_once(config, wdb, client, server, stats):
    """F4: the user reaches for the key `recharges show` gives after a lost answer: locate, never a second send."""
    number = mobile(5)
    server.sandbox.settings.faults = {"http_500": {"scope": SUBMIT}}
    lost = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199,
                  idempotency_key="user-key-0000001")
    assert lost.status == "UNKNOWN" and provider_count(server, number) == 0
    server.sandbox.settings.faults = {}
    stats.mark()
    # Within minutes of the submit: its locate, which searches, finds nothing, and sends the key again.
    again = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199,
                   idempotency_key="user-key-0000001")
    assert again.local_id == lost.local_id and again.located_by == "idempotency_key" and again.performed_now
    assert provider_count(server, number) == 1 and stats.calls(SUBMIT) == 1
    with pytest.raises(ValueError, match=r"is local recharge #1's \(.*\), not this request \(mobile_number, "
                                         r"client_reference differ\): nothing was sent"):
        submit(config, wdb, client, mobile_number=mobile(5), operator_id=1, amount=199,
               idempotency_key="user-key-0000001", client_reference="another")
    assert stats.calls(SUBMIT) == 1


# ---- a provider that does not answer in time (nit 1) ---------------------------------------------------------
def test_a_submit_whose_lookups_go_unanswered_returns_within_a_few_timeouts_and_says_could_not_be_checked(
        server, tmp_path, wdb, stats):
    """Every recharge answer held past the client's timeout: the locate inside submit sends each lookup
    once (the client would try a read 4 times, with back-off: 64 s at the default 10 s timeout) and
    says the provider could not be checked, never that it shows nothing."""
    from partnerkit.client import PartnerClient

    number = mobile(0)
    server.sandbox.settings.faults = {"slow": {"scope": "recharges", "seconds": 1}}
    config = quick_config(server, tmp_path)
    backoffs: list[float] = []  # what the client slept between attempts (the wall clock is no measure here)
    with PartnerClient(config, wdb, sleep=backoffs.append) as client:   # the default RetryPolicy, as the CLI's
        outcome = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
        assert outcome.status == "UNKNOWN" and outcome.unchecked
        assert stats.calls(SUBMIT) == 2 and stats.calls(LIST) == 1   # the send, one replay, one page
        assert backoffs == []   # each sent once: three 0.5 s timeouts, never a back-off between attempts
        assert ("is UNKNOWN: it could not be checked (search by number: GET /api/v1/recharges: no answer within "
                "the timeout") in outcome.message
        assert "UNKNOWN: the provider shows no such recharge" not in outcome.message
        assert "may have performed it, which only the next locate can tell" in outcome.message
        assert provider_count(server, number) == 1   # the held send did arrive
        server.sandbox.settings.faults = {}
        found = locate(config, wdb, client, local_id=outcome.local_id)
    assert found.located_by == "client_reference" and not found.performed_now
    assert stats.calls(SUBMIT) == 2 and provider_count(server, number) == 1


def test_a_later_locate_whose_search_goes_unanswered_sends_nothing(config, server, wdb, client, stats):
    number = mobile(0)
    server.sandbox.settings.faults = {"http_500": {"scope": SUBMIT}}
    lost = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    server.sandbox.settings.faults = {"http_500": {"scope": LIST}}
    stats.mark()
    outcome = locate(config, wdb, client, local_id=lost.local_id)
    assert outcome.status == "UNKNOWN" and outcome.unchecked
    assert stats.calls(SUBMIT) == 0 and provider_count(server, number) == 0   # within 5 minutes, yet not sent
    assert "is UNKNOWN: it could not be checked (search by number: HTTP 500" in outcome.message
    assert "UNKNOWN: the provider shows no such recharge" not in outcome.message
    assert (f"Run `partnerkit recharges locate --local-id {lost.local_id}` again when the provider answers (until "
            in outcome.message)
