"""Placing a voucher order: intent first, one Idempotency-Key for every send, never a second order.

`place_order` is what `partnerkit orders create` runs, and what a fork calls instead of the raw
`PartnerClient.create_order` (which records nothing). The order debits the wallet when it is
created, and its answer can be lost after that: so, as a recharge submit does
(`reconcile.recharges.submit`), it

1. validates locally (`OrderInputError`, nothing recorded or sent), checks that the API key is the
   account's the database serves (`PartnerClient.check_account`: `AccountMismatch`, nothing recorded or
   sent) and opens the voucher key (vouchers delivered with the answer must be storable);
2. commits an intent (`partnerkit.store.order_intents`, migration 10) with the Idempotency-Key and
   a client `ref` (a UUID unless given) before the request exists. The provider keeps a client's
   refs unique ("Duplicate reference code"): once an order carries the ref, no second one can;
3. sends once and stores the answer (the order, its vouchers encrypted, a voucher fetch for any
   still missing) with the intent PLACED, in one transaction. A definite refusal (a 4xx, no budget,
   a connection never made, nothing sent) leaves it REFUSED: nothing was placed. An answer the store
   cannot take (the database locked past its busy timeout) leaves the intent open (UNKNOWN), never
   REFUSED: the order exists, and its replay or the catch-up stores it;
4. on an ambiguous failure (`partnerkit.errors.is_ambiguous`: a timeout or reset after sending, a
   5xx, a 2xx that cannot be read, a local error once the request left) replays the same key once:
   "a retry with the same Idempotency-Key within 24 hours replays the original response". Still no
   answer: the intent is UNKNOWN, and the outcome names the key, the ref and the command that
   replays it. The order catch-up (`partnerkit.vouchers.catch_up_orders`) links it to the listed
   order carrying its ref.

A new order (no key, a key never recorded, or a REFUSED intent's) is refused before anything is sent
(`UnresolvedOrder`) while an earlier order of the same product, denomination, quantity and wallet
is unresolved, UNKNOWN or INTENT (being sent, or its process died while sending), from the last
`HOLD_WINDOW`: it may be placed already, and a second one debits the wallet twice. Its replay
command resolves it; `force=True` (`--force`) places another order deliberately.

Given the key of a known intent, the same request is resumed with the intent's own ref; other
fields under that key are refused before anything is sent. A 2xx whose order is not the request's
(product, denomination or quantity differ: a key used for another order) raises `ReplayMismatch`.
"""

from __future__ import annotations

import logging
import shlex
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from partnerkit import errors
from partnerkit.config import Config
from partnerkit.crypto import Cipher, load_cipher
from partnerkit.errors import is_ambiguous
from partnerkit.money import MoneyError, cents, fmt, from_cents, to_decimal
from partnerkit.store import Database, jobs, order_intents, orders
from partnerkit.store import vouchers as voucher_store
from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp
from partnerkit.timeutil import parse_ts, utcnow
from partnerkit.vouchers import seal

log = logging.getLogger(__name__)

# How long an unresolved intent holds back a new order of the same fields, from its last send. The
# provider replays a key for 24 hours ("Idempotency record lifetime"): within them the replay command
# answers what happened, and the worker's order catch-up (every 5 minutes) links a placed order long
# before. One still open past them was most likely never placed; `partnerkit status` keeps naming it.
HOLD_HOURS = 24
HOLD_WINDOW = timedelta(hours=HOLD_HOURS)


class OrderInputError(errors.PartnerKitError, ValueError):
    """An order refused locally, before anything is recorded or sent."""


@dataclass(frozen=True)
class HeldIntent:
    """An unresolved intent that holds back a new order of the same fields."""

    intent_id: int
    idempotency_key: str
    ref: str
    state: str  # UNKNOWN (its answer was lost) or INTENT (being sent, or its process died while sending)
    age: timedelta  # since its last send (or its recording, if never sent)
    replay_command: str

    def describe(self) -> str:
        how = ("its answer was lost" if self.state == "UNKNOWN" else
               "not answered yet: another `orders create` may still be sending it, or its process died")
        return (f"order intent #{self.intent_id} is {self.state}, sent {_age(self.age)} ago and {how} "
                f"(Idempotency-Key {self.idempotency_key}, ref {self.ref}); replay it with `{self.replay_command}`")


