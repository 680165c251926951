"""A host clock that is off: the provider refuses every signed request (its X-Timestamp is outside the
5-minute window), and the refusal is saved under that clock. The CLI and `status` name the clock first,
and once the clock is put right the worker does not pause on a refusal dated ahead of it (an operator
audit: at +1800 s every provider-calling job waited 31 minutes, and a settled recharge stayed PROCESSING).

Our clock is moved with freezegun; the sandbox's (`ignore=["sandbox"]`) stays the real one, as the
provider's would: it checks each signed request's X-Timestamp against its own time."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone

from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store.budget import REFUSAL_AHEAD_TOLERANCE_S, REFUSAL_PAUSE_S, Budget
from reconcile.scheduler import run_once
from reconcile.worker_jobs import JOBS
from tests.conftest import account_of
from tests.worker.worker_helpers import mobile

POLL = next(s for s in JOBS if s.id == "poll-recharges")
CATCH_UP = next(s for s in JOBS if s.id == "catch-up-orders")
FETCH = next(s for s in JOBS if s.id == "fetch-vouchers")
SKEW = timedelta(seconds=1800)


def _jobs_info(caplog) -> list[str]:
    """The INFO lines of the worker's jobs (not the lease's)."""
    return [r.getMessage() for r in caplog.records
            if r.name == "reconcile.worker" and r.levelno == logging.INFO and "lease" not in r.getMessage()]


def test_a_clock_ahead_is_named_and_once_put_right_pauses_no_job(config, wdb, caplog):
    env = config_as_env(config)
    with freeze_time(datetime.now(timezone.utc) + SKEW, tick=True, ignore=["sandbox"]):
        refused = CliRunner().invoke(cli, ["recharges", "submit", "--mobile", mobile(5), "--operator-id", "1",
                                           "--amount", "100"], env=env)
    assert refused.exit_code == 1, refused.output
    assert "X-Timestamp is outside the 5-minute window" in refused.output
    assert "check this host's clock first (`timedatectl`" in refused.output, refused.output
    [(at,)] = wdb.execute("SELECT at FROM provider_refusals").fetchall()

    # The clock put right: the refusal stands (no call has been accepted since), dated ahead of it.
    status = collect(config, wdb)
    assert status["checked_at"].timestamp() < at - SKEW.total_seconds() / 2
    assert "(ahead of this host's clock): invalid request signature" in status["provider_refused"]
    assert status["provider_calls_paused_until"] is None, "the worker does not pause on it"
    [line] = [line for line in status["attention"] if "refused partnerkit's credentials" in line]
    assert "check this host's clock first" in line and "the worker does not pause on it" in line
    printed = CliRunner().invoke(cli, ["status", "--format", "json"], env=env)
    assert json.loads(printed.stdout)["provider_calls_paused_until"] is None

    caplog.set_level(logging.INFO, logger="reconcile.worker")
    ran = run_once(config, jobs=(CATCH_UP, POLL))
    assert [r["outcome"] for r in ran] == ["ok", "ok"], ran
    assert wdb.execute("SELECT COUNT(*) FROM provider_refusals").fetchone()[0] == 0, "the accepted call cleared it"
    ahead = [m for m in _jobs_info(caplog) if "ahead of this host's clock" in m]
    assert len(ahead) == 1 and "the jobs do not pause on it" in ahead[0], _jobs_info(caplog)


def test_a_pause_is_one_info_line_an_episode_and_a_refusal_just_ahead_still_pauses(config, wdb, caplog):
    account_of(wdb, config.api_key, ("1", "2"))
    start = datetime.now(timezone.utc).replace(microsecond=0)

    def refuse(at: datetime) -> None:
        Budget.from_config(config, wdb, clock=at.timestamp).refused(
            status=401, message="invalid API credentials", method="GET", path="/api/v1/wallets", purpose="cli")

    caplog.set_level(logging.INFO, logger="reconcile.worker")
    refuse(start)
    with freeze_time(start + timedelta(seconds=10)):
        first = run_once(config, jobs=(CATCH_UP, POLL, FETCH))
        again = run_once(config, jobs=(CATCH_UP, POLL))
    assert [r["outcome"] for r in first + again] == ["paused"] * 5
    until = (start + timedelta(seconds=REFUSAL_PAUSE_S)).isoformat().replace("+00:00", "Z")
    assert all(f"trying again 50s from now, at {until}" in r["result"] for r in first), first
    [said] = _jobs_info(caplog)  # one line for five paused runs
    assert said.startswith("job catch-up-orders paused: the provider refused the API key 10s ago")
    assert "every job that calls the provider waits as long" in said

    caplog.clear()
    refuse(start + timedelta(seconds=100))  # a job's next try met another 401: a new episode
    with freeze_time(start + timedelta(seconds=100 - REFUSAL_AHEAD_TOLERANCE_S + 1)):  # just ahead: within tolerance
        nearly = run_once(config, jobs=(POLL, FETCH))
    assert [r["outcome"] for r in nearly] == ["paused", "paused"]
    assert len(_jobs_info(caplog)) == 1 and "check this host's clock" not in _jobs_info(caplog)[0]
