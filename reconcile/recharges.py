"""Recharge submit: intent first, HTTP status before body, never a blind resend.

`submit` validates locally, checks that the API key is the account's the database serves
(`PartnerClient.check_account`), commits an INTENT row (with its Idempotency-Key and a client_reference)
before the request exists, sends it once, and stores the answer. An ambiguous failure (timeout,
500, an unreadable answer) marks the row UNKNOWN and locates it at once (`reconcile.locate`, in the
document's order, bounded in time). partnerkit never re-sends with a new key on its own.

An answer that is not the request (its mobile number, operator id, face or client_reference differs) is
another request's, replayed under the same Idempotency-Key: nothing is linked, the intent stays UNKNOWN with
the reason, and `errors.ReplayMismatch` is raised (`answer_of_another`), as `orders create` does. An answer
naming a recharge the store already holds (the sync stored it before its key was sent through partnerkit) is
that recharge: the intent is merged into its row (`merged_answer`). One whose record disagrees with the row
holding its id is not, and the intent stays UNKNOWN (`answer_held_elsewhere`).
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from partnerkit import errors, senders
from partnerkit.client import PartnerApi, check_idempotency_key
from partnerkit.config import Config
from partnerkit.errors import is_ambiguous  # the one notion of a lost write's answer, shared with orders
from partnerkit.money import MoneyError, fmt, from_cents, to_decimal
from partnerkit.printable import printable
from partnerkit.store import Database
from partnerkit.store import recharges as store
from partnerkit.store.budget import after_429
from partnerkit.store.db import database_file, transaction
from partnerkit.timeutil import utcnow
from reconcile.recharge_hold import UnresolvedRecharge, open_ones_named, refuse_if_held  # noqa: F401 (submit raises it)

log = logging.getLogger("reconcile.recharges")

MOBILE = re.compile(r"[0-9]{10}")  # Limits: digits only, 10 digits for India (fullmatch: no trailing newline)
NICKNAME_MAX = 40  # Limits: alphanumeric, max 40 characters


class RechargeInputError(errors.PartnerKitError, ValueError):
    """A submit field is refused locally, before anything is recorded or sent. `locate` raises it too for
    an intent whose stored Idempotency-Key the client refuses: never sent, and removed."""


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

    @classmethod
    def of_row(cls, row: dict) -> "SubmitRequest":
        """The request a local recharge row recorded (to send it again under its key, or compare)."""
        return cls(row["mobile_number"], row["operator_id"], from_cents(row["amount_cents"]),  # type: ignore[arg-type]
                   row["circle_id"], _flag(row["is_postpaid"]), _flag(row["is_special"]), row["nickname"],
                   bool(row["force"]))

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
    performed_now: bool = False  # a replay of the key made the recharge (its first send never arrived)
    merged_from: int | None = None  # the intent merged into `local_id`, the row that already held the recharge
    unchecked: bool = False  # some lookup went unanswered: "could not be checked", not "not there"


def validate_mobile(value: Any) -> str:
    """10 digits, no country prefix, spaces or dashes."""
    text = "" if value is None else str(value)
    if not MOBILE.fullmatch(text):
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
    """A fresh Idempotency-Key (35 visible ASCII characters)."""
    return f"pk-{uuid.uuid4().hex}"


def validate_key(key: Any) -> str:
    """An Idempotency-Key as the client will send it: the client's one check (Limits: 8 to 256 characters;
    visible ASCII without spaces, since it is a header), refused as a RechargeInputError."""
    try:
        return check_idempotency_key(key)
    except ValueError as exc:
        raise RechargeInputError(str(exc)) from None


def new_client_reference() -> str:
    """A client_reference unique enough for locate step 2 to match on, in the form the matcher recognises as
    partnerkit's own (partnerkit.store.recharges.OWN_REFERENCE_PREFIX)."""
    return store.OWN_REFERENCE_PREFIX + uuid.uuid4().hex[:store.OWN_REFERENCE_DIGITS]


