"""Control endpoints under /sandbox (no auth): stats, clock, settings, webhooks' envelope and chaos,
drift planting.

The client is named by API key or short name in the body ("client") or the `client`
query parameter; default alpha.
"""
from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from flask import Blueprint, request

from . import faults, orders, recharges, wallets, webhooks
from .api_webhooks import validate_config
from .errors import ApiError
from .httputil import json_response, sandbox
from .models import Recharge
from .money import BadJSON, loads, money_str, parse_amount, q2

bp = Blueprint("control", __name__, url_prefix="/sandbox")
CLIENT_FLAGS = ("recharge_enabled", "api_enabled", "prepaid_enabled", "postpaid_enabled", "paused")


def _body() -> dict:
    try:
        body = loads(request.get_data() or b"{}")
    except BadJSON as exc:
        raise ApiError(400, "malformed JSON") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


def _client(body: dict):
    found = sandbox().client(body.get("client") or request.args.get("client"))
    if found is None:
        raise ApiError(404, "unknown client")
    return found


def _when(raw) -> datetime | None:
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, "created_at must be ISO 8601") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


@bp.get("/stats")
def stats():
    """API calls per 'METHOD /path/template', their total, rate-limited and faulted answers."""
    sb = sandbox()
    with sb.lock:
        return json_response({"calls": dict(sorted(sb.calls.items())),
                              "total": sum(sb.calls.values()), "rate_limited": sb.rate_limited,
                              "faults_injected": dict(sorted(sb.faults_injected.items()))})


@bp.post("/stats/reset")
def reset_stats():
    """Zero the call counters."""
    sb = sandbox()
    with sb.lock:
        sb.calls.clear()
        sb.rate_limited = 0
        sb.faults_injected.clear()
    return json_response({"calls": {}, "total": 0, "rate_limited": 0, "faults_injected": {}})


@bp.get("/clock")
def clock():
    """Sandbox time and speed."""
    sb = sandbox()
    return json_response({"now": sb.clock.now().isoformat(), "speed": sb.clock.speed})


@bp.post("/clock/advance")
def advance():
    """Jump the clock forward {"seconds": S}, then run everything due."""
    sb = sandbox()
    seconds = parse_amount(_body().get("seconds"))
    if seconds is None or seconds < 0:
        raise ApiError(400, "seconds must be a number >= 0")
    sb.clock.advance(float(seconds))
    done = sb.run_due()
    return json_response({"now": sb.clock.now().isoformat(), **done})


@bp.post("/run-due")
def run_due():
    """Run everything due now (settlements, fulfilment, webhook attempts)."""
    return json_response(sandbox().run_due())


@bp.get("/settings")
def get_settings():
    """Current settings."""
    return json_response(sandbox().settings.public())


@bp.patch("/settings")
def patch_settings():
    """Change settings (kill switch, signatures, limits, delays, faults, speed, clients)."""
    sb = sandbox()
    body = _body()
    with sb.lock:
        per_client = body.pop("clients", {}) or {}
        if "speed" in body:
            sb.clock.speed = float(body["speed"])
        try:
            unknown = sb.settings.update(body)
        except (TypeError, ValueError) as exc:
            raise ApiError(400, f"invalid settings: {exc}") from exc
        if unknown:
            raise ApiError(400, f"unknown settings: {', '.join(unknown)}")
        for ref, changes in per_client.items():
            _patch_client(sb.client(ref), changes)
    return json_response(sb.settings.public())


@bp.get("/faults")
def list_faults():
    """The faults switched on, name -> {scope, rate, seconds, fields, ids}."""
    return json_response(sandbox().settings.public()["faults"])


@bp.put("/faults/<name>")
def put_fault(name: str):
    """Switch one fault on (or change it), leaving the others as they are."""
    sb = sandbox()
    spec = _body()
    with sb.lock:
        try:
            fault = faults.make(name, spec)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        sb.settings.faults = {**sb.settings.faults, name: fault}
        return json_response(sb.settings.public()["faults"])


@bp.delete("/faults/<name>")
def delete_fault(name: str):
    """Switch one fault off (no error when it was off)."""
    sb = sandbox()
    if name not in faults.NAMES:
        raise ApiError(404, f"unknown fault {name!r}")
    with sb.lock:
        sb.settings.faults = {k: v for k, v in sb.settings.faults.items() if k != name}
        return json_response(sb.settings.public()["faults"])


@bp.delete("/faults")
def clear_faults():
    """Switch every fault off."""
    sb = sandbox()
    with sb.lock:
        sb.settings.faults = {}
    return json_response({})


@bp.get("/clients")
def list_clients():
    """Seeded credentials and enablement flags."""
    sb = sandbox()
    return json_response([{"name": c.name, "key": c.key, "secret": c.secret, "keys": sb.keys_of(c),
                           "signing_secret": c.signing_secret, "credential_id": c.credential_id,
                           **{f: getattr(c, f) for f in CLIENT_FLAGS},
                           "blocked_operators": sorted(c.blocked_operators),
                           "recharge_discounts": {str(k): money_str(v)
                                                  for k, v in c.recharge_discounts.items()}}
                          for c in sb.clients.values()])


