"""Recharge submit and locate: intent first, HTTP status before body, never a blind resend.

`submit` validates locally, commits an INTENT row (with its Idempotency-Key and a client_reference)
before the request exists, sends it once, and stores the answer. An ambiguous failure (timeout,
500, an unreadable answer) marks the row UNKNOWN and runs `locate`, the document's procedure
"Locating a recharge after a submit timeout": (1) the same Idempotency-Key again, whose answer is a
replay of the original, never a second recharge; (2) search by mobile number and match
client_reference; (3) search by number and from_date and match face and created_at. partnerkit
never re-sends with a new key on its own.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from partnerkit import errors
from partnerkit.config import Config
from partnerkit.errors import is_ambiguous  # the one notion of a lost write's answer, shared with orders
from partnerkit.money import MoneyError, from_cents, to_decimal
from partnerkit.store import Database
from partnerkit.store import recharges as store
from partnerkit.timeutil import iso, parse_ts, utcnow

log = logging.getLogger("reconcile.recharges")

MOBILE = re.compile(r"^[0-9]{10}$")  # Limits: digits only, 10 digits for India
NICKNAME_MAX = 40  # Limits: alphanumeric, max 40 characters
KEY_LIFETIME = timedelta(hours=24)  # Limits: idempotency record lifetime
# Those 24 hours run on the provider's clock, from when it received the key. A replay is sent only
# this far inside them: to a provider whose clock is ahead of ours, a key replayed at 23h59m by
# our clock may already be forgotten, and the "replay" is then a new request, a second recharge.
KEY_REPLAY_MARGIN = timedelta(hours=1)
LOCATE_WINDOW = timedelta(minutes=10)  # step 3: created_at within this of our submit (document silent)
LOCATE_MAX_PAGES = 5
LOCATE_PAGE_SIZE = 200


class RechargeInputError(errors.PartnerKitError, ValueError):
    """A submit field is refused locally, before anything is recorded or sent."""


class DuplicateSubmit(errors.DuplicateRecharge):
    """409 from the duplicate guard, with a message naming --force (the intent row is discarded)."""

    def __str__(self) -> str:
        # What to do comes last, where the eye ends: not followed by the request line and the trace.
        trace = f" (trace {self.trace_id})" if self.trace_id else ""
        return f"HTTP 409 from the provider's duplicate guard{trace}: {self.message}"


@dataclass(frozen=True)
class SubmitRequest:
    """A validated submit body (the document's field names)."""

    mobile_number: str
    operator_id: int
    amount: Decimal
    circle_id: int | None = None
    is_postpaid: bool | None = None
    is_special: bool | None = None
    nickname: str | None = None
    force: bool = False

    def body(self, client_reference: str) -> dict[str, Any]:
        """Keyword arguments for client.submit_recharge (whole rupees sent as an integer)."""
        return {"mobile_number": self.mobile_number, "operator_id": self.operator_id, "amount": int(self.amount),
                "circle_id": self.circle_id, "is_postpaid": self.is_postpaid, "is_special": self.is_special,
                "nickname": self.nickname, "client_reference": client_reference, "force": self.force}


@dataclass
class SubmitOutcome:
    """What a submit (or a locate) established about one local recharge."""

    local_id: int
    status: str
    idempotency_key: str | None
    client_reference: str | None
    http_status: int | None = None
    recharge: Any = None
    located_by: str | None = None
    message: str = ""
    row: dict = field(default_factory=dict, repr=False)
    matches: list = field(default_factory=list, repr=False)  # NOT_RECORDED: the provider's matching recharges


def validate_mobile(value: Any) -> str:
    """10 digits, no country prefix, spaces or dashes."""
    text = "" if value is None else str(value)
    if not MOBILE.match(text):
        raise RechargeInputError(f"mobile number must be exactly 10 digits with no +91, spaces or dashes, got {text!r}")
    return text


def validate_amount(value: Any) -> Decimal:
    """Face value in whole rupees greater than zero (a fraction is refused, never rounded)."""
    try:
        amount = to_decimal(value, field="amount", typed=True)
    except MoneyError as exc:
        raise RechargeInputError(f"amount must be whole rupees, e.g. 199: {exc}") from None
    if amount <= 0 or amount != amount.to_integral_value():
        raise RechargeInputError(f"amount must be a whole number of rupees greater than zero, got {value}")
    return amount.quantize(Decimal(1))


def validate_submit(*, mobile_number: Any, operator_id: Any, amount: Any, circle_id: Any = None,
                    is_postpaid: bool | None = None, is_special: bool | None = None, nickname: str | None = None,
                    force: bool = False) -> SubmitRequest:
    """Check a submit against the document's field rules; raise RechargeInputError naming the field."""
    def positive_int(name: str, value: Any) -> int:
        try:
            number = int(str(value))
        except (TypeError, ValueError):
            raise RechargeInputError(f"{name} must be a whole number, got {value!r}") from None
        if number <= 0:
            raise RechargeInputError(f"{name} must be greater than zero, got {value!r}")
        return number

    if nickname is not None and not (nickname.isascii() and nickname.isalnum() and len(nickname) <= NICKNAME_MAX):
        raise RechargeInputError(f"nickname must be letters and digits only, at most {NICKNAME_MAX} characters")
    return SubmitRequest(validate_mobile(mobile_number), positive_int("operator_id", operator_id),
                         validate_amount(amount), None if circle_id is None else positive_int("circle_id", circle_id),
                         is_postpaid, is_special, nickname, bool(force))


def new_idempotency_key() -> str:
    """A fresh Idempotency-Key (8 to 256 characters)."""
    return f"pk-{uuid.uuid4().hex}"


def new_client_reference() -> str:
    """A client_reference unique enough for locate step 2 to match on."""
    return f"pk-{uuid.uuid4().hex[:20]}"


def status_from_answer(http_status: int, body_status: str) -> str:
    """Recharge submit: the HTTP status carries meaning and is read before the body."""
    if http_status == 202:
        return "PROCESSING"  # accepted, not settled: only polling settles it, whatever the body says
    if http_status == 200:
        return _stored_status(body_status)  # SUCCESS or FAILED is final; a 200 PROCESSING is simply polled
    raise errors.MalformedResponse(f"recharge submit answered HTTP {http_status}, not 200 or 202", status=http_status)


def submit(config: Config, db: Database, client: Any, *, mobile_number: str, operator_id: int, amount: Any,
           client_reference: str | None = None, circle_id: int | None = None, is_postpaid: bool | None = None,
           is_special: bool | None = None, nickname: str | None = None, force: bool = False,
           idempotency_key: str | None = None, now: datetime | None = None) -> SubmitOutcome:
    """Submit one recharge: validate, record the intent, send once, store the answer or locate it."""
    request = validate_submit(mobile_number=mobile_number, operator_id=operator_id, amount=amount,
                              circle_id=circle_id, is_postpaid=is_postpaid, is_special=is_special,
                              nickname=nickname, force=force)
    key = idempotency_key or new_idempotency_key()
    if not 8 <= len(key) <= 256:
        raise RechargeInputError("Idempotency-Key must be 8 to 256 characters")
    known = store.by_idempotency_key(db, key) if idempotency_key else None
    if known is not None:
        return _resume(config, db, client, known, request, client_reference)
    reference = client_reference or new_client_reference()
    submitted_at = now or utcnow()
    try:
        local_id = store.record_intent(db, idempotency_key=key, mobile_number=request.mobile_number,
                                       operator_id=request.operator_id, amount=request.amount,
                                       client_reference=reference, submitted_at=submitted_at,
                                       circle_id=request.circle_id, is_postpaid=request.is_postpaid,
                                       is_special=request.is_special, nickname=request.nickname, force=request.force)
    except errors.StorageError:
        known = store.by_idempotency_key(db, key)  # another process recorded this key a moment ago
        if known is None:
            raise
        return _resume(config, db, client, known, request, client_reference)
    try:
        result = client.submit_recharge(**request.body(reference), idempotency_key=key)
        status = status_from_answer(result.http_status, result.recharge.status)
    except errors.DuplicateRecharge as exc:
        store.discard_refused(db, local_id)
        raise DuplicateSubmit(
            f"a recharge of {request.amount} to {request.mobile_number} was submitted recently; "
            f"if this second recharge is intended, submit again with --force",
            status=409, code=exc.code, trace_id=exc.trace_id, body=exc.body, method=exc.method, path=exc.path) from exc
    except errors.PartnerKitError as exc:
        if not is_ambiguous(exc):
            store.discard_refused(db, local_id)  # a definite refusal: no recharge exists for this intent
            raise
        store.mark_unknown(db, local_id, str(exc), utcnow())
        log.warning("recharge submit #%s outcome unknown (%s); locating it", local_id, exc,
                    extra={"local_id": local_id})
        found = locate(config, db, client, local_id=local_id)
        found.message = f"The submit's answer was lost ({exc}). " + found.message
        return found
    except BaseException:
        store.mark_unknown(db, local_id, "interrupted while sending", utcnow())
        raise
    row = store.record_response(db, local_id, result.recharge, status=status, seen_at=utcnow(),
                                http_status=result.http_status)
    return SubmitOutcome(local_id, status, key, reference, result.http_status, result.recharge,
                         message=describe(row), row=row)


def _resume(config: Config, db: Database, client: Any, row: dict, request: SubmitRequest,
            client_reference: str | None) -> SubmitOutcome:
    """`--idempotency-key K` of a local recharge: the same request is located (its step 1 replays K,
    which can never create a second recharge); another request under K is refused, nothing sent."""
    stored = SubmitRequest(row["mobile_number"], row["operator_id"], from_cents(row["amount_cents"]),  # type: ignore[arg-type]
                           row["circle_id"], _flag(row["is_postpaid"]), _flag(row["is_special"]), row["nickname"],
                           bool(row["force"]))
    differ = [name for name in ("mobile_number", "operator_id", "amount", "circle_id", "is_postpaid", "is_special",
                                "nickname", "force") if getattr(request, name) != getattr(stored, name)]
    if client_reference is not None and client_reference != row["client_reference"]:
        differ.append("client_reference")
    if differ:
        raise RechargeInputError(
            f"Idempotency-Key {row['idempotency_key']} is local recharge #{row['local_id']}'s "
            f"({row['mobile_number']}, {from_cents(row['amount_cents'])}, {row['status']}), not this request "
            f"({', '.join(differ)} differ): nothing was sent; submit without --idempotency-key for a new recharge")
    found = locate(config, db, client, local_id=row["local_id"])
    found.message = (f"Idempotency-Key {row['idempotency_key']} is local recharge #{row['local_id']}'s: located it "
                     "instead of submitting again. " + found.message)
    return found


def describe(row: dict) -> str:
    """One sentence for the user about a stored recharge."""
    ident = f"recharge {row.get('provider_id')} ({row.get('reference_number')}, local #{row['local_id']})"
    payable = from_cents(row.get("payable_cents"))
    if row["status"] == "SUCCESS":
        return f"{ident} SUCCESS: confirmed by the operator, wallet debited {payable}."
    if row["status"] == "FAILED":
        return f"{ident} FAILED: {row.get('failure_reason') or 'no reason given'}; the wallet was credited back."
    if row["status"] == "REVERSED":
        return f"{ident} REVERSED: the wallet was credited back."
    if row["status"] == "PROCESSING":
        return f"{ident} PROCESSING: accepted, wallet debited {payable}; `partnerkit worker` polls it until it settles."
    return f"local recharge #{row['local_id']} is {row['status']}."


# ---- locate ------------------------------------------------------------------------------------

def locate(config: Config, db: Database, client: Any, *, local_id: int | None = None,
           mobile_number: str | None = None, amount: Any = None, client_reference: str | None = None,
           now: datetime | None = None) -> SubmitOutcome:
    """Run the document's after-timeout search for a local recharge (or a number and amount)."""
    now = now or utcnow()
    if local_id is not None:
        row = store.get(db, local_id)
        if row is None:
            raise RechargeInputError(f"no local recharge #{local_id}")
    else:
        mobile = validate_mobile(mobile_number)
        face = validate_amount(amount)
        rows = store.open_intents(db, mobile_number=mobile, amount=face, client_reference=client_reference)
        row = rows[0] if rows else None
        if row is None:
            return _search_only(db, client, mobile, face, client_reference, now)
    if row["provider_id"] is not None:
        return SubmitOutcome(row["local_id"], row["status"], row["idempotency_key"], row["client_reference"],
                             located_by="already_known", message=describe(row), row=row)
    notes: list[str] = []
    outcome = _replay_same_key(db, client, row, now, notes)
    if outcome is None:
        outcome = _search(db, client, row, now, notes)
    if outcome is not None:
        return outcome
    fresh = store.get(db, row["local_id"]) or row
    return SubmitOutcome(row["local_id"], fresh["status"], row["idempotency_key"], row["client_reference"],
                         message=_not_found_message(row, notes, replayable=_replayable(row, now)), row=fresh)


def _replay_same_key(db: Database, client: Any, row: dict, now: datetime, notes: list[str]) -> SubmitOutcome | None:
    """Step 1: the same Idempotency-Key within 24 hours replays the original answer, recharge id included."""
    if not _replayable(row, now):
        notes.append(f"same Idempotency-Key: not tried (older than {_hours(KEY_LIFETIME - KEY_REPLAY_MARGIN)} hours; "
                     f"the provider forgets a key after {_hours(KEY_LIFETIME)} hours on its own clock)")
        return None
    request = SubmitRequest(row["mobile_number"], row["operator_id"], from_cents(row["amount_cents"]),  # type: ignore[arg-type]
                            row["circle_id"], _flag(row["is_postpaid"]), _flag(row["is_special"]),
                            row["nickname"], bool(row["force"]))
    try:
        result = client.submit_recharge(**request.body(row["client_reference"]), idempotency_key=row["idempotency_key"])
        status = status_from_answer(result.http_status, result.recharge.status)
    except errors.PartnerKitError as exc:
        notes.append(f"same Idempotency-Key: {exc}")
        store.note_error(db, row["local_id"], f"locate step 1: {exc}", utcnow())
        return None
    return _link(db, row, result.recharge, status, "idempotency_key", http_status=result.http_status)


def _replayable(row: dict, now: datetime) -> bool:
    """True while the provider certainly still holds the row's Idempotency-Key (see KEY_REPLAY_MARGIN)."""
    submitted = parse_ts(row["submitted_at"])
    return bool(row["idempotency_key"]) and submitted is not None and now - submitted < KEY_LIFETIME - KEY_REPLAY_MARGIN


def _hours(span: timedelta) -> int:
    return int(span.total_seconds() // 3600)


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _candidates(client: Any, mobile: str, since: datetime, notes: list[str]) -> list[Any] | None:
    """Recharges of one number created since the day before `since` (steps 2 and 3 share this walk)."""
    found: list[Any] = []
    try:
        for page in range(1, LOCATE_MAX_PAGES + 1):
            result = client.list_recharges(page=page, limit=LOCATE_PAGE_SIZE, search=mobile,
                                           from_date=(since - timedelta(days=1)).date().isoformat())
            # search is a partial match on id, reference_number or number: keep exact numbers only.
            found += [r for r in result.items if r.mobile_number == mobile]
            if not result.has_more:
                break
    except errors.PartnerKitError as exc:
        notes.append(f"search by number: {exc}")
        return None
    return found


def _search(db: Database, client: Any, row: dict, now: datetime, notes: list[str]) -> SubmitOutcome | None:
    """Steps 2 and 3 over one list walk: client_reference first, then face and created_at."""
    submitted = parse_ts(row["submitted_at"]) or now
    found = _candidates(client, row["mobile_number"], submitted, notes)
    if found is None:
        return None
    by_reference = [r for r in found if row["client_reference"] and r.client_reference == row["client_reference"]]
    if len(by_reference) == 1:
        return _link(db, row, by_reference[0], by_reference[0].status, "client_reference")
    notes.append(f"search by number and client_reference {row['client_reference']}: "
                 f"{'several matches' if by_reference else 'no match'}")
    face = from_cents(row["amount_cents"])
    close = [r for r in found if r.face == face and abs(r.created_at - submitted) <= LOCATE_WINDOW
             and not isinstance(r.client_reference, str) and store.by_provider_id(db, r.id) is None]
    if len(close) == 1:
        return _link(db, row, close[0], close[0].status, "face_and_time")
    notes.append(f"search by number, date, face {face} and created_at within {int(LOCATE_WINDOW.total_seconds() // 60)} "
                 f"minutes: {len(close)} candidates" + (f" ({', '.join(str(r.id) for r in close)})" if close else ""))
    return None


def _stored_status(status: Any) -> str:
    """The stored status of a recharge the provider holds. A status the document does not name is
    kept as PROCESSING: the provider took the request (the wallet may be debited), so the recharge
    is linked and read again by the poller, never discarded or left UNKNOWN."""
    try:
        return store.normalise_status(status)[0]
    except errors.StorageError:
        return "PROCESSING"


def _link(db: Database, row: dict, recharge: Any, status: str, step: str, *, http_status: int | None = None) -> SubmitOutcome:
    stored = _stored_status(status)
    linked = store.record_response(db, row["local_id"], recharge, status=stored, seen_at=utcnow(), http_status=http_status)
    log.info("located local recharge #%s as %s by %s", row["local_id"], recharge.id, step,
             extra={"local_id": row["local_id"], "recharge_id": recharge.id, "located_by": step})
    return SubmitOutcome(row["local_id"], stored, row["idempotency_key"], row["client_reference"], http_status,
                         recharge, located_by=step, message=f"Located by {step.replace('_', ' ')}: " + describe(linked),
                         row=linked)


def _search_only(db: Database, client: Any, mobile: str, face: Decimal, client_reference: str | None,
                 now: datetime) -> SubmitOutcome:
    """Manual locate without a local intent: report what the provider has, change nothing."""
    notes: list[str] = []
    found = _candidates(client, mobile, now, notes) or []
    matches = [r for r in found if (r.client_reference == client_reference if client_reference else r.face == face)]
    lines = [f"{r.id} {r.reference_number} {r.status} face {r.face} created {iso(r.created_at)}" for r in matches]
    message = (f"No local intent for {mobile} / {face}; the provider shows {len(matches)} matching recharge(s)"
               + (":\n  " + "\n  ".join(lines) if lines else "") + ("\n" + "; ".join(notes) if notes else ""))
    return SubmitOutcome(0, "NOT_RECORDED", None, client_reference, recharge=matches[0] if len(matches) == 1 else None,
                         located_by="search" if matches else None, message=message, matches=matches)


def _not_found_message(row: dict, notes: list[str], *, replayable: bool) -> str:
    local = row["local_id"]
    head = (f"Local recharge #{local} ({row['mobile_number']}, {from_cents(row['amount_cents'])}) is UNKNOWN: "
            f"the provider shows no matching recharge yet ({'; '.join(notes)}). Do NOT submit it again with a new "
            f"key. ")
    if not replayable:
        return head + (f"Its Idempotency-Key ({row['idempotency_key']}) is too old to replay safely, so locate only "
                       f"searches now; contact support with that Idempotency-Key and client_reference "
                       f"{row['client_reference']}.")
    return head + (f"Run `partnerkit recharges locate --local-id {local}` again in a few minutes: it replays the same "
                   f"Idempotency-Key ({row['idempotency_key']}), which can never create a second recharge. If the "
                   f"provider keeps failing, contact support with that Idempotency-Key and client_reference "
                   f"{row['client_reference']}.")
