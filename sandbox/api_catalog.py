"""Catalog, wallet and transaction endpoints (general error shape; records our own)."""
from __future__ import annotations

from flask import Blueprint, request

from . import wallets
from .errors import ApiError
from .httputil import client, date_arg, int_arg, json_response, page_headers, sandbox
from .models import Product
from .money import money_str

bp = Blueprint("catalog", __name__, url_prefix="/api/v1")


def product_json(p: Product, full: bool = False) -> dict:
    """Product record (shape chosen by the sandbox; see docs/sandbox.md)."""
    out = {"id": p.id, "name": p.name, "category_id": p.category_id, "vendor": p.vendor,
           "currency": p.currency, "country": p.country, "delivery_type": p.delivery_type,
           "denominations": [money_str(d) for d in p.denominations],
           "discount_pct": money_str(p.discount_pct), "max_quantity": p.max_quantity,
           "realtime": p.realtime or p.always_realtime, "is_test_product": p.always_realtime,
           "expiry_policy": {"validity_days": p.validity_days}, "is_active": p.is_active}
    if full:
        out["availability"] = "in_stock" if p.is_active else "unavailable"
        out["denominations_detail"] = [{"value": money_str(d), "available": p.is_active}
                                       for d in p.denominations]
    return out


@bp.get("/categories")
def categories():
    """Product categories available to the client."""
    return json_response(sandbox().categories)


@bp.get("/products")
def products():
    """Active products, filterable by currency, country and category_id."""
    currency = (request.args.get("currency") or "").upper() or None
    country = (request.args.get("country") or "").upper() or None
    category = int_arg("category_id", None)
    found = [product_json(p) for p in sandbox().products.values() if p.is_active
             and (currency is None or p.currency == currency)
             and (country is None or p.country == country)
             and (category is None or p.category_id == category)]
    return json_response(found)


@bp.get("/products/<int:product_id>")
def product(product_id: int):
    """One product with its full denomination list and availability."""
    found = sandbox().products.get(product_id)
    if found is None or not found.is_active:
        raise ApiError(404, "product not found", code="PRODUCT_NOT_FOUND")
    return json_response(product_json(found, full=True))


@bp.get("/wallets")
def list_wallets():
    """Current balances of the client's wallets across settlement currencies."""
    sb = sandbox()
    with sb.lock:
        return json_response([wallets.wallet_json(w)
                              for w in wallets.client_wallets(sb, client().key)])


@bp.get("/transactions")
def transactions():
    """The client's transactions, newest first, filterable by date, order_id, type."""
    sb = sandbox()
    page = int_arg("page", 1, "page must be a positive integer", lo=1)
    limit = int_arg("limit", 50, "limit must be between 1 and 1000", lo=1, hi=1000)
    since, until = date_arg("from_date"), date_arg("to_date", end_of_day=True)
    order_id = int_arg("order_id", None)
    recharge_id = int_arg("recharge_id", None)
    type_ = (request.args.get("type") or "").upper() or None
    reference = request.args.get("reference_number") or None
    me = client().key
    with sb.lock:
        found = [t for t in reversed(sb.transactions.values()) if t.client_key == me
                 and (since is None or t.created_at >= since)
                 and (until is None or t.created_at < until)
                 and (order_id is None or t.order_id == order_id)
                 and (recharge_id is None or t.recharge_id == recharge_id)
                 and (type_ is None or t.type == type_)
                 and (reference is None or t.reference_number == reference)]
        found.sort(key=lambda t: t.id, reverse=True)
        chunk = found[(page - 1) * limit: page * limit]
        body = [wallets.txn_json(t) for t in chunk]
    return json_response(body, headers=page_headers(page, limit, len(found)))
