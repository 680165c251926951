"""catch_up_orders fills the provider fields of an order first seen through webhooks.

Regression: it used to skip orders whose local status already matched, so an order known only
from webhooks (no placed_at, transaction_id or currency) was never reconciled.
"""

from __future__ import annotations

import json
from decimal import Decimal

from partnerkit.client import PartnerClient
from partnerkit.store import orders
from partnerkit.timeutil import utcnow
from partnerkit.vouchers import catch_up_orders
from partnerkit.store import inbox
from receiver.envelope import normalise
from tests.receiver.conftest import CIPHER


def test_webhook_only_order_gets_its_provider_fields(sandbox_config, db):
    with PartnerClient(sandbox_config, db) as client:
        created = client.create_order(product_id=7, denomination=Decimal("50"), quantity=1)
        body = json.dumps({"event_id": "evt_fill_1", "event_type": "order.delivered", "created_at": "2026-11-21T10:00:00Z",
                           "data": {"id": created.id, "status": "DELIVERED", "quantity": 1}}).encode()
        inbox.record(db, normalise(body, {}), body, cipher=CIPHER, now=utcnow())
        before = orders.get(db, created.id)
        assert before["status"] == "DELIVERED" and before["placed_at"] is None and before["transaction_id"] is None

        catch_up_orders(sandbox_config, db, client)

    after = orders.get(db, created.id)
    assert after["status"] == "DELIVERED"
    assert after["transaction_id"] == created.transaction_id
    assert after["placed_at"] is not None
    assert after["currency"] == "INR"
