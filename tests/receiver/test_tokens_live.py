"""The receiver's accepted tokens while they change under it: /readyz while they cannot be read and the
recovery without a restart (finding 3).

Real SQLite files in tmp_path, the real app through Flask's test client, the real CLI in process,
freezegun for the receiver's token refresh.
"""

from __future__ import annotations

import logging
import os

from freezegun import freeze_time

from receiver.app import create_app
from receiver.state import TOKEN_REFRESH_S
from tests.ops.test_keys import SAVED_TOKEN, Keys, environment
from tests.receiver.conftest import envelope, post

def deliver(app, event_id: str, token: str, webhook_id: str = "77") -> int:
    return post(app.test_client(), envelope(event_id), token=token, X_Webhook_ID=webhook_id).status_code


def test_readyz_is_503_while_the_tokens_cannot_be_read_and_recovers_once_the_key_file_can_be(tmp_path, caplog):
    """The reviewer's receiver stayed at 503 after the key file's owner was put back: a chown changes
    neither the file's inode, its mtime nor its size, and the failed read had been recorded as read."""
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.save_token()
    key_file = run.config().key_file
    caplog.set_level(logging.INFO, logger="receiver")
    with freeze_time("2026-11-22 10:00:00") as clock:
        app = create_app(run.config())
        client = app.test_client()
        try:
            assert deliver(app, "evt_1", SAVED_TOKEN) == 200
            assert client.get("/readyz").get_json() == {"status": "ready"}
            run("keys", "rotate")  # the saved token is sealed with the new key by the rewrap ...
            run("keys", "rewrap")
            run("keys", "retire")
            good = key_file.read_bytes()
            with open(key_file, "r+b") as handle:  # ... and the receiver cannot read the key file now
                handle.write(b"\xff" * len(good))
            unreadable_at = key_file.stat().st_mtime_ns
            clock.tick(TOKEN_REFRESH_S + 1)
            for event_id in ("evt_2", "evt_3"):
                assert deliver(app, event_id, SAVED_TOKEN) == 503
            assert client.get("/readyz").status_code == 503
            assert client.get("/readyz").get_json() == {"status": "unavailable",
                                                        "reason": "cannot read accepted webhook tokens"}
            # Readable again, as a chown makes it: same inode, size and mtime as the unreadable file.
            with open(key_file, "r+b") as handle:
                handle.write(good)
            os.utime(key_file, ns=(unreadable_at, unreadable_at))
            clock.tick(TOKEN_REFRESH_S + 1)
            assert client.get("/readyz").get_json() == {"status": "ready"}
            assert deliver(app, "evt_4", SAVED_TOKEN) == 200
        finally:
            app.extensions["partnerkit_receiver"].close()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("receiver")]
    # Once when it began and once when it cleared, not once per delivery or probe.
    assert sum(m.startswith("cannot read accepted tokens") for m in said) == 1
    assert said.count("accepted tokens can be read again") == 1
    assert sum(m.startswith("the voucher key file changed and cannot be read") for m in said) == 1

