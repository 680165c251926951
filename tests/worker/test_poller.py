"""The poll pass against the sandbox: one list call settles many, single reads where cheaper,
escalation after 30 minutes, the budget reserve, and never a resubmit."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from freezegun import freeze_time

from partnerkit.errors import BudgetExhausted
from partnerkit.store import recharges as store
from partnerkit.timeutil import parse_ts, utcnow
from reconcile.poller import poll_once, poller_spend
from reconcile.recharges import submit
from tests.standin import StandIn
from tests.worker.worker_helpers import LIST, SINGLE, SUBMIT, make_config, mobile
from tests.conftest import account_of


def processing(server, config, db, client, count: int, digit: int = 5, *, skew_s: float = 0) -> list[int]:
    """Submit `count` recharges that answer PROCESSING, at the sandbox's now plus `skew_s` on our clock."""
    now = server.clock.now() + timedelta(seconds=skew_s)
    ids = []
    for _ in range(count):
        outcome = submit(config, db, client, mobile_number=mobile(digit), operator_id=1, amount=199, now=now)
        assert outcome.status == "PROCESSING"
        ids.append(outcome.local_id)
    return ids


def test_one_list_call_settles_many(server, config, wdb, client, stats):
    server.sandbox.settings.update({"processing_delay_s": 8})
    ids = processing(server, config, wdb, client, 20)
    stats.mark()
    server.advance(10)
    summary = poll_once(config, wdb, client, now=server.clock.now())
    assert (summary.due, summary.settled, summary.list_calls, summary.single_calls) == (20, 20, 1, 0)
    assert stats.calls(LIST) == 1 and stats.calls(SINGLE) == 0 and stats.calls(SUBMIT) == 0
    rows = [store.get(wdb, i) for i in ids]
    assert {r["status"] for r in rows} == {"SUCCESS"}
    assert all(r["settled_at"] and r["operator_txn_id"] and r["next_poll_at"] is None for r in rows)
    # Nothing is PROCESSING any more: the next pass makes no call at all.
    assert poll_once(config, wdb, client, now=server.clock.now() + timedelta(seconds=5)).calls == 0
    assert stats.calls() == 1


def test_nothing_due_means_no_call(server, config, wdb, client, stats):
    processing(server, config, wdb, client, 3)
    stats.mark()
    summary = poll_once(config, wdb, client, now=server.clock.now() + timedelta(seconds=2))
    assert summary.due == 0 and stats.calls() == 0


def test_a_single_due_recharge_is_read_by_id(server, config, wdb, client, stats):
    [local_id] = processing(server, config, wdb, client, 1, digit=6)
    stats.mark()
    server.advance(601)  # the fixture's processing delay: settles FAILED
    summary = poll_once(config, wdb, client, now=server.clock.now())
    assert (summary.single_calls, summary.list_calls) == (1, 0)
    assert stats.calls(SINGLE) == 1 and stats.calls(LIST) == 0
    row = store.get(wdb, local_id)
    assert row["status"] == "FAILED" and row["failure_reason"]


@pytest.mark.parametrize("skew_s", [0, 600, -600], ids=["same clock", "provider 10 min behind", "provider 10 min ahead"])
def test_still_processing_after_30_minutes_is_escalated_once_and_kept_on_5_minutes(server, config, wdb, client,
                                                                                  stats, skew_s):
    # The schedule and the escalation count from our own submit time, whatever the provider's clock
    # says: its created_at 10 minutes off must move neither.
    [stuck] = processing(server, config, wdb, client, 1, digit=8, skew_s=skew_s)  # sandbox: never settles
    row = store.get(wdb, stuck)
    reference, submitted = row["reference_number"], parse_ts(row["submitted_at"])
    assert abs((parse_ts(row["provider_created_at"]) - submitted).total_seconds() + skew_s) < 2
    stats.mark()
    reads_at: list[float] = []
    escalations = []
    seen = 0  # the provider's count of API calls so far (advancing its clock calls nothing)
    for _ in range(int(41 * 60 / 5)):
        server.advance(5)
        ours = server.clock.now() + timedelta(seconds=skew_s)
        summary = poll_once(config, wdb, client, now=ours)
        calls = stats.calls()
        if calls > seen:
            reads_at.append(round((ours - submitted).total_seconds(), 3))
        seen = calls
        escalations += summary.escalated
    row = store.get(wdb, stuck)
    assert escalations == [reference]
    assert row["status"] == "PROCESSING" and row["escalated_at"]
    escalated_age = (parse_ts(row["escalated_at"]) - submitted).total_seconds()
    assert 1800 <= escalated_age < 1810
    drifts = wdb.execute("SELECT kind, subject, reference, resolution FROM drifts").fetchall()
    assert drifts == [("stuck_processing", "recharge", reference, "pending")]
    # The nightly match finds the same drift (same id) with the same figures: expected payable, no actual.
    written = wdb.execute("SELECT id, expected_cents, actual_cents FROM drifts").fetchall()
    assert written == [(written[0][0], row["payable_cents"], None)]
    from reconcile.matcher import match_day

    match_day(wdb, parse_ts(row["provider_created_at"]).date(), now=ours)
    assert wdb.execute("SELECT id, expected_cents, actual_cents FROM drifts WHERE kind = 'stuck_processing'"
                       ).fetchall() == written
    late = [age for age in reads_at if age > 1800]
    assert [round(b - a) for a, b in zip(late, late[1:])] == [300] * (len(late) - 1) and len(late) >= 2
    early = [age for age in reads_at if age <= 60]
    assert [round(b - a) for a, b in zip(early, early[1:])] == [5] * (len(early) - 1)
    assert stats.calls(SUBMIT) == 0


