"""SIGTERM to a real `partnerkit worker` in the middle of its nightly walk (what `systemctl stop` or
`restart` sends): the walk ends at its next batch with its place kept, the process exits well within
systemd's 60 s (TimeoutStopSec, then SIGKILL), and the next run reads on from that page. SIGKILL (the
OOM killer, a power cut): the next run reads on from the place the walk noted while it ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from partnerkit.walks import PLACE_EVERY_S
from tests.reliability.crash_stack import CrashStack, Gate, wait_until

pytest.importorskip("sandbox.testing")
from sandbox import wallets as sb_wallets  # noqa: E402
from sandbox.settings import SandboxSettings  # noqa: E402

TOPUPS = 5000  # ten transaction pages of 500 on the night
SYSTEMD_STOP_S = 60  # deploy/systemd/partnerkit-worker.service TimeoutStopSec


class PageLog:
    """Every transaction-list request the sandbox receives: (from_date, page), and when (time.monotonic()).

    Installed before the gates, so a request is logged when it arrives, not when a gate lets it go on: a request
    held until after the worker was killed must count in the run that asked for it (a fresh-clone run once logged
    the killed page 9 after the first run's requests were counted, as if the next run had read it again)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.times: list[float] = []

    def install(self, app) -> None:
        app.before_request(self._before)

    def _before(self) -> None:
        from flask import request

        if request.path == "/api/v1/transactions":
            self.times.append(time.monotonic())
            self.requests.append((request.args.get("from_date", ""), request.args.get("page", "1")))

    def asked_at(self, from_date: str, page: str) -> float:
        return next(at for at, asked in zip(self.times, self.requests) if asked == (from_date, page))


def _stored(stack: CrashStack, day: str) -> int:
    return stack.db.execute("SELECT COUNT(*) FROM transactions WHERE created_at LIKE ?", (day + "%",)).fetchone()[0]


def _plant(stack: CrashStack, night: datetime) -> None:
    """TOPUPS top-ups on the night, a second apart."""
    sb = stack.sandbox.sandbox
    with sb.lock:
        wallet = sb_wallets.wallet_for(sb, stack.alpha.key, "INR")
        for n in range(TOPUPS):
            sb_wallets.post(sb, wallet, "TOPUP", "CREDIT", Decimal("1.00"), created_at=night + timedelta(seconds=n))


def _run_again(stack: CrashStack, pages: PageLog, first_run: int, day: str):
    """`worker --once` after the stop: (its process, the night's transaction pages it asked for, walks left kept,
    the night's transactions stored, whether the night is reported)."""
    again = stack.run_partnerkit("worker", "--once", "--format", "json", timeout=120)
    read_on = [page for from_date, page in pages.requests[first_run:] if from_date == day]
    walks_left = stack.db.execute("SELECT COUNT(*) FROM sync_walks").fetchone()[0]
    reported = stack.db.execute("SELECT COUNT(*) FROM reports WHERE date = ?", (day,)).fetchone()[0]
    return again, read_on, walks_left, _stored(stack, day), reported


def test_sigterm_mid_walk_stops_the_worker_promptly_and_the_next_run_reads_on(tmp_path):
    night = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    day = night.date().isoformat()
    held = Gate("GET", r"^/api/v1/transactions$", query=lambda a: a.get("from_date") == day and a.get("page") == "3")
    pages = PageLog()
    settings = SandboxSettings(speed=1.0, hourly_limit=100_000)
    with CrashStack(tmp_path, settings, gates=(pages, held), extra_env={"PARTNERKIT_DUE_HOUR_UTC": "0"}) as stack:
        _plant(stack, night)

        worker = stack.start_worker()
        held.wait_held(timeout=30)  # the nightly walk has read pages 1 and 2 of the night
        asked = time.monotonic()
        os.kill(worker.pid, signal.SIGTERM)
        # Page 3's answer comes after the worker has seen the stop (it logs this line, then ends its walks).
        wait_until(lambda: "worker stopping" in worker.log(), timeout=SYSTEMD_STOP_S / 2, step=0.05,
                   what="the worker seeing SIGTERM")
        held.open()
        try:
            code = worker.process.wait(timeout=SYSTEMD_STOP_S / 2)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker still ran {SYSTEMD_STOP_S / 2:.0f} s after SIGTERM:\n{worker.log()[-3000:]}")
        took = time.monotonic() - asked
        position = stack.db.execute("SELECT next_page FROM sync_walks WHERE entity = 'transactions' AND from_day = ?",
                                    (day,)).fetchone()
        stored_then = _stored(stack, day)
        first_run = len(pages.requests)

        again, read_on, walks_left, stored, reported = _run_again(stack, pages, first_run, day)
        log = worker.log()

    assert code == 0, log[-3000:]
    assert took < 15, f"{took:.1f} s from SIGTERM to exit"
    assert position is not None and position[0] == 4, (position, log[-3000:])  # page 3, then 4 to end its batch
    assert f"transactions sync of {day}.." in log and "stopped before page 4" in log
    assert '"level": "ERROR"' not in log, "a stop asked for is not an error"
    assert stored_then >= 3 * 500  # pages 1-3 (and 4) stored before it exited
    assert again.returncode == 0, again.stderr[-3000:]
    # The next run's walk of the night began at the kept page, and no page came twice: the restarted worker's
    # sync-recent (which reads the same days now) read on to the end, and the nightly run read nothing again.
    # Before, it then read every page again from page 1.
    assert read_on == [str(page) for page in range(4, int(read_on[-1]) + 1)], read_on
    assert walks_left == 0 and reported == 1
    assert stored == TOPUPS


def test_sigkill_mid_walk_the_next_run_reads_on_from_the_place_noted_and_reads_no_page_twice(tmp_path):
    night = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    day = night.date().isoformat()
    # Page 5 is answered once 5 s have passed since page 1 was asked for (the walk began before), so the walk notes
    # its place (every 5 s, at a batch boundary of two pages) once pages 5 and 6 are stored; the worker is killed
    # while page 9 is asked for.
    slow = Gate("GET", r"^/api/v1/transactions$", query=lambda a: a.get("from_date") == day and a.get("page") == "5")
    killed = Gate("GET", r"^/api/v1/transactions$", query=lambda a: a.get("from_date") == day and a.get("page") == "9")
    pages = PageLog()
    settings = SandboxSettings(speed=1.0, hourly_limit=100_000)
    with CrashStack(tmp_path, settings, gates=(pages, slow, killed),
                    extra_env={"PARTNERKIT_DUE_HOUR_UTC": "0"}) as stack:
        _plant(stack, night)

        worker = stack.start_worker()
        slow.wait_held(timeout=30)
        time.sleep(max(0.0, pages.asked_at(day, "1") + PLACE_EVERY_S + 0.2 - time.monotonic()))
        slow.open()
        killed.wait_held(timeout=30)
        worker.kill()
        killed.open()
        position = stack.db.execute("SELECT next_page FROM sync_walks WHERE entity = 'transactions' AND from_day = ?",
                                    (day,)).fetchone()
        first_run = len(pages.requests)

        again, read_on, walks_left, stored, reported = _run_again(stack, pages, first_run, day)

    # Noted at a batch boundary once 5 s had passed: after pages 5 and 6 at the latest (8 on a machine so busy that
    # pages 7 and 8 took 5 s more), never past the page the kill came on.
    assert position is not None and position[0] in (6, 8), (position, worker.log()[-3000:])
    assert again.returncode == 0, again.stderr[-3000:]
    assert read_on == [str(page) for page in range(position[0], int(read_on[-1]) + 1)], read_on  # on, once each
    assert walks_left == 0 and reported == 1
    assert stored == TOPUPS