class UnresolvedOrder(errors.PartnerKitError):
    """A new order refused before anything is recorded or sent: an earlier order of the same product,
    denomination, quantity and wallet has an unresolved outcome from the last `HOLD_WINDOW`, and may
    already be placed.

    `held` names each such intent (oldest first: key, ref, state, age, the command that replays it).
    Replay it (`place_order(..., idempotency_key=exc.held[0].idempotency_key)`: never a second order),
    let the order sync link it, or pass `force=True` (`--force`) when this is deliberately another order."""

    SHOWN = 3  # intents named in the message; `held` has them all

    def __init__(self, request: "OrderRequest", held: list[HeldIntent]) -> None:
        self.request, self.held = request, held
        more = f"; and {len(held) - self.SHOWN} more (`partnerkit status`)" if len(held) > self.SHOWN else ""
        super().__init__(
            f"not sent: an order of {request.describe()} may already be placed: "
            f"{'; '.join(h.describe() for h in held[:self.SHOWN])}{more}. The same key never orders twice, and "
            "`partnerkit orders sync` links the order if it was placed. If this is deliberately another order, "
            "add --force (force=True)")


@dataclass(frozen=True)
class OrderRequest:
    """A validated order body (the document's field names; `ref` is chosen with the intent)."""

    product_id: int
    denomination: Decimal
    quantity: int
    wallet_id: int | None = None
    email: str | None = None

    def describe(self) -> str:
        return f"product {self.product_id}, {self.quantity} x {fmt(self.denomination)}"


@dataclass
class OrderOutcome:
    """What placing (or resuming) one order established.

    `state` is the intent's: PLACED (`order_id`, `status`, `amount` are the order's) or UNKNOWN (the
    answer was lost: replay `idempotency_key`, as `replay_command` says; or it came but could not be
    stored: `order_id`, `amount` and `created` are the answer's). A refusal is raised."""

    intent_id: int
    state: str
    idempotency_key: str
    ref: str
    request: OrderRequest
    order_id: int | None = None
    status: str | None = None
    amount: Decimal | None = None
    vouchers_stored: int = 0  # stored for the order in all, this call's and earlier ones
    resumed: bool = False  # the key was a known intent's: a replay, never a second order
    message: str = ""
    created: Any = None  # the client's OrderCreated, when the provider answered
    replay_command: str = ""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise OrderInputError(f"{name} must be a whole number greater than zero, got {value!r}")
    return value


def validate_order(*, product_id: Any, denomination: Any, quantity: Any, wallet_id: Any = None,
                   email: str | None = None) -> OrderRequest:
    """Check an order against the document's body rules; raise OrderInputError naming the field."""
    try:
        amount = to_decimal(denomination, field="denomination", strict=True, typed=True)
    except MoneyError as exc:
        raise OrderInputError(f"denomination: {exc}") from None
    if amount <= 0:  # "Greater than 0.00"
        raise OrderInputError(f"denomination must be greater than 0, got {denomination}")
    if email is not None and (not isinstance(email, str) or not email.strip()):
        raise OrderInputError("email must be an e-mail address")
    return OrderRequest(_positive_int("product_id", product_id), amount, _positive_int("quantity", quantity),
                        None if wallet_id is None else _positive_int("wallet_id", wallet_id), email)


def new_ref() -> str:
    """A client ref for an order: a UUID, as the provider generates one when none is sent."""
    return str(uuid.uuid4())


def replay_command(intent: dict) -> str:
    """The `partnerkit orders create` line that resumes an intent under its own key and ref."""
    parts = ["partnerkit", "orders", "create", "--product-id", str(intent["product_id"]),
             "--denomination", fmt(from_cents(intent["denomination_cents"])) or "",
             "--quantity", str(intent["quantity"]), "--ref", intent["ref"]]
    if intent["email"]:
        parts += ["--email", intent["email"]]
    return shlex.join(parts + ["--idempotency-key", intent["idempotency_key"]])