def test_the_poller_leaves_the_voucher_fetches_their_tenth(server, tmp_path):
    from partnerkit.client import PartnerClient
    from partnerkit.store import open_db

    config = make_config(server, tmp_path, hourly_budget="10", poller_budget_share="0.5")
    assert poller_spend(config) == (1, 5)  # keep a tenth free; take at most half for itself
    db = open_db(config.db_path)
    account_of(db, config.api_key, ("1", "2"))  # a database in use: the hour below is spent as counted
    with PartnerClient(config, db, purpose="test", wait_for_budget=False) as client:
        processing(server, config, db, client, 2)  # 2 of 10 used
        for _ in range(7):
            client.list_operators()        # 9 of 10 used: only the vouchers' tenth is left
        server.advance(30)
        summary = poll_once(config, db, client, now=server.clock.now())
        assert summary.budget_exhausted and summary.deferred == 2
        assert summary.calls == 0 and summary.settled == 0
        assert summary.read == 0  # nothing was read, so everything stays due
        # The receiver's voucher fetches (no reserve) still find room.
        fetcher = client.with_budget("vouchers", wait=False)
        before = stats_total(server)
        fetcher.list_operators()
        assert stats_total(server) == before + 1
        assert client.budget.usage()["general"]["by_purpose"].get("poller", 0) == 0


def test_the_poller_share_is_its_own_whatever_others_spent(server, tmp_path):
    # Others have used more than the poller's share of the hour: it still reads, from its own share.
    from partnerkit.client import PartnerClient
    from partnerkit.store import open_db

    config = make_config(server, tmp_path, hourly_budget="10", poller_budget_share="0.5")
    db = open_db(config.db_path)
    with PartnerClient(config, db, purpose="test", wait_for_budget=False) as client:
        ids = processing(server, config, db, client, 2)
        for _ in range(4):
            client.list_operators()        # 6 of 10 used, none by the poller
        server.advance(601)  # the fixture's processing delay: the sandbox has settled them
        summary = poll_once(config, db, client, now=server.clock.now())
        assert not summary.budget_exhausted and summary.settled == 2 and summary.calls == 1
        assert {store.get(db, i)["status"] for i in ids} != {"PROCESSING"}
        assert client.budget.usage()["general"]["by_purpose"]["poller"] == 1


