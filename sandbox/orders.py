"""Voucher orders: validation, wallet selection with conversion, fulfilment, JSON shapes.

Fulfilment script (docs/sandbox.md), by the prefix of `ref` (asynchronous orders only;
products 7 and 8 are always realtime and ignore it):
    (none)    quantity <= 10: DELIVERED at once; else PENDING -> PROCESSING -> DELIVERED
    partial-  PENDING -> PROCESSING -> PARTIALLY_DELIVERED -> DELIVERED
    fail-     PENDING -> FAILED (refund)        cancel-  PENDING -> CANCELLED (refund)
    stuck-    PENDING forever (the vendor throttle never lets it through)
"""
from __future__ import annotations

import heapq
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from . import wallets, webhooks
from .clock import iso
from .errors import ApiError
from .models import Client, Order, Product, Voucher, Wallet
from .money import money_str, parse_amount, parse_int, q2

IMMEDIATE_MAX_QUANTITY = 10          # Limits: immediate order processing
SCRIPTS = {"partial-": "partial", "fail-": "fail", "cancel-": "cancel", "stuck-": "stuck"}
STATUSES = ("PENDING", "PROCESSING", "DELIVERED", "PARTIALLY_DELIVERED", "FAILED", "CANCELLED")
WITH_VOUCHERS = ("DELIVERED", "PARTIALLY_DELIVERED")
REFUNDED = ("FAILED", "CANCELLED")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
BAD_BODY = "Invalid request body format"


@dataclass(slots=True)
class CreateRequest:
    """A validated order-creation body."""

    product: Product
    denomination: Decimal
    quantity: int
    wallet_id: int | None
    ref: str | None
    email: str | None
    mobile: dict | None


def parse_create(sb, client: Client, body: dict) -> CreateRequest:
    """Validate an order body per the "Order creation" error table."""
    product_id = parse_int(body.get("product_id"))
    denomination = parse_amount(body.get("denomination"))
    quantity = parse_int(body.get("quantity"))
    if (product_id is None or product_id <= 0 or denomination is None or denomination <= 0
            or quantity is None or isinstance(body.get("denomination"), str)):
        raise ApiError(400, BAD_BODY)
    wallet_id = body.get("wallet_id")
    if wallet_id is not None and parse_int(wallet_id) is None:
        raise ApiError(400, BAD_BODY)
    ref, email, mobile = body.get("ref"), body.get("email"), body.get("mobile")
    if ref is not None and (not isinstance(ref, str) or not ref.strip() or len(ref) > 255):
        raise ApiError(400, BAD_BODY)
    if email is not None and (not isinstance(email, str) or not _EMAIL.match(email)):
        raise ApiError(400, BAD_BODY)
    if mobile is not None and not isinstance(mobile, dict):
        raise ApiError(400, BAD_BODY)
    if quantity < 1:
        raise ApiError(400, "Invalid Quantity: min")
    product = sb.products.get(product_id)
    if product is None or not product.is_active:
        raise ApiError(404, "Product not found")
    if quantity > product.max_quantity:
        raise ApiError(400, f"Invalid quantity, allowed max quantity: {product.max_quantity}")
    if denomination not in product.denominations:
        raise ApiError(400, "Denomination not available for this product")
    if ref is not None and any(o.client_key == client.key and o.ref == ref
                               for o in sb.orders.values()):
        raise ApiError(400, "Duplicate reference code")
    return CreateRequest(product, denomination, quantity,
                         parse_int(wallet_id) if wallet_id is not None else None,
                         ref, email, mobile)


def price(product: Product, denomination: Decimal, quantity: int) -> tuple[Decimal, Decimal]:
    """(amount, discount) in the product currency; discount rounded half up to cents."""
    total = denomination * quantity
    discount = q2(total * product.discount_pct / 100)
    return q2(total - discount), discount


