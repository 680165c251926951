"""A sync walk keeps its place while it runs, not only when the budget or the provider stops it: one
killed part-way (here: an exception after a page, as a SIGKILL leaves it) reads on from the page it
noted last, and one this process is asked to stop (SIGTERM to the worker or `worker --once`) ends at
its next batch with its place kept. Against the real sandbox on loopback, its clock frozen (World).
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, time, timedelta, timezone
from decimal import Decimal

import pytest
from freezegun import freeze_time

from partnerkit.store import ledger as ledger_store
from partnerkit import walks
from reconcile import ledger_writer, sync
from reconcile.scheduler import run_once
from reconcile.worker_jobs import JOBS
from sandbox import recharges as sb_recharges
from sandbox import wallets as sb_wallets
from tests.reliability.provider_world import RECHARGE_LIST, START, TRANSACTIONS, World, local_transactions

DAY = START.date()
PAGE = 100  # both walks' page size here, and a sync's batch two pages, as with the worker's 500 and 1000
PLANTED = 900  # nine and a bit pages of each, with what the sandbox holds already


@pytest.fixture
def small_pages(monkeypatch):
    """The walks' pages and a sync's batches a fifth of the worker's (a place is a page number, whatever a page
    holds): the same pages and batches from a fifth of the records to plant, serve, map and store."""
    for name in ("RECHARGE_PAGE", "TRANSACTION_PAGE"):
        monkeypatch.setattr(sync, name, PAGE)
    for name in ("BATCH", "UPSERT_GROUP"):
        monkeypatch.setattr(sync, name, 2 * PAGE)


class Killed(Exception):
    """What a SIGKILL does to a walk, as far as the store can tell: it never gets to its end."""


def _plant(world: World) -> None:
    """PLANTED recharges (each with its debit) and PLANTED top-ups on DAY, through the sandbox's own functions."""
    sb = world.sb
    with sb.lock:
        client = sb.clients[world.key]
        wallet = sb_wallets.wallet_for(sb, world.key, "INR")
        sb_wallets.post(sb, wallet, "TOPUP", "CREDIT", Decimal("1000000.00"))
        for n in range(PLANTED):
            body = {"mobile_number": f"97{n:07d}0", "operator_id": 1, "amount": 100, "force": True}  # 0: SUCCESS
            request = sb_recharges.parse_submit(sb, client, body)
            sb_recharges.create(sb, client, request, sb_recharges.quote(sb, client, request.operator, request.face))
        midnight = datetime.combine(DAY, time(0), tzinfo=timezone.utc)
        for n in range(PLANTED):
            sb_wallets.post(sb, wallet, "TOPUP", "CREDIT", Decimal("1.00"), created_at=midnight + timedelta(seconds=n))


