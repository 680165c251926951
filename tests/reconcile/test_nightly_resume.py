"""A nightly run stopped part-way (SIGTERM to the worker) is read on, not read again, after the restart; a walk
begun before the night was due is read again from page 1. Against the real sandbox on loopback, its clock frozen
(World), the jobs run by `run_once` as `worker --once` runs them (sync-recent first, then the nightly report).

Before, the restarted worker's sync-recent (which reads the same days as the nightly run once the first night has
moved its watermark) read on from the nightly run's kept page to the end and forgot the place, and the nightly run
then found none and read every page again from page 1.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, time, timedelta, timezone

import pytest
from freezegun import freeze_time

from partnerkit import walks
from partnerkit.store import ledger as ledger_store
from partnerkit.store import reports as report_store
from partnerkit.vouchers import orders_read
from reconcile import sync
from reconcile.jobs import day_synced, sync_recent
from reconcile.scheduler import run_once
from sandbox import orders as sb_orders
from tests.reliability.provider_world import SPECS, START, World
from tests.reliability.test_walk_place import PAGE, _pages, _plant, small_pages  # noqa: F401 (a fixture)

DAY = START.date()
NEXT = DAY + timedelta(days=1)
ORDERS = 250  # three pages of the order list


class PageLog:
    """Every list page the sandbox is asked for: (list, from_date, page), in order."""

    def __init__(self, app) -> None:
        self.asked: list[tuple[str, str, int]] = []
        app.before_request(self._before)

    def _before(self) -> None:
        from flask import request

        if request.path in ("/api/v1/recharges", "/api/v1/transactions", "/api/v1/orders"):
            self.asked.append((request.path.rsplit("/", 1)[1], request.args.get("from_date", ""),
                               int(request.args.get("page", "1"))))

    def since(self, mark: int, name: str, from_date: str = DAY.isoformat()) -> list[int]:
        """The pages of one list (of walks from `from_date`) asked for after the first `mark` requests."""
        return [page for what, start, page in self.asked[mark:] if what == name and start == from_date]


def _plant_day(world: World) -> None:
    """_plant's recharges and transactions on DAY, and ORDERS orders placed on it, through the sandbox's own code."""
    _plant(world)
    sb, client = world.sb, world.sb.clients[world.key]
    with sb.lock:
        for _ in range(ORDERS):
            sb_orders.create(sb, client, sb_orders.parse_create(sb, client, {"product_id": 7, "denomination": 10,
                                                                               "quantity": 1}))


def _at(moment: datetime, world: World) -> None:
    world.advance((moment - world.now()).total_seconds())


@pytest.fixture
def walks_allowed():
    yield
    walks.allow_walks()


def test_a_nightly_run_stopped_part_way_is_read_on_after_the_restart_and_no_page_is_read_twice(
        tmp_path, small_pages, walks_allowed):
    jobs = (SPECS["sync-recent"], SPECS["nightly-report"])

    sent: list[int] = []

    def sigterm_at_page_three() -> None:
        from flask import request

        if (request.path == "/api/v1/transactions" and request.args.get("from_date") == DAY.isoformat()
                and request.args.get("page") == "3" and not sent):
            sent.append(signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # systemd's stop, during the nightly run's walk of the night

    with freeze_time(START) as frozen:
        world = World(tmp_path, frozen)
        world.server.app.before_request(sigterm_at_page_three)
        log = PageLog(world.server.app)
        with world:
            _plant_day(world)
            pages, recharge_pages = _pages(world, "transactions"), _pages(world, "recharges")
            _at(datetime.combine(NEXT, time(1, 30), tzinfo=timezone.utc), world)  # the night is due at 01:00
            began = world.now()
            first = run_once(world.config, jobs=jobs, client_factory=world._job_client)
            kept = ledger_store.walk_position(world.db, "transactions", DAY.isoformat(), NEXT.isoformat())
            world.advance(120)  # the worker restarts
            mark = len(log.asked)
            again = run_once(world.config, jobs=jobs, client_factory=world._job_client)
            nightly_mark = len(log.asked)  # the restarted worker's sync-recent read on; the nightly run comes next
            report = report_store.get_report(world.db, DAY.isoformat())
            covered = ledger_store.coverage(world.db, "transactions", DAY.isoformat())
            order_walk = orders_read(world.db)
            synced = day_synced(world.db, DAY)

    assert [(r["job"], r["outcome"]) for r in first] == [("sync-recent", "ok"), ("nightly-report", "stopped")]
    assert "stopped before page 4, which its next run reads on from" in first[1]["result"]
    assert kept is not None and kept[0] == 4
    assert [(r["job"], r["outcome"]) for r in again] == [("sync-recent", "ok"), ("nightly-report", "ok")]
    # After the restart each page of the night is asked for once: transactions from the kept page on (sync-recent,
    # reading on), recharges and orders once (sync-recent's own walks); the nightly run reads none of them again.
    assert log.since(mark, "transactions") == list(range(4, pages + 1))
    assert log.since(mark, "recharges") == list(range(1, recharge_pages + 1))
    assert log.since(mark, "orders", "") == [1, 2, 3]
    assert log.asked[nightly_mark:] == []
    assert report is not None and synced
    assert covered == began.strftime("%Y-%m-%dT%H:%M:%SZ")  # counted from when the nightly run's walk began
    assert order_walk is not None and order_walk[0] == datetime.combine(DAY, time(0), tzinfo=timezone.utc)


def test_a_walk_begun_before_the_night_was_due_is_read_again_from_page_1(tmp_path, small_pages, walks_allowed):
    """sync-recent's walk of the night and the day after, stopped at 00:45 (the hour's budget, a stop): the pages
    before its place show the night as it stood before it settled (a recharge that fails at 00:50 still PROCESSING)."""
    with freeze_time(START) as frozen, World(tmp_path, frozen) as world:
        log = PageLog(world.server.app)
        _plant(world)
        pages = _pages(world, "transactions")
        _at(datetime.combine(NEXT, time(0, 40), tzinfo=timezone.utc), world)
        sync_recent(world.config, world.db, world.client("sync"))  # the first run reads today: the watermark moves

        def stop_at_page_four(name: str, read: int) -> None:
            if name == "transactions" and read >= 4 * PAGE:
                walks.stop_walks()

        world.advance(300)
        with pytest.raises(walks.WalkStopped, match="before page 4"):
            sync.sync_range(world.config, world.db, world.client("sync"), DAY, NEXT, now=world.now(),
                            progress=stop_at_page_four)
        walks.allow_walks()
        assert ledger_store.walk_position(world.db, "transactions", DAY.isoformat(), NEXT.isoformat())[0] == 4

        _at(datetime.combine(NEXT, time(1, 30), tzinfo=timezone.utc), world)
        mark = len(log.asked)
        assert world.run("nightly-report")["outcome"] == "ok"
        covered = ledger_store.coverage(world.db, "transactions", DAY.isoformat())

    assert log.since(mark, "transactions") == list(range(1, pages + 1))
    assert covered == "2025-03-11T01:30:00Z"  # the nightly run's own read, not the walk begun at 00:45
