"""The three webhook envelope forms of the document (Events, Envelope).

    standard   {event_id, event_type, created_at, data{id, reference_code, status, ...}}
    order_id   {event, event_id, created_at, data{order_id, status, total_amount, ...}}
    timestamp  {event, timestamp, data{order_id, ref, status, vouchers_ready, total_vouchers}}
Voucher codes are never included in a payload; they are read through the order detail.
"""
from __future__ import annotations

from datetime import datetime

from .clock import iso
from .models import Order, Product, Webhook
from .money import money_str

EVENT_TYPES = ("order.created", "order.pending", "order.processing", "order.delivered",
               "order.partially_delivered", "order.failed", "order.cancelled")
TEST_EVENT = "webhook.test"
FORMS = ("standard", "order_id", "timestamp")


def order_payload(form: str, event_type: str, event_id: str, at: datetime, order: Order,
                  product: Product) -> dict:
    """The envelope of an order event, as a snapshot of the order at `at`."""
    delivered = len(order.vouchers) if order.status in ("DELIVERED", "PARTIALLY_DELIVERED") else 0
    if form == "order_id":
        realtime = order.delivered_on is not None and order.delivered_on == order.placed_at
        return {"event": event_type, "event_id": event_id, "created_at": iso(at),
                "data": {"order_id": order.id, "status": order.status,
                         "total_amount": money_str(order.amount), "currency": order.currency,
                         "fulfilled_from": "realtime" if realtime else "stock",
                         "vouchers": [{"product_id": order.product_id,
                                       "expiry": iso(v.expires_at)}
                                      for v in order.vouchers[:delivered]]}}
    if form == "timestamp":
        return {"event": event_type, "timestamp": iso(at),
                "data": {"order_id": order.id, "ref": order.ref, "status": order.status,
                         "vouchers_ready": delivered, "total_vouchers": order.quantity}}
    return {"event_id": event_id, "event_type": event_type, "created_at": iso(at),
            "data": {"id": order.id, "reference_code": order.ref, "status": order.status,
                     "sub_status": order.sub_status, "product_name": product.name,
                     "denomination": money_str(order.denomination),
                     "quantity": order.quantity, "amount": money_str(order.amount),
                     "delivered_quantity": delivered,
                     "delivered_on": iso(order.delivered_on) if delivered else None,
                     "created_at": iso(order.placed_at)}}


def test_payload(form: str, event_id: str, at: datetime, webhook: Webhook) -> dict:
    """The envelope of a test event (event type webhook.test; the document does not show it)."""
    data = {"webhook_id": webhook.id, "message": "Test event from the partnerkit sandbox"}
    if form == "timestamp":
        return {"event": TEST_EVENT, "timestamp": iso(at), "data": data}
    if form == "order_id":
        return {"event": TEST_EVENT, "event_id": event_id, "created_at": iso(at), "data": data}
    return {"event_id": event_id, "event_type": TEST_EVENT, "created_at": iso(at), "data": data}