def status_from_answer(http_status: int, body_status: str) -> str:
    """Recharge submit: the HTTP status carries meaning and is read before the body."""
    if http_status == 202:
        return "PROCESSING"  # accepted, not settled: only polling settles it, whatever the body says
    if http_status == 200:
        return stored_status(body_status)  # SUCCESS or FAILED is final; a 200 PROCESSING is simply polled
    raise errors.MalformedResponse(f"recharge submit answered HTTP {http_status}, not 200 or 202", status=http_status)


def stored_status(status: Any) -> str:
    """The stored status of a recharge the provider holds. A status the document does not name is
    kept as PROCESSING: the provider took the request (the wallet may be debited), so the recharge
    is linked and read again by the poller, never discarded or left UNKNOWN."""
    try:
        return store.normalise_status(status)[0]
    except errors.StorageError:
        return "PROCESSING"


def submit(config: Config, db: Database, client: PartnerApi, *, mobile_number: str, operator_id: int, amount: Any,
           client_reference: str | None = None, circle_id: int | None = None, is_postpaid: bool | None = None,
           is_special: bool | None = None, nickname: str | None = None, force: bool = False,
           idempotency_key: str | None = None, now: datetime | None = None) -> SubmitOutcome:
    """Submit one recharge: validate, record the intent, send once, store the answer or locate it.

    A new recharge of a mobile number and amount whose earlier one is unresolved (INTENT or UNKNOWN, from the
    last 24 hours) raises `UnresolvedRecharge`, nothing recorded or sent, unless `force` (deliberately another
    one: the provider's duplicate guard is passed too). The key of a local recharge locates that one."""
    request = validate_submit(mobile_number=mobile_number, operator_id=operator_id, amount=amount,
                              circle_id=circle_id, is_postpaid=is_postpaid, is_special=is_special,
                              nickname=nickname, force=force)
    # The client checks a key only when it sends it, after the intent is recorded: checked here first,
    # a key it refuses is refused with nothing recorded, never an intent that can never be sent.
    key = new_idempotency_key() if idempotency_key is None else validate_key(idempotency_key)
    # Before the intent: a key of another account is refused with nothing recorded, and an error of
    # the wallet read that tells a new key's account is never taken for the submit's own.
    client.check_account()
    known = store.by_idempotency_key(db, key) if idempotency_key is not None else None
    if known is not None:
        return _resume(config, db, client, known, request, client_reference)
    reference = client_reference or new_client_reference()
    submitted_at = now or utcnow()
    # The lock this submit holds until it returns (partnerkit.senders), so that `status`, `recharges locate` and the
    # hold can tell its INTENT from one a killed submit left: taken before the intent is committed (no reader sees
    # the row without it) and freed after the answer is stored or the row is left open for locate.
    with senders.holding(database_file(db)) as sending:
        return _record_and_send(config, db, client, key, request, reference, submitted_at, client_reference, sending)


