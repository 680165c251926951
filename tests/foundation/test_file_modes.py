"""Files holding secrets that partnerkit did not create itself (a database copied in, a config file written under
umask 022) are left as they are, but named in a WARNING with the `chmod 600` to run, as the voucher key file is."""

from __future__ import annotations

import logging
import subprocess
import sys

from partnerkit.store import open_db
from partnerkit.store.db import connect


def db_warning(path) -> str:
    return (f"the database {path} can be read by other users; run: chmod 600 {path} "
            "(and its -wal and -shm files, if present)")


def test_a_database_readable_by_others_is_warned_about_once_a_process(tmp_path, caplog):
    path = tmp_path / "copied-in.db"
    open_db(path).conn.close()
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="partnerkit.store.db"):
        first, second = open_db(path), connect(path)  # every receiver thread opens its own connection
    assert caplog.messages == [db_warning(path)]
    assert path.stat().st_mode & 0o777 == 0o644  # named, never changed behind the owner's back
    first.conn.close()
    second.conn.close()


def test_a_private_or_new_database_is_not_warned_about(tmp_path, caplog):
    path = tmp_path / "pk.db"
    with caplog.at_level(logging.WARNING, logger="partnerkit.store.db"):
        open_db(path).conn.close()  # created 0600
        open_db(path).conn.close()  # and found so
    assert path.stat().st_mode & 0o777 == 0o600
    assert caplog.messages == []


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "partnerkit.cli", *args], capture_output=True, text=True,
                          env={"PATH": "", **env}, timeout=120)


def test_the_commands_name_a_readable_config_file_and_database_on_stderr(tmp_path):
    """README's quick start wrote its config file with `cat >`: 0644 under umask 022, API secret included."""
    db, config = tmp_path / "pk.db", tmp_path / "partnerkit.env"
    open_db(db).conn.close()
    config.write_text(f"PARTNERKIT_DB={db}\nPARTNERKIT_API_SECRET=sk_sandbox_alpha_3f9a1c7e5b2d4068\n")
    for file in (db, config):
        file.chmod(0o644)
    shared = cli("--config", str(config), "events", "list", env={})
    assert shared.returncode == 0
    assert shared.stderr.splitlines() == [
        f"the --config file {config} can be read by other users; run: chmod 600 {config} "
        "(it holds PARTNERKIT_API_SECRET)",
        db_warning(db),
        "no events received yet",
    ]
    assert "sk_sandbox" not in shared.stderr
    for file in (db, config):
        file.chmod(0o600)
    private = cli("--config", str(config), "events", "list", env={})
    assert private.returncode == 0 and private.stderr == "no events received yet\n"


def test_config_names_a_passphrase_voucher_key(tmp_path):
    """`partnerkit config` checks the settings: a passphrase is accepted (what it sealed stays readable), but said."""
    env = {"PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_VOUCHER_KEY": "aaaaaaaaaaaaaaaa"}
    shown = cli("config", env=env)
    assert shown.returncode == 0 and "PARTNERKIT_VOUCHER_KEY" in shown.stdout
    assert shown.stderr.strip() == ("PARTNERKIT_VOUCHER_KEY is a passphrase, not a random key: what it seals can be "
                                    "guessed offline from a copy of the database; make a random key with `partnerkit "
                                    "keys rotate` and move to it (README, \"Rotate the voucher key\")")
    random = cli("config", env={**env, "PARTNERKIT_VOUCHER_KEY": "0123456789abcdef" * 4})
    assert random.returncode == 0 and random.stderr == ""