@bp.patch("/clients/<ref>")
def patch_client(ref: str):
    """Change a client's flags, blocked operators or discounts."""
    sb = sandbox()
    with sb.lock:
        _patch_client(sb.client(ref), _body())
    return json_response({"ok": True})


WEBHOOK_SWITCHES = ("envelope", "chaos")  # the sandbox-only fields of a webhook


@bp.get("/webhooks")
def list_webhooks():
    """Every client's webhooks (without their tokens), with the client's name."""
    sb = sandbox()
    with sb.lock:
        names = {c.key: c.name for c in sb.clients.values()}
        return json_response([{**webhooks.webhook_json(h), "client": names.get(h.client_key)}
                              for h in sorted(sb.webhooks.values(), key=lambda h: h.id)])


@bp.patch("/webhooks/<int:wid>")
def patch_webhook(wid: int):
    """Switch a registered webhook's envelope form or chaos, without a signed API call."""
    sb = sandbox()
    body = _body()
    other = sorted(set(body) - set(WEBHOOK_SWITCHES))
    if other:
        raise ApiError(400, f"only envelope and chaos change here, not {', '.join(other)} "
                            "(the other fields through PUT /api/v1/webhooks/{id})")
    if not body:
        raise ApiError(400, "give envelope (standard, order_id, timestamp) and/or chaos (true or false)")
    with sb.lock:
        hook = sb.webhooks.get(wid)
        if hook is None:
            raise ApiError(404, "webhook not found")
        for name, value in validate_config(sb, body, creating=False).items():
            setattr(hook, name, value)
        hook.updated_at = sb.clock.now()
        names = {c.key: c.name for c in sb.clients.values()}
        return json_response({**webhooks.webhook_json(hook), "client": names.get(hook.client_key)})


@bp.post("/clients/<ref>/keys")
def add_client_key(ref: str):
    """Rotate a client's API key, first half: issue another key and secret (given, or generated); both work."""
    sb = sandbox()
    found = sb.client(ref)
    if found is None:
        raise ApiError(404, "unknown client")
    body = _body()
    try:
        key, secret = sb.add_key(found, body.get("key"), body.get("secret"))
    except ValueError as exc:
        raise ApiError(409, str(exc)) from exc
    return json_response({"client": found.name, "key": key, "secret": secret}, 201)


@bp.delete("/clients/<ref>/keys/<key>")
def revoke_client_key(ref: str, key: str):
    """Rotate a client's API key, second half: revoke one of its keys (401 from then on)."""
    sb = sandbox()
    found = sb.client(ref)
    if found is None:
        raise ApiError(404, "unknown client")
    try:
        sb.revoke_key(found, key)
    except KeyError:
        raise ApiError(404, f"{found.name} has no API key {key!r}") from None
    except ValueError as exc:
        raise ApiError(409, str(exc)) from exc
    return json_response({"ok": True, "keys": sb.keys_of(found)})


def _patch_client(found, changes: dict) -> None:
    if found is None:
        raise ApiError(404, "unknown client")
    for name in CLIENT_FLAGS:
        if name in changes:
            setattr(found, name, bool(changes[name]))
    if "blocked_operators" in changes:
        found.blocked_operators = {int(x) for x in changes["blocked_operators"]}
    for op_id, pct in (changes.get("recharge_discounts") or {}).items():
        found.recharge_discounts[int(op_id)] = Decimal(str(pct))


@bp.post("/wallets/topup")
def topup():
    """Credit a client's wallet (opened if missing) with a TOPUP transaction."""
    sb = sandbox()
    body = _body()
    amount = parse_amount(body.get("amount"))
    if amount is None or amount <= 0:
        raise ApiError(400, "amount must be > 0")
    with sb.lock:
        me = _client(body)
        currency = str(body.get("currency", "INR")).upper()
        wallet = wallets.wallet_for(sb, me.key, currency) or sb.open_wallet(me.key, currency)
        txn = wallets.post(sb, wallet, "TOPUP", "CREDIT", amount, description="sandbox top-up")
        return json_response(wallets.txn_json(txn), 201)


@bp.post("/transactions")
def inject_transaction():
    """Plant an arbitrary transaction (moves the balance unless "apply": false)."""
    sb = sandbox()
    body = _body()
    amount = parse_amount(body.get("amount"))
    direction = str(body.get("direction", "DEBIT")).upper()
    if amount is None or amount < 0 or direction not in ("DEBIT", "CREDIT"):
        raise ApiError(400, "amount >= 0 and direction DEBIT|CREDIT are required")
    with sb.lock:
        me = _client(body)
        currency = str(body.get("currency", "INR")).upper()
        wallet = wallets.wallet_for(sb, me.key, currency) or sb.open_wallet(me.key, currency)
        links = {k: body[k] for k in ("order_id", "recharge_id", "reference_number")
                 if body.get(k) is not None}
        before = wallet.balance
        txn = wallets.post(sb, wallet, str(body.get("type", "ADJUSTMENT")).upper(), direction,
                           amount, created_at=_when(body.get("created_at")), allow_negative=True,
                           description=body.get("description", "planted by sandbox control"),
                           **links)
        if body.get("apply") is False:
            wallet.balance = before
        return json_response(wallets.txn_json(txn), 201)


