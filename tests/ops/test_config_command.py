"""`partnerkit config` tells what the services will make of the settings: each value's source, the database as an
absolute path, the webhook tokens saved in it and the voucher key file in use (never a token or a key), and with
`--check` exit 1 naming what the worker or the receiver would refuse to start without. It creates nothing.

Real SQLite files in tmp_path, a token and a key file made by partnerkit's own code, the real CLI in process.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import load_config
from partnerkit.crypto import load_cipher, token_context
from partnerkit.store import open_db, webhook_tokens

NOW = datetime(2025, 3, 14, 10, 0, tzinfo=timezone.utc)
SAVED = {"12": "whsec_saved_for_twelve_0012", "7": "whsec_saved_for_seven_00007"}
OTHER_KEY = "b3RoZXIta2V5LW9mLTMyLWJ5dGVzLWZvci10ZXN0cyEh"  # base64 of 32 bytes, tests only
CREDENTIALS = {"PARTNERKIT_API_BASE_URL": "https://api.provider.example", "PARTNERKIT_API_KEY": "pk_config_test",
               "PARTNERKIT_API_SECRET": "sk_config_test_secret"}


def clean_env(**values: str) -> dict[str, str | None]:
    """Only these PARTNERKIT_* variables (CliRunner overlays the test process's environment)."""
    env: dict[str, str | None] = {name: None for name in os.environ if name.upper().startswith("PARTNERKIT_")}
    env.update(values)
    return env


def shown(result) -> dict[str, dict]:
    assert result.exit_code in (0, 1), result.output
    return {row["variable"]: row for row in json.loads(result.stdout)}


def config(*args: str, env: dict[str, str | None]):
    return CliRunner().invoke(cli, ["config", "--format", "json", *args], env=env)


def saved_tokens_and_key_file(db_path) -> None:
    """A database where `webhooks register` saved two tokens, sealed with a generated key file beside it."""
    settings = load_config(environ={"PARTNERKIT_DB": str(db_path)})
    db = open_db(db_path)
    cipher = load_cipher(settings)
    for webhook_id, token in SAVED.items():
        webhook_tokens.save(db, webhook_id, cipher.encrypt(token, context=token_context(webhook_id)), now=NOW)
    db.conn.close()


def test_each_value_says_where_it_came_from_and_the_database_is_shown_absolute(tmp_path, monkeypatch):
    # It showed `var/try/partnerkit.db` as written, and never whether a value was the file's, the environment's or
    # the default.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "partnerkit.env").write_text("PARTNERKIT_DB=var/try/partnerkit.db\nPARTNERKIT_TOLERANCE_S=42\n"
                                             "PARTNERKIT_HOURLY_BUDGET=500\n")
    rows = shown(CliRunner().invoke(cli, ["--config", "partnerkit.env", "config", "--format", "json"],
                                    env=clean_env(PARTNERKIT_HOURLY_BUDGET="700", PARTNERKIT_REPORT_DIR="")))
    assert rows["PARTNERKIT_DB"] == {
        "variable": "PARTNERKIT_DB", "value": str(tmp_path / "var" / "try" / "partnerkit.db"), "source": "file",
        "note": "'var/try/partnerkit.db' relative to the working directory; does not exist yet: the worker or the "
                "receiver creates it at a first start, with 2 new directories (mode 0700)"}
    assert (rows["PARTNERKIT_TOLERANCE_S"]["value"], rows["PARTNERKIT_TOLERANCE_S"]["source"]) == ("42", "file")
    # The environment overrides the file, and an empty value counts as not set.
    assert (rows["PARTNERKIT_HOURLY_BUDGET"]["value"], rows["PARTNERKIT_HOURLY_BUDGET"]["source"]) == \
        ("700", "environment")
    assert (rows["PARTNERKIT_REPORT_DIR"]["value"], rows["PARTNERKIT_REPORT_DIR"]["source"]) == \
        (str(tmp_path / "var" / "reports"), "default")
    assert rows["PARTNERKIT_LOG_LEVEL"] == {"variable": "PARTNERKIT_LOG_LEVEL", "value": "INFO", "source": "default",
                                            "note": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partnerkit.env"]  # nothing created


def test_the_tokens_saved_in_the_database_and_the_key_file_are_counted_never_shown(tmp_path):
    # Both said "(not set)" while the receiver accepted a saved token and every voucher was sealed with the key file.
    db_path = tmp_path / "pk.db"
    saved_tokens_and_key_file(db_path)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    result = config(env=clean_env(PARTNERKIT_DB=str(db_path)))
    rows = shown(result)
    assert rows["PARTNERKIT_WEBHOOK_TOKENS"] == {
        "variable": "PARTNERKIT_WEBHOOK_TOKENS", "value": "(not set)", "source": "default",
        "note": "2 tokens saved in the database (webhooks 7, 12, by `webhooks register` or `webhooks token set`): "
                "the receiver accepts them"}
    assert rows["PARTNERKIT_VOUCHER_KEY"]["note"] == f"key file {str(db_path) + '.voucher.key'!r} (1 key)"
    assert rows["PARTNERKIT_DB"]["note"] == "exists"
    key = (tmp_path / "pk.db.voucher.key").read_text().strip()
    assert key not in result.output and not any(token in result.output for token in SAVED.values())
    # Read-only: the database and its key file are as they were, and nothing was added beside them.
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()} == before

    configured = shown(config(env=clean_env(PARTNERKIT_DB=str(db_path), PARTNERKIT_WEBHOOK_TOKENS="whsec_configured_0001")))
    assert configured["PARTNERKIT_WEBHOOK_TOKENS"]["value"] == "***"
    assert configured["PARTNERKIT_WEBHOOK_TOKENS"]["note"].startswith("and 2 tokens saved in the database (webhooks 7, 12")


