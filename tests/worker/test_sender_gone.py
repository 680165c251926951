"""A `recharges submit` killed while sending is named at once; one still sending is waited for (partnerkit.senders).

The kill -9 review left `partnerkit status` silent for two minutes after a killed submit: nothing on its INTENT
told a live submit from a dead one. The submit now holds a lock for its send, which the kernel drops when the
process dies, and records it on the row. Here a real `python -m partnerkit recharges submit` is held at the
sandbox (its request received, not answered) and killed with SIGKILL; `status`, the submit hold and `recharges
locate` read the same fact. The sandbox's clock stands at the real time it started at (speed 0; nothing is
frozen here): the child signs its request with the real clock.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from partnerkit import senders
from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store import recharges as store
from tests.worker.worker_helpers import SUBMIT, Hold, make_config, mobile

LIST = "GET /api/v1/recharges"


@pytest.fixture
def config(server, tmp_path):
    return make_config(server, tmp_path, http_timeout_s="30")  # the child waits for the held answer


def made(server, number: str) -> list:
    with server.sandbox.lock:
        return [rc for rc in server.sandbox.recharges.values() if rc.mobile_number == number]


def partnerkit(config, *args: str, code: int):
    result = CliRunner().invoke(cli, list(args), env=config_as_env(config))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def test_a_killed_submit_is_named_at_once_by_status_the_hold_and_locate(server, config, wdb):
    number = mobile(0)  # SUCCESS at once, once the provider gets to it
    submit_args = ("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "199")
    hold = Hold(server.app)
    child = subprocess.Popen([sys.executable, "-m", "partnerkit", *submit_args], env={**os.environ, **config_as_env(config)},
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert hold.held.wait(30), "the submit never reached the sandbox"
        [row] = store.list_rows(wdb)
        local_id, sender = row["local_id"], f"pid {child.pid} on {socket.gethostname()}"
        assert (row["status"], row["sender"]) == ("INTENT", sender) and row["sender_lock"] is not None

        # Alive: not named (its answer may still come), and locate does not send its key beside it.
        assert collect(config, wdb)["recharges_unknown"] == 0
        beside = partnerkit(config, "recharges", "locate", "--local-id", str(local_id), code=3)
        assert (f"Its row is still INTENT: its `recharges submit` ({sender}) is still running, waiting for the "
                "provider's answer.") in beside.stderr
        assert ("Its key was not sent again: that submit stores the answer when it comes, and locates the recharge "
                f"itself if the answer is lost. Once it has ended, if #{local_id} is still open, run `partnerkit "
                f"recharges locate --local-id {local_id}` again.") in beside.stderr
        assert server.sandbox.calls[SUBMIT] == 1 and made(server, number) == []  # the held request alone

        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        if not hold.held.is_set():
            hold.release.set()

    # Dead: `status` names it at once, with the command to run.
    status = collect(config, wdb)
    assert status["recharges_unknown_local_ids"] == [local_id]
    assert status["recharges_unknown_senders_gone"] == [f"#{local_id} ({sender})"]
    assert (f"1 recharge(s) with an unknown outcome (local id {local_id}): the submit that recorded #{local_id} "
            f"({sender}) is no longer running; any answer it got was not stored: `partnerkit "
            f"recharges locate --local-id {local_id}`; ") in "\n".join(status["attention"])
    shown = partnerkit(config, "status", "--check", "--format", "json", code=1)
    assert json.loads(shown.stdout)["recharges_unknown_senders_gone"] == [f"#{local_id} ({sender})"]

    # The same command again is refused, saying why.
    rerun = partnerkit(config, *submit_args, code=1)
    assert f"local recharge #{local_id} is INTENT, submitted " in rerun.stderr
    assert (f" ago and the `recharges submit` that recorded it ({sender}) is no longer running; any answer it got "
            f"was not stored (Idempotency-Key {row['idempotency_key']}") in rerun.stderr
    assert "once that command has ended" not in rerun.stderr

    # Locate while the provider's list cannot be read: the row stays open, and the message says whose it was.
    server.sandbox.settings.faults = {"http_500": {"scope": LIST}}
    unread = partnerkit(config, "recharges", "locate", "--local-id", str(local_id), code=3)
    assert (f"Its row is still INTENT: the `recharges submit` that recorded it ({sender}) is no longer running; "
            "any answer it got was not stored.") in unread.stderr
    server.sandbox.settings.faults = {}

    # The killed send had reached the provider: let it finish there, and locate links it without sending it again.
    hold.release.set()
    deadline = time.monotonic() + 60  # the held request's thread finishing on a busy machine
    while not made(server, number) and time.monotonic() < deadline:
        time.sleep(0.05)
    [first] = made(server, number)
    located = json.loads(partnerkit(config, "recharges", "locate", "--local-id", str(local_id), "--format", "json",
                                    code=0).stdout)
    assert (located["local_id"], located["id"], located["status"]) == (local_id, first.id, "SUCCESS")
    assert server.sandbox.calls[SUBMIT] == 1 and collect(config, wdb)["recharges_unknown"] == 0


def test_the_lock_is_the_senders_own_and_dies_with_its_process(tmp_path):
    """The fact itself: held by a live process (another one, or another descriptor of this one), free once it is
    released or its process is killed, and "cannot tell" without a lock file or an offset."""
    database = tmp_path / "partnerkit.db"
    assert senders.running(database, 12345) is None  # no lock file yet: a row of another host, a moved database
    mine = senders.hold(database)
    assert mine is not None and mine.who == f"pid {os.getpid()} on {socket.gethostname()}"
    assert senders.running(database, mine.offset) is True  # another thread of this process sees it held
    assert senders.running(database, None) is None and senders.running(":memory:", mine.offset) is None
    mine.release()
    assert senders.running(database, mine.offset) is False
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom partnerkit import senders\n"
                              f"held = senders.hold({str(database)!r})\nprint(held.offset, flush=True)\ntime.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        offset = int(child.stdout.readline())
        assert senders.running(database, offset) is True
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert senders.running(database, offset) is False
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdout.close()
    assert oct((tmp_path / "partnerkit.db-senders").stat().st_mode & 0o777) == "0o600"