def _pages(world: World, entity: str) -> int:
    with world.sb.lock:
        if entity == "recharges":
            count = sum(1 for r in world.sb.recharges.values() if r.client_key == world.key)
        else:
            count = sum(1 for t in world.sb.transactions.values() if t.client_key == world.key)
    return -(-count // PAGE)


def _listed(world: World, entity: str, pages: int) -> set[str]:
    """What the provider lists on pages 1..pages of the day (ids as stored)."""
    client = world.client("check")
    ids: set[str] = set()
    for page in range(1, pages + 1):
        if entity == "recharges":
            ids.update(str(r.id) for r in client.list_recharges(page=page, limit=PAGE, from_date=DAY, to_date=DAY).items)
        else:
            ids.update(str(t["id"]) for t in client.list_transactions(page=page, limit=PAGE, from_date=DAY,
                                                                      to_date=DAY).items)
    return ids


def _stored(world: World, entity: str) -> set[str]:
    if entity == "recharges":
        return {str(r[0]) for r in world.db.execute("SELECT provider_id FROM recharges WHERE provider_id IS NOT NULL")}
    return set(local_transactions(world))


def _walk(entity: str):
    return sync.sync_recharges if entity == "recharges" else sync.sync_transactions


def _calls(world: World, entity: str) -> int:
    return world.calls(RECHARGE_LIST if entity == "recharges" else TRANSACTIONS)


@pytest.fixture
def walks_allowed():
    yield
    walks.allow_walks()  # a test that stopped the walks leaves none stopped for the next


@pytest.mark.parametrize("entity, writer", [("recharges", False), ("transactions", False), ("transactions", True)])
def test_a_walk_killed_part_way_reads_on_from_the_place_it_noted(tmp_path, monkeypatch, small_pages, entity, writer):
    monkeypatch.setattr(walks, "PLACE_EVERY_S", 0.0)  # note the place after every batch (two pages)
    if writer:  # the transaction rows go through the writer thread from the first batch on, as on a busy day
        monkeypatch.setattr(ledger_writer, "STAGE_ROWS", 2 * PAGE)
    with freeze_time(START) as frozen, World(tmp_path, frozen) as world:
        _plant(world)
        pages = _pages(world, entity)
        assert pages >= 9

        def killed_after_eight_pages(name: str, read: int) -> None:
            if name == entity and read >= 8 * PAGE:
                raise Killed

        started = world.now()
        with pytest.raises(Killed):
            _walk(entity)(world.db, world.client("sync"), DAY, DAY, now=started, progress=killed_after_eight_pages)
        position = ledger_store.walk_position(world.db, entity, DAY.isoformat(), DAY.isoformat())
        assert position is not None, "the killed walk noted no place"
        place = position[0]
        # Noted after the batch of pages 5-6 (the kill came after pages 7-8, before their turn), once the rows
        # before it were written: the writer thread may not have passed the last mark or two yet.
        assert place in (2, 4, 6) if writer else place == 6
        assert _listed(world, entity, place - 1) <= _stored(world, entity), "a place past rows not yet written"

        world.advance(60)
        before = _calls(world, entity)
        _walk(entity)(world.db, world.client("sync"), DAY, DAY, now=world.now())
        assert _calls(world, entity) - before == pages - place + 1  # read on from the noted page, not from page 1
        assert ledger_store.walk_position(world.db, entity, DAY.isoformat(), DAY.isoformat()) is None
        # The coverage the finished walk claims counts from when its first part began.
        assert ledger_store.coverage(world.db, entity, DAY.isoformat()) == started.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert _stored(world, entity) == _listed(world, entity, pages)


@pytest.mark.parametrize("entity", ["recharges", "transactions"])
def test_a_walk_asked_to_stop_ends_at_its_next_batch_with_its_place_kept(tmp_path, small_pages, walks_allowed, entity):
    with freeze_time(START) as frozen, World(tmp_path, frozen) as world:
        _plant(world)
        pages = _pages(world, entity)

        def stop_after_page_four(name: str, read: int) -> None:
            if name == entity and read >= 4 * PAGE:
                walks.stop_walks()  # what the worker does on SIGTERM

        before = _calls(world, entity)
        with pytest.raises(walks.WalkStopped, match=rf"the {entity} sync of {DAY}..{DAY} stopped before page 4, "
                                                   "which its next run reads on from"):
            _walk(entity)(world.db, world.client("sync"), DAY, DAY, now=world.now(), progress=stop_after_page_four)
        assert _calls(world, entity) - before == 4  # no page read after the stop
        assert ledger_store.walk_position(world.db, entity, DAY.isoformat(), DAY.isoformat())[0] == 4
        assert _listed(world, entity, 4) <= _stored(world, entity)  # page 4 was read whole, stored, read again

        walks.allow_walks()
        before = _calls(world, entity)
        _walk(entity)(world.db, world.client("sync"), DAY, DAY, now=world.now())
        assert _calls(world, entity) - before == pages - 3
        assert _stored(world, entity) == _listed(world, entity, pages)


def test_a_sync_that_begins_while_the_worker_stops_asks_for_no_page(tmp_path, walks_allowed):
    """The nightly run waits for a running sync-recent to end (one sync at a time); once the stop has ended that
    one, its own walk must not begin: it would read a page to keep "page 1" as its place."""
    with freeze_time(START) as frozen, World(tmp_path, frozen) as world:
        walks.stop_walks()
        before = world.calls()
        with pytest.raises(walks.WalkStopped, match=rf"the recharges sync of {DAY}..{DAY} stopped before its first "
                                                   r"page: the worker is stopping \(SIGTERM or SIGINT\)"):
            sync.sync_range(world.config, world.db, world.client("sync"), DAY, DAY, now=world.now())
        assert world.calls() == before
        assert ledger_store.walk_positions(world.db) == []


def test_sigterm_to_worker_once_ends_its_walk_keeps_the_place_and_runs_no_later_job(tmp_path, small_pages):
    sync_recent = next(spec for spec in JOBS if spec.id == "sync-recent")
    nightly = next(spec for spec in JOBS if spec.id == "nightly-report")
    def sigterm_at_page_three() -> None:
        from flask import request

        if request.path == "/api/v1/transactions" and request.args.get("page") == "3":
            os.kill(os.getpid(), signal.SIGTERM)  # as systemd, or a timeout around cron's run, sends it

    with freeze_time(START) as frozen:
        world = World(tmp_path, frozen)
        world.server.app.before_request(sigterm_at_page_three)  # before the sandbox serves
        with world:
            _plant(world)
            pages = _pages(world, "transactions")
            previous = signal.getsignal(signal.SIGTERM)
            before = world.calls(TRANSACTIONS)
            results = run_once(world.config, jobs=(sync_recent, nightly), client_factory=world._job_client)
            read_first = world.calls(TRANSACTIONS) - before
            assert signal.getsignal(signal.SIGTERM) is previous, "run_once put the previous handler back"
            first = ledger_store.walk_position(world.db, "transactions", DAY.isoformat(), DAY.isoformat())

            before = world.calls(TRANSACTIONS)  # the next pass reads on from there
            again = run_once(world.config, jobs=(sync_recent,), client_factory=world._job_client)
            read_again = world.calls(TRANSACTIONS) - before

    assert [(r["job"], r["outcome"]) for r in results] == [("sync-recent", "stopped"), ("nightly-report", "stopped")]
    assert results[0]["result"] == (f"the transactions sync of {DAY}..{DAY} stopped before page 4, which its next run "
                                    "reads on from: the worker is stopping (SIGTERM or SIGINT)")
    assert results[1]["result"] == "not run: the worker was asked to stop (SIGTERM or SIGINT)"
    assert read_first == 4 and first is not None and first[0] == 4  # page 3 came, and 4 to end its batch
    assert again[0]["outcome"] == "ok"
    assert read_again == pages - 3
    assert not walks.walks_stopping(), "the stop ends with the pass"
