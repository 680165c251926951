"""What a command seals after a slow provider answer, or a long wait, is sealed with the key file as it is
then, not as it was when the command started.

Session 15 left this gap: `orders create` and `webhooks register` read the key once, before they call the
provider, and sealed what it answered seconds later. Had `keys rotate; keys rewrap; keys retire` run
meanwhile, the vouchers (or the webhook token, returned only once) were stored sealed with a key no longer
in the file: unreadable for good, and the database then refused by every command as if its key were a
stranger's.

The command runs as a real process against the sandbox on loopback; the sandbox's `slow` fault holds its
answer after the order or webhook is committed; the three `keys` commands run beside it as the operator
runs them (in process, the clock KEY_PICKUP_S ahead so that they have nothing to wait for:
`Keys.after_pickup`). `webhooks token set` waits for a person typing the token instead: the rotation runs
while it reads stdin.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import time

from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.crypto import load_cipher, read_key_file
from partnerkit.rotation import retire_key_file, rewrap, rotate_key_file
from partnerkit.store import open_db
from receiver.app import create_app
from receiver.tokens import saved_tokens
from tests.key_rotation import rotate_and_retire_behind_the_lock
from tests.ops.test_keys import Keys, environment
from tests.receiver.conftest import envelope, post
from tests.receiver.servers import PARTNERKIT

HOLD_S = 2.5  # the sandbox holds the answer this long: the rotation beside it takes well under a second
START_LIMIT_S = 30  # the command under test reaches the provider within this, or the test fails


def started(env: dict[str, str | None], *args: str) -> subprocess.Popen:
    """`partnerkit ARGS` as a real process with `env` alone for its settings."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    child.update({k: v for k, v in env.items() if v is not None})
    return subprocess.Popen([PARTNERKIT, *args], env=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until(done, what: str) -> None:
    deadline = time.monotonic() + START_LIMIT_S
    while not done():
        assert time.monotonic() < deadline, f"{what} did not happen within {START_LIMIT_S} s"
        time.sleep(0.02)


def rotate_rewrap_retire_beside(proc: subprocess.Popen, keys: Keys) -> None:
    """The operator's three commands, while `proc` waits for the provider's held answer."""
    keys.after_pickup()
    keys("keys", "rotate")
    keys("keys", "rewrap")
    assert "retired 1 previous key" in keys("keys", "retire").stderr
    assert proc.poll() is None, "the premise: the command was still waiting for its answer when the key was retired"


def finished(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return out



def tokens_saved(config) -> list[tuple[str, str]]:
    """(webhook id, token) of every saved webhook token, opened with the key file as it is now."""
    db = open_db(config.db_path)
    try:
        return [(t.webhook_id, t.token) for t in saved_tokens(db, load_cipher(config))]
    finally:
        db.conn.close()

def test_orders_create_seals_the_vouchers_of_a_slow_answer_with_the_key_file_as_it_is_then(
        sandbox_server, sandbox_config, tmp_path):
    env = environment(tmp_path, **config_as_env(sandbox_config))
    open_db(sandbox_config.db_path).conn.close()  # `orders create` refuses a missing database (not a missing key file)
    sandbox_server.sandbox.settings.faults = {"slow": {"scope": "POST /api/v1/orders", "seconds": HOLD_S}}
    proc = started(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "2",
                   "--format", "json")
    keys = Keys(env)
    try:
        wait_until(lambda: sandbox_server.sandbox.orders, "the order's placing")  # committed; its answer is held
        rotate_rewrap_retire_beside(proc, keys)
    finally:
        created = json.loads(finished(proc))
    assert created["vouchers_stored"] == 2
    # Nothing stored is lost: every value opens with the one key left, and the codes are the provider's.
    assert keys.status()["values_unreadable"] == 0
    revealed = json.loads(keys("vouchers", str(created["id"]), "--reveal", "--format", "json").stdout)
    placed = sandbox_server.sandbox.orders[created["id"]]
    assert sorted((v["card_number"], v["pin_code"]) for v in revealed) == sorted(
        (v.card_number, v.pin_code) for v in placed.vouchers)


def test_webhooks_register_seals_the_token_of_a_slow_answer_with_the_key_file_as_it_is_then(
        sandbox_server, sandbox_config, tmp_path):
    env = environment(tmp_path, **config_as_env(sandbox_config))
    sandbox_server.sandbox.settings.faults = {"slow": {"scope": "POST /api/v1/webhooks", "seconds": HOLD_S}}
    proc = started(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    keys = Keys(env)
    try:
        wait_until(lambda: sandbox_server.sandbox.webhooks, "the webhook's creation")
        rotate_rewrap_retire_beside(proc, keys)
    finally:
        finished(proc)
    assert keys.status()["values_unreadable"] == 0
    # The token the provider returned only once is the one the receiver accepts for the webhook.
    token = sandbox_server.sandbox.webhooks[1].token
    app = create_app(keys.config())
    try:
        assert post(app.test_client(), envelope("evt_after_rotation"), token=token, X_Webhook_ID="1").status_code == 200
    finally:
        app.extensions["partnerkit_receiver"].close()


class TypedLate(io.BytesIO):
    """A token on stdin that arrives only after `before_typing` ran (the operator types slowly)."""

    def __init__(self, text: str, before_typing) -> None:
        super().__init__(text.encode())
        self.before_typing = before_typing

    def _first(self, size: int = -1) -> None:
        if self.before_typing is not None and size != 0:  # click probes the stream with read(0)
            hook, self.before_typing = self.before_typing, None
            hook()

    def read(self, size=-1):
        self._first(size)
        return super().read(size)

    def read1(self, size=-1):
        self._first(size)
        return super().read1(size)

    def readinto(self, buffer):
        self._first(len(buffer))
        return super().readinto(buffer)


def test_webhooks_token_set_seals_a_token_typed_after_a_rotation_with_the_key_file_as_it_is_then(tmp_path):
    keys = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    keys.save_token("77")  # the database exists: its key is checked before the token is read, as before
    config = keys.config()

    def rotate_rewrap_retire() -> None:
        db = open_db(config.db_path)
        try:
            rotate_key_file(config.key_file)
            assert rewrap(db, load_cipher(config)).tokens == 1
            assert retire_key_file(config.key_file, db)[1] == 1
        finally:
            db.conn.close()

    new_token = "whsec_rotated_in_the_portal_0043"
    result = CliRunner().invoke(cli, ["webhooks", "token", "set", "77"], env=keys.env,
                                input=TypedLate(new_token + "\n", rotate_rewrap_retire))
    assert result.exit_code == 0, result.stderr
    assert keys.status()["values_unreadable"] == 0
    assert tokens_saved(config) == [("77", new_token)]


def test_a_token_whose_save_waits_for_the_write_lock_is_sealed_again_if_the_key_was_retired_meanwhile(tmp_path):
    """`webhooks token set` (and `register`) store through `webhook_tokens`, which opens its own transaction:
    the token is sealed before its wait for another process's write lock (up to 30 s, longer than `keys
    retire` waits), and sealed again under the lock when the key file moved on during that wait."""
    keys = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    config = keys.config()
    open_db(config.db_path).conn.close()
    load_cipher(config)  # the key file, nothing sealed with it yet
    retired = threading.Event()

    def lock_taken() -> None:  # the command has sealed the token and waits for the lock to save it
        rotate_and_retire_behind_the_lock(config, retired)

    new_token = "whsec_rotated_in_the_portal_0044"
    result = CliRunner().invoke(cli, ["webhooks", "token", "set", "77"], env=keys.env,
                                input=TypedLate(new_token + "\n", lock_taken))
    assert result.exit_code == 0, result.stderr
    assert retired.is_set() and len(read_key_file(config.key_file)) == 1
    assert keys.status()["values_unreadable"] == 0
    assert tokens_saved(config) == [("77", new_token)]
