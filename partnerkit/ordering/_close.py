"""Closing by hand an order intent whose outcome stays unknown (`partnerkit orders close`): never made, checked.

An UNKNOWN intent (or an INTENT whose `orders create` died while sending) that the order sync never links stays in
`partnerkit status` for good, and holds back the same order for 24 hours. Once the provider (or its support) confirms
the order was never placed, `close_intent` searches once more the way a lost answer is found (the order list read by
the order sync down to the intent's time, linked by its ref and request: `order_intents.link_by_ref`), never a send
of its key, which would place the order now. A found order is linked instead; otherwise the intent is kept, still
open, with a closure record (`order_intents.close_intent`), as a closed recharge is (`reconcile.locate.close`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from partnerkit import errors, senders
from partnerkit.config import Config
from partnerkit.ordering._request import OrderInputError, _intent_request, _name, never_sent
from partnerkit.store import Database, closures, order_intents, orders
from partnerkit.store.db import database_file
from partnerkit.timeutil import iso, parse_ts, utcnow

if TYPE_CHECKING:
    from partnerkit.client import PartnerApi

log = logging.getLogger("partnerkit.ordering")

# How far before an intent was recorded the search reads the order list: the provider's placed_at is its clock's.
SEARCH_MARGIN = timedelta(hours=1)
# Why an order walk stopped before the intent's time, as a refusal names it (`catch_up_orders`' `stopped`).
_INCOMPLETE = {"budget": "the hourly API budget is spent", "max pages": "it read its most pages",
               "page repeated": "the provider answered the same page twice"}


@dataclass
class CloseOutcome:
    """What `close_intent` did: closed (`record`, the closure kept), or not, because the search found its order."""

    closed: bool
    intent: dict
    message: str
    record: dict | None = None


def close_intent(config: Config, db: Database, client: PartnerApi | None, intent_id: int, *, note: str, by: str,
                 without_search: bool = False, now: datetime | None = None) -> CloseOutcome:
    """Close order intent `intent_id`, whose outcome is not known, once an operator checked: never placed.

    Only an open intent (UNKNOWN; INTENT whose `orders create` no longer runs, or older than a send takes) with no
    order: anything else is refused (OrderInputError, nothing written). First the order list is read down to the
    intent's time (`catch_up_orders`, which stores what it lists and links an intent to the order carrying its ref
    and request), never a send of its key: an order found is linked, and not closed (`closed` False). A provider
    that cannot be read down to then, or an order carrying its ref that is not its request, refuses it (nothing
    written). `without_search` skips the search (an operator who confirmed with support another way), and so does an
    intent that was never sent (`never_sent`: no request ever carried its key or ref).

    Closing keeps the intent and its state, with a record of who, when, why and what the search saw
    (`order_intents.close_intent`) that `partnerkit status` and the hold of a new order leave out. A sync that lists
    the order later still links it (the provider's record wins)."""
    from partnerkit.status._facts import INTENT_ABANDONED_AFTER
    from partnerkit.vouchers import catch_up_orders

    now = now or utcnow()
    intent = order_intents.get(db, intent_id)
    if intent is None:
        raise OrderInputError(f"no order intent #{intent_id}")
    if intent["order_id"] is not None or intent["state"] not in order_intents.OPEN:
        known = f"order {intent['order_id']}, " if intent["order_id"] is not None else ""
        raise OrderInputError(f"order intent #{intent_id} is {intent['state']} ({known}its outcome is known): only "
                              "one whose outcome is not known (INTENT, UNKNOWN) can be closed; nothing was written")
    done = order_intents.closure(db, intent)
    if done is not None:
        return CloseOutcome(True, intent, f"Order intent #{intent_id} {closures.described(done)}: nothing changed.", done)
    running = senders.row_running(database_file(db), intent)
    if intent["state"] == "INTENT":
        recent = now - (parse_ts(intent["updated_at"]) or now) < INTENT_ABANDONED_AFTER
        if running is True or (running is None and recent):
            how = senders.sending("orders create", running, intent["sender"])
            raise OrderInputError(
                f"order intent #{intent_id} is not closed: {how}; it stores the answer itself. Run this again once "
                "that command has ended; nothing was written")
    if without_search:
        searched = "not searched (--without-search)"
    elif never_sent(intent, running, now):
        # No request ever carried its key or ref: the order list cannot hold its order.
        searched = "not searched: it was never sent (its `orders create` stopped before sending it)"
    else:
        searched = _search(config, db, client, intent, now, catch_up_orders)
        linked = order_intents.get(db, intent_id) or intent
        if linked["order_id"] is not None:
            message = (f"Order intent #{intent_id} is not closed: the provider lists its order {linked['order_id']} "
                       f"(ref {linked['ref']}), so it is linked instead ({_name(linked)}); see `partnerkit orders "
                       f"show {linked['order_id']}`.")
            return CloseOutcome(False, linked, message)
    try:
        record = order_intents.close_intent(db, intent_id, by=by, note=note, at=now.replace(microsecond=0),
                                            searched=searched)
    except errors.StorageError as exc:
        raise OrderInputError(f"order intent #{intent_id} is not closed: {exc}") from None
    log.info("order intent #%s closed by hand (%s)", intent_id, searched, extra={"intent_id": intent_id})
    message = (f"Order intent #{intent_id} ({_intent_request(intent).describe()}, ref {intent['ref']}) is closed: "
               f"{searched}. It stays {intent['state']} with the closure kept; `partnerkit status` no longer names "
               "it, it holds no new order back, and its key is never sent again (`orders create --idempotency-key` "
               "refuses it). If the provider lists it later, the order sync links it (its record wins).")
    return CloseOutcome(True, order_intents.get(db, intent_id) or intent, message, record)


def _search(config: Config, db: Database, client: PartnerApi | None, intent: dict, now: datetime,
            catch_up_orders) -> str:
    """Read the order list down to the intent's time (the order sync's walk, which links it by its ref); what it
    saw, as the closure keeps it. OrderInputError, nothing written of a closure, when it could not be read in full
    or shows an order of its ref that is not its request."""
    number = intent["id"]
    since = (parse_ts(intent["created_at"]) or now) - SEARCH_MARGIN
    try:
        summary = catch_up_orders(config, db, client, since=since, now=now)
    except errors.ApiError as exc:
        raise OrderInputError(f"order intent #{number} is not closed: the provider's order list could not be read "
                              f"({exc}); nothing was written. Run this again when the provider answers") from None
    if summary.stopped in _INCOMPLETE:
        why = _INCOMPLETE[summary.stopped]
        raise OrderInputError(f"order intent #{number} is not closed: the provider's order list was read back to "
                              f"{summary.reached or 'no order'} only, not to {iso(since)} ({why}); nothing was "
                              "written. Run this again later, or with --without-search once support confirmed it "
                              "was never placed")
    if summary.quarantined or summary.id_given_twice:
        raise OrderInputError(f"order intent #{number} is not closed: the provider's order list holds records that "
                              "could not be stored (see `partnerkit status`), and one may be this order; nothing was "
                              "written. Ask support, quoting its Idempotency-Key "
                              f"{intent['idempotency_key']} and ref {intent['ref']}")
    linked = order_intents.get(db, number) or intent
    other = orders.by_reference(db, intent["ref"]) if linked["order_id"] is None else None
    if other is not None:
        raise OrderInputError(f"order intent #{number} is not closed: the provider lists order {other['id']} with its "
                              f"ref {intent['ref']} but not its request ({_intent_request(intent).describe()}), or "
                              "held for another intent; nothing was written. Ask support which order it is, quoting "
                              f"its Idempotency-Key {intent['idempotency_key']}")
    return (f"the order list showed no order with ref {intent['ref']} ({summary.seen} order(s) placed since "
            f"{iso(since)} read)")
