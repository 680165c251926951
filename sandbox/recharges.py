"""Recharges: pricing, submit validation, scripted outcomes, settlement, reads.

Outcome script (docs/sandbox.md), by the LAST DIGIT of the mobile number:
    0-3 SUCCESS at once (200)        4 FAILED at once (200, credited back)
    5 PROCESSING -> SUCCESS (202)    6 PROCESSING -> FAILED     7 PROCESSING -> REVERSED
    8 PROCESSING, never settles      9 PROCESSING -> SUCCESS, but the answer is a bare 500
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from . import wallets
from .clock import iso
from .errors import ApiError
from .models import Client, Operator, Recharge
from .money import parse_amount, parse_int, q2

FINAL = ("SUCCESS", "FAILED", "REVERSED")
LEGACY_SUCCESS = ("DELIVERED", "RECHARGED")   # Recharge states: legacy stored values
SCRIPT = {0: "SUCCESS", 1: "SUCCESS", 2: "SUCCESS", 3: "SUCCESS", 4: "FAILED",
          5: "PROCESSING:SUCCESS", 6: "PROCESSING:FAILED", 7: "PROCESSING:REVERSED",
          8: "PROCESSING:NEVER", 9: "PROCESSING:SUCCESS"}
FAULT_AFTER_COMMIT_DIGIT = 9
SUB_STATUS = {"SUCCESS": "OPERATOR_CONFIRMED", "FAILED": "OPERATOR_DECLINED",
              "REVERSED": "REVERSED_BY_OPERATOR", "PROCESSING": "PENDING_AT_OPERATOR"}
FAILURE_REASON = {"FAILED": "ERR-1024: Recharge declined by operator (invalid plan for subscriber)",
                  "REVERSED": "ERR-2071: Transaction reversed by operator after timeout"}
AMOUNT_MESSAGE = "amount must be a whole rupee greater than zero"


@dataclass(slots=True)
class SubmitRequest:
    """A validated submit body."""

    mobile_number: str
    operator: Operator
    face: Decimal
    circle: str | None
    is_prepaid: bool
    is_special: bool
    nickname: str | None
    client_reference: str | None
    force: bool


def _operator_id(body: dict) -> int:
    raw = body.get("operator_id")
    if raw is None:
        raise ApiError(400, "operator_id is required")
    value = parse_int(raw)
    if value is None:
        raise ApiError(400, "invalid request body", detail="operator_id must be a number")
    if value == 0:
        raise ApiError(400, "operator_id is required")
    return value


def parse_preview(sb, body: dict) -> tuple[Operator, Decimal]:
    """Validate a preview body per the "Recharge charge preview" error table."""
    operator_id = _operator_id(body)
    if body.get("amount") is None:
        raise ApiError(400, "amount must be greater than zero")
    face = parse_amount(body["amount"])
    if face is None:
        raise ApiError(400, "invalid request body", detail="amount must be a number or string")
    if face <= 0:
        raise ApiError(400, "amount must be greater than zero")
    if face != face.to_integral_value():
        raise ApiError(400, "amount must be a whole rupee")
    operator = sb.operators.get(operator_id)
    if operator is None or not operator.is_active:
        raise ApiError(400, "unknown operator_id")
    return operator, face


def quote(sb, client: Client, operator: Operator, face: Decimal) -> dict:
    """Charge quote: discount = face * pct / 100 to 2 decimals; payable = face - discount."""
    if "pricing" in sb.settings.faults:
        raise ApiError(500, "pricing could not be resolved", detail="fault 'pricing' is set")
    pct = client.recharge_discounts.get(operator.id, Decimal(0))
    discount = q2(face * pct / 100)
    return {"face": q2(face), "discount_pct": q2(pct), "discount": discount,
            "payable": q2(face - discount)}


def _check_mobile(raw) -> str:
    if raw is None or raw == "":
        raise ApiError(400, "invalid mobile number: mobile_number is required")
    if not isinstance(raw, str):
        raise ApiError(400, "invalid mobile number: must be a string of digits")
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(400, "invalid mobile number: digits only, "
                            "no country prefix, spaces or dashes")
    if len(raw) != 10:
        raise ApiError(400, f"invalid mobile number: expected 10 digits, got {len(raw)}")
    return raw


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, "invalid request body", detail=f"{name} must be a boolean")
    return value


def parse_submit(sb, client: Client, body: dict) -> SubmitRequest:
    """Validate a submit body per the "Recharge submit" error table (400/403/404 rows)."""
    mobile = _check_mobile(body.get("mobile_number"))
    operator_id = _operator_id(body)
    operator = sb.operators.get(operator_id)
    if operator is None or not operator.is_active:
        raise ApiError(400, "unknown operator")
    face = parse_amount(body.get("amount"))
    if face is None or face <= 0 or face != face.to_integral_value():
        raise ApiError(400, AMOUNT_MESSAGE)   # fractional is rejected, never rounded
    circle = None
    if body.get("circle_id") is not None:
        circle_id = parse_int(body["circle_id"])
        if circle_id is None or circle_id not in sb.circles:
            raise ApiError(400, "unknown circle")
        circle = sb.circles[circle_id]
    elif operator.requires_circle:
        raise ApiError(400, "circle_id is required for this operator")
    is_postpaid, is_special = _flag(body, "is_postpaid"), _flag(body, "is_special")
    force = _flag(body, "force")
    if is_postpaid and not operator.supports_postpaid:
        raise ApiError(400, "operator does not support postpaid recharge")
    if not is_postpaid and not operator.supports_prepaid:
        raise ApiError(400, "operator does not support prepaid recharge")
    if is_special and not operator.supports_special:
        raise ApiError(400, "operator does not support special recharge")
    country = body.get("country_code", "IN")
    if country not in (None, "IN"):
        raise ApiError(400, "country_code must be IN in v1")
    nickname = body.get("nickname")
    if nickname is not None and not (isinstance(nickname, str) and nickname.isascii()
                                     and nickname.isalnum() and len(nickname) <= 40):
        raise ApiError(400, "nickname must be alphanumeric, max 40 characters")
    reference = body.get("client_reference")
    if reference is not None and not isinstance(reference, str):
        raise ApiError(400, "invalid request body", detail="client_reference must be a string")
    if not operator.vendor_mapped:
        raise ApiError(400, "operator is not mapped to the recharge vendor")
    # Authentication 6: per-client enablement of recharge type and operator.
    if not (client.postpaid_enabled if is_postpaid else client.prepaid_enabled):
        raise ApiError(403, "this recharge type is not enabled for this client")
    if operator.id in client.blocked_operators:
        raise ApiError(403, "this operator is not enabled for this client")
    return SubmitRequest(mobile, operator, face, circle, not is_postpaid, is_special,
                         nickname, reference or None, force)


def check_account(sb, client: Client) -> None:
    """Kill switch, account and API-channel enablement, pause (503/403 rows)."""
    if not sb.settings.recharge_enabled:
        raise ApiError(503, "recharge is temporarily unavailable")
    if not client.recharge_enabled:
        raise ApiError(403, "recharge is not enabled for this client")
    if not client.api_enabled:
        raise ApiError(403, "recharge over the API is not enabled for this client")
    if client.paused:
        raise ApiError(503, "recharge is temporarily paused for this client")


def recent_duplicate(sb, client: Client, mobile: str, face: Decimal,
                     now: datetime) -> Recharge | None:
    """Submit rule 1: the same (number, amount) from this client inside the guard window."""
    since = now - timedelta(seconds=sb.settings.duplicate_guard_window_s)
    for rid in reversed(sb.recharge_ids[client.key]):
        rc = sb.recharges.get(rid)
        if rc is None or rc.status in LEGACY_SUCCESS:
            continue     # planted legacy rows may carry any created_at
        if rc.created_at < since:
            break
        if rc.mobile_number == mobile and rc.face == face:
            return rc
    return None


def _digits(sb, n: int) -> str:
    return "".join(str(sb.rng.randrange(10)) for _ in range(n))


def create(sb, client: Client, req: SubmitRequest, payable_quote: dict) -> Recharge:
    """Debit payable and create the recharge, applying the scripted outcome (lock held)."""
    now = sb.clock.now()
    wallet = wallets.wallet_for(sb, client.key, "INR")
    rid = sb.next_id("recharge")
    script = SCRIPT[int(req.mobile_number[-1])]
    rc = Recharge(rid, client.key, f"RCH{now:%Y%m%d}{rid:08d}", "PROCESSING",
                  SUB_STATUS["PROCESSING"], req.mobile_number, req.operator.id,
                  req.operator.name, req.circle, req.is_prepaid, payable_quote["face"],
                  payable_quote["discount"], payable_quote["payable"], now,
                  is_special=req.is_special, nickname=req.nickname,
                  client_reference=req.client_reference, wallet_id=wallet.id)
    if script != "PROCESSING:NEVER":
        rc.vendor_recharge_id = f"VR{_digits(sb, 10)}"
    wallets.post(sb, wallet, "RECHARGE", "DEBIT", rc.payable, created_at=now,
                 recharge_id=rc.id, reference_number=rc.reference_number,
                 description=f"recharge {rc.mobile_number}")
    sb.recharges[rid] = rc
    sb.recharge_ids[client.key].append(rid)
    if script in ("SUCCESS", "FAILED"):
        _finish(sb, rc, script, now, refund=True, changed=False)
    elif script == "PROCESSING:NEVER":
        rc.sub_status = "AWAITING_VENDOR"
    else:
        rc.outcome = script.split(":")[1]
        rc.settle_at = now + timedelta(seconds=_delay(sb))
        sb.schedule_recharge(rc.settle_at, rid)
    return rc


def _delay(sb) -> float:
    delay = sb.settings.processing_delay_s
    if isinstance(delay, (tuple, list)):
        return sb.rng.uniform(float(delay[0]), float(delay[1]))
    return float(delay)


def _finish(sb, rc: Recharge, status: str, now: datetime, *, refund: bool, changed: bool) -> None:
    rc.status, rc.sub_status = status, SUB_STATUS[status]
    rc.outcome, rc.settle_at = None, None
    if changed:
        rc.updated_at = now
    if status == "SUCCESS":
        rc.operator_txn_id = f"OP{_digits(sb, 12)}"
        return
    rc.failure_reason = FAILURE_REASON[status]
    wallet = sb.wallets.get(rc.wallet_id) if rc.wallet_id else None
    if refund and wallet is not None:
        wallets.post(sb, wallet, "RECHARGE_REFUND", "CREDIT", rc.payable, created_at=now,
                     recharge_id=rc.id, reference_number=rc.reference_number,
                     description=f"credit back of {status.lower()} recharge")


def settle(sb, rc: Recharge, status: str, *, refund: bool = True) -> None:
    """Settle a PROCESSING recharge now (vendor push / service poll)."""
    if rc.status != "PROCESSING":
        raise ValueError(f"recharge {rc.id} is {rc.status}, not PROCESSING")
    if status not in FINAL:
        raise ValueError(f"cannot settle to {status}")
    _finish(sb, rc, status, sb.clock.now(), refund=refund, changed=True)


def settle_due(sb, now: datetime) -> int:
    """Settle every scripted PROCESSING recharge whose time has come (lock held)."""
    import heapq
    count = 0
    while sb.recharge_timers and sb.recharge_timers[0][0] <= now:
        _, rid = heapq.heappop(sb.recharge_timers)
        rc = sb.recharges.get(rid)
        if rc is None or rc.status != "PROCESSING" or rc.outcome is None:
            continue
        _finish(sb, rc, rc.outcome, now, refund=True, changed=True)
        count += 1
    return count


_OPTIONAL = ("vendor_recharge_id", "operator_txn_id", "failure_reason", "client_reference")


def detail_json(rc: Recharge) -> dict:
    """Recharge (detail and list item): optional strings omitted, never null."""
    out = {"id": rc.id, "reference_number": rc.reference_number, "status": rc.status,
           "sub_status": rc.sub_status, "mobile_number": rc.mobile_number,
           "country_code": rc.country_code}
    if rc.operator_name is not None:
        out["operator"] = rc.operator_name
    if rc.circle is not None:
        out["circle"] = rc.circle
    out.update(is_prepaid=rc.is_prepaid, face=rc.face, discount=rc.discount,
               payable=rc.payable, currency=rc.currency)
    for name in _OPTIONAL:
        value = getattr(rc, name)
        if value is not None:
            out[name] = value
    if rc.updated_at is not None:
        out["updated_at"] = iso(rc.updated_at)
    out["created_at"] = iso(rc.created_at)
    return out


def submit_json(rc: Recharge) -> dict:
    """Recharge submit response: operator_id echoed (a number, not the display name)."""
    out = {"id": rc.id, "reference_number": rc.reference_number, "status": rc.status,
           "sub_status": rc.sub_status, "mobile_number": rc.mobile_number,
           "operator_id": rc.operator_id, "face": rc.face, "discount": rc.discount,
           "payable": rc.payable}
    for name in _OPTIONAL:
        value = getattr(rc, name)
        if value is not None:
            out[name] = value
    out["created_at"] = iso(rc.created_at)
    return out


def operator_json(op: Operator) -> dict:
    """Operator record (shape chosen by the sandbox)."""
    return {"id": op.id, "name": op.name, "country_code": "IN", "is_active": op.is_active,
            "supports_prepaid": op.supports_prepaid, "supports_postpaid": op.supports_postpaid,
            "supports_special": op.supports_special, "requires_circle": op.requires_circle}


def matching(sb, client_key: str, status: str | None, search: str | None,
             since: datetime | None, until: datetime | None) -> list[Recharge]:
    """The client's recharges newest first (id descending), filtered as the list endpoint says."""
    wanted = None
    if status:
        wanted = {"SUCCESS", *LEGACY_SUCCESS} if status == "SUCCESS" else {status}
    needle = search.lower() if search else None
    out = []
    for rid in sorted(sb.recharge_ids[client_key], reverse=True):
        rc = sb.recharges.get(rid)
        if rc is None:
            continue
        if wanted is not None and rc.status not in wanted:
            continue
        if since is not None and rc.created_at < since:
            continue
        if until is not None and rc.created_at >= until:
            continue
        if needle is not None and not (needle in str(rc.id) or needle in rc.mobile_number
                                       or needle in rc.reference_number.lower()):
            continue   # search never looks at client_reference
        out.append(rc)
    return out
