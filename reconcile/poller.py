"""One poll pass: read due PROCESSING recharges back from the provider and store what changed.

The plan (`reconcile.polling.plan`) decides what to read; this module only does the I/O. It uses
the client under the "poller" budget purpose with `wait=False`, leaving the receiver's voucher
fetches their tenth of the hour (`keep_free`) and taking at most its share of the hour for itself
(`own_cap`): when either is reached the pass simply ends (BudgetExhausted is an outcome here, not
an error). Never resubmit to resolve: a PROCESSING recharge is only ever read (States and
transitions: Recharge).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from partnerkit.config import Config
from partnerkit.errors import ApiError, BudgetExhausted, MalformedResponse, NotFound, PartnerKitError, RateLimited
from partnerkit.money import from_cents
from partnerkit.store import Database
from partnerkit.store import meta
from partnerkit.store import recharges as store
from partnerkit.store.budget import background_reserve, poller_cap
from partnerkit.store.db import transaction
from partnerkit.timeutil import CLOCK_STEP_MARGIN_S, iso, parse_ts, utcnow
from reconcile.polling import DEFAULT_SCHEDULE, ListRead, PollItem, PollSchedule, plan

if TYPE_CHECKING:
    from partnerkit.client import PartnerApi

log = logging.getLogger("reconcile.poller")

PURPOSE = "poller"  # the budget purpose the poller spends under; its own cap counts these requests

MAX_CALLS_PER_PASS = 20  # a pass every 5 s never needs more; bounds a pass if the estimate is off
EXTRA_PAGES = 2  # pages beyond the plan's estimate a list walk may take before leaving the rest due
# After a pass the provider failed (5xx, timeout, unreadable answer), the next passes wait 5 s,
# 10 s, 20 s, ... up to 60 s instead of asking every 5 s: a provider in trouble is not hammered and
# the poller's share of the budget is not burnt on failures; once it answers, the schedule resumes.
BACKOFF_KEY = "poller.provider_backoff"
BACKOFF_FIRST_S = 5.0
BACKOFF_CAP_S = 60.0
# A back-off ending further ahead than this was set while this host's clock ran ahead, since put back: no
# pass waits for it (`_backoff`).
BACKOFF_LATEST_S = BACKOFF_CAP_S + CLOCK_STEP_MARGIN_S


@dataclass
class PollSummary:
    """What one pass did; logged as the job's outcome."""

    candidates: int = 0
    due: int = 0
    read: int = 0
    settled: int = 0
    calls: int = 0
    list_calls: int = 0
    single_calls: int = 0
    deferred: int = 0
    escalated: list[str] = field(default_factory=list)
    budget_exhausted: bool = False
    not_found: list[int] = field(default_factory=list)
    quarantined: list[int] = field(default_factory=list)  # provider ids whose record could not be stored (the reason
    # is logged): unreadable, or another recharge than the one stored under the id
    backing_off_until: str | None = None  # the provider failed recently: no call before this
    escalation_unread: list[int] = field(default_factory=list)  # past 30 minutes, not escalated until read

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the job log line."""
        return dict(vars(self))


def poller_spend(config: Config) -> tuple[int, int]:
    """(keep_free, own_cap) of the poller's requests: it leaves the voucher fetches their tenth of the
    hour, and its share (PARTNERKIT_POLLER_BUDGET_SHARE) caps what it takes itself, whatever others spent."""
    return background_reserve(config.hourly_budget), poller_cap(config.hourly_budget, config.poller_budget_share)


def _room(client: PartnerApi, keep_free: int, own_cap: int, cap: int) -> int:
    """Calls this pass may plan for: at most `cap`, the shared remaining above the reserve, and what
    is left of the poller's own cap this hour."""
    try:
        general = client.budget.usage()["general"]
        remaining = int(general["remaining"])
        own_used = int(general["by_purpose"].get(PURPOSE, 0))
    except (KeyError, TypeError, ValueError, PartnerKitError):
        return cap  # the budget could not be read now (the database busy): BudgetExhausted still ends the pass
    return max(0, min(cap, remaining - keep_free, own_cap - own_used))


def _items(rows: list[dict]) -> list[PollItem]:
    return [PollItem(r["local_id"], r["provider_id"], parse_ts(r["since"]),  # type: ignore[arg-type]
                     parse_ts(r["last_polled_at"]), parse_ts(r["escalated_at"])) for r in rows]