def test_a_recharge_unread_for_want_of_budget_is_not_escalated_until_read(server, tmp_path):
    """At 30 minutes a recharge the budget left unread since minute 10 was escalated on that 20-minute-old read
    (a stuck_processing drift, "escalate to support"), though it may have settled at minute 11: it now waits
    for the read that shows it still PROCESSING (Limits, recommended polling: "then escalate")."""
    from partnerkit.client import PartnerClient
    from partnerkit.store import open_db

    tight = make_config(server, tmp_path, hourly_budget="10", poller_budget_share="0.5")
    db = open_db(tight.db_path)
    account_of(db, tight.api_key, ("1", "2"))
    with PartnerClient(tight, db, purpose="test", wait_for_budget=False) as client:
        [stuck] = processing(server, tight, db, client, 1, digit=8)  # 1 of 10 used; the sandbox never settles it
        row = store.get(db, stuck)
        submitted = parse_ts(row["submitted_at"])
        first = poll_once(tight, db, client, now=submitted + timedelta(minutes=10))
        assert first.read == 1 and first.calls == 1  # 2 of 10: PROCESSING at minute 10
        for _ in range(7):
            client.list_operators()  # 9 of 10: only the voucher fetches' tenth is left
        starved = poll_once(tight, db, client, now=submitted + timedelta(minutes=31))
    assert starved.calls == 0 and starved.budget_exhausted
    assert starved.escalated == [] and starved.escalation_unread == [row["provider_id"]]
    assert store.get(db, stuck)["escalated_at"] is None
    assert db.execute("SELECT count(*) FROM drifts").fetchone()[0] == 0

    roomy = make_config(server, tmp_path, hourly_budget="1000")  # the same key and database, an hour to spend
    with PartnerClient(roomy, db, purpose="test") as client:
        read = poll_once(roomy, db, client, now=submitted + timedelta(minutes=32))
    assert read.calls == 1 and read.escalated == [row["reference_number"]] and read.escalation_unread == []
    assert store.get(db, stuck)["escalated_at"] is not None
    assert db.execute("SELECT kind, reference FROM drifts").fetchall() == [("stuck_processing", row["reference_number"])]


def stats_total(server) -> int:
    return sum(server.sandbox.calls.values())


class FakeProvider(StandIn):
    """An in-memory provider for pure-logic checks of the pass (not the HTTP path)."""

    def __init__(self, records):
        self.records = {r["id"]: r for r in records}
        self.calls = []
        self.exhausted = False

    def with_budget(self, purpose, *, wait, keep_free=0, own_cap=None):
        self.calls.append(("with_budget", purpose, wait, keep_free, own_cap))
        return self

    def list_recharges(self, **params):
        self.calls.append(("list", params))
        if self.exhausted:
            raise BudgetExhausted("request budget 'general' has no room for 'poller'; retry in 12.0s")
        items = [SimpleNamespace(id=r["id"], raw=r) for r in sorted(self.records.values(), key=lambda r: -r["id"])]
        return SimpleNamespace(items=items, has_more=False)

    def get_recharge(self, recharge_id):
        self.calls.append(("get", recharge_id))
        return SimpleNamespace(id=recharge_id, raw=self.records[recharge_id])


def three_processing(wdb):
    """Three PROCESSING rows created 20 s ago, and the provider's SUCCESS records for them."""
    created = utcnow() - timedelta(seconds=20)
    records = []
    for n in range(3):
        local_id = store.record_intent(wdb, idempotency_key=f"pk-key-{n:04d}", mobile_number=f"981234567{n}",
                                       operator_id=1, amount=199, client_reference=f"c{n}", submitted_at=created)
        record = {"id": 500 + n, "reference_number": f"RCH{n}", "status": "PROCESSING", "mobile_number": f"981234567{n}",
                  "face": 199, "discount": 0, "payable": 199, "client_reference": f"c{n}",
                  "created_at": created.isoformat()}
        store.record_response(wdb, local_id, record, status="PROCESSING", seen_at=created)
        records.append(dict(record, status="SUCCESS", updated_at=utcnow().isoformat()))
    return records


@freeze_time("2025-03-10 10:00:00")
def test_the_pass_uses_now_from_the_clock_and_the_poller_budget_view(config, wdb):
    provider = FakeProvider(three_processing(wdb))
    summary = poll_once(config, wdb, provider)
    assert provider.calls[0] == ("with_budget", "poller", False, *poller_spend(config))
    assert [c[0] for c in provider.calls[1:]] == ["list"]
    assert provider.calls[1][1]["from_date"] == "2025-03-09" and provider.calls[1][1]["limit"] == 10000
    assert summary.settled == 3
    assert {r["last_polled_at"] for r in store.list_rows(wdb)} == {"2025-03-10T10:00:00Z"}


@freeze_time("2025-03-10 10:00:00")
def test_budget_exhausted_mid_pass_ends_it_without_error(config, wdb):
    provider = FakeProvider(three_processing(wdb))
    provider.exhausted = True
    summary = poll_once(config, wdb, provider)
    assert summary.budget_exhausted and summary.read == 0 and summary.settled == 0
    assert {r["status"] for r in store.list_rows(wdb)} == {"PROCESSING"}
    assert {r["last_polled_at"] for r in store.list_rows(wdb)} == {None}  # still due next pass