def _record_and_send(config: Config, db: Database, client: PartnerApi, key: str, request: SubmitRequest,
                     reference: str, submitted_at: datetime, client_reference: str | None,
                     sending: senders.Held | None) -> SubmitOutcome:
    """`submit` once its request is validated and its sender's lock taken: the intent, the send, the answer."""
    try:
        local_id = _record_intent(db, key, request, reference, submitted_at, sending)
    except errors.StorageError as exc:
        known = store.by_idempotency_key(db, key)  # another process recorded this key a moment ago
        if known is None:
            exc.request_sent = False  # raised before the request existed: nothing can have taken effect
            if isinstance(exc, errors.DatabaseBusy) and getattr(db, "lock_wait", None) is not None:
                raise  # a command's wait for the lock that ran out says that nothing was sent
            said = type(exc)(f"{exc}: no recharge was sent, and nothing of this run was recorded; run the same "
                             "command again once the database takes writes")
            said.request_sent = False
            raise said from exc
        return _resume(config, db, client, known, request, client_reference)
    try:
        result = client.submit_recharge(**request.body(reference), idempotency_key=key)
        status = status_from_answer(result.http_status, result.recharge.status)
    except errors.DuplicateRecharge as exc:
        _discard(db, local_id, exc)
        # An open intent of the number and amount comes before --force: it may be the recharge the guard saw.
        open_ones = open_ones_named(db, mobile_number=request.mobile_number, amount=request.amount,
                                    besides=local_id, now=utcnow())
        raise DuplicateSubmit(
            f"a recharge of {request.amount} to {request.mobile_number} was submitted recently. {open_ones}"
            f"If this second recharge is intended, submit again with --force (force=True)",
            status=409, code=exc.code, trace_id=exc.trace_id, body=exc.body, method=exc.method, path=exc.path) from exc
    except errors.PartnerKitError as exc:
        if not is_ambiguous(exc):
            removed = _discard(db, local_id, exc)  # a definite refusal: no recharge exists for this intent
            if isinstance(exc, errors.RateLimited):  # the provider's own words say neither
                exc.outcome = after_429("no recharge was made", exc.retry_after)
            if isinstance(exc, errors.StorageError) and not removed:
                raise _unsent(exc, local_id) from exc
            raise
        # Any other error once the request left, a local one included (the database locked while the
        # answer was on its way), says nothing of what the provider did: locate it, never drop it.
        keep_open(db, local_id, str(exc))
        log.warning("recharge submit #%s outcome unknown (%s); locating it", local_id, exc,
                    extra={"local_id": local_id})
        from reconcile.locate import locate_after_submit  # locate builds on this module

        return locate_after_submit(config, db, client, local_id, exc)
    except BaseException:
        keep_open(db, local_id, "interrupted while sending")
        raise
    try:
        row = store.record_response(db, local_id, result.recharge, status=status, seen_at=utcnow(),
                                    http_status=result.http_status)
    except store.AnswerOfAnotherRequest as exc:
        raise answer_of_another(db, local_id, key, result.recharge, status, exc) from None
    except store.RechargeHeldElsewhere as exc:
        return answer_held_elsewhere(db, local_id, result.recharge, status, exc, http_status=result.http_status)
    except errors.StorageError as exc:
        return answer_not_stored(db, local_id, result.recharge, status, exc, http_status=result.http_status)
    if row.get("local_id", local_id) != local_id:
        return merged_answer(local_id, row, result.recharge, http_status=result.http_status)
    return SubmitOutcome(local_id, status, key, reference, result.http_status, result.recharge,
                         message=describe(row), row=row)


def _record_intent(db: Database, key: str, request: SubmitRequest, reference: str, submitted_at: datetime,
                   sending: senders.Held | None = None) -> int:
    """Commit the INTENT row of a new recharge; its local id. Unless `force`, an open intent of the same number
    and amount holds it back first (`UnresolvedRecharge`, nothing recorded): the look-up and the insert are one
    IMMEDIATE transaction, so two submits of one recharge at once cannot both pass. A key recorded a moment
    ago by another process is not held: its insert fails, and the caller resumes that recharge."""
    with transaction(db):
        if not request.force and store.by_idempotency_key(db, key) is None:
            refuse_if_held(db, mobile_number=request.mobile_number, amount=request.amount, now=submitted_at)
        return store.record_intent(db, idempotency_key=key, mobile_number=request.mobile_number,
                                   operator_id=request.operator_id, amount=request.amount,
                                   client_reference=reference, submitted_at=submitted_at,
                                   circle_id=request.circle_id, is_postpaid=request.is_postpaid,
                                   is_special=request.is_special, nickname=request.nickname, force=request.force,
                                   sender_lock=sending.offset if sending else None,
                                   sender=sending.who if sending else None)


