"""Recharge submit: validate first, intent before send, HTTP status before body, 409 names --force."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from werkzeug.wrappers import Response

from partnerkit.errors import BadRequest
from partnerkit.store import open_db
from partnerkit.store import recharges as store
from reconcile.recharges import DuplicateSubmit, RechargeInputError, status_from_answer, submit
from tests.standin import StandIn
from tests.worker.worker_helpers import config_for, mobile
from tests.conftest import account_of


# Recharge submit response: "HTTP status carries meaning, read it before the body".
@pytest.mark.parametrize("digit, http_status, status, final", [
    (0, 200, "SUCCESS", True),
    (4, 200, "FAILED", True),
    (5, 202, "PROCESSING", False),
])
def test_submit_outcomes_follow_the_document_table(config, wdb, client, digit, http_status, status, final):
    outcome = submit(config, wdb, client, mobile_number=mobile(digit), operator_id=1, amount="199")
    row = store.get(wdb, outcome.local_id)
    assert (outcome.status, outcome.http_status) == (status, http_status)
    assert row["status"] == status and row["http_status"] == http_status
    assert row["provider_id"] == outcome.recharge.id and row["reference_number"].startswith("RCH")
    assert row["amount_cents"] == 19900 and row["face_cents"] == 19900
    assert row["payable_cents"] == 19900 - row["discount_cents"]
    assert row["client_reference"].startswith("pk-") and row["idempotency_key"].startswith("pk-")
    assert (row["settled_at"] is not None) is final
    if status == "FAILED":
        assert row["failure_reason"] and "credited back" in outcome.message


@pytest.mark.parametrize("http_status, body_status, stored", [
    (200, "SUCCESS", "SUCCESS"), (200, "FAILED", "FAILED"), (200, "RECHARGED", "SUCCESS"),
    (202, "PROCESSING", "PROCESSING"),
    (202, "SUCCESS", "PROCESSING"),   # 202 means not settled, whatever the body says: poll it
    (200, "PROCESSING", "PROCESSING"),
    (200, "QUEUED", "PROCESSING"),    # a status the document does not name: kept and read again
    (202, "QUEUED", "PROCESSING"),
])
def test_http_status_is_read_before_the_body(http_status, body_status, stored):
    assert status_from_answer(http_status, body_status) == stored


@pytest.mark.parametrize("fields, message", [
    ({"mobile_number": "+919876543210"}, "10 digits"),
    ({"mobile_number": "98765 43210"}, "10 digits"),
    ({"mobile_number": "987654321"}, "10 digits"),
    ({"mobile_number": "9876543210\n"}, "10 digits"),  # `$` matched before a trailing newline: now refused
    ({"amount": "199.50"}, "whole number of rupees"),
    ({"amount": "0"}, "greater than zero"),
    ({"amount": "-5"}, "greater than zero"),
    ({"amount": "ten"}, "whole rupees"),
    ({"amount": "1e3"}, "written in digits"),  # a number, but as a face value a slip, not 1000 rupees
    ({"amount": "2E2"}, "written in digits"),
    ({"operator_id": 0}, "operator_id must be greater than zero"),
    ({"nickname": "my phone!"}, "nickname"),
    ({"nickname": "a" * 41}, "nickname"),
    ({"idempotency_key": "short"}, "8 to 256"),
    ({"idempotency_key": ""}, "8 to 256"),  # given, so checked: never swapped for a generated one
    ({"idempotency_key": "x" * 257}, "8 to 256"),
    # The client's one check, before the intent: a key it would refuse to send never leaves a row behind.
    ({"idempotency_key": "my key 0001"}, "visible ASCII without spaces"),
    ({"idempotency_key": "clé-0001-order"}, "visible ASCII without spaces"),
    ({"idempotency_key": "tab\tkey-0001"}, "visible ASCII without spaces"),
])
def test_local_validation_refuses_before_recording_or_sending(config, wdb, client, stats, fields, message):
    base = {"mobile_number": mobile(0), "operator_id": 1, "amount": "199"}
    with pytest.raises(RechargeInputError, match=message):
        submit(config, wdb, client, **{**base, **fields})
    assert store.list_rows(wdb) == [] and stats.calls() == 0


def test_whole_rupees_written_with_decimals_are_accepted(config, wdb, client):
    outcome = submit(config, wdb, client, mobile_number=mobile(0), operator_id=1, amount=Decimal("150.00"))
    assert store.get(wdb, outcome.local_id)["face_cents"] == 15000


def test_intent_is_committed_before_the_request_arrives(httpserver, tmp_path):
    """The provider inspects partnerkit's database (another connection) when the submit arrives."""
    from partnerkit.client import PartnerClient

    config = config_for(httpserver.url_for("").rstrip("/"), "pk_test_key", "sk_test_secret_0123456789", tmp_path)
    db = open_db(config.db_path)
    account_of(db, config.api_key)  # the server below answers the submit only
    seen: dict = {}

    def provider(request):
        body = json.loads(request.data)
        probe = open_db(config.db_path)
        seen["rows"] = store.list_rows(probe)
        probe.conn.close()
        seen["key"] = request.headers["Idempotency-Key"]
        seen["client_reference"] = body["client_reference"]
        answer = {"id": 7001, "reference_number": "RCH7001", "status": "PROCESSING", "sub_status": "PENDING",
                  "mobile_number": body["mobile_number"], "operator_id": 1, "face": 199.00, "discount": 4.98,
                  "payable": 194.02, "client_reference": body["client_reference"],
                  "created_at": "2025-03-10T10:00:00Z"}
        return Response(json.dumps(answer), status=202, content_type="application/json")

    httpserver.expect_oneshot_request("/api/v1/recharges", method="POST").respond_with_handler(provider)
    with PartnerClient(config, db) as client:
        outcome = submit(config, db, client, mobile_number="9876543215", operator_id=1, amount=199)
    [row] = seen["rows"]
    assert row["status"] == "INTENT" and row["provider_id"] is None
    assert row["idempotency_key"] == seen["key"] and row["client_reference"] == seen["client_reference"]
    assert outcome.status == "PROCESSING" and store.get(db, outcome.local_id)["provider_id"] == 7001