def test_a_rotated_key_file_counts_its_previous_keys(tmp_path):
    db_path = tmp_path / "pk.db"
    (tmp_path / "pk.db.voucher.key").write_text("a2V5LUEta2V5LUEta2V5LUEta2V5LUEta2V5LUEtISE\n"
                                                "b2xkZXIta2V5LW9mLTMyLWJ5dGVzLWZvci10ZXN0cyE\n")
    (tmp_path / "pk.db.voucher.key").chmod(0o600)
    rows = shown(config(env=clean_env(PARTNERKIT_DB=str(db_path))))
    assert rows["PARTNERKIT_VOUCHER_KEY"]["note"] == f"key file {str(db_path) + '.voucher.key'!r} (2 keys: 1 previous)"


INCOMPLETE = [
    ({}, [
        "the worker (and `run`) would refuse to start: PARTNERKIT_API_BASE_URL, PARTNERKIT_API_KEY, "
        "PARTNERKIT_API_SECRET are not set",
        "the receiver (`serve`, and `run`) would refuse to start: no webhook token is accepted (set "
        "PARTNERKIT_WEBHOOK_TOKENS, or run `partnerkit webhooks register`, which saves the provider's token in the "
        "database)"]),
    ({**CREDENTIALS, "PARTNERKIT_API_SECRET": ""}, [  # empty: not set, as every command reads it
        "the worker (and `run`) would refuse to start: PARTNERKIT_API_SECRET is not set",
        "the receiver (`serve`, and `run`) would refuse to start: no webhook token is accepted (set "
        "PARTNERKIT_WEBHOOK_TOKENS, or run `partnerkit webhooks register`, which saves the provider's token in the "
        "database)"]),
    ({"PARTNERKIT_WEBHOOK_TOKENS": "whsec_configured_0001"}, [
        "the worker (and `run`) would refuse to start: PARTNERKIT_API_BASE_URL, PARTNERKIT_API_KEY, "
        "PARTNERKIT_API_SECRET are not set"]),
    ({**CREDENTIALS, "PARTNERKIT_WEBHOOK_TOKENS": "whsec_configured_0001"}, []),
]


