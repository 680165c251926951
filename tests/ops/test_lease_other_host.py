"""A worker lease taken over from a worker on another host is flagged: one WARNING naming both hosts at the
takeover, and `partnerkit status` (`worker_lease_previous_host`, an attention line for an hour after it).

No host can see another's processes, so such a lease was left to expire: two hosts on one database file
(NFS), or a move to a new host under way. The hosts are the holder ids' first part, injected as the other
lease tests do."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import config_as_env, load_config
from partnerkit.processes import other_host
from partnerkit.status import TAKEOVER_ATTENTION, collect
from partnerkit.store import locks, meta, transaction
from partnerkit.timeutil import utcnow
from reconcile.scheduler import LEASE_NAME, WorkerLease

HOST_A = "alpha-host:41:4026531836:aaaa0000"  # the old holder, on host alpha-host
HOST_B = "bravo-host:42:4026531836:bbbb0000"  # the worker that takes the lease over, on bravo-host


@pytest.fixture
def config(tmp_path, db):
    """`status` reads the database only: no provider, no API key needed."""
    return load_config(environ={"PARTNERKIT_DB": str(tmp_path / "partnerkit.db"),
                                "PARTNERKIT_WEBHOOK_TOKENS": "bootstrap-token-for-tests",
                                "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")})


def _expired_lease_of(db, holder: str) -> None:
    """`holder` took the lease five minutes ago and stopped renewing it (30 s): it expired unreleased."""
    assert locks.acquire(db, LEASE_NAME, holder, ttl_s=30, now=utcnow() - timedelta(minutes=5)).acquired


def _takeover_lines(status: dict) -> list[str]:
    return [line for line in status["attention"] if line.startswith("the worker lease was taken over at ")]


@pytest.mark.parametrize("previous, holder, host", [
    (HOST_A, HOST_B, "alpha-host"),                           # another host
    (HOST_A, "alpha-host:77:4026531836:cccc0000", None),      # the same host, another process
    ("alpha-host:41:aaaa0000", HOST_B, "alpha-host"),        # host:pid:random, before the namespace was kept
    ("a", HOST_B, None),                                      # no host in the id: nothing to compare
    (HOST_A, "b", None),
    (":41:ns:aaaa0000", HOST_B, None),                        # an empty host part
])
def test_the_host_a_lease_was_taken_from(previous, holder, host):
    assert other_host(previous, holder) == host


def test_a_lease_taken_from_another_host_is_logged_once_naming_both_hosts(db, caplog):
    _expired_lease_of(db, HOST_A)
    lease = WorkerLease(db, holder=HOST_B, ttl_s=30)
    with caplog.at_level(logging.INFO, logger="reconcile.worker"):
        lease.acquire(wait=False)
        assert lease.renew() is True
        lease.try_acquire()  # already ours: not a takeover
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(f"worker lease taken over from {HOST_A} on host alpha-host, whose lease "
                                           f"expired unreleased, by {HOST_B} on host bravo-host: two hosts open this "
                                           "one database file")
    assert (warning.host, warning.previous_host, warning.previous_holder) == ("bravo-host", "alpha-host", HOST_A)
    lease.release()


def test_a_lease_taken_from_the_same_host_or_taken_free_is_not_flagged(db, config, caplog):
    _expired_lease_of(db, "bravo-host:40:4026531836:dddd0000")  # a worker of this same host that died
    lease = WorkerLease(db, holder=HOST_B, ttl_s=30)
    with caplog.at_level(logging.WARNING, logger="reconcile.worker"):
        lease.acquire(wait=False)
    assert not any("taken over from" in r.getMessage() for r in caplog.records)
    status = collect(config, db)
    assert (status["worker_lease_previous_host"], status["worker_lease_taken_over_at"]) == (None, None)
    assert _takeover_lines(status) == []
    lease.release()


def test_status_names_the_previous_host_with_an_attention_line_for_an_hour(db, config):
    _expired_lease_of(db, HOST_A)
    before = utcnow()
    lease = WorkerLease(db, holder=HOST_B, ttl_s=30)
    lease.acquire(wait=False)
    taken = locks.taken_over(db, locks.current(db, LEASE_NAME))
    assert (taken.holder, taken.previous) == (HOST_B, HOST_A) and before <= taken.at <= utcnow()
    assert taken.previous_expires_at < taken.at  # it was left to expire: no host sees another's processes

    status = collect(config, db)
    assert status["worker_lease_holder"] == HOST_B and status["worker_running"] is True
    assert (status["worker_lease_previous_host"], status["worker_lease_taken_over_at"]) == ("alpha-host", taken.at)
    [line] = _takeover_lines(status)
    assert f"by {HOST_B} from a worker on another host, alpha-host, whose lease had expired unreleased" in line
    assert "two hosts open this one database file" in line
    assert "moved to bravo-host while the worker on alpha-host still ran or had crashed" in line

    assert TAKEOVER_ATTENTION == timedelta(hours=1)
    lease.renew()  # the worker holds it on: the fields stay, the line only for the hour
    last = collect(config, db, now=taken.at + TAKEOVER_ATTENTION)
    assert len(_takeover_lines(last)) == 1 and "(60 min ago)" in _takeover_lines(last)[0]
    later = collect(config, db, now=taken.at + TAKEOVER_ATTENTION + timedelta(seconds=1))
    assert _takeover_lines(later) == [] and later["worker_lease_previous_host"] == "alpha-host"
    lease.release()


def test_each_takeover_between_two_hosts_starts_the_hour_again(db, config):
    _expired_lease_of(db, HOST_A)
    WorkerLease(db, holder=HOST_B, ttl_s=30).acquire(wait=False)
    first = collect(config, db)["worker_lease_taken_over_at"]
    # bravo-host stalls past its lease (NFS); alpha-host's restarted worker, standing by, takes it back.
    back = "alpha-host:43:4026531836:eeee0000"
    assert locks.acquire(db, LEASE_NAME, back, ttl_s=30, now=first + timedelta(minutes=50)).previous == HOST_B
    status = collect(config, db, now=first + timedelta(minutes=70))
    assert (status["worker_lease_holder"], status["worker_lease_previous_host"]) == (back, "bravo-host")
    assert status["worker_lease_taken_over_at"] == first + timedelta(minutes=50)
    [line] = _takeover_lines(status)
    assert "(20 min ago)" in line and "from a worker on another host, bravo-host" in line


def test_a_clean_stop_and_a_fresh_start_forget_the_takeover(db, config):
    _expired_lease_of(db, HOST_A)
    taker = WorkerLease(db, holder=HOST_B, ttl_s=30)
    taker.acquire(wait=False)
    taker.release()  # `systemctl stop`: the lease is given back
    gone = collect(config, db)
    assert gone["worker_lease_holder"] is None and gone["worker_lease_previous_host"] is None

    again = WorkerLease(db, holder=HOST_B, ttl_s=30)  # the same id taking it free: not a takeover now
    again.acquire(wait=False)
    assert meta.get(db, f"lock.{LEASE_NAME}.taken_over") is None
    status = collect(config, db)
    assert status["worker_lease_previous_host"] is None and _takeover_lines(status) == []
    again.release()


def test_an_unreadable_takeover_record_is_ignored_not_a_traceback(db, config):
    _expired_lease_of(db, HOST_A)
    lease = WorkerLease(db, holder=HOST_B, ttl_s=30)
    lease.acquire(wait=False)
    with transaction(db) as conn:
        meta.put(conn, f"lock.{LEASE_NAME}.taken_over", '{"holder": "' + HOST_B + '"}', now=utcnow())
    status = collect(config, db)
    assert status["worker_lease_previous_host"] is None and status["worker_lease_holder"] == HOST_B
    lease.release()


def test_status_json_and_check_carry_the_takeover(db, config):
    _expired_lease_of(db, HOST_A)
    lease = WorkerLease(db, holder=HOST_B, ttl_s=30)
    lease.acquire(wait=False)
    result = CliRunner().invoke(cli, ["status", "--format", "json", "--check"], env=config_as_env(config))
    assert result.exit_code == 1, result.output  # --check: something needs a person
    printed = json.loads(result.stdout)
    assert printed["worker_lease_previous_host"] == "alpha-host"
    assert printed["worker_lease_taken_over_at"].endswith("Z")
    assert [line for line in printed["attention"] if "from a worker on another host, alpha-host" in line]
    lease.release()
