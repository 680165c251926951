"""Voucher fetches and the order sync, run by the worker (never inside a webhook request).

`run_voucher_fetches` claims due fetch jobs under a lease, reads GET /api/v1/orders/{id} through
the shared budget, stores each voucher once (encrypted, keyed by a fingerprint) and retries with
backoff until the detail shows what the event announced. `catch_up_orders` walks the order list
and repairs orders whose status changed without a webhook reaching us, and links an order intent
whose answer was lost (`partnerkit.ordering`) to the order carrying its ref.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from partnerkit import errors
from partnerkit.config import Config
from partnerkit.crypto import Cipher, KeyFollower
from partnerkit.money import cents
from partnerkit.store import Database, jobs, order_intents, orders, quarantine, vouchers
from partnerkit.store.budget import REFUSAL_PAUSE_S, walk_reserve
from partnerkit.store.db import transaction
from partnerkit.store.jobs import Job, stamp
from partnerkit.store.vouchers import SealedVoucher
from partnerkit.timeutil import iso, parse_ts, utcnow

log = logging.getLogger(__name__)
SYNC_WATERMARK = "orders.catch_up.since"


@dataclass(frozen=True)
class FetchPolicy:
    """How often and how long a voucher fetch is retried."""

    max_attempts: int = 8
    not_found_attempts: int = 3  # a 404 right after an event may be the provider's replication lag
    base_s: float = 10.0  # the document: "Order polling: no faster than every 10 seconds"
    cap_s: float = 900.0
    lease_s: float = 120.0  # longer than one read with the client's own retries
    # A parked (dead) fetch is not stuck forever: the order catch-up re-arms it once it has been
    # parked this long, for one more read each time, at most `revive_per_run` per catch-up run.
    # Vouchers are what the partner paid for; an hourly read per parked order is cheap.
    revive_after_s: float = 3600.0
    revive_per_run: int = 5

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before retry number `attempt` (1-based); never less than Retry-After."""
        return max(min(self.cap_s, self.base_s * 2 ** max(0, attempt - 1)), retry_after or 0.0)


@dataclass
class FetchSummary:
    """What one run of `run_voucher_fetches` did."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    deferred: int = 0
    vouchers_added: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


_OWNER: tuple[int, str] | None = None


def _owner() -> str:
    """This process's lease owner id, stable for its life (re-made after a fork).

    Stable so that a fetch run can take back its own process's leftover leases: a run that read a
    detail but could not store it (disk full) cannot write the release either, and would otherwise
    leave the order waiting out the lease after space is back. Fetch runs never overlap in one
    process (the scheduler runs one instance of the job at a time)."""
    global _OWNER
    if _OWNER is None or _OWNER[0] != os.getpid():
        _OWNER = (os.getpid(), f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    return _OWNER[1]


def _text(value: Any) -> str | None:
    """A voucher field as text; the client's MISSING sentinel and None are both "absent"."""
    return None if value is None or not isinstance(value, (str, int)) else str(value)


def voucher_identity(code: str | None, reference: str | None, url: str | None, raw: dict | None) -> str | None:
    """What a voucher's fingerprint is made of: its code, else its reference, else its claim URL, else
    the provider's whole record; None when only the record would do and it is not at hand (it is not
    stored, so `partnerkit keys rewrap` cannot recompute such a fingerprint)."""
    return code or reference or url or (repr(sorted(raw.items())) if raw is not None else None)


