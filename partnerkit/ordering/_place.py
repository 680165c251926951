"""The placing procedure: intent first, one send, the same Idempotency-Key once more on a lost answer.

`place_order` validates, checks the account, opens the voucher key (`KeyFollower`), commits or resumes the intent
(`_open_intent`, where `UnresolvedOrder` holds back a second order) and sends; what the answer
settles is `partnerkit.ordering._answer`'s.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from partnerkit import errors, senders
from partnerkit.config import Config
from partnerkit.crypto import Cipher, KeyFollower
from partnerkit.errors import is_ambiguous
from partnerkit.ordering._answer import _from_local, _keep_open, _not_placed, _placed, _unknown
from partnerkit.ordering._request import (
    HOLD_WINDOW, HeldIntent, OrderInputError, OrderOutcome, OrderRequest, UnresolvedOrder, _intent_request, _key, _name,
    _resume_check, never_sent, new_ref, replay_command, validate_order,
)
from partnerkit.store import Database, closures, order_intents, orders
from partnerkit.store.db import database_file, transaction
from partnerkit.timeutil import parse_ts, utcnow

if TYPE_CHECKING:
    from partnerkit.client import PartnerApi

log = logging.getLogger("partnerkit.ordering")


def place_order(config: Config, db: Database, client: PartnerApi, *, product_id: int, denomination: Any, quantity: int,
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
    # Before anything is recorded (a generated voucher key file included): a key of another account is
    # refused here, and an error of the wallet read that tells a new key's account is not the order's.
    client.check_account()
    # The voucher key is opened before anything is recorded or sent: vouchers delivered with the
    # answer must be stored, and a key error after the wallet is debited invites a second, paid, attempt.
    # They are sealed with the key file as it is when the answer is stored (`_placed`), not as it is now:
    # the answer can take up to the HTTP timeout, and a replay as long again.
    keys = KeyFollower(config, cipher)
    # The lock this run holds until it returns (partnerkit.senders), so that `status` and the hold can tell its
    # INTENT from one a killed run left: taken before the intent is committed or marked sending, freed after the
    # answer is stored or the intent is left open.
    with senders.holding(database_file(db)) as sending:
        return _place(db, client, keys, key, request, ref, force=force, sending=sending)


def _place(db: Database, client: PartnerApi, keys: KeyFollower, key: str, request: OrderRequest, ref: str | None, *,
           force: bool, sending: senders.Held | None) -> OrderOutcome:
    """`place_order` once its request is validated and its sender's lock taken: the intent, the sends, the answer."""
    try:
        intent, resumed, marked = _open_intent(db, key, request, ref, force=force, sending=sending)
    except errors.StorageError as exc:
        exc.request_sent = False  # raised before the request existed: nothing can have taken effect
        if isinstance(exc, errors.DatabaseBusy) and getattr(db, "lock_wait", None) is not None:
            raise  # a command's wait for the lock that ran out says that nothing was sent (partnerkit.cli.context)
        raise _not_recorded(exc) from exc
    if not marked:
        # Nothing to learn from the provider: the order is stored, at least as new as the answer was.
        return _from_local(db, intent, request, note=f"Idempotency-Key {key} already placed order "
                           f"{intent['order_id']} ({_name(intent)}): nothing was sent, nothing ordered twice.")
    # A send of an intent sent before (and not refused) may meet the order its earlier send placed.
    may_exist = resumed and intent["state"] != "REFUSED"
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
    return _placed(db, keys, intent, request, created, resumed=resumed)


def _open_intent(db: Database, key: str, request: OrderRequest, ref: str | None, *, force: bool,
                 sending: senders.Held | None = None) -> tuple[dict, bool, bool]:
    """(the intent to send, whether it existed already, whether it was marked sending): the key's known intent,
    checked against the request, or a new one, committed now with its sending mark, before the request exists.
    A known intent whose order is stored is not marked: nothing is sent for it. A new order (a new intent, or a
    REFUSED one sent again: nothing was placed for it) is refused while one of the same fields is unresolved
    (`UnresolvedOrder`, nothing recorded), unless `force`. The look-ups, the insert and the mark are one IMMEDIATE
    transaction: two processes placing the same order, or under one key, cannot both pass, and no intent is ever
    committed unmarked (a mark of its own, committed after it, could fail on a full disk, leaving an intent never
    sent that read as one whose answer was lost). The known intent is returned as it was before its mark."""
    now = utcnow()
    lock, who = (sending.offset, sending.who) if sending else (None, None)
    with transaction(db) as conn:
        known = order_intents.by_key(conn, key)
        if known is not None:
            _resume_check(known, request, ref)
            _closed_check(conn, known)
            if known["state"] == "PLACED" and known["order_id"] is not None and orders.get(conn, known["order_id"]):
                return known, True, False
        if not force and (known is None or known["state"] == "REFUSED"):
            found = order_intents.held(conn, product_id=request.product_id, denomination=request.denomination,
                                       quantity=request.quantity, wallet_id=request.wallet_id, since=now - HOLD_WINDOW)
            # Inside the transaction that holds the write lock: no held intent changes meanwhile, so a sender
            # whose lock is free has not stored its answer (nor sent an intent it never marked) and never will.
            database = database_file(conn)
            held = [h for intent in found if (h := _held(intent, now, database)) is not None]
            if held:
                raise UnresolvedOrder(request, held)
        if known is None:
            intent_id = order_intents.record(conn, idempotency_key=key, ref=ref or new_ref(),
                                             product_id=request.product_id, denomination=request.denomination,
                                             quantity=request.quantity, wallet_id=request.wallet_id,
                                             email=request.email, now=now, sender_lock=lock, sender=who)
        else:
            intent_id = known["id"]
        order_intents.mark_sending(conn, intent_id, now, sender_lock=lock, sender=who)
        return known or order_intents.get(conn, intent_id) or {}, known is not None, True


def _not_recorded(exc: errors.StorageError) -> errors.StorageError:
    """The error of a run whose intent (or its resumption) could not be committed, saying that nothing was recorded
    or sent, and what to do: the same command again is safe (a key it was given resumes its intent as it was)."""
    said = type(exc)(f"{exc}: no order was sent, and nothing of this run was recorded; run the same command again "
                     "once the database takes writes")
    said.request_sent = False
    return said


def _closed_check(conn: Any, intent: dict) -> None:
    """The key of an open intent an operator closed (`orders close`: searched for, never placed) is never sent
    again: within the provider's 24 hours its replay would place the order now (nothing sent)."""
    if intent["state"] not in order_intents.OPEN or intent["order_id"] is not None:
        return
    closed = order_intents.closure(conn, intent)
    if closed is not None:
        raise OrderInputError(f"Idempotency-Key {intent['idempotency_key']} is {_name(intent)}, which "
                              f"{closures.described(closed)}: nothing was sent; sending its key now would place the order. If "
                              "the customer still wants it, order it again without --idempotency-key (a closed intent "
                              "holds no new order back)")


def _held(intent: dict, now: datetime, database: str | None) -> HeldIntent | None:
    """What an open intent `held` found holds back, or None when it was never sent and never will be (`never_sent`:
    nothing was placed for it, and it is not in flight)."""
    running = senders.row_running(database, intent)
    if never_sent(intent, running, now):
        return None
    since = parse_ts(intent["sent_at"] or intent["created_at"]) or now
    return HeldIntent(intent["id"], intent["idempotency_key"], intent["ref"], intent["state"], now - since,
                      replay_command(intent), running, intent["sender"], sent=intent["sent_at"] is not None)


def _send(db: Database, client: PartnerApi, intent: dict) -> Any:
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