def _discard(db: Database, local_id: int, refusal: Exception) -> bool:
    """Remove a definitely refused intent; whether it was removed. A database that cannot take it leaves the row
    open (locate then finds no such recharge), and the caller still hears the refusal, not the database."""
    try:
        store.discard_refused(db, local_id)
    except errors.StorageError as exc:
        log.warning("recharge submit #%s was refused (%s) but its intent could not be removed (%s); it stays "
                    "open until `recharges locate` finds no such recharge", local_id, refusal, exc,
                    extra={"local_id": local_id})
        return False
    return True


def _unsent(exc: errors.StorageError, local_id: int) -> errors.StorageError:
    """The error for a submit the store stopped before its request left (the request budget could not be taken: a
    full disk), whose intent could not be removed either: it stays INTENT, which `partnerkit status` cannot tell from
    a submit whose answer was lost, so the error says what settles it."""
    said = type(exc)(f"{exc}: no recharge was sent; local recharge #{local_id} stays INTENT, as the database could "
                     "not remove it either, and `partnerkit status` names it among the unknown outcomes until it is "
                     f"settled: `partnerkit recharges locate --local-id {local_id}` (within 5 minutes of the submit, "
                     "if the provider shows none, it sends its key then, once: the recharge is made), or, if it is no "
                     f"longer wanted, `partnerkit recharges close {local_id} --note TEXT`")
    said.request_sent = False
    return said


def keep_open(db: Database, local_id: int, why: str) -> None:
    """Mark a row UNKNOWN after a send whose outcome is not known. A database that cannot take it leaves
    the row INTENT: open all the same for locate and the sync (both read INTENT and UNKNOWN rows), so
    the mark never replaces what the caller is told."""
    try:
        store.mark_unknown(db, local_id, why, utcnow())
    except errors.StorageError as exc:
        log.warning("local recharge #%s stays INTENT, not marked UNKNOWN (%s); it is open either way",
                    local_id, exc, extra={"local_id": local_id})


def _kept_open(db: Database, local_id: int, recharge: Any, reason: str) -> tuple[dict, str]:
    """Keep intent `local_id` open with `reason`; return its row as stored now (empty if it cannot be read)
    and the answer's payable as a message fragment (", payable 98.00", or "")."""
    keep_open(db, local_id, reason)
    try:
        row = store.get(db, local_id) or {}
    except errors.StorageError:
        row = {}
    payable = getattr(recharge, "payable", None)
    return row, f", payable {fmt(payable)}" if isinstance(payable, Decimal) else ""


def answer_not_stored(db: Database, local_id: int, recharge: Any, status: str, exc: errors.StorageError, *,
                      http_status: int | None = None, head: str = "") -> SubmitOutcome:
    """The provider answered with its recharge, but the store could not take it (locked past its busy
    timeout, full): the row stays open (INTENT or UNKNOWN) for `recharges locate` and the recharge sync,
    which link it by its client_reference once the database takes writes. Said so, never dropped."""
    log.error("local recharge #%s: the provider's recharge %s (%s) could not be stored (%s); the row stays open "
              "for locate and the sync", local_id, recharge.id, status, exc,
              extra={"local_id": local_id, "recharge_id": recharge.id})
    row, paid = _kept_open(db, local_id, recharge, f"the provider answered recharge {recharge.id} ({status}) but it "
                                                 f"could not be stored: {exc}")
    message = (f"{head}The provider answered: recharge {recharge.id} ({recharge.reference_number}) {status}{paid}, "
               f"but it could not be stored here ({exc}). Local recharge #{local_id} stays {row.get('status') or 'open'}: once the database "
               f"takes writes, `partnerkit recharges locate --local-id {local_id}` links it (it searches first "
               "and finds it; nothing is sent twice), as does the worker's recharge sync. Do NOT submit it again "
               "with a new key.")
    return SubmitOutcome(local_id, row.get("status") or "INTENT", row.get("idempotency_key"),
                         row.get("client_reference"), http_status, recharge, message=message, row=row)


