"""Ctrl-C to `partnerkit reconcile --date` (a real process) in the middle of its walk: the walk ends after the page
it is reading, everything read stored and its place kept, the command says where in one line (exit 1, no
traceback), and the same command run again reads on from that page. Before, Ctrl-C raised KeyboardInterrupt
wherever the walk was ("Aborted!"), and the next run read the day from page 1 but for a place noted every 5 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import config_as_env, load_config
from partnerkit.store import open_db
from sandbox import wallets as sb_wallets
from sandbox.settings import SandboxSettings
from tests.conftest import account_of
from tests.sandbox_serving import serve_sandbox

TOPUPS = 3000  # six transaction pages of 500 on the day


def test_ctrl_c_ends_the_walk_after_its_page_in_one_line_and_the_next_run_reads_on(tmp_path):
    night = (datetime.now(timezone.utc) - timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
    day = night.date().isoformat()
    child: list[subprocess.Popen] = []
    asked: list[int] = []

    def ctrl_c_at_page_three() -> None:
        from flask import request

        if request.path == "/api/v1/transactions" and request.args.get("from_date") == day:
            asked.append(int(request.args.get("page", "1")))
            if asked[-1] == 3 and child:
                os.kill(child[0].pid, signal.SIGINT)  # what the terminal sends on Ctrl-C, while page 3 is read

    with serve_sandbox(SandboxSettings(speed=1.0, hourly_limit=100_000), background=False) as server:
        server.app.before_request(ctrl_c_at_page_three)
        sb, alpha = server.sandbox, server.clients[0]
        with sb.lock:
            wallet = sb_wallets.wallet_for(sb, alpha.key, "INR")
            for n in range(TOPUPS):
                sb_wallets.post(sb, wallet, "TOPUP", "CREDIT", Decimal("1.00"), created_at=night + timedelta(seconds=n))
        config = load_config(environ={
            "PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_API_BASE_URL": server.base_url,
            "PARTNERKIT_API_KEY": alpha.key, "PARTNERKIT_API_SECRET": alpha.secret,
            "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")})
        db = open_db(config.db_path)
        account_of(db, alpha.key)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}, **config_as_env(config)}
        child.append(subprocess.Popen([sys.executable, "-m", "partnerkit", "reconcile", "--date", day], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        _, err = child[0].communicate(timeout=120)
        code = child[0].returncode
        first = list(asked)
        kept = db.execute("SELECT next_page FROM sync_walks WHERE entity = 'transactions'").fetchone()
        again = CliRunner().invoke(cli, ["reconcile", "--date", day], env=env)
        stored = db.execute("SELECT COUNT(*) FROM transactions WHERE created_at LIKE ?", (day + "%",)).fetchone()[0]
        reported = db.execute("SELECT COUNT(*) FROM reports WHERE date = ?", (day,)).fetchone()[0]
        db.conn.close()

    lines = err.strip().splitlines()
    assert code == 1 and "Traceback" not in err and "Aborted" not in err, err
    # No page asked for after its batch: the batch of pages 3 and 4 ends with the last record of page 4, before the
    # walk turns the page, so page 4 is the place (read again: the walk knows a page is done once it asks for more).
    assert kept is not None and first == list(range(1, kept[0] + 1)), (first, kept)
    assert lines[-1].startswith(f"Error: the transactions sync of {day}..") and lines[-1].endswith(
        f"stopped before page {kept[0]}, which its next run reads on from: interrupted (Ctrl-C)"), err
    assert again.exit_code == 0, again.output
    assert asked[len(first):] == list(range(kept[0], max(asked) + 1))  # on from the kept page, none twice
    assert stored == TOPUPS and reported == 1