def choose_wallet(sb, client: Client, currency: str, amount: Decimal,
                  wallet_id: int | None) -> tuple[Wallet, Decimal, Decimal]:
    """(wallet, debit in wallet currency, rate): same-currency wallet first, else convert.

    A converted debit needs room for its conversion charge too (`conversion_charge`)."""
    def cost(wallet):
        rate = wallets.fx_rate(sb, currency, wallet.currency)
        return (None, None) if rate is None else (q2(amount * rate), rate)

    def fits(wallet, debit):
        if debit is None:  # no rate between the currencies
            return False
        charge = conversion_charge(sb, debit) if wallet.currency != currency else Decimal("0")
        return wallet.balance >= debit + charge

    if wallet_id is not None:
        wallet = sb.wallets.get(wallet_id)
        if wallet is None or wallet.client_key != client.key:
            raise ApiError(404, "Wallet not found")
        debit, rate = cost(wallet)
        if not fits(wallet, debit):
            raise ApiError(400, "Insufficient funds in your wallet")
        return wallet, debit, rate
    own = wallets.client_wallets(sb, client.key)
    if not own:
        raise ApiError(404, "Wallet not found")
    ordered = sorted(own, key=lambda w: w.currency != currency)   # product currency first
    for wallet in ordered:
        debit, rate = cost(wallet)
        if fits(wallet, debit):
            return wallet, debit, rate
    raise ApiError(400, "Insufficient funds in your wallet")


def conversion_charge(sb, debit: Decimal) -> Decimal:
    """The charge on a converted debit (settings.conversion_charge_pct, rounded half up to cents)."""
    return q2(debit * sb.settings.conversion_charge_pct / 100)


def create(sb, client: Client, req: CreateRequest) -> Order:
    """Debit the wallet (transaction ORDER) and create the order; deliver now or schedule."""
    if "order_create" in sb.settings.faults:
        raise ApiError(500, "Failed to create order", detail="fault 'order_create' is set")
    product = req.product
    amount, discount = price(product, req.denomination, req.quantity)
    wallet, debit, rate = choose_wallet(sb, client, product.currency, amount, req.wallet_id)
    now = sb.clock.now()
    order_id = sb.next_id("order")
    ref = req.ref or str(uuid.UUID(int=sb.rng.getrandbits(128), version=4))
    links = {}
    if wallet.currency != product.currency:   # conversions are logged in the history
        links = {"original_amount": amount, "original_currency": product.currency,
                 "fx_rate": rate}
    txn = wallets.post(sb, wallet, "ORDER", "DEBIT", debit, created_at=now, order_id=order_id,
                       description=f"order {ref}", **links)
    if links and conversion_charge(sb, debit) > 0:
        wallets.post(sb, wallet, "FX_FEE", "DEBIT", conversion_charge(sb, debit), created_at=now,
                     order_id=order_id, description=f"conversion charge of order {ref}")
    script = next((s for p, s in SCRIPTS.items() if ref.startswith(p)), "deliver")
    order = Order(order_id, client.key, ref, txn.id, product.id, req.quantity,
                  req.denomination, amount, discount, product.currency, "PENDING", now,
                  wallet.id, email=req.email, mobile=req.mobile, script=script)
    sb.orders[order_id] = order
    webhooks.emit(sb, order, "order.created")
    immediate = product.always_realtime or (
        product.realtime and script == "deliver" and req.quantity <= IMMEDIATE_MAX_QUANTITY)
    if immediate:
        set_state(sb, order, "DELIVERED")
    else:
        webhooks.emit(sb, order, "order.pending")
        _plan(sb, order, now)
    return order


def _plan(sb, order: Order, now: datetime) -> None:
    step = timedelta(seconds=sb.settings.order_fulfilment_delay_s)
    half = step / 2
    plans = {"deliver": [(half, "PROCESSING"), (step, "DELIVERED")],
             "partial": [(half, "PROCESSING"), (step, "PARTIALLY_DELIVERED"),
                         (step * 2, "DELIVERED")],
             "fail": [(half, "FAILED")], "cancel": [(half, "CANCELLED")], "stuck": []}
    order.steps = [(now + offset, status) for offset, status in plans[order.script]]
    for at, _ in order.steps:
        sb.schedule_order(at, order.id)


def advance_due(sb, now: datetime) -> int:
    """Apply every fulfilment step whose time has come (lock held)."""
    count = 0
    while sb.order_timers and sb.order_timers[0][0] <= now:
        _, order_id = heapq.heappop(sb.order_timers)
        order = sb.orders.get(order_id)
        if order is None or not order.steps or order.steps[0][0] > now:
            continue
        _, status = order.steps.pop(0)
        set_state(sb, order, status)
        count += 1
    return count