def merged_answer(local_id: int, row: dict, recharge: Any, *, http_status: int | None = None, head: str = "",
                  located_by: str | None = None) -> SubmitOutcome:
    """The answer named a recharge the store already held (`row`, stored by a provider read): intent
    `local_id` was merged into it (partnerkit.store.recharges, `record_response`). Its outcome is that
    row's, as for any replayed answer."""
    log.info("local recharge #%s merged into local #%s, which already held the provider's recharge %s", local_id,
             row["local_id"], row["provider_id"], extra={"local_id": row["local_id"], "recharge_id": row["provider_id"]})
    message = (f"{head}{describe(row)} It was already known as local #{row['local_id']}, synced from the provider; "
               f"its key is now recorded there, and this submit's intent (local #{local_id}) is merged into it: one "
               "recharge, stored once.")
    return SubmitOutcome(row["local_id"], row["status"], row["idempotency_key"], row["client_reference"], http_status,
                         recharge, located_by=located_by, message=message, row=row, merged_from=local_id)


def answer_of_another(db: Database, local_id: int, key: str, recharge: Any, status: str,
                      exc: store.AnswerOfAnotherRequest, *, head: str = "") -> errors.ReplayMismatch:
    """The answer to intent `local_id`'s Idempotency-Key is another request's recharge (`exc`: what differs): the
    key was already used for another recharge, and the provider replayed its original answer. This recharge was
    not made under the key, and the answered one is not linked to it: the intent stays open (UNKNOWN) with
    `exc.reason` in its last_error (`store.key_taken` reads it back: its key is never sent again, since the same
    answer would come back). Returns the error to raise (`orders create`'s `ReplayMismatch`, exit 1)."""
    log.error("local recharge #%s: the provider answered its Idempotency-Key with recharge %s, another request's: "
              "not linked, the intent stays open (its last_error says what differs)", local_id, recharge.id,
              extra={"local_id": local_id, "recharge_id": recharge.id})
    row, _ = _kept_open(db, local_id, recharge, exc.reason(status))
    kept = ("with this reason in its last_error (`partnerkit status` names it); its key is never sent again (the "
            "same answer would come back)" if store.key_taken(row.get("last_error")) else
            "though this reason could not be written to it now (a send of its key would meet the same answer)")
    answered = store.provider_fields(recharge)
    theirs = ", ".join(part for part in (
        answered["mobile_number"], answered["operator_id"] is not None and f"operator {answered['operator_id']}",
        isinstance(answered["face"], Decimal) and f"face {fmt(answered['face'])}") if part)
    reference = f"{recharge.reference_number}, " if recharge.reference_number else ""
    mine = (f"local recharge #{local_id}: {row['mobile_number']}, operator {row['operator_id']}, "
            f"amount {fmt(from_cents(row['amount_cents']))}" if row else f"local recharge #{local_id}")
    known = (f" (recharge {recharge.id} is local #{exc.holder} here: `partnerkit recharges show {exc.holder}`)"
             if exc.holder is not None else "")
    message = (f"{head}Idempotency-Key {key} belongs to recharge {recharge.id} "
               f"({reference}{status}{': ' + theirs if theirs else ''}), not to this request ({mine}): "
               f"{'; '.join(exc.differences)}. The key {store.KEY_TAKEN}, whose answer the provider replayed: this "
               f"recharge was not made under it, and recharge {recharge.id} is not linked to it{known}. Local recharge "
               f"#{local_id} stays {row.get('status') or 'open'}, {kept}. What to do: "
               f"{store.key_taken_advice(local_id)}.")
    return errors.ReplayMismatch(message, method="POST", path="/api/v1/recharges")


