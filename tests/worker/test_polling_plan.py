"""The polling plan, a pure function: the document's schedule by age, list vs single reads, budget."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from freezegun import freeze_time
from hypothesis import given, settings
from hypothesis import strategies as st

from partnerkit.timeutil import utcnow
from reconcile.polling import DEFAULT_SCHEDULE, ListRead, PollItem, PollSchedule, SingleRead, plan

NOW = datetime(2025, 3, 10, 12, 0, 0, tzinfo=timezone.utc)


def item(n: int, age_s: float, last_read_age_s: float | None = None, *, escalated: bool = False) -> PollItem:
    created = NOW - timedelta(seconds=age_s)
    last = None if last_read_age_s is None else created + timedelta(seconds=last_read_age_s)
    return PollItem(n, 100000 + n, created, last, NOW if escalated else None)


# Limits, "Recommended polling for a PROCESSING recharge".
@pytest.mark.parametrize("age_s, interval_s", [
    (0, 5), (4, 5), (59, 5),          # 0 to 1 min: 5 seconds
    (61, 15), (299, 15),              # 1 to 5 min: 15 seconds
    (301, 60), (1799, 60),            # 5 to 30 min: 60 seconds
    (1801, 300),                      # beyond 30 min: 5 minutes
])
def test_interval_by_age_follows_the_document(age_s, interval_s):
    assert DEFAULT_SCHEDULE.interval(age_s) == interval_s


# (age now, age at the last read or None for "only the submit answer", due?)
@pytest.mark.parametrize("age_s, last_read_age_s, due", [
    (0, None, False),      # just submitted: the submit answer is the first read
    (4, None, False),
    (5, None, True),
    (59, 54, True),        # read at 54 s (5 s step): due at 59 s
    (59, 55, False),
    (61, 55, True),        # read at 55 s is still on the 5 s step
    (61, 60, False),       # read at 60 s: next at 75 s
    (299, 284, True),      # 15 s step
    (299, 285, False),
    (301, 286, True),      # read at 286 s (15 s step): due at 301 s
    (301, 300, False),     # read at 300 s: 60 s step, next at 360 s
    (1799, 1739, True),
    (1799, 1740, False),
    (1801, 1790, False),   # read at 1790 s (60 s step): next at 1850 s
    (1801, 1741, True),
    (2100, 1800, True),    # beyond 30 min: every 5 minutes
    (2100, 1810, False),
])
def test_due_by_age_and_last_read(age_s, last_read_age_s, due):
    result = plan(NOW, [item(1, age_s, last_read_age_s)], budget_available=10)
    assert (len(result.due) == 1) is due


@freeze_time("2025-03-10 12:00:00")
def test_plan_runs_on_the_frozen_clock():
    now = utcnow()
    fresh = PollItem(1, 100001, now - timedelta(seconds=3))
    assert plan(now, [fresh], 5).due == ()
    assert plan(now + timedelta(seconds=2), [fresh], 5).due == (fresh,)


def test_many_due_recharges_are_one_list_read():
    items = [item(n, 30 + n) for n in range(50)]
    result = plan(NOW, items, budget_available=10)
    assert len(result.due) == 50
    assert len(result.reads) == 1 and isinstance(result.reads[0], ListRead)
    read = result.reads[0]
    assert read.from_day == date(2025, 3, 9) and read.to_day == date(2025, 3, 11)  # widened a day each side
    assert read.min_provider_id == 100000
    assert result.calls == 1 and result.deferred == ()


def test_one_due_recharge_is_a_single_read():
    result = plan(NOW, [item(1, 30)], budget_available=10)
    assert [type(r) for r in result.reads] == [SingleRead]


def test_old_stragglers_far_from_busy_days_are_read_singly():
    stuck = [item(1, 3 * 86400), item(2, 3 * 86400 + 60)]
    fresh = [item(n, 20 + n) for n in range(10, 20)]
    busy = {date(2025, 3, 7): 30000, date(2025, 3, 8): 30000, date(2025, 3, 9): 30000, date(2025, 3, 10): 500}
    result = plan(NOW, stuck + fresh, budget_available=10, day_counts=busy)
    singles = sorted(r.item.local_id for r in result.reads if isinstance(r, SingleRead))
    lists = [r for r in result.reads if isinstance(r, ListRead)]
    assert singles == [1, 2]
    assert len(lists) == 1 and {i.local_id for i in lists[0].items} == set(range(10, 20))
    assert result.calls == 3  # two singles + one page, against nine pages for one walk from the 7th


def test_spread_recharges_on_quiet_days_are_still_one_list_read():
    items = [item(1, 3 * 86400), item(2, 40), item(3, 50)]
    result = plan(NOW, items, budget_available=10, day_counts={date(2025, 3, 7): 40, date(2025, 3, 10): 60})
    assert len(result.reads) == 1 and isinstance(result.reads[0], ListRead)


def test_no_budget_defers_everything_and_reads_nothing():
    items = [item(n, 30) for n in range(5)]
    result = plan(NOW, items, budget_available=0)
    assert result.reads == () and len(result.deferred) == 5 and result.calls == 0


def test_tight_budget_reads_the_most_overdue_singly():
    items = [item(1, 20), item(2, 200, 100), item(3, 40)]  # item 2 is the most overdue
    busy = {date(2025, 3, 10): 50000}  # a list walk would take five pages
    result = plan(NOW, items, budget_available=1, day_counts=busy)
    assert [r.item.local_id for r in result.reads] == [2]
    assert sorted(i.local_id for i in result.deferred) == [1, 3]


def test_escalation_candidates_are_past_30_minutes_and_not_yet_escalated():
    items = [item(1, 1799, 1790), item(2, 1800, 1790), item(3, 4000, 3900, escalated=True)]
    result = plan(NOW, items, budget_available=10)
    assert [i.local_id for i in result.escalate] == [2]


def test_next_due_at_is_the_earliest_upcoming_read():
    result = plan(NOW, [item(1, 2), item(2, 100, 95)], budget_available=10)
    assert result.next_due_at == NOW + timedelta(seconds=3)


@pytest.mark.parametrize("kwargs", [
    {"steps": ((300, 15), (60, 5))},
    {"steps": ((60, 0),)},
    {"tail_s": 0},
    {"escalate_after_s": 0},
    {"list_limit": 10001},
])
def test_schedule_policy_is_validated(kwargs):
    with pytest.raises(ValueError):
        PollSchedule(**kwargs)


@settings(max_examples=60, deadline=None)
@given(ages=st.lists(st.tuples(st.integers(0, 4 * 86400), st.integers(0, 600)), min_size=0, max_size=40),
       budget=st.integers(0, 6), busy=st.integers(0, 60000))
def test_every_due_recharge_is_read_or_deferred_and_the_budget_holds(ages, budget, busy):
    items = [item(n, age, max(0, age - since)) for n, (age, since) in enumerate(ages)]
    result = plan(NOW, items, budget, day_counts={NOW.date(): busy})
    covered = set()
    for read in result.reads:
        covered |= {i.local_id for i in read.items} if isinstance(read, ListRead) else {read.item.local_id}
    assert covered | {i.local_id for i in result.deferred} == {i.local_id for i in result.due}
    assert covered.isdisjoint(i.local_id for i in result.deferred)
    assert result.calls <= budget
    assert result.calls <= len(result.due)  # never more calls than reading each due recharge once