@bp.patch("/transactions/<int:tid>")
def alter_transaction(tid: int):
    """Alter a transaction's amount and/or created_at (balance_after and the wallet are left untouched).

    A new created_at models a ledger that stamps an entry apart from the record it pays for (a debit a
    moment before midnight for a recharge created just after it)."""
    sb = sandbox()
    body = _body()
    if "amount" not in body and "created_at" not in body:
        raise ApiError(400, "amount or created_at is required")
    amount = parse_amount(body.get("amount")) if "amount" in body else None
    if "amount" in body and (amount is None or amount < 0):
        raise ApiError(400, "amount must be a number >= 0")
    created_at = _when(body.get("created_at")) if "created_at" in body else None
    if "created_at" in body and created_at is None:
        raise ApiError(400, "created_at must be ISO 8601")
    with sb.lock:
        txn = sb.transactions.get(tid)
        if txn is None:
            raise ApiError(404, "transaction not found")
        if amount is not None:
            txn.amount = q2(amount)
        if created_at is not None:
            txn.created_at = created_at.astimezone(timezone.utc)
        return json_response(wallets.txn_json(txn))


@bp.delete("/transactions/<int:tid>")
def remove_transaction(tid: int):
    """Remove a transaction from history (e.g. a refund), leaving balances as they are."""
    sb = sandbox()
    with sb.lock:
        if sb.transactions.pop(tid, None) is None:
            raise ApiError(404, "transaction not found")
    return json_response({"deleted": tid})


@bp.delete("/recharges/<int:rid>")
def forget_recharge(rid: int):
    """The provider forgets a recharge (its transactions stay)."""
    sb = sandbox()
    with sb.lock:
        rc = sb.recharges.pop(rid, None)
        if rc is None:
            raise ApiError(404, "recharge not found")
        sb.recharge_ids[rc.client_key].remove(rid)
    return json_response({"deleted": rid})


@bp.post("/recharges/<int:rid>/settle")
def settle_recharge(rid: int):
    """Settle a PROCESSING recharge now; "refund": false plants a missing credit-back."""
    sb = sandbox()
    body = _body()
    with sb.lock:
        rc = sb.recharges.get(rid)
        if rc is None:
            raise ApiError(404, "recharge not found")
        try:
            recharges.settle(sb, rc, str(body.get("status", "SUCCESS")).upper(),
                             refund=body.get("refund", True) is not False)
        except ValueError as exc:
            raise ApiError(409, str(exc)) from exc
        return json_response(recharges.detail_json(rc))


@bp.post("/recharges/legacy")
def plant_legacy():
    """Plant a stored recharge with a legacy status (DELIVERED or RECHARGED) and its debit."""
    sb = sandbox()
    body = _body()
    status = str(body.get("status", "DELIVERED")).upper()
    face = parse_amount(body.get("amount", 100))
    if status not in recharges.LEGACY_SUCCESS or face is None or face <= 0:
        raise ApiError(400, "status must be DELIVERED or RECHARGED and amount > 0")
    with sb.lock:
        me = _client(body)
        operator = sb.operators[int(body.get("operator_id", 1))]
        price = recharges.quote(sb, me, operator, face)
        created = _when(body.get("created_at")) or sb.clock.now()
        rid = sb.next_id("recharge")
        rc = Recharge(rid, me.key, f"RCH{created:%Y%m%d}{rid:08d}", status, "LEGACY",
                      str(body.get("mobile_number", "9800000000")), operator.id, operator.name,
                      None, True, price["face"], price["discount"], price["payable"], created,
                      operator_txn_id=f"OPLEGACY{rid}",
                      client_reference=body.get("client_reference"))
        wallet = wallets.wallet_for(sb, me.key, "INR")
        if wallet is not None and body.get("with_transaction", True):
            rc.wallet_id = wallet.id
            wallets.post(sb, wallet, "RECHARGE", "DEBIT", rc.payable, created_at=created,
                         allow_negative=True, recharge_id=rid,
                         reference_number=rc.reference_number, description="legacy recharge")
        sb.recharges[rid] = rc
        sb.recharge_ids[me.key].append(rid)
        return json_response(recharges.detail_json(rc), 201)


@bp.post("/orders/<int:oid>/state")
def order_state(oid: int):
    """Force an order's status (with delivered_quantity and refund), emitting its event."""
    sb = sandbox()
    body = _body()
    status = str(body.get("status", "")).upper()
    if status not in orders.STATUSES:
        raise ApiError(400, f"status must be one of {', '.join(orders.STATUSES)}")
    with sb.lock:
        order = sb.orders.get(oid)
        if order is None:
            raise ApiError(404, "order not found")
        order.steps = []           # a forced state ends the scripted fulfilment
        quantity = body.get("delivered_quantity")
        orders.set_state(sb, order, status,
                         delivered_quantity=int(quantity) if quantity is not None else None,
                         refund=body.get("refund", True) is not False)
        return json_response(orders.detail_json(order))