def seal(cipher: Cipher, order_id: int, voucher: Any) -> SealedVoucher:
    """Encrypt a client Voucher's secrets, bound to its order and field; fingerprint its code.

    The fingerprint under each previous key goes along, so a voucher stored before a key rotation
    is not stored again (`vouchers.add`)."""
    code, pin, url = _text(voucher.card_number), _text(getattr(voucher, "pin_code", None)), _text(getattr(voucher, "claim_url", None))
    reference = _text(getattr(voucher, "voucher_reference_number", None))
    expires = getattr(voucher, "expires_at", None)
    identity = voucher_identity(code, reference, url, getattr(voucher, "raw", None) or {})
    fingerprint, *previous = cipher.fingerprints(str(order_id), identity)
    ctx = voucher_context(order_id)
    return SealedVoucher(
        fingerprint=fingerprint,
        card_number=cipher.encrypt(code, context=ctx + b"card_number"),
        pin_code=cipher.encrypt(pin, context=ctx + b"pin_code"),
        claim_url=cipher.encrypt(url, context=ctx + b"claim_url"),
        voucher_reference_number=reference,
        expires_at=iso(expires) if isinstance(expires, datetime) else _text(expires),
        previous_fingerprints=tuple(previous))


def voucher_context(order_id: int) -> bytes:
    """The prefix binding a voucher's sealed fields to its order (the field name follows)."""
    return f"voucher:{order_id}:".encode()


def unseal(cipher: Cipher, row: dict) -> dict:
    """A stored voucher row (`partnerkit.store.vouchers.for_order`) with card_number, pin_code and claim_url
    decrypted: what `partnerkit vouchers --reveal` shows and a fork hands its customer. Never log them."""
    ctx = voucher_context(row["order_id"])
    return {**row, **{name: cipher.decrypt(row[name], context=ctx + name.encode())
                      for name in ("card_number", "pin_code", "claim_url")}}


def _detail_fields(detail: Any) -> dict:
    return {"reference_code": detail.reference_code, "transaction_id": detail.transaction_id,
            "product_id": detail.product_id, "quantity": detail.quantity,
            "amount_cents": cents(detail.amount), "denomination_cents": cents(detail.denomination),
            "placed_at": stamp(detail.placed_at) if isinstance(detail.placed_at, datetime) else None}


def _verdict(job: Job, detail: Any) -> tuple[str, str | None]:
    """("done" | "retry", reason) for a detail read: does it show what the event announced?"""
    status = (detail.status or "").upper()
    if status in ("FAILED", "CANCELLED"):
        return "done", f"order is {status}: no vouchers to fetch"
    expected = job.expected_status or "DELIVERED"
    if status not in orders.DELIVERING or orders.RANK.get(status, 0) < orders.RANK.get(expected, 0):
        return "retry", f"detail shows {status or 'no status'}, event announced {expected}"
    want = job.expected_count or 0
    if status == "DELIVERED":
        want = max(want, detail.quantity or 0)
    bad = getattr(detail, "malformed", ())
    if len(detail.vouchers) < want:
        unreadable = f" ({len(bad)} unreadable: {bad[0]})" if bad else ""
        return "retry", f"detail shows {len(detail.vouchers)} of {want} vouchers{unreadable}"
    if bad:  # enough readable vouchers, yet some unreadable: keep reading until every one is stored
        return "retry", f"{len(bad)} voucher(s) unreadable: {bad[0]}"
    return "done", None


def _settle(db: Database, job: Job, policy: FetchPolicy, *, now: datetime, outcome: str, reason: str,
            retry_after: float | None = None, give_up_after: int | None = None) -> str:
    """Record a failed attempt: back off, or park the job as dead after its attempts."""
    attempt = job.attempts + 1
    limit = give_up_after or policy.max_attempts
    with transaction(db) as conn:
        jobs.bump(conn, f"voucher_fetch.{outcome}")
        if attempt >= limit:
            jobs.finish(conn, job, now=now, state="dead", error=f"gave up after {attempt} attempts: {reason}")
            return "dead"
        jobs.release(conn, job, now=now, next_run_at=now + timedelta(seconds=policy.delay(attempt, retry_after)),
                     error=reason)
    return "retried"


def _in_hand(db: Database, job: Job) -> int | None:
    """How many vouchers are stored when that is already all the job waits for, else None.

    `orders create` stores the vouchers delivered with its answer; the order.delivered webhook
    that follows still queues a fetch (the receiver does not look), and reading the detail again
    would only spend the shared budget to confirm them."""
    if job.expected_status == "DELIVERED":
        local = orders.get(db, job.order_id) or {}
        want = max(job.expected_count or 0, local.get("quantity") or 0)
    elif job.expected_status == "PARTIALLY_DELIVERED":
        want = job.expected_count or 0
    else:
        return None
    stored = vouchers.count(db, job.order_id)
    return stored if want and stored >= want else None