@pytest.mark.parametrize("settings, refusals", INCOMPLETE, ids=["nothing", "no secret", "no credentials", "complete"])
def test_check_exits_1_naming_what_each_service_would_refuse_to_start_without(settings, refusals, tmp_path):
    # With PARTNERKIT_API_KEY and _SECRET empty it printed "(not set)" and exited 0.
    env = clean_env(PARTNERKIT_DB=str(tmp_path / "pk.db"), **settings)
    checked = config("--check", env=env)
    assert (checked.exit_code, checked.stderr.splitlines()) == (1 if refusals else 0, refusals)
    assert len(shown(checked)) == 18  # the same table either way
    listed = config(env=env)  # without --check: the table alone, exit 0, as before
    assert (listed.exit_code, listed.stderr) == (0, "")
    assert not (tmp_path / "pk.db").exists()


def test_check_counts_a_token_saved_in_the_database_as_accepted(tmp_path):
    saved_tokens_and_key_file(tmp_path / "pk.db")
    checked = config("--check", env=clean_env(PARTNERKIT_DB=str(tmp_path / "pk.db"), **CREDENTIALS))
    assert (checked.exit_code, checked.stderr) == (0, "")


@pytest.mark.parametrize("broken", ["damaged key file", "missing key file", "another key"])
def test_check_names_a_voucher_key_the_services_would_refuse(broken, tmp_path):
    db_path = tmp_path / "pk.db"
    saved_tokens_and_key_file(db_path)
    key_file = tmp_path / "pk.db.voucher.key"
    env = clean_env(PARTNERKIT_DB=str(db_path), **CREDENTIALS)
    if broken == "another key":  # a mistyped PARTNERKIT_VOUCHER_KEY: it opens none of the saved tokens
        env["PARTNERKIT_VOUCHER_KEY"] = OTHER_KEY
        why = (f"PARTNERKIT_VOUCHER_KEY opens none of the vouchers and webhook tokens stored in {str(db_path)!r}, so it "
               "is not the key they were sealed with")
    elif broken == "damaged key file":
        key_file.write_text("short\n")
        why = (f"the voucher key file {str(key_file)!r} is empty or damaged; restore it from its backup (without it "
               "stored vouchers cannot be read)")
    else:
        key_file.unlink()
        why = (f"the voucher key file {str(key_file)!r} is missing, but the database holds 2 stored voucher(s) or "
               "webhook token(s) sealed with it: restore it from its backup (or set PARTNERKIT_VOUCHER_KEY to that key)")
    files = sorted(p.name for p in tmp_path.iterdir())
    checked = config("--check", env=env)
    assert checked.exit_code == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # no -wal or -shm left by its reads either
    (line,) = checked.stderr.splitlines()
    assert line.startswith(f"the receiver and the worker would refuse to start: {why}")
    assert OTHER_KEY not in checked.output
    assert shown(checked)["PARTNERKIT_VOUCHER_KEY"]["note"] == \
        ("this key" if broken == "another key" else f"key file {str(key_file)!r}") + \
        " cannot be used (see `partnerkit config --check`)"
    assert key_file.exists() == (broken != "missing key file")  # never generated by `config`


def test_a_database_path_under_a_file_is_named_by_check_and_nothing_is_created(tmp_path):
    (tmp_path / "a-file").write_text("x")
    env = clean_env(PARTNERKIT_DB=str(tmp_path / "a-file" / "pk.db"), PARTNERKIT_WEBHOOK_TOKENS="whsec_configured_0001",
                    **CREDENTIALS)
    checked = config("--check", env=env)
    assert checked.exit_code == 1
    assert checked.stderr.splitlines() == [f"the receiver and the worker would refuse to start: cannot open database "
                                           f"{str(tmp_path / 'a-file' / 'pk.db')!r}: {tmp_path / 'a-file'} is a file "
                                           "where a directory is needed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
