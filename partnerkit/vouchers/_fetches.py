"""Voucher fetches: the due fetch jobs claimed under a lease, each order's detail read until it shows
what its event announced, its vouchers stored once; retried with backoff, parked after its attempts,
and re-armed as soon as the provider answers again (`rearm_parked_fetches`) or, whatever it does,
an hour later (`revive_parked_fetches`).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from partnerkit import errors
from partnerkit.config import Config
from partnerkit.crypto import Cipher, KeyFollower
from partnerkit.money import cents
from partnerkit.store import Database, jobs, orders, vouchers
from partnerkit.store.budget import REFUSAL_PAUSE_S
from partnerkit.store.db import transaction
from partnerkit.store.jobs import Job, stamp
from partnerkit.timeutil import CLOCK_STEP_MARGIN_S, utcnow
from partnerkit.vouchers._sealing import seal

if TYPE_CHECKING:
    from partnerkit.client import PartnerApi

log = logging.getLogger("partnerkit.vouchers")


@dataclass(frozen=True)
class FetchPolicy:
    """How often and how long a voucher fetch is retried."""

    max_attempts: int = 8
    not_found_attempts: int = 3  # a 404 right after an event may be the provider's replication lag
    base_s: float = 10.0  # the document: "Order polling: no faster than every 10 seconds"
    cap_s: float = 900.0
    # The longest a provider's Retry-After or the request budget holds a fetch: one window of the budget's general
    # class, an hour (the budget caps a 429's wait there, `within_window`; `delay` caps a 5xx's too).
    wait_cap_s: float = 3600.0
    lease_s: float = 120.0  # longer than one read with the client's own retries
    # A parked (dead) fetch is not stuck forever: the order catch-up re-arms it once it has been
    # parked this long, for one more read each time, at most `revive_per_run` per catch-up run.
    # Vouchers are what the partner paid for; an hourly read per parked order is cheap.
    revive_after_s: float = 3600.0
    revive_per_run: int = 5
    # A fetch parked because the provider failed (5xx, no answer, 429, a body that is not JSON, an answer
    # that is not its own: `ApiStatusError.from_provider`) is re-armed as soon as the provider answers a
    # call again (an order sync's list page, another fetch's detail), at most this many per run
    # (`rearm_parked_fetches`); see `rearm_delay`.
    rearm_per_run: int = 20

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before retry number `attempt` (1-based); never less than Retry-After, up to `wait_cap_s`."""
        return max(min(self.cap_s, self.base_s * 2 ** max(0, attempt - 1)), min(retry_after or 0.0, self.wait_cap_s))

    @property
    def latest_s(self) -> float:
        """How far ahead of now a fetch job can be due: the longest delay the fetch schedules (its backoff's cap, a
        Retry-After's or the budget's wait, the key refused, a parked job's re-arm moment), plus CLOCK_STEP_MARGIN_S.

        A job due later was scheduled while this host's clock ran ahead, since put back: it is due now
        (`partnerkit.store.jobs`, the `horizon` of `claim`, `rearm_parked` and `revive_parked`)."""
        return max(self.cap_s, self.wait_cap_s, REFUSAL_PAUSE_S, self.revive_after_s) + CLOCK_STEP_MARGIN_S

    def rearm_delay(self, *, first: bool, providers: bool) -> float:
        """Seconds from parking until an answer of the provider may re-arm a fetch (`rearm_parked_fetches`).

        The provider's failure (`providers`): at once when the fetch parks after its first series of
        attempts (the provider answering again is the news it waits for), else `cap_s` (it was re-armed,
        and failed again: an order whose detail keeps failing while the provider answers everything else
        is read at the backoff's slowest pace, never once per answer). The order's own (a 404, a 400, a
        detail short of vouchers or unreadable): `revive_after_s`, the hourly revival's pace, since an
        answer from the provider is no news for it.
        """
        if not providers:
            return self.revive_after_s
        return 0.0 if first else self.cap_s


