"""A threaded web app's shape: one `open_db()` handle and one client shared by request threads, each
submitting a recharge. Every recharge the provider performs is stored with its outcome; none is left
INTENT behind a StorageError (threads take turns in their transactions on the shared handle)."""

from __future__ import annotations

import threading

from partnerkit.client import PartnerClient
from partnerkit.client._http import RetryPolicy
from partnerkit.store import open_db
from partnerkit.store import recharges as store
from reconcile.recharges import submit
from tests.conftest import account_of
from tests.worker.worker_helpers import mobile

THREADS = 20


def test_request_threads_sharing_one_handle_store_every_performed_recharge(server, config):
    db = open_db(config.db_path)  # one handle for the app, as a web app holds it
    account_of(db, config.api_key)  # the key's account check done: the budget below counts the submits alone
    client = PartnerClient(config, db, purpose="web", retry=RetryPolicy(max_attempts=1))
    numbers = [mobile(0) for _ in range(THREADS)]  # digit 0: SUCCESS at once
    outcomes: dict[str, str] = {}
    failures: list[str] = []
    start = threading.Barrier(THREADS, timeout=10)

    def handler(number: str) -> None:
        try:
            start.wait()
            outcomes[number] = submit(config, db, client, mobile_number=number, operator_id=1, amount=10).status
        except Exception as exc:  # noqa: BLE001 - the test reports every failure
            failures.append(f"{number}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=handler, args=(number,), daemon=True) for number in numbers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not any(thread.is_alive() for thread in threads)
        assert failures == []
        assert outcomes == {number: "SUCCESS" for number in numbers}
        with server.sandbox.lock:
            performed = {r.mobile_number: r.id for r in server.sandbox.recharges.values() if r.mobile_number in numbers}
        stored = {row["mobile_number"]: (row["status"], row["provider_id"]) for row in store.list_rows(db)}
        assert stored == {number: ("SUCCESS", performed[number]) for number in numbers}
        assert client.budget.usage()["general"]["used"] == THREADS  # every send counted once
    finally:
        client.close()
        db.conn.close()
