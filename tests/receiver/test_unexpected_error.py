"""A bug on the way to the inbox answers 503 (the provider retries), never a 500 and never a 200.

The bug is injected by replacing the inbox writer for one test: there is no real input that reaches
this path any more (the hostile-input tests found four and each was fixed where it lived), which is
exactly why the catch-all must be proved this way.
"""

from __future__ import annotations

import logging

from partnerkit.store import inbox
from tests.receiver.conftest import envelope, post


def test_an_unexpected_error_is_503_with_retry_after_and_stores_nothing(client, db, monkeypatch, caplog):
    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(inbox, "record", broken)
    with caplog.at_level(logging.ERROR, logger="receiver.views"):
        response = post(client, envelope(event_id="evt_bug"))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "60"
    assert response.get_json() == {"status": "unavailable"}
    assert db.execute("SELECT count(*) FROM inbox").fetchone()[0] == 0
    assert any("unexpected error" in r.getMessage() and r.exc_info for r in caplog.records)

    monkeypatch.undo()  # the provider's retry, once the bug is gone, is stored once
    assert post(client, envelope(event_id="evt_bug")).get_json() == {"status": "accepted"}
