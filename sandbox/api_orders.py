"""Order endpoints: creation ({error: Name, message}) and reads ({error: code, message})."""
from __future__ import annotations

from flask import Blueprint, request

from . import orders
from .errors import ApiError
from .httputil import (client, idempotency_key, int_arg, json_body, json_response, page_headers,
                       remember, replay, sandbox)

bp = Blueprint("orders", __name__, url_prefix="/api/v1")


@bp.post("/orders")
def create():
    """Create an order: wallet debited (transaction ORDER), DELIVERED now or PENDING."""
    sb = sandbox()
    key = idempotency_key("Idempotency-Key header is required",
                          "Idempotency-Key must be at least 8 characters",
                          "Idempotency-Key must be at most 256 characters")
    with sb.lock:
        original = replay(sb, "order", key)
        if original is not None:
            return original
        body = json_body(orders.BAD_BODY)
        req = orders.parse_create(sb, client(), body)
        order = orders.create(sb, client(), req)
        response = json_response(orders.create_json(order))
        remember(sb, "order", key, response)
    return response


@bp.get("/orders")
def list_orders():
    """The client's orders, newest first; statuses lower-case, money as strings."""
    sb = sandbox()
    # No 400 row exists for this endpoint: out-of-range paging is clamped, not rejected.
    page = int_arg("page", 1, lo=1, clamp=True)
    limit = int_arg("limit", 10, lo=1, hi=100, clamp=True)
    status = (request.args.get("status") or "").strip().upper() or None
    product_id = int_arg("product_id", None, clamp=True)
    with sb.lock:
        found = [o for o in sorted(sb.orders.values(), key=lambda o: o.id, reverse=True)
                 if o.client_key == client().key
                 and (status is None or o.status == status)
                 and (product_id is None or o.product_id == product_id)]
        chunk = found[(page - 1) * limit: page * limit]
        if not chunk and sb.settings.order_list_empty_404:
            raise ApiError(404, "No Matching Result Found!")  # the other reading of the list's error table
        body = [orders.list_json(o, sb.products[o.product_id]) for o in chunk]
    return json_response(body, headers=page_headers(page, limit, len(found), has_more=False))


@bp.get("/orders/<oid>")
def get_order(oid: str):
    """One order of the client, vouchers decrypted only when (partially) delivered."""
    sb = sandbox()
    if "order_detail" in sb.settings.faults:
        raise ApiError(500, "Failed to retrieve order", detail="fault 'order_detail' is set")
    order = sb.orders.get(int(oid)) if oid.isascii() and oid.isdigit() else None
    if order is None or order.client_key != client().key:
        raise ApiError(404, "No Matching Result Found!")
    with sb.lock:
        return json_response(orders.detail_json(order))
