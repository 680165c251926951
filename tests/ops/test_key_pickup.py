"""`keys rewrap` and `keys retire` wait for running processes to take a rotated key file (finding 1 of
the concurrency review: bodies sealed with the retired key in the seconds after `rotate; rewrap; retire`).

The wait itself with an injected clock and sleep (no real waiting); the commands through the real CLI
with freezegun placing the clock relative to the key file's real change time. The same sequence
against a real gunicorn receiver taking deliveries: tests/receiver/test_rotation_live.py.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from freezegun import freeze_time

from partnerkit.config import ConfigError
from partnerkit.crypto import read_key_file, write_key_file
from partnerkit.rotation import (KEY_PICKUP_S, PICKUP_ROUNDS, key_file_changed_at, pickup_wait, retire_key_file,
                                 wait_for_key_pickup)
from partnerkit.store import open_db
from receiver.state import RECEIVER_BUSY_TIMEOUT_MS, TOKEN_REFRESH_S
from tests.ops.test_keys import KEY_A, Keys, environment

OLD = "b2xkLWtleS1vZi0zMi1ieXRlcy1mb3ItdGVzdHMhISE"
NEW = "bmV3LWtleS1vZi0zMi1ieXRlcy1mb3ItdGVzdHMhISE"


class FakeTime:
    """A clock and a sleep that moves it: the wait runs without waiting."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []
        self.said: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def key_file(tmp_path, *keys: str):
    path = tmp_path / "pk.db.voucher.key"
    write_key_file(path, list(keys))
    return path


def test_the_window_covers_a_receiver_refresh_and_the_lock_wait_after_it():
    # A receiver worker follows the file at its token refresh, then may wait its busy timeout to store.
    # The worker and the commands look the key up under the write lock they store with: no lock wait of
    # theirs counts (tests/ops/test_key_sealed_late.py, tests/receiver/test_vouchers.py).
    assert KEY_PICKUP_S >= TOKEN_REFRESH_S + RECEIVER_BUSY_TIMEOUT_MS / 1000 + 1
    assert KEY_PICKUP_S == 9.0  # what the help texts and the README say


@pytest.mark.parametrize("changed, now, left", [
    (100.0, 100.0, KEY_PICKUP_S),      # just changed: the whole window
    (100.0, 102.5, KEY_PICKUP_S - 2.5),
    (100.0, 100.0 + KEY_PICKUP_S, 0.0),
    (100.0, 500.0, 0.0),               # long ago
    (100.0, 40.0, KEY_PICKUP_S),       # dated in the future (clocks that disagree): the whole window, no more
])
def test_pickup_wait(changed, now, left):
    assert pickup_wait(changed, now) == pytest.approx(left)


def test_a_key_file_just_rotated_is_waited_out_once_and_said_before(tmp_path):
    path = key_file(tmp_path, NEW, OLD)
    changed = key_file_changed_at(path)
    fake = FakeTime(changed / 1e9 + 2.0)
    assert wait_for_key_pickup(path, announce=fake.said.append, clock=fake.clock, sleep=fake.sleep) == changed
    assert fake.said == fake.slept == [pytest.approx(KEY_PICKUP_S - 2.0)]


@pytest.mark.parametrize("keys, after", [
    ((NEW, OLD), KEY_PICKUP_S + 0.1),  # rotated long enough ago
    ((NEW,), 0.0),  # one key (a retire, or a new file): every process seals with it, whichever it read
])
def test_nothing_to_wait_for(tmp_path, keys, after):
    path = key_file(tmp_path, *keys)
    fake = FakeTime(key_file_changed_at(path) / 1e9 + after)
    assert wait_for_key_pickup(path, announce=fake.said.append, clock=fake.clock, sleep=fake.sleep) is not None
    assert fake.said == fake.slept == []


def test_no_key_file_no_wait(tmp_path):
    fake = FakeTime(0.0)
    assert wait_for_key_pickup(tmp_path / "none.key", clock=fake.clock, sleep=fake.sleep) is None
    assert fake.slept == []


def test_a_file_rotated_again_during_the_wait_is_waited_out_again(tmp_path):
    path = key_file(tmp_path, NEW, OLD)
    fake = FakeTime(key_file_changed_at(path) / 1e9)
    rotations = iter([["third-key-of-32-bytes-for-tests", NEW, OLD]])

    def sleep(seconds: float) -> None:
        fake.sleep(seconds)
        for keys in rotations:  # a second `keys rotate` meanwhile
            write_key_file(path, keys)
            fake.now = key_file_changed_at(path) / 1e9 + 1.0

    settled = wait_for_key_pickup(path, announce=fake.said.append, clock=fake.clock, sleep=sleep)
    assert settled == key_file_changed_at(path)
    assert fake.said == [pytest.approx(KEY_PICKUP_S), pytest.approx(KEY_PICKUP_S - 1.0)]


