"""`keys rotate; keys rewrap; keys retire` run one after the other while a real gunicorn receiver takes
deliveries (finding 1 of the concurrency review): every acknowledged delivery's body opens with the one
key left, because rewrap and retire wait for the receiver's workers to take the rotated key file.

Real processes: `partnerkit serve --workers 2` on a free loopback port with the generated key file,
the three commands as the operator runs them, a sender thread at about 25 deliveries a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import requests

from partnerkit.crypto import cipher_from_keys, read_key_file
from partnerkit.rotation import KEY_PICKUP_S, key_file_changed_at
from partnerkit.store import inbox, open_db
from receiver.state import TOKEN_REFRESH_S
from tests.receiver.conftest import TOKEN, envelope, signed_headers
from tests.receiver.servers import PARTNERKIT, ServedReceiver

SENDING_LIMIT_S = 60  # the sender stops by itself after this, whatever happens to the test


class Sender(threading.Thread):
    """Signed deliveries, one at a time with a short pause, each answer kept with its time."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.acked: list[tuple[float, str]] = []  # (monotonic time of the answer, event id)
        self.other: list[tuple[str, int]] = []

    def run(self) -> None:
        session = requests.Session()
        deadline = time.monotonic() + SENDING_LIMIT_S
        number = 0
        while not self.stop.is_set() and time.monotonic() < deadline:
            number += 1
            event_id = f"evt-rotation-{number}"
            body = envelope(event_id, order_id=1000 + number)
            try:
                answer = session.post(self.url, data=body, headers=signed_headers(body), timeout=10).status_code
            except requests.RequestException:
                answer = 0
            if answer == 200:
                self.acked.append((time.monotonic(), event_id))
            else:
                self.other.append((event_id, answer))
            self.stop.wait(0.04)


def partnerkit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PARTNERKIT, *args], env=env, capture_output=True, text=True, timeout=60)


def test_rotate_rewrap_retire_in_one_go_while_deliveries_arrive_leaves_every_body_readable(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")},
           "PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_WEBHOOK_TOKENS": TOKEN,
           "PARTNERKIT_LOG_LEVEL": "WARNING"}
    with ServedReceiver(env, tmp_path / "serve.log", workers=2) as served:  # generates the key file
        sender = Sender(served.base_url + "/webhooks/partner")
        sender.start()
        try:
            time.sleep(1.0)  # both workers have read the key file and sealed with it
            runs = {}
            for command in ("rotate", "rewrap", "retire"):
                runs[command] = partnerkit(env, "keys", command)
                runs[command + " ended"] = time.monotonic()
                runs[command + " ended at"] = time.time()  # the clock the key file's change time is on
                if command == "rotate":
                    rotated_at = key_file_changed_at(tmp_path / "pk.db.voucher.key") / 1e9
            # Deliveries go on: a worker still on the old key would seal these with the retired key.
            time.sleep(TOKEN_REFRESH_S / 2)
        finally:
            sender.stop.set()
            sender.join(timeout=15)
        assert not sender.is_alive()
    status = partnerkit(env, "keys", "status", "--format", "json")

    for command in ("rotate", "rewrap", "retire"):
        assert runs[command].returncode == 0, (command, runs[command].stderr)
        assert "Traceback" not in runs[command].stderr
    # The rewrap ended no sooner than the pickup window after the rotation: it waited it out, or (started on a
    # machine so busy that the window had passed) had nothing left to wait for. Its wall clock, as the command's
    # own, against the file's change time; 0.1 s for that clock against the monotonic one the command sleeps on.
    assert runs["rewrap ended at"] >= rotated_at + KEY_PICKUP_S - 0.1
    said = runs["rewrap"].stderr.splitlines()[0]
    if said.startswith("waiting "):  # which of the two, its first line says (on a quiet machine, always this one)
        assert "s for running receivers and workers to take the new key" in said
        assert 1 <= int(said.split()[1]) <= KEY_PICKUP_S
    assert "the previous keys can be retired" in runs["rewrap"].stderr
    assert "waiting" not in runs["retire"].stderr  # the rewrap waited it out already
    assert "retired 1 previous key" in runs["retire"].stderr
    # The receiver took deliveries all along: during the wait and after the retire too.
    assert sender.other == []
    assert any(runs["rotate ended"] < at < runs["rewrap ended"] for at, _ in sender.acked)
    assert any(at > runs["retire ended"] for at, _ in sender.acked)

    found = json.loads(status.stdout)
    assert (found["previous_keys"], found["values_unreadable"], found["unreadable"]) == (0, 0, [])
    [key] = read_key_file(tmp_path / "pk.db.voucher.key")
    db = open_db(tmp_path / "pk.db")
    try:
        only = cipher_from_keys([key])
        for _, event_id in sender.acked:
            assert json.loads(inbox.body_of(db, only, event_id))["event_id"] == event_id
    finally:
        db.conn.close()