def _fetch_one(db: Database, api: Any, keys: KeyFollower, job: Job, policy: FetchPolicy, now: datetime,
               summary: FetchSummary) -> str:
    stored = _in_hand(db, job)
    if stored is not None:
        with transaction(db) as conn:  # no call made: not a fetch outcome
            jobs.finish(conn, job, now=now, state="done", error=f"all {stored} vouchers already stored: no read needed")
        return "done"
    try:
        detail = api.get_order(job.order_id)
    except errors.BudgetExhausted as exc:
        with transaction(db) as conn:  # nothing was sent: not an attempt
            jobs.release(conn, job, now=now, next_run_at=now + timedelta(seconds=exc.retry_after or 30),
                         error=f"waiting for API budget: {exc}", count_attempt=False)
        return "deferred"
    except errors.RateLimited as exc:
        return _settle(db, job, policy, now=now, outcome="rate_limited", reason=str(exc), retry_after=exc.retry_after)
    except errors.NotFound as exc:
        return _settle(db, job, policy, now=now, outcome="not_found", reason=str(exc),
                       give_up_after=policy.not_found_attempts)
    except errors.ServerError as exc:
        return _settle(db, job, policy, now=now, outcome="server_error", reason=str(exc), retry_after=exc.retry_after)
    except errors.TransportError as exc:
        return _settle(db, job, policy, now=now, outcome="network_error", reason=str(exc))
    except errors.MalformedResponse as exc:  # the detail itself is unreadable: nothing stored from it
        return _settle(db, job, policy, now=now, outcome="malformed",
                       reason=f"order detail unreadable: {exc}")
    except errors.Unauthorized as exc:
        # The API key refused (rotated, revoked, off the allowlist): not this order's fault, and every
        # other fetch would meet it too. Not an attempt: the job waits for the key, parking nothing;
        # the run hands the rest back (`partnerkit status` shows `provider_refused` meanwhile).
        with transaction(db) as conn:
            jobs.bump(conn, "voucher_fetch.refused")
            jobs.release(conn, job, now=now, next_run_at=now + timedelta(seconds=REFUSAL_PAUSE_S),
                         error=f"waiting for the provider to accept the API key: {exc}", count_attempt=False)
        return "deferred"
    except errors.ApiStatusError as exc:  # 400/403: retrying unchanged will not help
        return _settle(db, job, policy, now=now, outcome="refused", reason=str(exc), give_up_after=1)
    # The key is looked up after the read, not once per run: a read can take seconds, and vouchers sealed
    # with a key that `keys rotate` replaced and `keys retire` dropped meanwhile could never be read.
    cipher = keys.current()
    sealed = [seal(cipher, job.order_id, v) for v in detail.vouchers]
    verdict, reason = _verdict(job, detail)
    if detail.malformed:
        log.warning("order detail with unreadable vouchers", extra={"order_id": job.order_id,
                                                                     "unreadable": len(detail.malformed)})
    with transaction(db) as conn:
        added = vouchers.add(conn, job.order_id, sealed, now=now)
        status = (detail.status or "").upper()
        orders.apply(conn, job.order_id, status, now=now, source="detail",
                     delivered_quantity=len(detail.vouchers) if status in orders.DELIVERING else None,
                     **_detail_fields(detail))
    summary.vouchers_added += added
    if verdict == "retry":
        return _settle(db, job, policy, now=now, outcome="malformed" if detail.malformed else "not_ready",
                       reason=reason or "")
    with transaction(db) as conn:
        jobs.bump(conn, "voucher_fetch.stored")
        jobs.finish(conn, job, now=now, state="done", error=reason)
    log.info("vouchers stored", extra={"order_id": job.order_id, "added": added, "job_id": job.id})
    return "done"


