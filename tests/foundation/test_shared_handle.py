"""One `open_db()` handle shared by threads (what a threaded web app holds): each thread's transaction
runs whole, never interleaved with another's on the same connection (partnerkit/store/db.py)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from partnerkit.errors import StorageError
from partnerkit.store import drifts, ledger, open_db, transaction
from partnerkit.store.db import in_transaction

THREADS, ROUNDS = 8, 25


def run_threads(target, count: int) -> list[str]:
    """Run `target(i)` on `count` threads started together; every failure, as text."""
    failures: list[str] = []
    start = threading.Barrier(count, timeout=10)

    def work(i: int) -> None:
        try:
            start.wait()
            target(i)
        except Exception as exc:  # noqa: BLE001 - the test reports every failure
            failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return failures


def test_threads_sharing_a_handle_take_turns_in_their_transactions(db):
    """Read, then write what was read plus one: interleaved on one connection, the threads' statements
    would land in each other's transactions (lost increments, "cannot start a transaction within a
    transaction", "cannot commit - no transaction is active")."""
    db.execute("INSERT INTO counters (name, value) VALUES ('shared', 0)")

    def increment(_: int) -> None:
        for _ in range(ROUNDS):
            with transaction(db) as conn:
                (value,) = conn.execute("SELECT value FROM counters WHERE name = 'shared'").fetchone()
                threading.Event().wait(0.0005)  # let another thread run, mid-transaction
                conn.execute("UPDATE counters SET value = ? WHERE name = 'shared'", (value + 1,))

    assert run_threads(increment, THREADS) == []
    assert db.execute("SELECT value FROM counters WHERE name = 'shared'").fetchone() == (THREADS * ROUNDS,)


def test_a_write_joins_only_its_own_threads_transaction(db):
    """`open_drift` joins a transaction its caller has open. Another thread's open transaction on the shared
    handle is not its caller's: the drift waits for it and commits on its own, and is kept when that other
    transaction rolls back."""
    opened, finish = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def other_thread() -> None:
        with pytest.raises(RuntimeError), transaction(db):
            seen["own"] = in_transaction(db)
            opened.set()
            finish.wait(10)
            raise RuntimeError("rolled back")

    other = threading.Thread(target=other_thread, daemon=True)
    other.start()
    assert opened.wait(10)
    seen["main"] = in_transaction(db)
    finish_soon = threading.Timer(0.2, finish.set)
    finish_soon.start()
    ident = drifts.open_drift(db, kind="orphan_transaction", subject="transaction", reference="700001",
                              expected=None, actual="10.00", currency="INR",
                              detected_at=datetime(2026, 1, 2, tzinfo=timezone.utc))
    other.join(10)
    finish_soon.join(10)
    assert seen == {"own": True, "main": False}
    assert [d.id for d in drifts.list_drifts(db)] == [ident]


def test_a_transaction_inside_its_own_thread_is_still_refused_not_a_deadlock(db):
    with transaction(db):
        with pytest.raises(StorageError, match="within a transaction"):
            with transaction(db):
                pass


def test_a_handle_made_elsewhere_gets_its_lock_once(tmp_path):
    """A fork's own sqlite_utils.Database around a connection: transaction() makes its lock on first use."""
    import sqlite3

    import sqlite_utils

    path = tmp_path / "fork.db"
    open_db(path).conn.close()
    fork = sqlite_utils.Database(sqlite3.connect(path, isolation_level=None, check_same_thread=False))
    fork.execute("INSERT INTO counters (name, value) VALUES ('shared', 0)")

    def increment(_: int) -> None:
        for _ in range(ROUNDS):
            with transaction(fork) as conn:
                (value,) = conn.execute("SELECT value FROM counters WHERE name = 'shared'").fetchone()
                threading.Event().wait(0.0005)
                conn.execute("UPDATE counters SET value = ? WHERE name = 'shared'", (value + 1,))

    assert run_threads(increment, 4) == []
    assert fork.execute("SELECT value FROM counters WHERE name = 'shared'").fetchone() == (4 * ROUNDS,)


def test_store_writes_join_the_callers_transaction_and_roll_back_with_it(db):
    """The ledger's and the drifts' writes go through one helper (`store.db.run_in_transaction`): inside the
    caller's transaction they are part of it, rolled back with it; outside one, each commits on its own."""
    def write(key: str) -> str:
        ledger.quarantine(db, [(f"transaction:{key}", "unreadable", "{}", None)], "2026-01-02T00:00:00Z")
        return drifts.open_drift(db, kind="orphan_transaction", subject="transaction", reference=key, expected=None,
                                 actual="10.00", currency="INR", detected_at=datetime(2026, 1, 2, tzinfo=timezone.utc))

    with pytest.raises(RuntimeError), transaction(db):
        write("700002")
        assert len(drifts.list_drifts(db)) == 1 and len(ledger.quarantined(db)) == 1  # seen inside it
        raise RuntimeError("the caller gives up")
    assert drifts.list_drifts(db) == [] and ledger.quarantined(db) == []
    kept = write("700003")
    db.conn.rollback()  # nothing open: each write committed on its own
    assert [d.id for d in drifts.list_drifts(db)] == [kept]
    assert [q["key"] for q in ledger.quarantined(db)] == ["transaction:700003"]
