"""`partnerkit status` reads the operator's figures from the store, through the real write paths."""

from __future__ import annotations

import json
from datetime import timedelta

from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store import drifts, inbox, jobs, transaction
from partnerkit.timeutil import utcnow
from receiver.envelope import normalise
from reconcile.recharges import submit


def test_empty_store_needs_no_attention(sandbox_config, db):
    status = collect(sandbox_config, db)
    assert status["last_webhook_at"] is None
    assert status["recharges_processing"] == 0
    assert status["attention"] == []


def test_status_reports_what_needs_a_person(sandbox_config, db):
    start = utcnow()
    body = b'{"event_id":"evt_s1","event_type":"order.delivered","created_at":"2026-11-21T10:00:00Z","data":{"id":77,"status":"DELIVERED","quantity":2}}'
    inbox.record(db, normalise(body, {}), body, now=start)
    with PartnerClient(sandbox_config, db) as client:
        outcome = submit(sandbox_config, db, client, mobile_number="9876543218", operator_id=1, amount="100")
    assert outcome.http_status == 202  # digit 8: PROCESSING that never settles (docs/sandbox.md)
    with transaction(db) as conn:
        job = conn.execute("SELECT id FROM jobs WHERE order_id = 77").fetchone()
        conn.execute("UPDATE jobs SET state = 'dead', last_error = 'HTTP 404' WHERE id = ?", job)
    drifts.open_drift(db, kind="missing_refund", subject="recharge", reference="RCH1", expected="10.00",
                      actual="0.00", currency="INR", detected_at=start)

    with freeze_time(start + timedelta(minutes=31)):
        status = collect(sandbox_config, db)
    assert status["last_webhook_age_s"] == 31 * 60
    assert status["events_stored"] == 1
    assert status["voucher_fetch_parked"] == 1
    assert status["recharges_processing"] == 1
    assert status["recharges_past_30_min"] == 1
    assert status["oldest_processing_age_s"] >= 31 * 60 - 5
    assert status["budget_used_this_hour"] >= 1  # the submit went through the shared budget
    assert status["open_drifts"] == 1
    assert any("PROCESSING for over 30 minutes" in line for line in status["attention"])
    assert any("parked" in line for line in status["attention"])

    result = CliRunner().invoke(cli, ["status", "--format", "json"], env=config_as_env(sandbox_config))
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["open_drifts"] == 1
    assert printed["checked_at"].endswith("Z")
