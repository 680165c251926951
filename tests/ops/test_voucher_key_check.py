"""A voucher key that opens none of the stored values is refused by every command that seals or reveals
(finding 1), the hint names the key's real source (N2), and a rewritten key file keeps its owner (finding 3).

Real SQLite files in tmp_path, values sealed by partnerkit's own code, the real CLI in process (and
`worker --once` as a real process).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import ConfigError, load_config
from partnerkit.crypto import cipher_from_keys, load_cipher, read_key_file
from partnerkit.store import open_db
from partnerkit.store.vouchers import keyed_samples
from partnerkit.vouchers import run_voucher_fetches
from tests.ops.test_keys import KEY_A, ORDER, PAYLOADS, Keys, environment

WRONG = "d3Jvbmctd3Jvbmctd3Jvbmctd3Jvbmctd3Jvbmct"  # base64 of 30 bytes: a mistyped key, tests only
NEW_TOKEN = "whsec_set_by_the_operator_0099"


def stored_with_the_key_file(tmp_path) -> Keys:
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    assert run.store() == 3
    run.save_token()
    return run


def one_error_line(result, code: int = 2) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.exit_code == code, (result.exit_code, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    return line


REFUSING = [
    ["vouchers", str(ORDER), "--reveal"],
    ["vouchers", str(ORDER)],
    ["keys", "rewrap"],
    ["keys", "rotate"],
    ["keys", "retire"],
    ["webhooks", "token", "set", "77"],
    ["serve", "--bind", "127.0.0.1:1"],  # refused before it listens (or execs gunicorn)
    ["run", "--bind", "127.0.0.1:1"],
]


@pytest.mark.parametrize("args", REFUSING, ids=" ".join)
def test_a_mistyped_voucher_key_is_refused_by_every_command_that_seals_or_reveals(tmp_path, args):
    run = stored_with_the_key_file(tmp_path)
    run.env.update(PARTNERKIT_VOUCHER_KEY=WRONG, PARTNERKIT_API_BASE_URL="http://127.0.0.1:9",
                   PARTNERKIT_API_KEY="k", PARTNERKIT_API_SECRET="s")
    before, key_file = run.sealed_bytes(), read_key_file(run.config().key_file)
    result = CliRunner().invoke(cli, args, env=run.env, input=NEW_TOKEN + "\n")
    line = one_error_line(result)
    assert line.startswith("Error: PARTNERKIT_VOUCHER_KEY opens none of the vouchers and webhook tokens stored in ")
    assert "PARTNERKIT_VOUCHER_KEY_PREVIOUS" in line and "Nothing was sealed" in line
    assert run.sealed_bytes() == before and read_key_file(run.config().key_file) == key_file
    assert WRONG not in result.output and NEW_TOKEN not in result.output


def test_keys_status_still_shows_what_a_mistyped_key_opens(tmp_path):
    run = stored_with_the_key_file(tmp_path)
    run.env.update(PARTNERKIT_VOUCHER_KEY=WRONG)
    status = run.status()
    assert (status["key_source"], status["values_unreadable"], status["values_current_key"]) == (
        "PARTNERKIT_VOUCHER_KEY", 5, 0)  # 4 voucher fields and the token


def test_the_worker_refuses_a_mistyped_key_at_start_and_its_voucher_fetch_seals_nothing(tmp_path):
    run = stored_with_the_key_file(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    env.update(PARTNERKIT_DB=run.env["PARTNERKIT_DB"], PARTNERKIT_VOUCHER_KEY=WRONG,
               PARTNERKIT_API_BASE_URL="http://127.0.0.1:9", PARTNERKIT_API_KEY="k", PARTNERKIT_API_SECRET="s")
    done = subprocess.run([sys.executable, "-m", "partnerkit", "worker", "--once"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Error: PARTNERKIT_VOUCHER_KEY opens none of")
    # And the job itself, should a key change under a running worker: refused before it claims a job.
    config = load_config(environ={k: v for k, v in env.items() if k.startswith("PARTNERKIT_")})
    db = open_db(config.db_path)
    try:
        with pytest.raises(ConfigError, match="opens none of the vouchers"):
            run_voucher_fetches(config, db, client=None)
    finally:
        db.conn.close()


def test_a_rotation_passes_and_forgetting_the_previous_key_does_not(tmp_path):
    """The check is "opens at least one stored value": a new key with the old one as previous opens
    them all; the new key alone opens none, and is refused before it seals anything."""
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.store()
    new = run("keys", "rotate").stdout.strip()
    run.env.update(PARTNERKIT_VOUCHER_KEY=new)  # PARTNERKIT_VOUCHER_KEY_PREVIOUS forgotten
    line = one_error_line(CliRunner().invoke(cli, ["vouchers", str(ORDER), "--reveal"], env=run.env))
    assert "after `keys rotate`, that key goes in PARTNERKIT_VOUCHER_KEY_PREVIOUS" in line
    run.env.update(PARTNERKIT_VOUCHER_KEY_PREVIOUS=KEY_A)
    assert len(run.revealed()) == 4
    run("keys", "rewrap")
    run.env.update(PARTNERKIT_VOUCHER_KEY_PREVIOUS=None)  # retired: the new key opens everything now
    assert len(run.revealed()) == 4


def test_the_hint_names_the_key_file_when_the_key_comes_from_it(tmp_path):
    """N2: the key file in use (PARTNERKIT_VOUCHER_KEY unset) is named, not the setting."""
    run = Keys(environment(tmp_path, PARTNERKIT_VOUCHER_KEY=KEY_A, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.store()
    run.env.update(PARTNERKIT_VOUCHER_KEY=None)
    key_file = run.config().key_file
    key_file.write_text(WRONG + "\n")  # another database's key file, say
    key_file.chmod(0o600)
    line = one_error_line(CliRunner().invoke(cli, ["vouchers", str(ORDER), "--reveal"], env=run.env))
    assert line.startswith(f"Error: the voucher key file {str(key_file)!r} opens none of the vouchers")
    assert "restore this database's key file from its backup" in line
    assert "PARTNERKIT_VOUCHER_KEY opens" not in line and "VOUCHER_KEY_PREVIOUS" not in line

    # A value no key opens, beside others it does open: the decryption error names the file too.
    run.store(order_id=5002, payloads=PAYLOADS[:1], cipher=cipher_from_keys([WRONG]))
    result = CliRunner().invoke(cli, ["vouchers", str(ORDER), "--reveal"], env=run.env)
    line = one_error_line(result, code=1)
    assert f"cannot be decrypted with this key (was the voucher key file {str(key_file)!r} changed?)" in line
    assert "PARTNERKIT_VOUCHER_KEY" not in line


def test_the_check_reads_a_few_values_not_every_one(tmp_path):
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    payloads = [{"card_number": f"GIFT-{i:05d}", "pin_code": f"P{i}", "expires_at": None} for i in range(300)]
    run.store(payloads=payloads)
    for webhook_id in ("5", "6", "7"):
        run.save_token(webhook_id)
    samples = keyed_samples(run.config().db_path)
    assert [s.kind for s in samples] == ["voucher", "voucher", "webhook_token", "webhook_token"]
    assert {s.owner for s in samples if s.kind == "webhook_token"} == {"5", "7"}
    assert keyed_samples(tmp_path / "nothing-here.db") is None
    assert load_cipher(run.config()) is not None  # the key file opens them


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_rotate_and_retire_run_as_root_keep_the_key_files_owner(tmp_path):
    """Finding 3: `keys rotate` from a root shell left a root-owned key file the services (their own
    user) could not read; the receiver then answered 503 to every delivery after the rewrap."""
    run = stored_with_the_key_file(tmp_path)
    key_file = run.config().key_file
    os.chown(key_file, 65534, 65534)  # the service user's file (nobody here)
    run("keys", "rotate")
    run.after_pickup()
    stat = key_file.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) == (65534, 65534, 0o600)
    run("keys", "rewrap")
    run("keys", "retire")
    stat = key_file.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) == (65534, 65534, 0o600)
    assert len(read_key_file(key_file)) == 1
    assert not [p for p in key_file.parent.iterdir() if p.name.startswith(".")]  # no temp file left


def test_status_says_when_the_saved_webhook_tokens_cannot_be_read(tmp_path):
    """Finding 3: the receiver answered 503 to every delivery while `status --check` said nothing needs
    attention. The status timer runs as the services' user, so it reads the key as the receiver does."""
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    open_db(run.config().db_path).conn.close()
    status = run("status", "--format", "json")
    assert '"webhook_tokens_unreadable": null' in status.stdout
    assert not run.config().key_file.exists()  # nothing saved: no key read, none generated
    run.save_token()
    run("status", "--check")
    key_file = run.config().key_file
    key_file.write_bytes(b"\xff" * 44)  # unreadable as a key, as a file of another owner is to its user
    failed = run("status", "--check", "--format", "json", code=1)
    assert f"the voucher key file {str(key_file)!r} is damaged" in failed.stdout
    assert "a receiver running as this user cannot verify deliveries signed with them" in failed.stdout