def run_voucher_fetches(config: Config, db: Database, client: Any, *, now: datetime | None = None, limit: int = 20,
                        policy: FetchPolicy = FetchPolicy(), cipher: Cipher | None = None) -> FetchSummary:
    """Run the due voucher fetch jobs once (the worker calls this every few seconds)."""
    keys = KeyFollower(config, cipher)
    api = client.with_budget("voucher_fetch", wait=False) if hasattr(client, "with_budget") else client
    started = now or utcnow()
    claimed = jobs.claim(db, owner=_owner(), now=started, lease_until=started + timedelta(seconds=policy.lease_s),
                         limit=limit)
    summary = FetchSummary(claimed=len(claimed))
    for index, job in enumerate(claimed):
        moment = now or utcnow()
        result = _fetch_one(db, api, keys, job, policy, moment, summary)
        summary.outcomes[result] = summary.outcomes.get(result, 0) + 1
        if result == "deferred":  # no budget, or the key refused: hand the rest back untouched
            with transaction(db) as conn:
                for rest in claimed[index + 1:]:
                    jobs.release(conn, rest, now=moment, next_run_at=moment, error=None, count_attempt=False)
            summary.deferred += len(claimed) - index
            break
        if result == "dead":
            log.warning("voucher fetch parked", extra={"order_id": job.order_id, "job_id": job.id})
        setattr(summary, result, getattr(summary, result) + 1)
    return summary


@dataclass
class SyncSummary:
    """What one run of `catch_up_orders` did."""

    pages: int = 0
    seen: int = 0
    updated: int = 0
    fetches_queued: int = 0
    stopped: str = "end of list"
    since: str | None = None
    quarantined: int = 0  # list records that could not be read (held with the reason)
    fetches_revived: int = 0  # parked voucher fetches given one more try
    reached: str | None = None  # placed_at of the oldest order read: how far back the walk got
    intents_linked: int = 0  # order intents whose lost answer was found by their ref (now PLACED)
    # None while the list reads newest first, as assumed; "oldest first" or "unsorted" when a page
    # showed otherwise (logged as a WARNING): the walk then never stops early at `since`.
    list_order: str | None = None


def _status_of(summary_item: Any) -> str:
    return str(summary_item.status or "").upper()  # the list shows lower-case values


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


def revive_parked_fetches(db: Database, *, now: datetime, policy: FetchPolicy = FetchPolicy()) -> list[int]:
    """Re-arm voucher fetches parked for `policy.revive_after_s` (one more read each); their order ids."""
    revived = jobs.revive_parked(db, now=now, parked_before=now - timedelta(seconds=policy.revive_after_s),
                                 limit=policy.revive_per_run)
    if revived:
        log.info("parked voucher fetches re-armed", extra={"order_ids": revived})
    return revived


