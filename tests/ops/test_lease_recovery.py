"""After a worker dies: its lease is taken over at once on the same host, its claimed jobs are handed back."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest

from partnerkit.store import jobs, locks
from partnerkit.store.db import transaction
from partnerkit.timeutil import utcnow
from reconcile.scheduler import (LEASE_NAME, WorkerBusy, WorkerLease, _pid_namespace, holder_is_gone, new_holder,
                                 process_prefix)


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def holder_of(pid: int, host: str | None = None, namespace: str | None = None) -> str:
    return f"{host or socket.gethostname()}:{pid}:{_pid_namespace() if namespace is None else namespace}:0badc0de"


def test_our_holder_id_names_host_pid_and_pid_namespace():
    host, pid, namespace, rand = new_holder().split(":")
    assert (host, int(pid), len(rand)) == (socket.gethostname(), os.getpid(), 8)
    assert namespace == _pid_namespace() != ""
    assert new_holder().startswith(process_prefix())


@pytest.mark.parametrize("holder, gone", [
    ("dead", True),                       # this host, this namespace, no such process
    ("parent", False),                    # a live process
    ("self", False),                      # ourselves
    ("other-host", False),                # another machine: only the TTL can tell
    ("other-namespace", False),           # another container with the same host name
    ("legacy", False),                    # host:pid:random, written before the namespace was recorded
    ("host-a:1", False),
])
def test_only_a_local_holder_whose_process_is_gone_counts_as_gone(holder, gone, dead_pid):
    ids = {"dead": holder_of(dead_pid), "parent": holder_of(os.getppid()), "self": holder_of(os.getpid()),
           "other-host": holder_of(dead_pid, host="elsewhere"), "other-namespace": holder_of(dead_pid, namespace="1"),
           "legacy": f"{socket.gethostname()}:{dead_pid}:0badc0de"}
    assert holder_is_gone(ids.get(holder, holder)) is gone


def _leased_job(db, order_id: int, owner: str) -> None:
    now = utcnow()
    with transaction(db) as conn:
        jobs.queue(conn, order_id, now=now, expected_status="DELIVERED", expected_count=1)
    claimed = jobs.claim(db, owner=owner, now=now, lease_until=now + timedelta(seconds=120), limit=1)
    assert [j.order_id for j in claimed] == [order_id]


def test_a_dead_holders_lease_is_taken_at_once_and_its_claimed_jobs_handed_back(db, dead_pid):
    dead = holder_of(dead_pid)
    locks.acquire(db, LEASE_NAME, dead, ttl_s=30)
    _leased_job(db, 5001, f"{socket.gethostname()}:{dead_pid}:cafe0001")
    assert jobs.claim(db, owner="anyone", now=utcnow(), lease_until=utcnow(), limit=5) == []  # leased 2 minutes

    lease = WorkerLease(db)
    lease.acquire(wait=False)  # no 30-second wait for the TTL

    assert lease.held and locks.current(db, LEASE_NAME).holder == lease.holder
    assert [j.order_id for j in jobs.claim(db, owner=lease.holder, now=utcnow(),
                                           lease_until=utcnow() + timedelta(seconds=120), limit=5)] == [5001]
    lease.release()


def test_a_live_holder_keeps_its_lease_and_its_jobs(db):
    alive = holder_of(os.getppid())
    locks.acquire(db, LEASE_NAME, alive, ttl_s=30)
    _leased_job(db, 5002, f"{socket.gethostname()}:{os.getppid()}:cafe0002")
    with pytest.raises(WorkerBusy, match="another worker .* holds the lease"):
        WorkerLease(db).acquire(wait=False)
    assert db.execute("SELECT lease_owner FROM jobs WHERE order_id = 5002").fetchone()[0].endswith("cafe0002")


def test_an_expired_lease_taken_over_hands_back_the_previous_workers_jobs(db):
    locks.acquire(db, LEASE_NAME, "elsewhere:41:1:aaaa0000", ttl_s=30, now=utcnow() - timedelta(minutes=5))
    _leased_job(db, 5003, "elsewhere:41:bbbb0000")
    lease = WorkerLease(db)
    lease.acquire(wait=False)
    assert db.execute("SELECT lease_owner, lease_expires_at FROM jobs WHERE order_id = 5003").fetchone() == (None, None)
    lease.release()


def test_a_clean_start_leaves_job_leases_alone(db):
    _leased_job(db, 5004, f"{process_prefix()}cafe0004")  # claimed by this very process
    lease = WorkerLease(db)
    lease.acquire(wait=False)
    assert db.execute("SELECT lease_owner FROM jobs WHERE order_id = 5004").fetchone()[0].endswith("cafe0004")
    lease.release()
