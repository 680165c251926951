"""Recharge endpoints (error shape {error: {message}})."""
from __future__ import annotations

import time

from flask import Blueprint, request

from . import recharges, wallets
from .errors import ApiError
from .httputil import (client, date_arg, idempotency_key, int_arg, json_body, json_response,
                       page_headers, remember, replay, sandbox)

bp = Blueprint("recharges", __name__, url_prefix="/api/v1")
NO_STORE = {"Cache-Control": "no-store"}   # "Reads of recharges are never cached."
STATUSES = ("PROCESSING", "SUCCESS", "FAILED", "REVERSED")


@bp.get("/recharge/operators")
def operators():
    """Operators: the source of operator_id values."""
    sb = sandbox()
    return json_response([recharges.operator_json(op) for op in sb.operators.values()])


@bp.post("/recharge/charges")
def preview():
    """Charge quote: nothing placed, no wallet check, no duplicate guard, never cached."""
    sb = sandbox()
    body = json_body()
    operator, face = recharges.parse_preview(sb, body)
    return json_response(recharges.quote(sb, client(), operator, face), headers=NO_STORE)


@bp.post("/recharges")
def submit():
    """Submit a recharge: 200 SUCCESS/FAILED, 202 PROCESSING; replay for the same key."""
    sb = sandbox()
    key = idempotency_key("IDEMPOTENCY_KEY_REQUIRED", "IDEMPOTENCY_KEY_TOO_SHORT",
                          "IDEMPOTENCY_KEY_TOO_LONG")
    with sb.lock:
        original = replay(sb, "recharge", key)
        if original is not None:
            return original
        body = json_body()
        me = client()
        recharges.check_account(sb, me)
        req = recharges.parse_submit(sb, me, body)
        wallet = wallets.wallet_for(sb, me.key, "INR")
        if wallet is None:
            raise ApiError(404, "no INR wallet found for this client")
        now = sb.clock.now()
        if not req.force and recharges.recent_duplicate(sb, me, req.mobile_number, req.face, now):
            raise ApiError(409, "a matching recharge was submitted recently; resend with "
                                "force=true if the repeat is intended")
        price = recharges.quote(sb, me, req.operator, req.face)
        if wallet.balance < price["payable"]:
            raise ApiError(400, "insufficient wallet balance")
        rc = recharges.create(sb, me, req, price)
        status = 202 if rc.status == "PROCESSING" else 200
        response = json_response(recharges.submit_json(rc), status)
        remember(sb, "recharge", key, response)
    delay = sb.settings.response_delay_s
    if delay and (not sb.settings.response_delay_numbers
                  or rc.mobile_number in sb.settings.response_delay_numbers):
        time.sleep(delay)
    if rc.mobile_number.endswith(str(recharges.FAULT_AFTER_COMMIT_DIGIT)):
        # Scripted service fault after commit: the recharge exists, the answer is lost.
        raise ApiError(500, "", empty=True, detail="scripted fault after commit (digit 9)")
    return response


@bp.get("/recharges/<rid>")
def get_recharge(rid: str):
    """One recharge; another client's is 404, exactly like a missing one (never 403)."""
    sb = sandbox()
    if not (rid.isascii() and rid.isdigit()):
        raise ApiError(400, "invalid recharge id")
    rc = sb.recharges.get(int(rid))
    if rc is None or rc.client_key != client().key:
        raise ApiError(404, "recharge not found")
    return json_response(recharges.detail_json(rc), headers=NO_STORE)


@bp.get("/recharges")
def list_recharges():
    """The client's recharges, newest first, paginated in headers, bare array body."""
    sb = sandbox()
    page = int_arg("page", 1, "page must be a positive integer", lo=1)
    limit_name = "limit" if request.args.get("limit") not in (None, "") else "page_size"
    limit = int_arg(limit_name, 50, "limit must be between 1 and 10000", lo=1, hi=10000)
    status = (request.args.get("status") or "").strip().upper() or None
    if status is not None and status not in STATUSES:
        raise ApiError(400, "status must be one of PROCESSING, SUCCESS, FAILED, REVERSED")
    since, until = date_arg("from_date"), date_arg("to_date", end_of_day=True)
    search = request.args.get("search") or None
    # sort, sort_by and sort_dir are accepted and ignored: always id descending.
    with sb.lock:
        found = recharges.matching(sb, client().key, status, search, since, until)
        chunk = found[(page - 1) * limit: page * limit]
        body = [recharges.detail_json(rc) for rc in chunk]
    headers = page_headers(page, limit, len(found))
    headers.update(NO_STORE)
    return json_response(body, headers=headers)