def poll_once(config: Config, db: Database, client: PartnerApi, now: datetime | None = None, *,
              schedule: PollSchedule = DEFAULT_SCHEDULE, max_calls: int = MAX_CALLS_PER_PASS) -> PollSummary:
    """Read the due PROCESSING recharges (list endpoint first), store changes, escalate stuck ones."""
    now = now or utcnow()
    summary = PollSummary()
    items = _items(store.poll_candidates(db, now=now, horizon=now + timedelta(seconds=schedule.latest_s)))
    summary.candidates = len(items)
    if not items:
        return summary
    failures, until = _backoff(db, now)
    if until is not None and now < until:
        summary.backing_off_until = iso(until)
        return summary
    first = min(i.since for i in items).date()
    counts = store.day_counts(db, first, now.date())
    keep_free, own_cap = poller_spend(config)
    budgeted = client.with_budget(PURPOSE, wait=False, keep_free=keep_free, own_cap=own_cap)
    the_plan = plan(now, items, _room(client, keep_free, own_cap, max_calls), schedule=schedule, day_counts=counts)
    summary.due, summary.deferred = len(the_plan.due), len(the_plan.deferred)
    summary.budget_exhausted = bool(the_plan.deferred)  # the poller's room has none for them now
    read: set[int] = set()  # local ids read in this pass (due or not: any fresh read resets the clock)
    known = {i.provider_id: i.local_id for i in items}
    try:
        for step in the_plan.reads:
            if isinstance(step, ListRead):
                missing = _walk_list(db, budgeted, step, now, summary, read, known, schedule.list_limit)
                # An item the walk did not show (other time zone, deleted): read it by id now.
                for item in missing:
                    _read_single(db, budgeted, item, now, summary, read)
            else:
                _read_single(db, budgeted, step.item, now, summary, read)
    except (BudgetExhausted, RateLimited) as exc:
        summary.budget_exhausted = True
        log.info("poll pass ended early: %s", exc)
    except ApiError as exc:  # the provider failed this pass: back off, and let the job report the error
        delay = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2 ** failures)
        _set_backoff(db, failures + 1, now + timedelta(seconds=delay), now)
        log.warning("poll pass failed (%s); next pass in %.0f s at the earliest", exc, delay)
        raise
    else:
        if failures:
            _set_backoff(db, 0, None, now)
    finally:
        marks = [(i.local_id, schedule.next_read_at(i.since, now)) for i in items if i.local_id in read]
        store.mark_polled(db, marks, now)
    summary.read = len(marks)
    _escalate(db, the_plan.escalate, now, summary, schedule)
    return summary


def _backoff(db: Database, now: datetime) -> tuple[int, datetime | None]:
    """(consecutive failed passes, no pass before) from the shared meta table; no moment past BACKOFF_LATEST_S
    from `now`, which a clock that read `now` never set."""
    raw = meta.get(db, BACKOFF_KEY)
    if not raw:
        return 0, None
    count, _, until = raw.partition("|")
    try:
        moment = parse_ts(until) if until else None
        return int(count), None if moment is None or moment > now + timedelta(seconds=BACKOFF_LATEST_S) else moment
    except (ValueError, PartnerKitError):
        return 0, None


def _set_backoff(db: Database, failures: int, until: datetime | None, now: datetime) -> None:
    with transaction(db) as conn:
        meta.put(conn, BACKOFF_KEY, f"{failures}|{iso(until) if until else ''}", now=now)


def _walk_list(db: Database, client: PartnerApi, step: ListRead, now: datetime, summary: PollSummary,
               read: set[int], known: dict[int, int], limit: int) -> list[PollItem]:
    """Page through the list (newest first) until every item of `step` is seen; return the unseen."""
    wanted = {i.provider_id: i for i in step.items}
    floor = step.min_provider_id
    page = 1
    while True:
        result = client.list_recharges(page=page, limit=limit,
                                       from_date=step.from_day.isoformat(), to_date=step.to_day.isoformat())
        summary.calls += 1
        summary.list_calls += 1
        records = list(result.items)
        # Only recharges partnerkit already holds are updated here; the sync adds the others.
        outcome = store.upsert_from_provider(db, records, now, insert_unknown=False)
        summary.settled += len(outcome.settled)
        for record in records:
            wanted.pop(int(record.id), None)
            if int(record.id) in known:
                read.add(known[int(record.id)])
        # A record the client could not read is quarantined, not a reason to stop: the good records
        # of the page are stored above, and the bad one counts as read (due again on its schedule,
        # never re-read in a tight loop).
        bad = store.reject(db, [(_record_id(b), f"{store.UNREADABLE} {b}", b.body) for b in getattr(result, "malformed", ())], now)
        for provider_id, reason in bad.rejected + outcome.rejected:
            _quarantined(provider_id, reason, summary, read, known)
            wanted.pop(provider_id, None)  # type: ignore[arg-type]
        if not wanted or not result.has_more or not records or int(records[-1].id) < floor:
            break
        if page >= step.estimated_pages + EXTRA_PAGES:
            break
        page += 1
    return list(wanted.values())