def test_a_file_that_keeps_changing_is_refused_after_a_few_waits(tmp_path):
    path = key_file(tmp_path, NEW, OLD)
    fake = FakeTime(key_file_changed_at(path) / 1e9)

    def sleep(seconds: float) -> None:
        fake.sleep(seconds)
        write_key_file(path, read_key_file(path))  # replaced again at every wait
        fake.now = key_file_changed_at(path) / 1e9

    with pytest.raises(ConfigError, match="changed again at every wait"):
        wait_for_key_pickup(path, clock=fake.clock, sleep=sleep)
    assert len(fake.slept) == PICKUP_ROUNDS


def test_retire_refuses_a_file_other_than_the_one_waited_out(tmp_path):
    path = key_file(tmp_path, NEW, OLD)
    settled = key_file_changed_at(path)
    write_key_file(path, ["third-key-of-32-bytes-for-tests", NEW, OLD])  # rotated after the wait
    db = open_db(tmp_path / "pk.db")
    try:
        with pytest.raises(ConfigError, match="changed while it was being checked"):
            retire_key_file(path, db, settled=settled)
        assert len(read_key_file(path)) == 3
        assert retire_key_file(path, db, settled=key_file_changed_at(path))[1] == 2
    finally:
        db.conn.close()


def rotated(tmp_path) -> tuple[Keys, int]:
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.store()
    run.save_token()
    run("keys", "rotate")
    return run, key_file_changed_at(run.config().key_file)


@pytest.mark.parametrize("command, done", [
    ("rewrap", "the previous keys can be retired"),
    ("retire", "retired 1 previous key"),
])
def test_rewrap_and_retire_right_after_rotate_wait_for_running_processes_and_say_why(tmp_path, command, done):
    run, changed = rotated(tmp_path)
    if command == "retire":
        run.after_pickup()
        run("keys", "rewrap")
        run.later_s = 0.0
        write_key_file(run.config().key_file, read_key_file(run.config().key_file))  # as if just rotated
        changed = key_file_changed_at(run.config().key_file)
    # The clock 8.5 s after the change: half a second of the window is left (a real, short, wait). Frozen, not
    # ticking: a busy machine starting the command must not use up that half second before it reads the clock.
    with freeze_time(datetime.fromtimestamp(changed / 1e9 + KEY_PICKUP_S - 0.5, timezone.utc)):
        result = run("keys", command)
    first = result.stderr.splitlines()[0]
    assert first == ("waiting 1 s for running receivers and workers to take the new key (they follow the key "
                     "file within 9 s of its change; until then they may still seal with a previous key)")
    assert done in result.stderr


def test_retire_just_after_rotate_still_refuses_what_needs_the_old_key(tmp_path):
    run, changed = rotated(tmp_path)
    # Frozen 0.2 s before the window's end (not ticking, which a busy machine would use up before the read).
    with freeze_time(datetime.fromtimestamp(changed / 1e9 + KEY_PICKUP_S - 0.2, timezone.utc)):
        refused = run("keys", "retire", code=1)
    assert refused.stderr.startswith("waiting 1 s for running receivers")
    assert "the previous keys are still needed" in refused.stderr
    assert len(read_key_file(run.config().key_file)) == 2


def test_rewrap_and_retire_after_the_window_do_not_wait(tmp_path):
    run, _ = rotated(tmp_path)
    run.after_pickup()
    for command in ("rewrap", "retire"):
        assert "waiting" not in run("keys", command).stderr


def test_with_the_environment_key_nothing_waits_and_the_conclusions_name_the_restart(tmp_path):
    """PARTNERKIT_VOUCHER_KEY: a process takes a new key when it starts, which no file's time tells; what
    rewrap and retire conclude holds if the receiver and the worker were restarted with it."""
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.store()
    new = run("keys", "rotate").stdout.strip()
    run.env.update(PARTNERKIT_VOUCHER_KEY=new, PARTNERKIT_VOUCHER_KEY_PREVIOUS=KEY_A)
    rewrapped, retired = run("keys", "rewrap").stderr, run("keys", "retire").stderr
    assert "waiting" not in rewrapped + retired  # the wait announces itself first, always
    restarted = ("provided the receiver and the worker were restarted with the new PARTNERKIT_VOUCHER_KEY before "
                 "this command (one started before still seals with the previous key)")
    assert "the previous keys can be retired" in rewrapped and restarted in rewrapped
    assert "PARTNERKIT_VOUCHER_KEY_PREVIOUS can be unset now" in retired and restarted in retired


@pytest.mark.parametrize("args", [("keys", "rewrap"), ("keys", "retire"), ("keys",), ("keys", "rotate")])
def test_the_help_says_the_window_the_commands_wait(tmp_path, args):
    run = Keys(environment(tmp_path))
    text = " ".join(run(*args, "--help").stdout.split())
    assert f"within {KEY_PICKUP_S:.0f} s" in text or f"until {KEY_PICKUP_S:.0f} s passed" in text