def test_an_interrupted_send_leaves_the_intent_unknown_not_lost(config, wdb):
    class Killed(StandIn):
        def submit_recharge(self, **_):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        submit(config, wdb, Killed(), mobile_number=mobile(5), operator_id=1, amount=199)
    [row] = store.list_rows(wdb)
    assert row["status"] == "UNKNOWN" and row["idempotency_key"]


def test_409_names_the_force_option_and_discards_the_intent(config, wdb, client):
    number = mobile(0)
    submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    with pytest.raises(DuplicateSubmit, match="--force") as refused:
        submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199)
    assert str(refused.value).startswith("HTTP 409 from the provider's duplicate guard")
    assert str(refused.value).endswith("submit again with --force (force=True)")  # what to do last, not the trace id
    assert [r["status"] for r in store.list_rows(wdb)] == ["SUCCESS"]
    forced = submit(config, wdb, client, mobile_number=number, operator_id=1, amount=199, force=True)
    assert forced.status == "SUCCESS" and store.get(wdb, forced.local_id)["force"] == 1


def test_a_definite_refusal_discards_the_intent(config, wdb, client):
    with pytest.raises(BadRequest, match="circle_id is required"):
        submit(config, wdb, client, mobile_number=mobile(0), operator_id=3, amount=199)  # Vi needs a circle
    assert store.list_rows(wdb) == []


@pytest.mark.parametrize("http_status", [200, 202])
def test_an_answer_with_a_status_the_document_does_not_name_is_kept_and_polled(httpserver, tmp_path, http_status):
    """A 2xx answer means the wallet may be debited: whatever its body status says, the recharge is
    linked and read again by the poller, never discarded as if the provider had refused it."""
    from partnerkit.client import PartnerClient

    config = config_for(httpserver.url_for("").rstrip("/"), "pk_test_key", "sk_test_secret_0123456789", tmp_path)
    db = open_db(config.db_path)
    account_of(db, config.api_key)  # the server below answers the submit only
    answer = {"id": 7002, "reference_number": "RCH7002", "status": "QUEUED", "sub_status": "AT_VENDOR",
              "mobile_number": "9876543210", "operator_id": 1, "face": 199.00, "discount": 4.98,
              "payable": 194.02, "created_at": "2025-03-10T10:00:00Z"}
    httpserver.expect_oneshot_request("/api/v1/recharges", method="POST").respond_with_response(
        Response(json.dumps(answer), status=http_status, content_type="application/json"))
    with PartnerClient(config, db) as client:
        outcome = submit(config, db, client, mobile_number="9876543210", operator_id=1, amount=199)
    [row] = store.list_rows(db)
    assert outcome.status == row["status"] == "PROCESSING"
    assert row["provider_id"] == 7002 and row["reference_number"] == "RCH7002" and row["payable_cents"] == 19402


@pytest.mark.parametrize("lost", [
    Response("<html><body>503 Service Temporarily Unavailable</body></html>", status=503, content_type="text/html"),
    Response("", status=503),
    Response("", status=303, headers={"Location": "/api/v1/recharges/7003"}),
], ids=["proxy 503 page", "empty 503", "303 see other"])
def test_an_answer_that_is_no_row_of_the_table_keeps_the_intent_and_locates_it(httpserver, tmp_path, lost):
    """A 503 without the provider's error body (a proxy's page) or a redirect may come after the recharge was
    made: the intent is kept and located (the same key replayed), never deleted as if the provider refused."""
    from partnerkit.client import PartnerClient

    config = config_for(httpserver.url_for("").rstrip("/"), "pk_test_key", "sk_test_secret_0123456789", tmp_path)
    db = open_db(config.db_path)
    account_of(db, config.api_key)  # the server below answers the submit only
    keys = []

    def replayed(request):
        keys.append(request.headers["Idempotency-Key"])
        body = json.loads(request.data)
        answer = {"id": 7003, "reference_number": "RCH7003", "status": "PROCESSING", "sub_status": "PENDING",
                  "mobile_number": body["mobile_number"], "operator_id": 1, "face": 199.00, "discount": 4.98,
                  "payable": 194.02, "client_reference": body["client_reference"],
                  "created_at": "2025-03-10T10:00:00Z"}
        return Response(json.dumps(answer), status=202, content_type="application/json")

    def first(request):
        keys.append(request.headers["Idempotency-Key"])
        return lost

    httpserver.expect_ordered_request("/api/v1/recharges", method="POST").respond_with_handler(first)
    httpserver.expect_ordered_request("/api/v1/recharges", method="POST").respond_with_handler(replayed)
    with PartnerClient(config, db) as client:
        outcome = submit(config, db, client, mobile_number="9876543215", operator_id=1, amount=199)
    [row] = store.list_rows(db)
    assert keys == [row["idempotency_key"]] * 2  # the same key, never a new one
    assert outcome.status == row["status"] == "PROCESSING" and outcome.located_by == "idempotency_key"
    assert row["provider_id"] == 7003 and outcome.message.startswith("The submit's answer was lost")
