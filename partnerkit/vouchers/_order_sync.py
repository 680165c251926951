"""The order sync: the order list walked down to a watermark (or a given `since`), local orders repaired,
missing vouchers queued for a fetch, and order intents whose answer was lost linked by their ref.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable

from partnerkit import errors
from partnerkit.config import Config
from partnerkit.money import cents
from partnerkit.store import Database, jobs, meta, order_intents, orders, quarantine, vouchers
from partnerkit.store import ledger as ledger_store
from partnerkit.store.budget import walk_reserve
from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp
from partnerkit.timeutil import iso, parse_ts, utcnow
from partnerkit.vouchers._fetches import FetchPolicy, rearm_parked_fetches, revive_parked_fetches
from partnerkit.vouchers._sealing import _text
from partnerkit.walks import READ_ALREADY, RESUME_WITHIN, KeptWalk

if TYPE_CHECKING:
    from partnerkit.client import PartnerApi

log = logging.getLogger("partnerkit.vouchers")
SYNC_WATERMARK = "orders.catch_up.since"
# The last walk given a `since` that read the list down to it in full: {"since", "began"} (`orders_read`).
READ_DOWN_TO = "orders.catch_up.read"


@dataclass
class SyncSummary:
    """What one run of `catch_up_orders` did."""

    pages: int = 0
    seen: int = 0
    updated: int = 0
    fetches_queued: int = 0
    stopped: str = "end of list"  # or "reached since", "max pages", "budget", "page repeated", "read already"
    since: str | None = None
    quarantined: int = 0  # list records that could not be read (held with the reason)
    fetches_revived: int = 0  # parked voucher fetches given one more try (parked for an hour)
    fetches_rearmed: int = 0  # parked voucher fetches given one more try because the provider answers again
    reached: str | None = None  # placed_at of the oldest order read: how far back the walk got
    intents_linked: int = 0  # order intents whose lost answer was found by their ref (now PLACED)
    # list records quarantined, not stored, because their id names a stored order they are not (`another_order`)
    id_given_twice: int = 0
    # None while the list reads newest first, as assumed; "oldest first" or "unsorted" when a page
    # showed otherwise (logged as a WARNING): the walk then never stops early at `since`.
    list_order: str | None = None


def _status_of(summary_item: Any) -> str:
    return str(summary_item.status or "").upper()  # the list shows lower-case values


# What a voucher is redeemed with: the `vouchers` array of an order detail and its records' secret fields (Orders,
# "Order detail"). The order list shows none, but the quarantine keeps a record as received in its plain table
# (vouchers are sealed at rest; a held record is not): a provider that ever added vouchers to list records would
# have their codes and PINs stored in clear. So these keys are dropped, at any depth and in any case, from a list
# record before it is held; everything else stays as received.
SECRET_KEYS = frozenset({"vouchers", "card_number", "pin_code", "claim_url"})


def without_secrets(value: Any) -> Any:
    """`value` (a list record as received) without SECRET_KEYS, at any depth."""
    if isinstance(value, dict):
        return {key: without_secrets(item) for key, item in value.items()
                if not (isinstance(key, str) and key.lower() in SECRET_KEYS)}
    if isinstance(value, list):
        return [without_secrets(item) for item in value]
    return value


def _as_listed(order: Any) -> Any:
    """A list record as the quarantine keeps it: as received (less SECRET_KEYS) when the client kept it, else
    its fields."""
    raw = getattr(order, "raw", None)
    if isinstance(raw, dict):
        return without_secrets(raw)
    return {"id": order.id, "reference_code": order.reference_code, "product_id": order.product_id,
            "denomination": order.denomination, "quantity": order.quantity, "amount": order.amount,
            "status": order.status, "placed_at": iso(order.placed_at) if order.placed_at else None}


def _listing_order(items: list[Any]) -> str | None:
    """"newest first" (ids descending), "oldest first" (ascending) or "unsorted" for one page; None
    for a page too short to tell. The document gives the order list no sort order (only the
    recharge list is "newest first (always id descending)")."""
    ids = [o.id for o in items]
    if len(ids) < 2:
        return None
    if all(a > b for a, b in zip(ids, ids[1:])):
        return "newest first"
    if all(a < b for a, b in zip(ids, ids[1:])):
        return "oldest first"
    return "unsorted"


def orders_read(db: Database) -> tuple[datetime, datetime] | None:
    """(since, began) of the last order walk that read the list down to the `since` it was given, in one run or
    in several that read on from where one stopped (`began`: when the first began); None before the first."""
    stored = meta.get(db, READ_DOWN_TO)
    if stored is None:
        return None
    read = json.loads(stored)
    return parse_ts(read["since"], field="since"), parse_ts(read["began"], field="began")


def _walk_range(since: datetime) -> str:
    """How a walk down to `since` is named and kept (`sync_walks`): its day when it is midnight, else the time."""
    utc = since.astimezone(timezone.utc)
    return utc.date().isoformat() if utc.time() == time(0) else iso(utc)


class _Cursor:
    """The page the order walk reads next, for its place (KeptWalk); None while it cannot read on from one."""

    def __init__(self, page: int) -> None:
        self.next_page: int | None = page


def catch_up_orders(config: Config, db: Database, client: PartnerApi, since: datetime | None = None, *,
                    now: datetime | None = None, max_pages: int | None = None, page_size: int = 100,
                    max_lookback: timedelta = timedelta(days=2), policy: FetchPolicy = FetchPolicy(),
                    progress: Callable[[str, int], None] | None = None, rearm_listed: bool = False,
                    fresh_since: datetime | None = None) -> SyncSummary:
    """Walk the order list down to `since` (else the stored watermark); repair local state.

    The order list has no date filter (GET /api/v1/orders: page, limit, status, product_id), so a
    range is covered by reading pages of 100 until one reaches `since`. Nor does the document give
    its sort order: newest first is assumed (the recharge list's, and the sandbox's) and checked on
    every page by the ids. A list shown oldest first is read from its last page (X-Total-Pages)
    backwards; one in no order, or oldest first without X-Total-Pages, is read to its end; either
    way `list_order` says so and a WARNING is logged, and the walk never stops early at `since`
    on an order it cannot rely on. An explicit `since` (the
    CLI's --since, reconciliation's day) is walked in full, however far back, until only what it
    leaves others is left: a tenth of the hourly budget for voucher fetches and another tenth (at
    most its share) for the recharge poller (`stopped` "budget"; `reached` says how far it got).
    The scheduled run, without
    `since`, starts at the watermark but never further back than `max_lookback` and reads at most
    `max_pages` (default 20) pages, so one order left open for weeks cannot make every run walk
    the whole history.

    Also re-arms voucher fetches parked long enough (`revive_parked_fetches`): a parked fetch is
    retried hourly by this job, never left dead forever. Once a page is read the provider answers
    again, so the parked fetches its failure parked are re-armed at once (`rearm_parked_fetches`):
    the fetch of each delivering order listed, and up to `policy.rearm_per_run` others;
    `rearm_listed` (`partnerkit orders sync`: a person asked) re-arms the fetch of every delivering
    order listed, whatever parked it. A list record that cannot be read is held
    in quarantine with the reason and does not stop the others; the watermark then stays put, so
    the record is listed again on the next run. `progress("orders", seen)` is called after each page.
    An open order intent (an `orders create` whose answer was lost) is linked to the listed order
    carrying its ref and request (`intents_linked`).

    A walk given `since` keeps its place as the recharge and transaction syncs do (partnerkit.walks.KeptWalk,
    `sync_walks` entity "orders", range `since`..now): stopped by the budget or the provider, or asked to stop
    (SIGTERM to the worker, Ctrl-C to `orders sync`: it ends after its page, raising WalkStopped), the next walk
    down to the same `since` within 6 hours reads on from the page it stopped before (`fresh_since`: only from
    one begun since then, whatever its age; see KeptWalk). The list grows at its front, so reading on skips nothing. The scheduled
    run ends at its next page too, but keeps no place: its start moves with the clock, and it reads at most
    `max_pages` pages from its watermark, which a stopped run leaves as it was. A walk that reads down to its
    `since` notes it (`orders_read`); with `fresh_since`, a walk down to a `since` that such a walk begun since
    then has read is not made (`stopped` "read already").
    """
    now = now or utcnow()
    floor = now - max_lookback
    keep_free = 0
    given = since is not None
    if since is None:
        stored = meta.get(db, SYNC_WATERMARK)
        since = max(parse_ts(stored) if stored else now - timedelta(days=1), floor)
        max_pages = 20 if max_pages is None else max_pages
    else:
        # An unbounded walk: it leaves the voucher fetches their tenth and the poller its slice (see there).
        keep_free = walk_reserve(config.hourly_budget, config.poller_budget_share)
    summary = SyncSummary(since=iso(since))
    read = orders_read(db) if given and fresh_since is not None else None
    if read is not None and read[0] <= since and read[1] >= fresh_since:
        # Read down to `since` by a walk begun since `fresh_since` (the nightly run's: the 15-minute sync's read
        # just before it): pure waste to read again. A place kept by a walk of it that never read on goes.
        ledger_store.forget_walk(db, "orders", _walk_range(since), "now", older_than=iso(fresh_since - RESUME_WITHIN))
        summary.stopped = READ_ALREADY
        return summary
    api = client.with_budget("order_sync", wait=False, keep_free=keep_free)
    place = KeptWalk(db, "orders", _walk_range(since), "now", now, fresh_since=fresh_since, keep=given)
    summary.fetches_revived = len(revive_parked_fetches(db, now=now, policy=policy))
    oldest_open: datetime | None = None
    oldest: datetime | None = None
    listed: set[int] = set()
    # backward_to: the page a backward walk ends after (oldest first)
    page_number, backward_to = place.start_page, None
    cursor = _Cursor(page_number)
    place.follow(cursor)
    if not place.may_begin():
        place.finish()  # raises WalkStopped: this process is stopping, not one page is asked for
    while True:
        if max_pages is not None and summary.pages >= max_pages:
            summary.stopped = "max pages"
            break
        try:
            # An empty list answered with the document's 404 "No Matching Result Found!" is an empty
            # page already (PartnerClient.list_orders): a partner without orders syncs like any other.
            page = api.list_orders(page=page_number, limit=page_size)
        except errors.ApiError as exc:  # its place is kept (the page it could not read), then the error raised
            place.stopped = exc
            try:
                place.finish()
            except errors.BudgetExhausted:
                summary.stopped = "budget"
                return summary
        summary.pages += 1
        if summary.pages == 1:  # the provider answers: the fetches its failure parked are worth a read now
            summary.fetches_rearmed += len(rearm_parked_fetches(db, now=now, policy=policy))
        fresh = {o.id for o in page.items} - listed
        if page.items and not fresh:
            # A provider that ignores `page` would otherwise be read until the budget is gone.
            summary.stopped = "page repeated"
            break
        listed |= fresh
        unreadable = getattr(page, "malformed", ())
        if unreadable:
            summary.quarantined += len(unreadable)
            quarantine.hold(db, "order", [(f"order record unreadable: {bad}", without_secrets(bad.body))
                                          for bad in unreadable], now=now)
            log.warning("quarantined %d order record(s): %s", len(unreadable),
                        "; ".join(str(bad) for bad in unreadable[:3]))
        items = [o for o in page.items if o.placed_at is None or o.placed_at >= since]
        local = orders.statuses(db, [o.id for o in items])
        clashes: list[tuple[str, Any]] = []
        with transaction(db) as conn:
            for order in items:
                summary.seen += 1
                status = _status_of(order)
                if order.placed_at is not None:
                    oldest = min(oldest or order.placed_at, order.placed_at)
                    summary.reached = iso(oldest)
                if status not in orders.FINAL and order.placed_at is not None:
                    oldest_open = min(oldest_open or order.placed_at, order.placed_at)
                # Always merge the list's fields, not only on a status change: an order known only
                # from webhooks lacks placed_at, transaction_id and currency, without which it is
                # never reconciled. apply() fills missing fields and never moves a status back, and
                # refuses, writing nothing, a record of another order under a stored order's id.
                fields = dict(reference_code=order.reference_code, transaction_id=order.transaction_id,
                              product_id=order.product_id, product_name=_text(order.product_name),
                              currency=_text(order.currency), denomination_cents=cents(order.denomination),
                              quantity=order.quantity, amount_cents=cents(order.amount), email=_text(order.email),
                              placed_at=stamp(order.placed_at) if order.placed_at else None)
                try:
                    _, moved = orders.apply(conn, order.id, status, now=now, source="sync",
                                            identity=orders.identity_of(fields), **fields)
                except orders.AnotherOrder as clash:  # the stored order keeps what it held; no fetch, no link
                    clashes.append((clash.reason, _as_listed(order)))
                    continue
                summary.updated += int(moved or order.id not in local)
                stored = vouchers.count(conn, order.id) if status in orders.DELIVERING else 0
                # A partial delivery is re-read only when its status is news (the list has no counts).
                missing = stored < (order.quantity or 1) if status == "DELIVERED" else (
                    status == "PARTIALLY_DELIVERED" and (local.get(order.id) != status or stored == 0))
                if missing:
                    expected = order.quantity if status == "DELIVERED" else None
                    summary.fetches_queued += jobs.queue_if_idle(conn, order.id, now=now, expected_status=status,
                                                                 expected_count=expected)
            # A record of another order under a stored id is held with the reason (one entry however often it is
            # listed); the records read as their orders' release theirs: the row's own record listed again.
            refused = {quarantine.id_in_key("order", key) for key in
                       quarantine.hold_in(conn, "order", clashes, now=now)} if clashes else set()
            stored_items = [o for o in items if str(o.id) not in refused]
            quarantine.release_in(conn, "order", [o.id for o in stored_items])
            delivering = [o.id for o in stored_items if _status_of(o) in orders.DELIVERING]
            # An `orders create` whose answer was lost: its intent is linked to the order carrying its ref.
            summary.intents_linked += order_intents.link_by_ref(
                conn, [(o.reference_code, o.id, o.product_id, o.denomination, o.quantity) for o in stored_items], now)
        if clashes:
            summary.id_given_twice += len(clashes)
            log.warning("quarantined %d order record(s), not stored: %s", len(clashes),
                        "; ".join(reason for reason, _ in clashes[:3]))
        # A listed delivering order whose fetch is parked: re-armed now if the provider's failure parked it
        # (the list just answered), or whatever parked it when a person runs the sync.
        summary.fetches_rearmed += len(rearm_parked_fetches(db, now=now, policy=policy, order_ids=delivering,
                                                            whenever=rearm_listed))
        if progress is not None:
            progress("orders", summary.seen)
        listing = _listing_order(page.items)
        if listing is not None and listing != "newest first" and summary.list_order != "unsorted":
            if summary.list_order is None:
                log.warning("the provider lists orders %s (ids %s within page %d), not newest first: %s",
                            listing, "ascending" if listing == "oldest first" else "in no order", page_number,
                            "reading from the last page backwards" if listing == "oldest first" and backward_to is None
                            and (page.total_pages or 0) > page_number else "reading every page")
            summary.list_order = listing
        # Only a list in a known order ends at the first order older than `since`: newest first read
        # forwards, oldest first read backwards. The document states no order for this list.
        newest_first = summary.list_order is None and backward_to is None
        backwards = backward_to is not None and summary.list_order == "oldest first"
        if (newest_first or backwards) and len(items) < len(page.items):
            summary.stopped = "reached since"
            break
        if backward_to is not None:
            page_number -= 1
            if page_number <= backward_to:
                break
        elif summary.list_order == "oldest first" and page.total_pages and page.total_pages > page_number:
            # The newest orders are on the last page: read back from there towards this one.
            backward_to, page_number = page_number, page.total_pages
        elif not page.has_more:
            break
        else:
            page_number += 1
        # Every order of the pages read is stored (one transaction a page). A walk read backwards cannot read on
        # from a page: its place is the one it had before it turned, if any.
        cursor.next_page = page_number if backward_to is None else None
        if not place.between_batches(lambda written: written):
            place.finish()  # raises WalkStopped, its place kept: this process is stopping
    began = place.finish()  # the place is forgotten: the walk reached its end
    if given and summary.stopped in ("end of list", "reached since"):
        with transaction(db) as conn:
            meta.put(conn, READ_DOWN_TO, json.dumps({"since": iso(since), "began": began}), now=now)
    # Next time, start from the oldest order that may still change (never older than the floor).
    # An unreadable record's placed_at is unknown: keep the watermark where it was so it is listed again.
    local_open = orders.oldest_open_placed_at(db)
    marks = [m for m in (oldest_open, parse_ts(local_open) if local_open else None) if m is not None]
    if summary.quarantined:
        marks.append(since)
    watermark = max(min(marks) if marks else now - timedelta(minutes=5), floor)
    with transaction(db) as conn:
        meta.put(conn, SYNC_WATERMARK, stamp(watermark), now=now)
    return summary