def answer_held_elsewhere(db: Database, local_id: int, recharge: Any, status: str,
                          exc: store.RechargeHeldElsewhere, *,
                          http_status: int | None = None, head: str = "") -> SubmitOutcome:
    """The answer names a recharge id another local row holds with other fields, or under another
    Idempotency-Key (`exc`): two recharges under one id, not a database
    fault. Nothing is merged, the intent stays UNKNOWN with the reason in its last_error
    (`exc.reason`, which `store.held_elsewhere` reads back: locate never sends its key again)."""
    held = f"local recharge #{exc.holder}"
    reason = exc.reason(status, recharge.reference_number)
    log.error("local recharge #%s: the provider's answer names recharge %s, which local recharge #%s already holds "
              "and is not this one: not merged, the intent stays open (its last_error says what differs)", local_id,
              recharge.id, exc.holder, extra={"local_id": local_id, "recharge_id": recharge.id})
    row, paid = _kept_open(db, local_id, recharge, reason)
    compare = store.HeldId(recharge.id, recharge.reference_number, status, exc.holder).compare
    message = (f"{head}The provider answered: recharge {recharge.id} ({recharge.reference_number}) {status}{paid}. But "
               f"{held} already holds recharge {recharge.id} and is not this one: "
               f"{'; '.join(exc.differences)}. Two recharges under one id is not a database fault, and they are not "
               f"merged: local recharge #{local_id} stays {row.get('status') or 'open'}. What to do: {compare}: "
               f"{store.HELD_ADVICE}. Its key would be answered with the same id, so `recharges locate` only searches "
               "for it and refuses --replay. Do NOT submit it again with a new key.")
    return SubmitOutcome(local_id, row.get("status") or "INTENT", row.get("idempotency_key"),
                         row.get("client_reference"), http_status, recharge, message=message, row=row)


def _resume(config: Config, db: Database, client: PartnerApi, row: dict, request: SubmitRequest,
            client_reference: str | None) -> SubmitOutcome:
    """`--idempotency-key K` of a local recharge: the same request is that recharge's `locate` (as
    `recharges locate` runs it: search first); another request under K is refused, nothing sent."""
    stored = SubmitRequest.of_row(row)
    differ = [name for name in ("mobile_number", "operator_id", "amount", "circle_id", "is_postpaid", "is_special",
                                "nickname", "force") if getattr(request, name) != getattr(stored, name)]
    if client_reference is not None and client_reference != row["client_reference"]:
        differ.append("client_reference")
    if differ:
        raise RechargeInputError(
            f"Idempotency-Key {row['idempotency_key']} is local recharge #{row['local_id']}'s "
            f"({row['mobile_number']}, {from_cents(row['amount_cents'])}, {row['status']}), not this request "
            f"({', '.join(differ)} differ): nothing was sent; submit without --idempotency-key (idempotency_key) for a new recharge")
    from reconcile.locate import locate  # locate builds on this module

    found = locate(config, db, client, local_id=row["local_id"])
    found.message = (f"Idempotency-Key {row['idempotency_key']} is local recharge #{row['local_id']}'s: ran its "
                     "locate instead of submitting again. " + found.message)
    return found


def describe(row: dict) -> str:
    """One sentence for the user about a stored recharge; the provider's text in it (its reference, a
    failure reason) printable, so an ESC sequence or a line break it sent never reaches the terminal as such."""
    reference = printable(str(row.get("reference_number")))
    ident = f"recharge {row.get('provider_id')} ({reference}, local #{row['local_id']})"
    payable = from_cents(row.get("payable_cents"))
    if row["status"] == "SUCCESS":
        return f"{ident} SUCCESS: confirmed by the operator, wallet debited {payable}."
    if row["status"] == "FAILED":
        reason = printable(str(row.get("failure_reason") or "no reason given"))
        return f"{ident} FAILED: {reason}; the wallet was credited back."
    if row["status"] == "REVERSED":
        return f"{ident} REVERSED: the wallet was credited back."
    if row["status"] == "PROCESSING":
        return f"{ident} PROCESSING: accepted, wallet debited {payable}; `partnerkit worker` polls it until it settles."
    return f"local recharge #{row['local_id']} is {row['status']}."


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)
