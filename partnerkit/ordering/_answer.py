"""What an order's answer settles: PLACED with the order and its vouchers stored, REFUSED, or UNKNOWN.

`_placed` stores the answer (the order, its vouchers sealed, a fetch for any still missing) with the
intent PLACED in one transaction, unless its order id is one the store holds for another order
(`_held_elsewhere`: nothing stored, the intent open); `_not_placed` reads a definite refusal (REFUSED, unless an earlier
send may have placed the order); `_keep_open` and `_unknown` leave an intent open with the command
that replays it. A database that cannot take a mark never replaces what the caller is told.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from partnerkit import errors
from partnerkit.crypto import KeyFollower
from partnerkit.money import cents, fmt, from_cents
from partnerkit.ordering._request import HOLD_HOURS, OrderOutcome, OrderRequest, _name, replay_command
from partnerkit.store import Database, jobs, order_intents, orders
from partnerkit.store import vouchers as voucher_store
from partnerkit.store.budget import after_429
from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp
from partnerkit.timeutil import utcnow
from partnerkit.vouchers import seal

log = logging.getLogger("partnerkit.ordering")


def _keep_open(db: Database, intent: dict, why: str) -> None:
    """Mark the intent UNKNOWN after a send whose outcome is not known. A database that cannot take it
    leaves the intent INTENT, open all the same: held against a second order, replayed by its key and
    linked by the order catch-up alike. So the mark never replaces what the caller is told."""
    try:
        order_intents.mark_unknown(db, intent["id"], why, utcnow())
    except errors.StorageError as exc:
        log.warning("order intent #%s stays INTENT, not marked UNKNOWN (%s); it is open either way",
                    intent["id"], exc, extra={"intent_id": intent["id"], "ref": intent["ref"]})


def _refuse(db: Database, intent: dict, why: str) -> bool:
    """Mark the intent REFUSED: nothing was placed for it; whether it was marked. A database that cannot take it
    leaves the intent open (INTENT or UNKNOWN), which only holds back the same order until its replay or the
    catch-up settles it; the caller hears the refusal all the same, not the database."""
    try:
        order_intents.mark_refused(db, intent["id"], why, utcnow())
    except errors.StorageError as exc:
        log.warning("order intent #%s was refused (%s) but stays open: %s", intent["id"], why, exc,
                    extra={"intent_id": intent["id"], "ref": intent["ref"]})
        return False
    return True


def _unsent(exc: errors.StorageError, intent: dict, *, refused: bool) -> errors.StorageError:
    """The error for a send the store stopped before it left (the request budget could not be taken: a full disk, a
    lock held too long), saying that no order was sent and how the intent stands: REFUSED (`refused`), or still
    INTENT when the database could not take that either, which `partnerkit status` cannot tell from a send whose
    answer was lost."""
    number = intent["id"]
    if refused:
        tail = f"order intent #{number} is REFUSED; run the same command again once the database takes writes"
    else:
        tail = (f"order intent #{number} stays INTENT, as the database could not record that either, and `partnerkit "
                f"status` names it among the unknown outcomes until it is settled: replaying its key is safe (it is "
                f"sent then, once: `{replay_command(intent)}`), or, if the order is no longer wanted, `partnerkit "
                f"orders close {number} --without-search --note TEXT`")
    said = type(exc)(f"{exc}: no order was sent; {tail}")
    said.request_sent = False
    return said


def _placed(db: Database, keys: KeyFollower, intent: dict, request: OrderRequest, created: Any, *,
            resumed: bool) -> OrderOutcome:
    """Store the order the provider answered (and its vouchers) with the intent PLACED, in one transaction.

    The vouchers are sealed in that transaction, with the key file as it is once the write lock is held
    (`KeyFollower`): the key read before the send may have been rotated and retired while the provider
    answered, or while another process held the lock. An order that is not the request's is stored too
    (it is the account's, paid for), but the intent is refused: its key belonged to that other order, and
    nothing was placed for this request. An order id the store holds for another order is not written over
    (`_held_elsewhere`)."""
    answered = OrderRequest(created.product_id, created.denomination, created.quantity)
    differ = [name for name in ("product_id", "denomination", "quantity")
              if getattr(answered, name) != getattr(request, name)]
    now = utcnow()
    status = created.status.upper()
    try:
        with transaction(db) as conn:
            # Before anything is written, in the transaction that would write it: an order id this store already
            # holds for another order is not this answer's to overwrite (`_held_elsewhere`).
            clash = _clash(conn, intent, created)
            if clash is None:
                stored = _store(conn, keys, intent, request, created, status, now, mine=not differ)
    except errors.StorageError as exc:
        if differ:
            raise  # another order's answer: nothing was placed for this request (ReplayMismatch below)
        return _unstored(db, intent, request, created, exc, resumed=resumed)
    if clash is not None:  # nothing written: checked first, in the transaction that would have written it
        return _held_elsewhere(db, intent, request, created, clash, resumed=resumed)
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


def _store(conn: Any, keys: KeyFollower, intent: dict, request: OrderRequest, created: Any, status: str,
           now: datetime, *, mine: bool) -> int:
    """Write the answer's order, its vouchers sealed and a fetch for any still missing (inside `_placed`'s
    transaction), and mark the intent PLACED if the order is `mine` (the request's); how many vouchers the
    order has stored now."""
    cipher = keys.current()
    sealed = [seal(cipher, created.id, v) for v in created.vouchers]
    orders.apply(conn, created.id, status, now=now, source="create", transaction_id=created.transaction_id,
                 quantity=created.quantity, amount_cents=cents(created.amount), discount_cents=cents(created.discount),
                 email=request.email if mine else None,
                 delivered_quantity=len(sealed) if status in orders.DELIVERING else None, **_identity(created))
    voucher_store.add(conn, created.id, sealed, now=now)
    stored = voucher_store.count(conn, created.id)
    if status in orders.DELIVERING and stored < created.quantity:
        jobs.queue(conn, created.id, now=now, expected_status=status, expected_count=created.quantity)
    if mine:
        order_intents.mark_placed(conn, intent["id"], created.id, now)
    return stored


def _identity(created: Any) -> dict[str, Any]:
    """The IDENTITY facts of a create answer (`orders.another_order`), as `_store` would store them."""
    return {"reference_code": created.ref, "product_id": created.product_id,
            "denomination_cents": cents(created.denomination),
            "placed_at": stamp(created.placed_at) if isinstance(created.placed_at, datetime) else None}


def _clash(conn: Any, intent: dict, created: Any) -> str | None:
    """Who already holds the order id an answer names, when it is another order than the answer's: another intent
    placed it (`order_intents.order_id` is UNIQUE), or the order stored under it is another order by the check the
    order sync, the voucher fetch and the receiver make (`orders.another_order`: its ref, product, denomination or
    placing time, to the second, differs from the answer's, each where both have one). As a phrase naming it
    ("order intent #1 (ref R, product 8, 1 x 100.00)"); None when the id is free or is this answer's order."""
    holder = order_intents.holding(conn, created.id, besides=intent["id"])
    if holder is not None:
        return _name(holder)
    stored = orders.get(conn, created.id)
    facts = _identity(created)
    if stored is None or orders.another_order(created.id, stored, facts) is None:
        return None
    held = ", ".join(part for part in (
        stored["reference_code"] and f"ref {stored['reference_code']}",
        stored["product_id"] is not None and f"product {stored['product_id']}",
        stored["denomination_cents"] is not None and f"denomination {fmt(from_cents(stored['denomination_cents']))}",
        stored["placed_at"] and f"placed {stored['placed_at']}") if part)
    return (f"the order stored from the provider's records ({held}), from which this answer differs in "
            f"{', '.join(orders.differences(stored, facts))}")


# The words of an intent's error that say its answer named an order id held for another order (`_held_elsewhere`):
# `partnerkit status` reads them (`held_elsewhere`) so that it never advises a replay, which answers the same id.
HELD_ELSEWHERE = "which this store already holds for"


def held_elsewhere(error: str | None) -> bool:
    """Whether an open intent's error says its answer named an order id this store holds for another order."""
    return bool(error) and HELD_ELSEWHERE in error  # type: ignore[operator]


def _held_elsewhere(db: Database, intent: dict, request: OrderRequest, created: Any, holder: str, *,
                    resumed: bool) -> OrderOutcome:
    """The answer names an order id this store holds for another order (`holder`): two orders under one id, from
    a provider that gave it twice or a sandbox started again with --fixed-ids beside a kept database, not a
    database fault. Nothing of the answer is stored (the order held under that id stays as it was) and the
    intent stays open (UNKNOWN): the money moved, so it is never REFUSED, and its replay meets the same id."""
    reason = f"the provider answered order {created.id} (ref {created.ref}), {HELD_ELSEWHERE} {holder}: not stored"
    log.error("order intent #%s: the provider's answer names order %s, which this store already holds for another "
              "order (%s): not stored, the intent stays open", intent["id"], created.id, holder,
              extra={"intent_id": intent["id"], "ref": intent["ref"], "order_id": created.id})
    _keep_open(db, intent, reason)
    message = (f"Order intent #{intent['id']} stays open (UNKNOWN): the provider answered with order {created.id} "
               f"({created.status.upper()}, {fmt(created.amount)}, ref {created.ref}), but this store already holds "
               f"order {created.id} for {holder}. Two orders under one id is not a database fault: nothing of this "
               f"answer was stored, and the order stored under {created.id} is left as it was. Compare both with the "
               f"provider (`partnerkit orders show {created.id}`; support knows this one by its ref {created.ref} and "
               f"Idempotency-Key {intent['idempotency_key']}): from a real provider an id given twice is its fault, to "
               "report to support with both. A sandbox run with --fixed-ids gives the same ids at every start: with one "
               "kept across its restarts, start a fresh database (a new PARTNERKIT_DB) or run it without --fixed-ids. "
               "Do NOT order it again: the provider placed it, and its replay answers the same id.")
    return OrderOutcome(intent["id"], "UNKNOWN", intent["idempotency_key"], intent["ref"], request, order_id=created.id,
                        amount=created.amount, resumed=resumed, message=message, created=created,
                        replay_command=replay_command(intent))


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
        refused = _refuse(db, intent, str(exc))
        # A command's wait for the lock that ran out says that nothing was sent (partnerkit.cli.context).
        said = refused and isinstance(exc, errors.DatabaseBusy) and getattr(db, "lock_wait", None) is not None
        if isinstance(exc, errors.StorageError) and exc.request_sent is False and not said:
            raise _unsent(exc, intent, refused=refused) from exc
        if isinstance(exc, errors.RateLimited):  # the provider's own words say neither
            exc.outcome = after_429("no order was placed", exc.retry_after)
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