def _age(age: timedelta) -> str:
    seconds = max(0, int(age.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _key(idempotency_key: str | None) -> str:
    from partnerkit.client import check_idempotency_key

    try:
        return check_idempotency_key(idempotency_key)
    except ValueError as exc:
        raise OrderInputError(str(exc)) from None


def _intent_request(intent: dict) -> OrderRequest:
    return OrderRequest(intent["product_id"], from_cents(intent["denomination_cents"]), intent["quantity"],  # type: ignore[arg-type]
                        intent["wallet_id"], intent["email"])


def _name(intent: dict) -> str:
    placed = f", order {intent['order_id']}" if intent["order_id"] else ""
    return f"order intent #{intent['id']} ({_intent_request(intent).describe()}, ref {intent['ref']}, " \
           f"{intent['state']}{placed})"


def _resume_check(intent: dict, request: OrderRequest, ref: str | None) -> None:
    """The key of a known intent carries its request: another one under it is refused (nothing sent)."""
    stored = _intent_request(intent)
    differ = [name for name in ("product_id", "denomination", "quantity") if getattr(request, name) != getattr(stored, name)]
    differ += [name for name, given, kept in (("wallet_id", request.wallet_id, stored.wallet_id),
                                              ("email", request.email, stored.email), ("ref", ref, intent["ref"]))
               if given is not None and given != kept]
    if differ:
        raise OrderInputError(f"Idempotency-Key {intent['idempotency_key']} is {_name(intent)}, not this request "
                              f"({', '.join(differ)} differ): nothing was sent; to place another order, run it "
                              "without --idempotency-key (idempotency_key)")


def place_order(config: Config, db: Database, client: Any, *, product_id: int, denomination: Any, quantity: int,
                ref: str | None = None, email: str | None = None, wallet_id: int | None = None,
                idempotency_key: str | None = None, force: bool = False, cipher: Cipher | None = None) -> OrderOutcome:
    """Place one order (or resume the intent of `idempotency_key`): intent first, at most one order.

    A new order whose fields match an unresolved intent raises `UnresolvedOrder`, unless `force`
    (deliberately another order). The key of an intent that may have placed its order (any state but
    REFUSED) resumes it, `force` or not."""
    request = validate_order(product_id=product_id, denomination=denomination, quantity=quantity,
                             wallet_id=wallet_id, email=email)
    if ref is not None and (not isinstance(ref, str) or not ref.strip()):
        raise OrderInputError("ref must be a non-empty text")
    key = _key(idempotency_key)
    if hasattr(client, "check_account"):  # the PartnerClient (stand-ins in tests have no account)
        # Before anything is recorded (a generated voucher key file included): a key of another account is
        # refused here, and an error of the wallet read that tells a new key's account is not the order's.
        client.check_account()
    # The voucher key is opened before anything is recorded or sent: vouchers delivered with the
    # answer must be stored, and a key error after the wallet is debited invites a second, paid, attempt.
    cipher = cipher or load_cipher(config)
    intent, resumed = _open_intent(db, key, request, ref, force=force)
    if intent["state"] == "PLACED" and intent["order_id"] is not None and orders.get(db, intent["order_id"]):
        # Nothing to learn from the provider: the order is stored, at least as new as the answer was.
        return _from_local(db, intent, request, note=f"Idempotency-Key {key} already placed order "
                           f"{intent['order_id']} ({_name(intent)}): nothing was sent, nothing ordered twice.")
    # A send of an intent sent before (and not refused) may meet the order its earlier send placed.
    may_exist = resumed and intent["state"] != "REFUSED"
    order_intents.mark_sending(db, intent["id"], utcnow())
    try:
        created = _send(db, client, intent)
    except errors.PartnerKitError as exc:
        if not is_ambiguous(exc):
            return _not_placed(db, intent, request, exc, may_exist=may_exist, resumed=resumed)
        _keep_open(db, intent, str(exc))
        log.warning("order intent #%s: the answer was lost (%s); replaying its Idempotency-Key",
                    intent["id"], exc, extra={"intent_id": intent["id"], "ref": intent["ref"]})
        try:
            created = _send(db, client, intent)  # the same key: the original answer, never a second order
        except errors.PartnerKitError as again:
            if not is_ambiguous(again):
                return _not_placed(db, intent, request, again, may_exist=True, resumed=resumed)
            _keep_open(db, intent, f"{exc}; its replay: {again}")
            return _unknown(db, intent, request, f"the answer was lost ({exc}) and so was its replay's ({again})",
                            resumed=resumed)
    return _placed(db, cipher, intent, request, created, resumed=resumed)


def _keep_open(db: Database, intent: dict, why: str) -> None:
    """Mark the intent UNKNOWN after a send whose outcome is not known. A database that cannot take it
    leaves the intent INTENT, open all the same: held against a second order, replayed by its key and
    linked by the order catch-up alike. So the mark never replaces what the caller is told."""
    try:
        order_intents.mark_unknown(db, intent["id"], why, utcnow())
    except errors.StorageError as exc:
        log.warning("order intent #%s stays INTENT, not marked UNKNOWN (%s); it is open either way",
                    intent["id"], exc, extra={"intent_id": intent["id"], "ref": intent["ref"]})


def _refuse(db: Database, intent: dict, why: str) -> None:
    """Mark the intent REFUSED: nothing was placed for it. A database that cannot take it leaves the intent
    open (INTENT or UNKNOWN), which only holds back the same order until its replay or the catch-up settles
    it; the caller hears the refusal all the same, not the database."""
    try:
        order_intents.mark_refused(db, intent["id"], why, utcnow())
    except errors.StorageError as exc:
        log.warning("order intent #%s was refused (%s) but stays open: %s", intent["id"], why, exc,
                    extra={"intent_id": intent["id"], "ref": intent["ref"]})


def _open_intent(db: Database, key: str, request: OrderRequest, ref: str | None, *, force: bool) -> tuple[dict, bool]:
    """(the intent to send, whether it existed already): the key's known intent, checked against the
    request, or a new one committed now, before the request exists. A new order (a new intent, or a
    REFUSED one sent again: nothing was placed for it) is refused while one of the same fields is
    unresolved (`UnresolvedOrder`, nothing recorded), unless `force`. The look-ups and the insert are
    one IMMEDIATE transaction: two processes placing the same order, or under one key, cannot both pass."""
    now = utcnow()
    with transaction(db) as conn:
        known = order_intents.by_key(conn, key)
        if known is not None:
            _resume_check(known, request, ref)
        if not force and (known is None or known["state"] == "REFUSED"):
            held = order_intents.held(conn, product_id=request.product_id, denomination=request.denomination,
                                      quantity=request.quantity, wallet_id=request.wallet_id, since=now - HOLD_WINDOW)
            if held:
                raise UnresolvedOrder(request, [_held(intent, now) for intent in held])
        if known is not None:
            return known, True
        intent_id = order_intents.record(conn, idempotency_key=key, ref=ref or new_ref(), product_id=request.product_id,
                                         denomination=request.denomination, quantity=request.quantity,
                                         wallet_id=request.wallet_id, email=request.email, now=now)
        return order_intents.get(conn, intent_id) or {}, False


def _held(intent: dict, now: datetime) -> HeldIntent:
    since = parse_ts(intent["sent_at"] or intent["created_at"]) or now
    return HeldIntent(intent["id"], intent["idempotency_key"], intent["ref"], intent["state"], now - since,
                      replay_command(intent))


def _send(db: Database, client: Any, intent: dict) -> Any:
    request = _intent_request(intent)
    # The create body carries money as a JSON number (the document's create table): whole as an integer.
    value = int(request.denomination) if request.denomination == request.denomination.to_integral_value() \
        else request.denomination
    try:
        return client.create_order(product_id=request.product_id, denomination=value, quantity=request.quantity,
                                   wallet_id=request.wallet_id, ref=intent["ref"], email=request.email,
                                   idempotency_key=intent["idempotency_key"])
    except errors.PartnerKitError:
        raise
    except BaseException:
        _keep_open(db, intent, "interrupted while sending")
        raise


def _placed(db: Database, cipher: Cipher, intent: dict, request: OrderRequest, created: Any, *,
            resumed: bool) -> OrderOutcome:
    """Store the order the provider answered (and its vouchers) with the intent PLACED, in one transaction.

    An order that is not the request's is stored too (it is the account's, paid for), but the intent
    is refused: its key belonged to that other order, and nothing was placed for this request."""
    answered = OrderRequest(created.product_id, created.denomination, created.quantity)
    differ = [name for name in ("product_id", "denomination", "quantity")
              if getattr(answered, name) != getattr(request, name)]
    now = utcnow()
    sealed = [seal(cipher, created.id, v) for v in created.vouchers]
    status = created.status.upper()
    try:
        with transaction(db) as conn:
            orders.apply(conn, created.id, status, now=now, source="create", reference_code=created.ref,
                         transaction_id=created.transaction_id, product_id=created.product_id,
                         quantity=created.quantity, amount_cents=cents(created.amount),
                         denomination_cents=cents(created.denomination), discount_cents=cents(created.discount),
                         email=request.email if not differ else None,
                         placed_at=stamp(created.placed_at) if isinstance(created.placed_at, datetime) else None,
                         delivered_quantity=len(sealed) if status in orders.DELIVERING else None)
            voucher_store.add(conn, created.id, sealed, now=now)
            stored = voucher_store.count(conn, created.id)
            if status in orders.DELIVERING and stored < created.quantity:
                jobs.queue(conn, created.id, now=now, expected_status=status, expected_count=created.quantity)
            if not differ:
                order_intents.mark_placed(conn, intent["id"], created.id, now)
    except errors.StorageError as exc:
        if differ:
            raise  # another order's answer: nothing was placed for this request (ReplayMismatch below)
        return _unstored(db, intent, request, created, exc, resumed=resumed)
    if differ:
        message = (f"Idempotency-Key {intent['idempotency_key']} belongs to order {created.id} "
                   f"({answered.describe()}), not to this request ({request.describe()}: {', '.join(differ)} differ): "
                   "the provider replayed that order's answer and placed nothing for this request; run it without "
                   "--idempotency-key (idempotency_key) to place it")
        _refuse(db, intent, message)
        raise errors.ReplayMismatch(message, method="POST", path="/api/v1/orders")
    note = (f"Idempotency-Key {intent['idempotency_key']} replayed ({_name({**intent, 'state': 'PLACED'})}): "
            "the provider's answer is the original order's, no second order was placed." if resumed else "")
    return OrderOutcome(intent["id"], "PLACED", intent["idempotency_key"], created.ref, request, order_id=created.id,
                        status=status, amount=created.amount, vouchers_stored=stored, resumed=resumed, message=note,
                        created=created)


def _unstored(db: Database, intent: dict, request: OrderRequest, created: Any, exc: errors.StorageError, *,
              resumed: bool) -> OrderOutcome:
    """The provider placed the order and answered, but the store could not take it (locked past its busy
    timeout, full): nothing of it was stored, so the intent stays open (UNKNOWN, or INTENT if even that
    mark fails) for its replay or the order catch-up, which store it then. Never REFUSED: the money moved."""
    log.error("order intent #%s: the provider placed order %s but it could not be stored (%s); the intent stays "
              "open for its replay or the order catch-up", intent["id"], created.id, exc,
              extra={"intent_id": intent["id"], "ref": intent["ref"], "order_id": created.id})
    _keep_open(db, intent, f"order {created.id} was placed but could not be stored: {exc}")
    outcome = _unknown(db, intent, request, f"the provider placed order {created.id} ({created.status.upper()}, "
                       f"{fmt(created.amount)}), but it could not be stored here ({exc})", resumed=resumed,
                       placed=created.id)
    outcome.order_id, outcome.amount, outcome.created = created.id, created.amount, created
    return outcome


def _from_local(db: Database, intent: dict, request: OrderRequest, *, note: str) -> OrderOutcome:
    """An intent's order as stored (PLACED), without a call."""
    row = orders.get(db, intent["order_id"]) or {}
    return OrderOutcome(intent["id"], "PLACED", intent["idempotency_key"], row.get("reference_code") or intent["ref"],
                        request, order_id=intent["order_id"], status=row.get("status"),
                        amount=from_cents(row.get("amount_cents")), vouchers_stored=voucher_store.count(db, intent["order_id"]),
                        resumed=True, message=note)


def _unread(exc: errors.PartnerKitError) -> bool:
    """A refusal given before the provider looked at the request (or nothing sent): it says nothing of
    what an earlier send under the same key did."""
    if getattr(exc, "request_sent", None) is False:
        return True  # never sent: a connection never made, a budget the store could not take
    return isinstance(exc, (errors.BudgetExhausted, errors.RateLimited, errors.Unauthorized))


def _not_placed(db: Database, intent: dict, request: OrderRequest, exc: errors.PartnerKitError, *, may_exist: bool,
                resumed: bool) -> OrderOutcome:
    """A definite answer that placed nothing now: REFUSED and raised, unless an earlier send of this
    intent may have placed the order. Then "Duplicate reference code" says it did, and a refusal the
    provider gave before reading the request (a 429, a 401, no local budget) says nothing: the
    intent stays open. Any other refusal under the same key is the provider's answer to the key,
    which it would have replayed had an order been placed with it ("replays the original response")."""
    if may_exist and _unread(exc):
        _keep_open(db, intent, f"its replay was not read: {exc}")
        return _unknown(db, intent, request, f"its replay was refused before the provider read it ({exc}), and an "
                        "earlier send may have placed it", resumed=resumed)
    if not (may_exist and isinstance(exc, errors.DuplicateOrderReference)):
        _refuse(db, intent, str(exc))
        raise exc
    # Past the key's 24 hours the provider no longer replays it, but the ref still guards the order.
    local = orders.by_reference(db, intent["ref"])
    if local is not None and (local["product_id"], local["denomination_cents"], local["quantity"]) == (
            intent["product_id"], intent["denomination_cents"], intent["quantity"]):
        try:
            with transaction(db) as conn:
                order_intents.mark_placed(conn, intent["id"], local["id"], utcnow())
        except errors.StorageError as failed:  # still open: the UNKNOWN answer below, and the catch-up links it
            log.warning("order intent #%s: its order %s could not be linked (%s)", intent["id"], local["id"], failed,
                        extra={"intent_id": intent["id"], "ref": intent["ref"]})
        else:
            linked = order_intents.get(db, intent["id"]) or intent
            if linked["order_id"] == local["id"]:
                return _from_local(db, linked, request, note=f"An order with ref {intent['ref']} exists: order "
                                   f"{local['id']}, placed by an earlier send of this intent; no second order was "
                                   "placed.")
    _keep_open(db, intent, f"{exc}: an order with its ref exists")
    return _unknown(db, intent, request, f"the provider answers {exc}: an order with ref {intent['ref']} exists, "
                    "placed by an earlier send of this intent", exists=True, resumed=resumed)


def _unknown(db: Database, intent: dict, request: OrderRequest, why: str, *, exists: bool = False,
             resumed: bool, placed: int | None = None) -> OrderOutcome:
    command = replay_command(intent)
    if placed is not None:
        message = (f"Order intent #{intent['id']} stays open (UNKNOWN): {why}. Do NOT order it again without its key. "
                   f"Once the database takes writes, `{command}` stores it (Idempotency-Key "
                   f"{intent['idempotency_key']}: the provider replays the original answer, no second order), and "
                   f"`partnerkit orders sync` (the worker's order catch-up, every 5 minutes) links order {placed} "
                   f"by its ref {intent['ref']}.")
    elif exists:
        message = (f"Order intent #{intent['id']}: {why}. `partnerkit orders sync` (and the worker's order "
                   f"catch-up, every 5 minutes) brings that order and links it to this intent. Do NOT order it again "
                   f"without the key (Idempotency-Key {intent['idempotency_key']}, ref {intent['ref']}).")
    else:
        message = (f"Order intent #{intent['id']} is UNKNOWN: {why}; the order may or may not have been placed. "
                   f"Do NOT order it again without its key (`orders create` refuses the same order for {HOLD_HOURS} "
                   f"hours, unless --force): replay it with `{command}` (Idempotency-Key "
                   f"{intent['idempotency_key']}, ref {intent['ref']}: the same key replays the original answer and "
                   "the provider refuses a second order with the same ref), or let `partnerkit orders sync` (the "
                   "worker's order catch-up, every 5 minutes) link the order carrying that ref.")
    return OrderOutcome(intent["id"], "UNKNOWN", intent["idempotency_key"], intent["ref"], request, resumed=resumed,
                        message=message, replay_command=command)