@dataclass
class FetchSummary:
    """What one run of `run_voucher_fetches` did."""

    claimed: int = 0
    answered: int = 0  # detail reads the provider answered (whatever they showed)
    rearmed: int = 0  # parked fetches re-armed because the provider answered (`rearm_parked_fetches`)
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
            retry_after: float | None = None, give_up_after: int | None = None, providers: bool = False) -> str:
    """Record a failed attempt: back off, or park the job as dead after its attempts.

    `providers`: the provider failed (not the order): its next answer may re-arm the parked job
    (`FetchPolicy.rearm_delay`)."""
    attempt = job.attempts + 1
    limit = give_up_after or policy.max_attempts
    with transaction(db) as conn:
        jobs.bump(conn, f"voucher_fetch.{outcome}")
        if attempt >= limit:
            # Its first park: the attempts end on the limit exactly (a re-armed job is past it already).
            rearm_at = now + timedelta(seconds=policy.rearm_delay(first=attempt == limit, providers=providers))
            jobs.finish(conn, job, now=now, state="dead", error=f"gave up after {attempt} attempts: {reason}",
                        rearm_at=rearm_at)
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


def _fetch_one(db: Database, api: PartnerApi, keys: KeyFollower, job: Job, policy: FetchPolicy, now: datetime,
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
            wait = min(exc.retry_after or 30, policy.wait_cap_s)
            jobs.release(conn, job, now=now, next_run_at=now + timedelta(seconds=wait),
                         error=f"waiting for API budget: {exc}", count_attempt=False)
        return "deferred"
    except errors.RateLimited as exc:
        return _settle(db, job, policy, now=now, outcome="rate_limited", reason=str(exc), retry_after=exc.retry_after,
                       providers=True)
    except errors.ServerError as exc:
        return _settle(db, job, policy, now=now, outcome="server_error", reason=str(exc), retry_after=exc.retry_after,
                       providers=True)
    except errors.TransportError as exc:
        return _settle(db, job, policy, now=now, outcome="network_error", reason=str(exc), providers=True)
    except errors.MalformedResponse as exc:  # the detail itself is unreadable: nothing stored from it
        # A body that is not JSON at all (no field named) was garbled on the way, or by a provider in
        # trouble; a record that is JSON but not the document's shape is this order's own.
        return _settle(db, job, policy, now=now, outcome="malformed",
                       reason=f"order detail unreadable: {exc}", providers=exc.field is None)
    except errors.Unauthorized as exc:
        # The API key refused (rotated, revoked, off the allowlist): not this order's fault, and every
        # other fetch would meet it too. Not an attempt: the job waits for the key, parking nothing;
        # the run hands the rest back (`partnerkit status` shows `provider_refused` meanwhile).
        with transaction(db) as conn:
            jobs.bump(conn, "voucher_fetch.refused")
            jobs.release(conn, job, now=now, next_run_at=now + timedelta(seconds=REFUSAL_PAUSE_S),
                         error=f"waiting for the provider to accept the API key: {exc}", count_attempt=False)
        return "deferred"
    except errors.ApiStatusError as exc:
        if not exc.from_provider:
            # A web server's HTML 404 under a wrong PARTNERKIT_API_BASE_URL, a proxy's 403, a redirect: the
            # provider failing, not this order's trouble. Backed off like a 5xx, re-armed once it answers again.
            return _settle(db, job, policy, now=now, outcome="not_the_provider", reason=str(exc), providers=True)
        if isinstance(exc, errors.NotFound):  # the provider's own 404: maybe its replication lag, a few times
            return _settle(db, job, policy, now=now, outcome="not_found", reason=str(exc),
                           give_up_after=policy.not_found_attempts)
        # 400/403: retrying unchanged will not help
        return _settle(db, job, policy, now=now, outcome="refused", reason=str(exc), give_up_after=1)
    summary.answered += 1
    verdict, reason = _verdict(job, detail)
    if detail.malformed:
        log.warning("order detail with unreadable vouchers", extra={"order_id": job.order_id,
                                                                     "unreadable": len(detail.malformed)})
    try:
        with transaction(db) as conn:
            status = (detail.status or "").upper()
            # First, before any voucher: a detail of another order than the one stored under its id is refused
            # by apply(), writing nothing (AnotherOrder), and none of its vouchers is stored under this order.
            fields = _detail_fields(detail)
            orders.apply(conn, job.order_id, status, now=now, source="detail",
                         delivered_quantity=len(detail.vouchers) if status in orders.DELIVERING else None,
                         identity=orders.identity_of(fields), **fields)
            # The key is looked up here, after the read and once the write lock is ours, not once per run: a read
            # can take seconds and the lock up to the worker's 15 s, and vouchers sealed with a key that `keys
            # rotate` replaced and `keys retire` dropped meanwhile could never be read (crypto.KeyFollower).
            cipher = keys.current()
            sealed = [seal(cipher, job.order_id, v) for v in detail.vouchers]
            added = vouchers.add(conn, job.order_id, sealed, now=now)
    except orders.AnotherOrder as clash:
        # Parked at once with the reason (`events list`), never retried in a loop: read again it is the same other
        # order. The hourly revival reads it once more (`revive_parked_fetches`), and a read of the order's own
        # detail ends the job as usual.
        log.warning("voucher fetch parked: the detail is of another order", extra={
            "order_id": job.order_id, "job_id": job.id, "reason": clash.reason})
        return _settle(db, job, policy, now=now, outcome="id_given_twice", reason=clash.reason, give_up_after=1)
    summary.vouchers_added += added
    if verdict == "retry":
        return _settle(db, job, policy, now=now, outcome="malformed" if detail.malformed else "not_ready",
                       reason=reason or "")
    with transaction(db) as conn:
        jobs.bump(conn, "voucher_fetch.stored")
        jobs.finish(conn, job, now=now, state="done", error=reason)
    log.info("vouchers stored", extra={"order_id": job.order_id, "added": added, "job_id": job.id})
    return "done"


def run_voucher_fetches(config: Config, db: Database, client: PartnerApi, *, now: datetime | None = None, limit: int = 20,
                        policy: FetchPolicy = FetchPolicy(), cipher: Cipher | None = None) -> FetchSummary:
    """Run the due voucher fetch jobs once (the worker calls this every few seconds)."""
    keys = KeyFollower(config, cipher)
    api = client.with_budget("voucher_fetch", wait=False)
    started = now or utcnow()
    claimed = jobs.claim(db, owner=_owner(), now=started, lease_until=started + timedelta(seconds=policy.lease_s),
                         limit=limit, horizon=started + timedelta(seconds=policy.latest_s))
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
    if summary.answered:  # the provider answers: what it failed earlier is worth one more read now
        summary.rearmed = len(rearm_parked_fetches(db, now=now or utcnow(), policy=policy))
    return summary


def rearm_parked_fetches(db: Database, *, now: datetime, policy: FetchPolicy = FetchPolicy(),
                         order_ids: list[int] | None = None, whenever: bool = False) -> list[int]:
    """Re-arm parked fetches for one more read each, now that the provider has answered a call; their order ids.

    Those whose re-arm moment has come (`FetchPolicy.rearm_delay`: the ones the provider's failure
    parked), at most `policy.rearm_per_run`; or every parked fetch of `order_ids` (the delivering
    orders an order sync listed), with `whenever` whatever its re-arm moment (a person ran the sync).
    """
    with transaction(db) as conn:
        rearmed = jobs.rearm_parked(conn, now=now, order_ids=order_ids, whenever=whenever,
                                    limit=policy.rearm_per_run if order_ids is None else None,
                                    horizon=now + timedelta(seconds=policy.latest_s))
    if rearmed:
        log.info("parked voucher fetches re-armed for one more read", extra={"order_ids": rearmed})
    return rearmed


def revive_parked_fetches(db: Database, *, now: datetime, policy: FetchPolicy = FetchPolicy()) -> list[int]:
    """Re-arm voucher fetches parked for `policy.revive_after_s` (one more read each); their order ids."""
    revived = jobs.revive_parked(db, now=now, parked_before=now - timedelta(seconds=policy.revive_after_s),
                                 limit=policy.revive_per_run, horizon=now + timedelta(seconds=policy.latest_s))
    if revived:
        log.info("parked voucher fetches re-armed", extra={"order_ids": revived})
    return revived