def catch_up_orders(config: Config, db: Database, client: Any, since: datetime | None = None, *,
                    now: datetime | None = None, max_pages: int | None = None, page_size: int = 100,
                    max_lookback: timedelta = timedelta(days=2), policy: FetchPolicy = FetchPolicy(),
                    progress: Callable[[str, int], None] | None = None) -> SyncSummary:
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
    retried hourly by this job, never left dead forever. A list record that cannot be read is held
    in quarantine with the reason and does not stop the others; the watermark then stays put, so
    the record is listed again on the next run. `progress("orders", seen)` is called after each page.
    An open order intent (an `orders create` whose answer was lost) is linked to the listed order
    carrying its ref and request (`intents_linked`).
    """
    now = now or utcnow()
    floor = now - max_lookback
    keep_free = 0
    if since is None:
        stored = orders.get_meta(db, SYNC_WATERMARK)
        since = max(parse_ts(stored) if stored else now - timedelta(days=1), floor)
        max_pages = 20 if max_pages is None else max_pages
    else:
        # An unbounded walk: it leaves the voucher fetches their tenth and the poller its slice (see there).
        keep_free = walk_reserve(config.hourly_budget, config.poller_budget_share)
    api = client.with_budget("order_sync", wait=False, keep_free=keep_free) if hasattr(client, "with_budget") else client
    summary = SyncSummary(since=iso(since))
    summary.fetches_revived = len(revive_parked_fetches(db, now=now, policy=policy))
    oldest_open: datetime | None = None
    oldest: datetime | None = None
    listed: set[int] = set()
    page_number, backward_to = 1, None  # backward_to: the page a backward walk ends after (oldest first)
    while True:
        if max_pages is not None and summary.pages >= max_pages:
            summary.stopped = "max pages"
            break
        try:
            # An empty list answered with the document's 404 "No Matching Result Found!" is an empty
            # page already (PartnerClient.list_orders): a partner without orders syncs like any other.
            page = api.list_orders(page=page_number, limit=page_size)
        except errors.BudgetExhausted:
            summary.stopped = "budget"
            return summary
        summary.pages += 1
        fresh = {o.id for o in page.items} - listed
        if page.items and not fresh:
            # A provider that ignores `page` would otherwise be read until the budget is gone.
            summary.stopped = "page repeated"
            break
        listed |= fresh
        unreadable = getattr(page, "malformed", ())
        if unreadable:
            summary.quarantined += len(unreadable)
            quarantine.hold(db, "order", [(f"order record unreadable: {bad}", bad.body) for bad in unreadable],
                            now=now)
            log.warning("quarantined %d order record(s): %s", len(unreadable),
                        "; ".join(str(bad) for bad in unreadable[:3]))
        items = [o for o in page.items if o.placed_at is None or o.placed_at >= since]
        quarantine.release(db, "order", [o.id for o in items])
        local = orders.statuses(db, [o.id for o in items])
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
                # never reconciled. apply() fills missing fields and never moves a status back.
                _, moved = orders.apply(
                    conn, order.id, status, now=now, source="sync", reference_code=order.reference_code,
                    transaction_id=order.transaction_id, product_id=order.product_id,
                    product_name=_text(order.product_name), currency=_text(order.currency),
                    denomination_cents=cents(order.denomination), quantity=order.quantity,
                    amount_cents=cents(order.amount), email=_text(order.email),
                    placed_at=stamp(order.placed_at) if order.placed_at else None)
                summary.updated += int(moved or order.id not in local)
                stored = vouchers.count(conn, order.id) if status in orders.DELIVERING else 0
                # A partial delivery is re-read only when its status is news (the list has no counts).
                missing = stored < (order.quantity or 1) if status == "DELIVERED" else (
                    status == "PARTIALLY_DELIVERED" and (local.get(order.id) != status or stored == 0))
                if missing:
                    expected = order.quantity if status == "DELIVERED" else None
                    summary.fetches_queued += jobs.queue_if_idle(conn, order.id, now=now, expected_status=status,
                                                                 expected_count=expected)
            # An `orders create` whose answer was lost: its intent is linked to the order carrying its ref.
            summary.intents_linked += order_intents.link_by_ref(
                conn, [(o.reference_code, o.id, o.product_id, o.denomination, o.quantity) for o in items], now)
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
            continue
        if summary.list_order == "oldest first" and page.total_pages and page.total_pages > page_number:
            # The newest orders are on the last page: read back from there towards this one.
            backward_to, page_number = page_number, page.total_pages
            continue
        if not page.has_more:
            break
        page_number += 1
    # Next time, start from the oldest order that may still change (never older than the floor).
    # An unreadable record's placed_at is unknown: keep the watermark where it was so it is listed again.
    local_open = orders.oldest_open_placed_at(db)
    marks = [m for m in (oldest_open, parse_ts(local_open) if local_open else None) if m is not None]
    if summary.quarantined:
        marks.append(since)
    watermark = max(min(marks) if marks else now - timedelta(minutes=5), floor)
    with transaction(db) as conn:
        orders.set_meta(conn, SYNC_WATERMARK, stamp(watermark), now=now)
    return summary