def _voucher(sb, order: Order, product: Product, index: int) -> Voucher:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    code = "".join(sb.rng.choice(alphabet) for _ in range(16))
    pin = "".join(str(sb.rng.randrange(10)) for _ in range(6))
    return Voucher(card_number=code,
                   pin_code=pin if product.delivery_type == "code_with_pin" else None,
                   claim_url=f"{product.claim_url_base}{code}" if product.claim_url_base else None,
                   voucher_reference_number=f"VRN{order.id}{index:05d}",
                   expires_at=order.placed_at + timedelta(days=product.validity_days))


def set_state(sb, order: Order, status: str, *, delivered_quantity: int | None = None,
              refund: bool = True) -> None:
    """Move an order to `status`: vouchers, refund and the matching event (lock held)."""
    if status not in STATUSES:
        raise ValueError(f"unknown order status {status}")
    now = sb.clock.now()
    product = sb.products[order.product_id]
    if status in WITH_VOUCHERS:
        target = order.quantity if status == "DELIVERED" else max(1, order.quantity // 2)
        if delivered_quantity is not None:
            target = max(0, min(order.quantity, delivered_quantity))
        while len(order.vouchers) < target:
            order.vouchers.append(_voucher(sb, order, product, len(order.vouchers) + 1))
        del order.vouchers[target:]
        order.delivered_on = now
    if status in REFUNDED and order.status not in REFUNDED and refund:
        debit = sb.transactions.get(order.transaction_id)
        wallet = sb.wallets.get(order.wallet_id)
        if debit is not None and wallet is not None:
            wallets.post(sb, wallet, "ORDER_REFUND", "CREDIT", debit.amount, created_at=now,
                         order_id=order.id, description=f"refund of order {order.ref}",
                         original_amount=debit.original_amount,
                         original_currency=debit.original_currency, fx_rate=debit.fx_rate)
    if status in REFUNDED:
        order.vouchers = []
    if order.status != status:
        order.updated_at = now
    order.status = status
    webhooks.emit(sb, order, "order." + status.lower())


def voucher_json(v: Voucher) -> dict:
    """Voucher: pin_code only for code_with_pin products."""
    out = {"card_number": v.card_number}
    if v.pin_code is not None:
        out["pin_code"] = v.pin_code
    out.update(claim_url=v.claim_url, voucher_reference_number=v.voucher_reference_number,
               expires_at=iso(v.expires_at))
    return out


def create_json(order: Order) -> dict:
    """Order (create response): money as JSON numbers."""
    return {"id": order.id, "ref": order.ref, "transaction_id": order.transaction_id,
            "amount": order.amount, "product_id": order.product_id,
            "denomination": order.denomination, "quantity": order.quantity,
            "discount": order.discount,
            "vouchers": [voucher_json(v) for v in order.vouchers]
            if order.status in WITH_VOUCHERS else [],
            "status": order.status, "placed_at": iso(order.placed_at)}


def list_json(order: Order, product: Product) -> dict:
    """Order (list item): money as 2-decimal strings, status lower-case."""
    mobile = order.mobile or {}
    return {"id": order.id, "product_name": product.name, "currency": order.currency,
            "reference_code": order.ref, "transaction_id": order.transaction_id,
            "product_id": order.product_id, "denomination": money_str(order.denomination),
            "quantity": order.quantity, "amount": money_str(order.amount),
            "status": order.status.lower(), "email": order.email,
            "mobile": {"mobile_country_code": mobile.get("mobile_country_code"),
                       "mobile_number": mobile.get("mobile_number")},
            "placed_at": iso(order.placed_at)}


def detail_json(order: Order) -> dict:
    """Order (detail): vouchers only for DELIVERED and PARTIALLY_DELIVERED."""
    return {"id": order.id, "reference_code": order.ref, "transaction_id": order.transaction_id,
            "amount": money_str(order.amount), "product_id": order.product_id,
            "denomination": money_str(order.denomination), "quantity": order.quantity,
            "discount": money_str(order.discount),
            "vouchers": [voucher_json(v) for v in order.vouchers]
            if order.status in WITH_VOUCHERS else [],
            "status": order.status, "placed_at": iso(order.placed_at)}
