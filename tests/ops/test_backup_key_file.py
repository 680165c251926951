"""`partnerkit backup` and the voucher key file: the backup's values sealed with the key cannot be read without it,
so a key file that is missing is a warning with their count, not "remember the key file"."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import load_config
from partnerkit.crypto import load_cipher, token_context
from partnerkit.store import open_db, webhook_tokens


@pytest.mark.parametrize("case", ["key file kept", "no key file yet", "key file missing"])
def test_the_backup_says_what_the_voucher_key_file_means_for_it(tmp_path, case):
    env = {"PARTNERKIT_DB": str(tmp_path / "live.db")}
    config = load_config(environ=env)
    db = open_db(config.db_path)
    if case != "no key file yet":
        sealed = load_cipher(config).encrypt("whsec_backup", context=token_context("7"))  # generates the key file
        webhook_tokens.save(db, "7", sealed, now=datetime(2025, 1, 15, tzinfo=timezone.utc))
    db.conn.close()
    if case == "key file missing":
        config.key_file.unlink()
    result = CliRunner().invoke(cli, ["backup", str(tmp_path / "b.db")], env=env)
    assert result.exit_code == 0, result.output
    last = result.stderr.splitlines()[-1]
    key_file = config.key_file
    if case == "key file kept":
        assert last.startswith(f"remember the voucher key file {key_file} (back it up once, keep it apart;")
    elif case == "no key file yet":
        assert last == (f"no voucher key file at {key_file} yet, and no stored voucher or webhook token is sealed with "
                        "one: partnerkit generates it when it first stores one; back it up once it exists")
    else:
        assert last == (f"warning: the voucher key file {key_file} is missing, and the database backed up holds 1 "
                        "stored voucher(s) or webhook token(s) sealed with it: neither it nor this backup can be read "
                        "without that key. Restore the key file from its own backup (or set PARTNERKIT_VOUCHER_KEY to "
                        "its key; `partnerkit keys status` then shows what it opens) and keep a copy apart from the "
                        "database backups")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("b.db")) == ["b.db"]  # nothing beside it
