"""`partnerkit keys`: rotate the voucher key in both modes, rewrap, retire; dedup across the rotation.

Real SQLite files in tmp_path, vouchers sealed and stored by partnerkit's own code, the real CLI
(in process through CliRunner, and as a real process for the kill in the middle of a rewrap).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.client import Voucher
from partnerkit.config import load_config
from partnerkit.crypto import cipher_from_keys, load_cipher, read_key_file
from partnerkit.rotation import KEY_PICKUP_S, census
from partnerkit.store import inbox, open_db, transaction, webhook_tokens
from partnerkit.store import vouchers as voucher_store
from partnerkit.vouchers import seal
from receiver.app import create_app
from receiver.tokens import seal_token
from tests.receiver.conftest import envelope, post

NOW = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
ORDER = 5001
SAVED_TOKEN = "whsec_saved_by_register_0042"
KEY_A = "a2V5LUEta2V5LUEta2V5LUEta2V5LUEta2V5LUEtISE"  # base64 of 32 bytes, tests only
PAYLOADS = [
    {"card_number": "GIFT-AAAA-1111", "pin_code": "PIN-1", "claim_url": None, "expires_at": None},
    {"card_number": None, "voucher_reference_number": "VR-0002", "pin_code": "PIN-2", "expires_at": None},
    {"card_number": None, "claim_url": "https://claim.example/c/3", "expires_at": None},
]
CODES = ["GIFT-AAAA-1111", "PIN-1", "PIN-2", "https://claim.example/c/3"]


def environment(tmp_path, **settings: str | None) -> dict[str, str | None]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PARTNERKIT_")}
    env["PARTNERKIT_DB"] = str(tmp_path / "pk.db")
    env.update(settings)
    return env


class Keys:
    """Runs `partnerkit ...` and keeps every output, to check that no key text ever appears."""

    def __init__(self, env: dict[str, str | None]) -> None:
        self.env = env
        self.outputs: list[str] = []
        self.later_s = 0.0  # the commands run this much later than the clock says (`after_pickup`)

    def after_pickup(self) -> None:
        """From now on, run the commands as the operator would once running processes took the rotated
        key file: KEY_PICKUP_S later (freezegun, ticking), so that `keys rewrap` and `keys retire` have
        nothing left to wait for."""
        self.later_s += KEY_PICKUP_S

    def __call__(self, *args: str, code: int = 0, input: str | None = None):
        later = (freeze_time(datetime.now(timezone.utc) + timedelta(seconds=self.later_s), tick=True)
                 if self.later_s else nullcontext())
        with later:
            result = CliRunner().invoke(cli, list(args), env=self.env, input=input)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.exit_code == code, (args, result.exit_code, result.stderr)
        self.outputs.append(result.stdout + result.stderr)
        return result

    def config(self):
        return load_config(environ={k: v for k, v in self.env.items() if v is not None})

    def store(self, order_id: int = ORDER, payloads: list[dict] = PAYLOADS, cipher=None) -> int:
        """Seal and store vouchers as the worker does (or with `cipher`, as nothing in partnerkit would
        any more: a key that opens none of the stored values is refused); how many were new."""
        config = self.config()
        cipher = cipher or load_cipher(config)
        db = open_db(config.db_path)
        try:
            with transaction(db) as conn:
                return voucher_store.add(conn, order_id, [seal(cipher, order_id, Voucher.from_payload(p))
                                                          for p in payloads], now=NOW)
        finally:
            db.conn.close()

    def save_token(self, webhook_id: str = "77", token: str = SAVED_TOKEN) -> None:
        config = self.config()
        db = open_db(config.db_path)
        webhook_tokens.save(db, webhook_id, seal_token(load_cipher(config), webhook_id, token), now=NOW)
        db.conn.close()

    def revealed(self, order_id: int = ORDER) -> set[str]:
        out = self("vouchers", str(order_id), "--reveal", "--format", "json").stdout
        return set(out.split('"')) & set(CODES)

    def status(self) -> dict:
        return json.loads(self("keys", "status", "--format", "json").stdout)

    def sealed_bytes(self) -> list[tuple]:
        db = open_db(self.config().db_path)
        try:
            return db.execute("SELECT id, fingerprint, card_number, pin_code, claim_url FROM vouchers ORDER BY id"
                              ).fetchall() + db.execute("SELECT webhook_id, token FROM webhook_tokens").fetchall()
        finally:
            db.conn.close()

    def assert_no_key_in(self, *keys: str, exempt: str = "") -> None:
        for output in self.outputs:
            for key in keys:
                assert key not in output.replace(exempt, "") if exempt else key not in output


def opens_only_with(keys: list[str], run: Keys) -> bool:
    """Whether every stored value opens with a cipher holding `keys` alone."""
    found = run.config()
    db = open_db(found.db_path)
    try:
        result = census(db, cipher_from_keys(keys))
        return result.current > 0 and result.previous == 0 and not result.unreadable
    finally:
        db.conn.close()


def accepts_saved_token(run: Keys) -> int:
    """The receiver, built from this configuration with no configured token, answers a delivery
    signed with the token saved by `webhooks register`."""
    app = create_app(run.config())
    try:
        return post(app.test_client(), envelope("evt_rotation"), token=SAVED_TOKEN, X_Webhook_ID="77").status_code
    finally:
        app.extensions["partnerkit_receiver"].close()


def test_key_file_rotate_rewrap_retire(tmp_path):
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    assert run.store() == 3
    run.save_token()
    key_file = run.config().key_file
    [old] = read_key_file(key_file)

    rotated = run("keys", "rotate")
    run.after_pickup()
    assert rotated.stdout == ""
    assert "1 previous key kept below it" in rotated.stderr
    assert "(voucher codes, PINs and claim URLs, webhook tokens, webhook bodies) will need `keys rewrap`" in rotated.stderr
    assert "no restart is needed" in rotated.stderr and "keys rewrap" in rotated.stderr
    assert "within 9 s" in rotated.stderr and "rewrap and retire wait that out" in rotated.stderr
    new, kept = read_key_file(key_file)
    assert kept == old and new != old and len(base64.urlsafe_b64decode(new + "=")) == 32
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert not [p for p in key_file.parent.iterdir() if p.name.startswith(".")]  # no temp file left

    # Old values still open; the same vouchers read again are not stored again; new ones use the new key.
    assert run.revealed() == set(CODES)
    assert run.store() == 0
    assert run.store(order_id=5002) == 3
    status = run.status()
    assert (status["previous_keys"], status["values_previous_key"], status["fingerprints_previous_key"]) == (1, 5, 3)
    assert status["values_current_key"] == 4 and status["previous_keys_needed"] is True
    assert status["key_source"] == f"key file {key_file}"

    refused = run("keys", "retire", code=1)
    assert "5 stored values open only with a previous key and 3 voucher fingerprints were made with one" in refused.stderr
    assert read_key_file(key_file) == [new, old]

    done = run("keys", "rewrap", "--batch-size", "2")
    assert "re-sealed 3 vouchers, 1 webhook token and 0 webhook bodies" in done.stderr
    assert "the previous keys can be retired" in done.stderr
    again = run("keys", "rewrap")
    assert "re-sealed 0 vouchers, 0 webhook tokens and 0 webhook bodies" in again.stderr
    assert opens_only_with([new], run)

    assert "retired 1 previous key" in run("keys", "retire").stderr
    assert read_key_file(key_file) == [new]
    assert "nothing to retire" in run("keys", "retire").stderr

    assert run.store() == 0 and run.store(order_id=5002) == 0
    assert run.revealed() == set(CODES)
    assert not opens_only_with([old], run)
    assert accepts_saved_token(run) == 200
    run.assert_no_key_in(old, new)


def test_environment_rotate_rewrap_retire(tmp_path):
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.store()
    run.save_token()

    rotated = run("keys", "rotate")
    new = rotated.stdout.strip()
    assert len(base64.urlsafe_b64decode(new + "=")) == 32 and rotated.stdout == new + "\n"
    assert "nothing was changed" in rotated.stderr
    assert "PARTNERKIT_VOUCHER_KEY=<the new key printed on stdout>" in rotated.stderr
    assert "PARTNERKIT_VOUCHER_KEY_PREVIOUS=<your current PARTNERKIT_VOUCHER_KEY>" in rotated.stderr
    assert "restart the receiver and the worker with the new settings" in rotated.stderr
    assert "then run `partnerkit keys rewrap`" in rotated.stderr
    assert not run.config().key_file.exists()
    assert opens_only_with([KEY_A], run)  # nothing changed

    run.env.update(PARTNERKIT_VOUCHER_KEY=new, PARTNERKIT_VOUCHER_KEY_PREVIOUS=KEY_A)
    assert run.revealed() == set(CODES)
    assert run.store() == 0
    assert "still needed" in run("keys", "retire", code=1).stderr
    run("keys", "rewrap")
    assert "PARTNERKIT_VOUCHER_KEY_PREVIOUS can be unset now" in run("keys", "retire").stderr

    run.env["PARTNERKIT_VOUCHER_KEY_PREVIOUS"] = None
    assert run.store() == 0
    assert run.revealed() == set(CODES)
    assert accepts_saved_token(run) == 200
    assert "nothing to retire" in run("keys", "retire").stderr
    run.assert_no_key_in(KEY_A, new, exempt=rotated.stdout)
    assert KEY_A not in rotated.stdout + rotated.stderr and new not in rotated.stderr


def test_a_value_no_key_opens_is_named_and_left_untouched(tmp_path):
    """Values sealed with a key nobody has any more, beside values the key opens (vouchers an earlier
    version sealed under a mistyped PARTNERKIT_VOUCHER_KEY): named, and left exactly as they are."""
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A))
    run.store(payloads=PAYLOADS[:1])
    run.save_token()
    other = "b3RoZXIta2V5LW9mLTMyLWJ5dGVzLWZvci10ZXN0cyE"
    run.env.update(PARTNERKIT_VOUCHER_KEY=other)  # KEY_A forgotten, not listed as previous
    assert run.store(order_id=5002, payloads=PAYLOADS[:1], cipher=cipher_from_keys([other])) == 1
    before = run.sealed_bytes()

    status = run.status()
    assert status["values_unreadable"] == 3 and status["values_current_key"] == 2
    assert {"kind": "voucher", "order_id": ORDER, "voucher_id": 1, "field": "card_number"} in status["unreadable"]
    assert {"kind": "webhook_token", "webhook_id": "77"} in status["unreadable"]
    table = run("keys", "status").stdout
    assert "order 5001 voucher 1 (pin_code)" in table and "webhook token of webhook 77" in table

    failed = run("keys", "rewrap", code=1)
    assert "no key opens these, left as they are: order 5001 voucher 1 (card_number)" in failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith("Error: no key opens 3 stored values")
    assert run.sealed_bytes() == before
    revealed = run("vouchers", str(ORDER), "--reveal", code=1)
    # The hint names where the key came from (N2): here the setting.
    assert "cannot be decrypted with this key (was PARTNERKIT_VOUCHER_KEY changed?)" in revealed.stderr
    run.assert_no_key_in(KEY_A, other)


def test_a_voucher_whose_fingerprint_cannot_be_recomputed_keeps_the_previous_key(tmp_path):
    """No code, reference or claim URL: its fingerprint came from the provider's whole record, which
    is not stored. Re-sealing its PIN alone would hide that dedup still needs the old key."""
    record_only = [{"card_number": None, "pin_code": "PIN-ONLY", "expires_at": "2030-01-01T00:00:00Z"}]
    run = Keys(environment(tmp_path))
    run.store(payloads=record_only + PAYLOADS[:1])
    run("keys", "rotate")
    run.after_pickup()
    before = run.sealed_bytes()[0]

    done = run("keys", "rewrap", code=1)
    assert "re-sealed 1 voucher, " in done.stderr
    assert "their fingerprint cannot be recomputed" in done.stderr and "order 5001 voucher 1" in done.stderr
    assert "Error: the previous keys cannot be retired yet: 1 stored value open" in done.stderr
    assert run.sealed_bytes()[0] == before  # left whole
    assert run.status()["kept_under_previous_key"] == [{"kind": "voucher", "order_id": ORDER, "voucher_id": 1}]
    assert "still needed" in run("keys", "retire", code=1).stderr
    assert len(read_key_file(run.config().key_file)) == 2
    assert run.store(payloads=record_only) == 0  # the previous key's fingerprint still dedups it


def test_rewrap_killed_mid_way_loses_nothing_and_a_second_run_finishes(tmp_path):
    # PARTNERKIT_VOUCHER_KEY: the rewrap is a real process here, and with a key file just rotated it
    # would first wait for running receivers and workers to take it (test_key_pickup.py).
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A))
    payloads = [{"card_number": f"GIFT-{i:06d}", "pin_code": f"P{i}", "expires_at": None} for i in range(600)]
    assert run.store(payloads=payloads) == 600
    new, old = run("keys", "rotate").stdout.strip(), KEY_A
    run.env.update(PARTNERKIT_VOUCHER_KEY=new, PARTNERKIT_VOUCHER_KEY_PREVIOUS=old)
    db = open_db(run.config().db_path)
    fingerprints = dict(db.execute("SELECT id, fingerprint FROM vouchers").fetchall())

    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    env.update({k: v for k, v in run.env.items() if v is not None})
    process = subprocess.Popen([sys.executable, "-m", "partnerkit", "keys", "rewrap", "--batch-size", "1"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not any(fp != fingerprints[i] for i, fp in db.execute("SELECT id, fingerprint FROM vouchers")):
            assert process.poll() is None and time.monotonic() < deadline
        # Frozen at once wherever it is (a busy machine could let it finish all 600 batches before
        # this process took the lock), then killed there: mid-batch or between two.
        process.send_signal(signal.SIGSTOP)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        process.kill()
        process.wait()
    stderr = process.stderr.read().decode()

    new_only, old_only = cipher_from_keys([new]), cipher_from_keys([old])
    states = []
    for row in db.execute("SELECT order_id, fingerprint, card_number, pin_code FROM vouchers ORDER BY id"):
        order_id, fingerprint, card, pin = row
        code = {"card_number": card, "pin_code": pin}
        under = [name for name, cipher in (("new", new_only), ("old", old_only))
                 if all(cipher.open(v, context=f"voucher:{order_id}:{f}".encode()) for f, v in code.items())]
        plain = (new_only.open(card, context=f"voucher:{order_id}:card_number".encode())
                 or old_only.open(card, context=f"voucher:{order_id}:card_number".encode()))[0]
        made_by = {"new": new_only, "old": old_only}[under[0]] if len(under) == 1 else None
        assert made_by is not None and fingerprint == made_by.fingerprint(str(order_id), plain)  # whole rows only
        states.append(under[0])
    db.conn.close()
    assert 0 < states.count("new") < 600, states.count("new")
    assert KEY_A not in stderr and new not in stderr and old not in stderr

    second = run("keys", "rewrap")
    assert f"re-sealed {states.count('old')} vouchers," in second.stderr
    assert opens_only_with([new], run)
    assert run.store(payloads=payloads) == 0
    run("keys", "retire")
    assert run.store(payloads=payloads) == 0


@pytest.mark.parametrize("command", ["rotate", "retire"])
def test_rotate_or_retire_without_a_key_file_says_so(tmp_path, command):
    run = Keys(environment(tmp_path))
    open_db(tmp_path / "pk.db").conn.close()
    failed = run("keys", command, code=1)
    assert f"no voucher key file at {run.config().key_file}: nothing to {command}" in failed.stderr
    assert not run.config().key_file.exists()


@pytest.mark.parametrize("command", ["status", "rewrap", "retire"])
def test_with_nothing_stored_every_command_is_calm(tmp_path, command):
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A))
    open_db(tmp_path / "pk.db").conn.close()
    result = run("keys", command)
    assert KEY_A not in result.stdout + result.stderr


def test_config_masks_the_previous_keys(tmp_path):
    older = "b2xkZXIta2V5LW9mLTMyLWJ5dGVzLWZvci10ZXN0cyE"
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A, PARTNERKIT_VOUCHER_KEY_PREVIOUS=f"{older},{older}x"))
    shown = {row["variable"]: row["value"] for row in json.loads(run("config", "--format", "json").stdout)}
    assert shown["PARTNERKIT_VOUCHER_KEY_PREVIOUS"] == "*** (2 set)"
    run.assert_no_key_in(KEY_A, older)


def test_the_backup_reminder_says_a_backup_before_the_rewrap_needs_the_old_key(tmp_path):
    run = Keys(environment(tmp_path))
    run.store()
    reminder = run("backup", str(tmp_path / "before-rewrap.db")).stderr
    assert "keep the old copy as long as backups made before the rewrap are kept" in reminder


def test_webhook_bodies_are_rewrapped_and_one_kept_in_clear_by_an_earlier_version_is_sealed(tmp_path):
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.save_token()
    assert accepts_saved_token(run) == 200  # the receiver kept the body of evt_rotation, sealed
    legacy = b'{"event_id":"evt_before_sealing","event_type":"order.delivered","data":{"id":9}}'
    db = open_db(run.config().db_path)
    with transaction(db) as conn:  # a row as versions before sealed bodies wrote it
        conn.execute("INSERT INTO inbox (dedup_key, state, received_at, last_seen_at, body) "
                     "VALUES ('evt_before_sealing', 'processed', '2024-05-01T10:00:00Z', '2024-05-01T10:00:00Z', ?)",
                     (legacy,))
    db.conn.close()
    [old] = read_key_file(run.config().key_file)
    assert run.status()["webhook_bodies_in_clear"] == 1

    run("keys", "rotate")
    run.after_pickup()
    status = run.status()
    assert status["values_previous_key"] == 2  # the token and the receiver's body
    assert "still needed" in run("keys", "retire", code=1).stderr

    done = run("keys", "rewrap")
    assert "1 webhook token and 2 webhook bodies" in done.stderr
    status = run.status()
    assert (status["values_previous_key"], status["webhook_bodies_in_clear"]) == (0, 0)
    run("keys", "retire")
    [new] = read_key_file(run.config().key_file)

    db = open_db(run.config().db_path)
    try:
        cipher = cipher_from_keys([new])
        assert inbox.body_of(db, cipher, "evt_before_sealing") == legacy
        assert b'"evt_rotation"' in inbox.body_of(db, cipher, "evt_rotation")
        stored = db.execute("SELECT body FROM inbox WHERE dedup_key = 'evt_before_sealing'").fetchone()[0]
        assert legacy not in bytes(stored)
    finally:
        db.conn.close()
    run.assert_no_key_in(old, new)


def test_a_running_receiver_seals_with_the_key_a_rotation_put_first_without_a_restart(tmp_path):
    from freezegun import freeze_time

    from receiver.state import TOKEN_REFRESH_S
    from tests.receiver.conftest import TOKEN

    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING", PARTNERKIT_WEBHOOK_TOKENS=TOKEN))
    key_file = run.config().key_file
    # Frozen at the real time: `keys rewrap` compares the clock with the key file's change, which is real.
    with freeze_time(datetime.now(timezone.utc)) as clock:
        app = create_app(run.config())  # generates the key file: the receiver seals the bodies it keeps
        client = app.test_client()
        try:
            assert post(client, envelope("evt_before")).status_code == 200
            [old] = read_key_file(key_file)
            run("keys", "rotate")
            clock.tick(TOKEN_REFRESH_S + 1)
            assert post(client, envelope("evt_after", order_id=102)).status_code == 200
            new, _ = read_key_file(key_file)
            clock.tick(KEY_PICKUP_S)
            run("keys", "rewrap")
            run("keys", "retire")
            clock.tick(TOKEN_REFRESH_S + 1)
            assert post(client, envelope("evt_late", order_id=103)).status_code == 200
        finally:
            app.extensions["partnerkit_receiver"].close()

    db = open_db(run.config().db_path)
    try:
        sealed = dict(db.execute("SELECT dedup_key, body FROM inbox").fetchall())
        only_new = cipher_from_keys([new])
        # Sealed with the new key as soon as the running receiver saw the rotated file, not after a restart.
        assert only_new.open(sealed["evt_after"], context=inbox.body_context("evt_after"))[1] == 0
        # After the retire the old key is gone from the file: a body sealed with it would be lost.
        for event_id in ("evt_before", "evt_after", "evt_late"):
            assert inbox.body_of(db, only_new, event_id).startswith(b"{")
    finally:
        db.conn.close()
    run.assert_no_key_in(old, new)
