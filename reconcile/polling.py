"""The polling plan: given now, the PROCESSING recharges and a call budget, what to read. Pure.

The schedule is the document's "Recommended polling for a PROCESSING recharge" (Limits): every 5 s
in the first minute, 15 s to 5 minutes, 60 s to 30 minutes, then every 5 minutes with escalation to
support. A recharge is due when `interval(age at its last read)` has passed since that read (the
submit response counts as the first read). Due recharges are read through the list endpoint, one
date range covering many of them, except where single reads cost fewer calls (a few old
stragglers far from the rest).

A recharge's age counts from `PollItem.since`: the moment partnerkit sent it, on partnerkit's own
clock, or for a recharge someone else submitted the provider's created_at (all there is). The
provider's clock is not ours: aged by its created_at, the recharges of a provider running ten
minutes ahead would look ten minutes younger (read slower, escalated ten minutes late), and those
of one running behind ten minutes older (escalated early).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Mapping, Sequence

from partnerkit.timeutil import CLOCK_STEP_MARGIN_S

LIST_LIMIT_MAX = 10000  # GET /api/v1/recharges: limit 1 to 10000


@dataclass(frozen=True)
class PollSchedule:
    """Read intervals by age (rq-style policy object): `steps` of (age below s, interval s), then `tail`."""

    steps: tuple[tuple[float, float], ...] = ((60, 5), (300, 15), (1800, 60))
    tail_s: float = 300
    escalate_after_s: float = 1800
    slack_s: float = 0.5  # a pass that starts a hair early still counts (the job runs every 5 s)
    list_limit: int = LIST_LIMIT_MAX

    def __post_init__(self) -> None:
        bounds = [b for b, _ in self.steps]
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise ValueError("PollSchedule.steps must have strictly increasing age bounds")
        if any(i <= 0 for _, i in self.steps) or self.tail_s <= 0:
            raise ValueError("PollSchedule intervals must be positive")
        if self.escalate_after_s <= 0 or self.slack_s < 0:
            raise ValueError("PollSchedule.escalate_after_s must be positive and slack_s not negative")
        if not 1 <= self.list_limit <= LIST_LIMIT_MAX:
            raise ValueError(f"PollSchedule.list_limit must be 1 to {LIST_LIMIT_MAX}")

    def interval(self, age_s: float) -> float:
        """Seconds until the next read of a recharge that is `age_s` old."""
        for below, every in self.steps:
            if age_s < below:
                return every
        return self.tail_s

    def next_read_at(self, since: datetime, last_read_at: datetime | None) -> datetime:
        """When a recharge aged from `since`, last read at `last_read_at` (None: only the submit answer), is due."""
        last = last_read_at or since
        age = max(0.0, (last - since).total_seconds())
        return last + timedelta(seconds=self.interval(age))

    @property
    def latest_s(self) -> float:
        """The longest interval between two reads, plus CLOCK_STEP_MARGIN_S: a recharge's last read or submit time
        further ahead of now than this was written under a clock since put back (NTP stepped it), and is not
        waited for (`partnerkit.store.recharges.poll_candidates`, the poller's `horizon`)."""
        return max(self.tail_s, *(every for _, every in self.steps)) + CLOCK_STEP_MARGIN_S

    def is_due(self, now: datetime, since: datetime, last_read_at: datetime | None) -> bool:
        """True when the recharge should be read in a pass starting at `now`."""
        return now + timedelta(seconds=self.slack_s) >= self.next_read_at(since, last_read_at)


DEFAULT_SCHEDULE = PollSchedule()


@dataclass(frozen=True)
class PollItem:
    """What the plan needs to know about one PROCESSING recharge."""

    local_id: int
    provider_id: int
    since: datetime  # where its age counts from (the module docstring): our submit time, else the provider's
    last_polled_at: datetime | None = None
    escalated_at: datetime | None = None


@dataclass(frozen=True)
class ListRead:
    """One walk of GET /recharges?from_date=..&to_date=.. (newest first) covering `items`."""

    from_day: date
    to_day: date
    items: tuple[PollItem, ...]
    estimated_pages: int

    @property
    def min_provider_id(self) -> int:
        """Paging can stop once the list passes below this id (the list is id descending)."""
        return min(i.provider_id for i in self.items)


@dataclass(frozen=True)
class SingleRead:
    """One GET /recharges/:id."""

    item: PollItem


@dataclass(frozen=True)
class Plan:
    """The reads of one poll pass, what the budget left out, and what is past escalation age."""

    now: datetime
    due: tuple[PollItem, ...]
    reads: tuple[ListRead | SingleRead, ...]
    deferred: tuple[PollItem, ...] = ()
    escalate: tuple[PollItem, ...] = ()
    calls: int = 0
    next_due_at: datetime | None = field(default=None)


def _list_pages(day_counts: Mapping[date, int], first: date, last: date, limit: int) -> int:
    """Estimated pages of a list walk over days [first, last] from what partnerkit knows (at least 1)."""
    known = sum(n for day, n in day_counts.items() if first <= day <= last)
    return max(1, math.ceil(known / limit))


def _window(items: Sequence[PollItem]) -> tuple[date, date]:
    # The document does not say in which time zone from_date/to_date are days; widen by one day
    # on each side so that any zone between UTC-12 and UTC+14 still covers every item (and
    # `since`, on our clock, may differ from the provider's created_at by its clock's error).
    # An item the walk still does not show is read by id (poller.poll_once).
    first = min(i.since for i in items).date() - timedelta(days=1)
    last = max(i.since for i in items).date() + timedelta(days=1)
    return first, last


def plan(now: datetime, recharges: Sequence[PollItem], budget_available: int, *,
         schedule: PollSchedule = DEFAULT_SCHEDULE, day_counts: Mapping[date, int] | None = None) -> Plan:
    """Decide which recharges are due and the cheapest reads that cover them within the budget."""
    counts = day_counts or {}
    due = sorted((r for r in recharges if schedule.is_due(now, r.since, r.last_polled_at)),
                 key=lambda r: (schedule.next_read_at(r.since, r.last_polled_at), r.provider_id))
    escalate = tuple(r for r in recharges if r.escalated_at is None
                     and (now - r.since).total_seconds() >= schedule.escalate_after_s)
    due_ids = {r.local_id for r in due}
    upcoming = [schedule.next_read_at(r.since, r.last_polled_at) for r in recharges if r.local_id not in due_ids]
    next_due = min(upcoming) if upcoming else None
    if not due or budget_available <= 0:
        return Plan(now, tuple(due), (), tuple(due), escalate, 0, next_due)

    # Split point: recharges created on or after some day go into one list read, older ones are
    # read singly. Only day boundaries change the list's date range, so try each and keep the
    # cheapest (ties favour the list read, which also settles what is not due yet).
    by_age = sorted(due, key=lambda r: (r.since, r.provider_id))
    last_day = by_age[-1].since.date() + timedelta(days=1)
    best: tuple[int, int] | None = None  # (cost, number read singly)
    previous_day = None
    for index, item in enumerate(by_age):
        day = item.since.date()
        if day == previous_day:
            continue
        previous_day = day
        listed = len(by_age) - index
        pages = _list_pages(counts, day, last_day, schedule.list_limit)
        cost = index + (1 if listed == 1 else pages)  # a one-item list read is never better than by id
        if best is None or cost < best[0]:
            best = (cost, index)
    if best is None or len(by_age) < best[0]:
        best = (len(by_age), len(by_age))
    n_single = best[1]
    single_items, listed = by_age[:n_single], by_age[n_single:]
    if len(listed) == 1:
        single_items, listed = by_age, []

    reads: list[ListRead | SingleRead] = []
    budget = budget_available
    covered: set[int] = set()
    if listed:
        first, last = _window(listed)
        # Rows older than the oldest due one come after it (id descending): paging stops there.
        pages = _list_pages(counts, listed[0].since.date(), last, schedule.list_limit)
        if pages <= budget:
            reads.append(ListRead(first, last, tuple(listed), pages))
            budget -= pages
            covered.update(r.local_id for r in listed)
        else:
            single_items = by_age  # not enough room for the whole walk: read the most overdue singly
    # Most overdue first, so a tight budget reads the recharges that waited longest.
    for item in sorted((r for r in single_items if r.local_id not in covered),
                       key=lambda r: schedule.next_read_at(r.since, r.last_polled_at)):
        if budget <= 0:
            break
        reads.append(SingleRead(item))
        budget -= 1
        covered.add(item.local_id)
    deferred = tuple(r for r in due if r.local_id not in covered)
    calls = sum(r.estimated_pages if isinstance(r, ListRead) else 1 for r in reads)
    return Plan(now, tuple(due), tuple(reads), deferred, escalate, calls, next_due)