def _read_single(db: Database, client: PartnerApi, item: PollItem, now: datetime, summary: PollSummary,
                 read: set[int]) -> None:
    summary.calls += 1
    summary.single_calls += 1
    try:
        record = client.get_recharge(item.provider_id)
    except NotFound as exc:
        if not exc.from_provider:
            # A web server's HTML 404 under a wrong PARTNERKIT_API_BASE_URL says nothing of the recharge: a
            # failed read (the pass backs off, the job reports the error), as a 5xx is, never "not found".
            raise
        # The provider no longer shows it; reconciliation reports unknown_to_provider. Keep reading
        # it on the slow schedule rather than guessing an outcome.
        summary.not_found.append(item.provider_id)
        read.add(item.local_id)
        log.warning("recharge %s not found at the provider while PROCESSING locally", item.provider_id)
        return
    except MalformedResponse as exc:
        if exc.status is not None:
            raise  # the whole answer is unreadable (not one record): the provider's fault ends the pass
        reason = f"{store.UNREADABLE} {exc}"
        store.reject(db, [(item.provider_id, reason, exc.body)], now)
        _quarantined(item.provider_id, reason, summary, read, {item.provider_id: item.local_id})
        return
    outcome = store.upsert_from_provider(db, [record], now, insert_unknown=False)
    summary.settled += len(outcome.settled)
    for provider_id, reason in outcome.rejected:  # unreadable, or another recharge under its id
        _quarantined(provider_id, reason, summary, read, {item.provider_id: item.local_id})
    read.add(item.local_id)


def _record_id(bad: MalformedResponse) -> int | None:
    value = bad.body.get("id") if isinstance(bad.body, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _quarantined(provider_id: int | None, reason: str, summary: PollSummary, read: set[int],
                 known: dict[int, int]) -> None:
    if provider_id is None:
        return
    summary.quarantined.append(provider_id)
    if provider_id in known:
        read.add(known[provider_id])
    log.warning("recharge %s: the provider's record is quarantined, not stored: %s", provider_id, reason)


def _escalate(db: Database, candidates: tuple[PollItem, ...], now: datetime, summary: PollSummary,
              schedule: PollSchedule = DEFAULT_SCHEDULE) -> None:
    """Limits, recommended polling: beyond 30 min, escalate to support with the reference_number.

    Only a recharge read as the schedule asks: one still due for a read after this pass (the budget, a
    429's block or the plan's room left it unread) is PROCESSING only as of its last read, which may be
    twenty minutes old; it waits for the read that shows it still PROCESSING (README, "Where the
    provider's document is silent": the polling table's last row)."""
    if not candidates:
        return
    from partnerkit.store.drifts import open_drift  # reconciliation's store; imported where used

    for item in candidates:
        row = store.get(db, item.local_id)
        if row is None or row["status"] != "PROCESSING" or row["escalated_at"]:
            continue  # settled by this pass's reads
        if schedule.is_due(now, item.since, parse_ts(row["last_polled_at"])):
            summary.escalation_unread.append(item.provider_id)
            continue  # not read when the schedule asked: its PROCESSING is stale, escalated once read
        # The matcher's reference and figures for the same drift (partnerkit.store.matching, RECHARGE_RULES):
        # the drift id derives from the reference, and the nightly match rewrites the figures.
        reference = row["reference_number"] or row["idempotency_key"] or f"local:{row['local_id']}"
        payable = row["payable_cents"] if row["payable_cents"] is not None else row["amount_cents"]
        # Drift first, flag second: a crash in between re-records the same drift (stable id), never loses it.
        open_drift(db, kind="stuck_processing", subject="recharge", reference=reference,
                   expected=None if payable is None else from_cents(payable), actual=None,
                   currency=row["currency"] or "INR", detected_at=now)
        if store.mark_escalated(db, item.local_id, now):
            summary.escalated.append(reference)
            log.warning("recharge %s still PROCESSING after 30 minutes: escalate to support with reference_number %s",
                        row["provider_id"], reference, extra={"reference_number": reference,
                                                               "recharge_id": row["provider_id"]})
