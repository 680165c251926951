"""SIGTERM to a real `partnerkit worker` in the middle of its nightly walk (what `systemctl stop` or
`restart` sends): the walk ends at its next batch with its place kept, the process exits well within
systemd's 60 s (TimeoutStopSec, then SIGKILL), and the next run reads on from that page.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from tests.reliability.crash_stack import CrashStack, Gate

pytest.importorskip("sandbox.testing")
from sandbox import wallets as sb_wallets  # noqa: E402
from sandbox.settings import SandboxSettings  # noqa: E402

TOPUPS = 5000  # ten transaction pages of 500 on the night
SYSTEMD_STOP_S = 60  # deploy/systemd/partnerkit-worker.service TimeoutStopSec


class PageLog:
    """Every transaction-list request the sandbox receives: (from_date, page)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    def install(self, app) -> None:
        app.before_request(self._before)

    def _before(self) -> None:
        from flask import request

        if request.path == "/api/v1/transactions":
            self.requests.append((request.args.get("from_date", ""), request.args.get("page", "1")))


def _stored(stack: CrashStack, day: str) -> int:
    return stack.db.execute("SELECT COUNT(*) FROM transactions WHERE created_at LIKE ?", (day + "%",)).fetchone()[0]


def test_sigterm_mid_walk_stops_the_worker_promptly_and_the_next_run_reads_on(tmp_path):
    night = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    day = night.date().isoformat()
    held = Gate("GET", r"^/api/v1/transactions$", query=lambda a: a.get("from_date") == day and a.get("page") == "3")
    pages = PageLog()
    settings = SandboxSettings(speed=1.0, hourly_limit=100_000)
    with CrashStack(tmp_path, settings, gates=(held, pages), extra_env={"PARTNERKIT_DUE_HOUR_UTC": "0"}) as stack:
        sb = stack.sandbox.sandbox
        with sb.lock:
            wallet = sb_wallets.wallet_for(sb, stack.alpha.key, "INR")
            for n in range(TOPUPS):
                sb_wallets.post(sb, wallet, "TOPUP", "CREDIT", Decimal("1.00"), created_at=night + timedelta(seconds=n))

        worker = stack.start_worker()
        held.wait_held(timeout=30)  # the nightly walk has read pages 1 and 2 of the night
        asked = time.monotonic()
        os.kill(worker.pid, signal.SIGTERM)
        time.sleep(1.5)  # the worker sees the stop within a second; page 3's answer comes after it
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

        again = stack.run_partnerkit("worker", "--once", "--format", "json", timeout=120)
        read_on = [page for from_date, page in pages.requests[first_run:] if from_date == day]
        walks_left = stack.db.execute("SELECT COUNT(*) FROM sync_walks").fetchone()[0]
        stored = _stored(stack, day)
        reported = stack.db.execute("SELECT COUNT(*) FROM reports WHERE date = ?", (day,)).fetchone()[0]
        log = worker.log()

    assert code == 0, log[-3000:]
    assert took < 15, f"{took:.1f} s from SIGTERM to exit"
    assert position is not None and position[0] == 4, (position, log[-3000:])  # page 3, then 4 to end its batch
    assert f"transactions sync of {day}.." in log and "stopped before page 4" in log
    assert '"level": "ERROR"' not in log, "a stop asked for is not an error"
    assert stored_then >= 3 * 500  # pages 1-3 (and 4) stored before it exited
    assert again.returncode == 0, again.stderr[-3000:]
    assert read_on[0] == "4", read_on  # the next run's walk of the night began at the kept page
    assert walks_left == 0 and reported == 1
    assert stored == TOPUPS
