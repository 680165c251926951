"""Storage faults on the real stack: the database locked beyond the busy timeout, the disk full, the
report directory unwritable. The receiver answers 503 (with Retry-After) and never 200 for what it
did not store; the worker's jobs fail with one log line each, the process stays up, and the next
run after the fault is gone does the work, once.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from partnerkit.client import PartnerClient
from partnerkit.config import load_config
from partnerkit.store import open_db
from partnerkit.store import vouchers as voucher_store
from tests.reliability.crash_stack import CrashStack, wait_until
from tests.reliability.storage_faults import (fill, held_write_lock, remount, signed_webhook, tiny_filesystem,
                                              truncate_wal)

pytest.importorskip("sandbox.testing")
from sandbox.settings import SandboxSettings  # noqa: E402


def _settings(**overrides) -> SandboxSettings:
    # 30x: webhook retries 2, 4, 8 and 16 real seconds apart (30 s before a delivery fails for good);
    # an order's fulfilment (D = 30 sandbox seconds) takes one real second.
    values = dict(speed=30.0, allow_http_webhooks=True, order_fulfilment_delay_s=30, hourly_limit=100_000)
    values.update(overrides)
    return SandboxSettings(**values)


def _creator(stack: CrashStack, tmp_path: Path) -> PartnerClient:
    """A client for the partner's own order creation, on its own scratch database (ours is the broken one)."""
    config = load_config(environ={**stack.env, "PARTNERKIT_DB": str(tmp_path / "creator.db")})
    return PartnerClient(config, open_db(config.db_path), purpose="test")


def _attempts(stack: CrashStack, order_id: int) -> list[tuple[str, int | None]]:
    return [(d["event_id"], a["response_status"]) for d in stack.deliveries() if d["order_id"] == order_id
            for a in d["attempts"]]


def _acknowledged(stack: CrashStack) -> Counter:
    return Counter(d["event_id"] for d in stack.deliveries() for a in d["attempts"]
                   if a["response_status"] is not None and 200 <= a["response_status"] < 300)


def _inbox(stack: CrashStack) -> dict[str, int]:
    return dict(stack.db.execute("SELECT dedup_key, duplicate_count FROM inbox").fetchall())


def _assert_acknowledged_means_stored_once(stack: CrashStack) -> None:
    acked, inbox = _acknowledged(stack), _inbox(stack)
    assert set(acked) <= set(inbox), "an event was acknowledged but not stored"
    for event_id, times in acked.items():
        assert inbox[event_id] == times - 1, f"{event_id}: {times} acknowledgements, one row"


def test_a_database_locked_past_the_busy_timeout_gets_503_then_the_retry_is_stored_once(tmp_path):
    # 60x: retries 1, 2, 4, 8 s apart. D = one sandbox hour: the order stays PENDING, two events to deliver.
    with CrashStack(tmp_path, _settings(speed=60.0, order_fulfilment_delay_s=3600)) as stack:
        stack.register_webhook()
        stack.start_receiver(workers=2)
        creator = _creator(stack, tmp_path)
        webhook_url = stack.receiver_url + "/webhooks/partner"
        with held_write_lock(stack.config.db_path):
            order = creator.create_order(product_id=6, denomination=250, quantity=1, ref="locked-1").id
            refused = signed_webhook(webhook_url, stack.alpha.signing_secret, event_id="evt_locked_direct")
            ready = stack.get("/readyz")
            # Both events tried (each waits out the receiver's 2 s busy timeout) while the lock is held.
            wait_until(lambda: len({e for e, _ in _attempts(stack, order)}) == 2,
                       timeout=30, step=0.1, what="the provider's attempts against the locked database")
            while_locked = _attempts(stack, order)
        wait_until(lambda: all(d["status"] == "delivered" for d in stack.deliveries()), timeout=30, step=0.2,
                   what="the provider's retries after the lock is released")
        resent = signed_webhook(webhook_url, stack.alpha.signing_secret, event_id="evt_locked_direct")
        after = _attempts(stack, order)
        _assert_acknowledged_means_stored_once(stack)
        inbox = _inbox(stack)
        receiver_log = stack.receiver.log()
        creator.close()

    assert refused.status_code == 503 and refused.headers["Retry-After"] == "60"
    assert refused.json() == {"status": "unavailable"}
    assert ready.status_code == 503
    assert {status for _, status in while_locked} == {503}, "never a 200 for what was not stored"
    assert resent.status_code == 200 and resent.json() == {"status": "accepted"}, "the 503'd event was not kept"
    events = {event_id for event_id, _ in after}
    assert events <= set(inbox) and all(inbox[e] == 0 for e in events), "each event stored exactly once"
    assert [s for _, s in after].count(200) == len(events)
    assert "Traceback" not in receiver_log
