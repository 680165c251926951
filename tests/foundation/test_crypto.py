"""Encryption at rest: the generated key file and its directory are private whatever the umask."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone

import pytest

from partnerkit.config import Config, ConfigError
from partnerkit.crypto import (Cipher, DecryptionError, load_cipher, new_key_text, read_key_file, token_context,
                               write_key_file)
from partnerkit.store import open_db, transaction, vouchers, webhook_tokens
from partnerkit.store.vouchers import SealedVoucher


@pytest.fixture
def zero_umask():
    old = os.umask(0)
    yield
    os.umask(old)


def test_generated_key_file_and_new_directory_are_private_under_umask_000(tmp_path, zero_umask):
    config = Config(db_path=tmp_path / "new" / "dir" / "pk.db")
    cipher = load_cipher(config)
    assert config.key_file.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "new" / "dir").stat().st_mode & 0o777 == 0o700
    assert load_cipher(config).decrypt(cipher.encrypt("4111-1111", context=b"c"), context=b"c") == "4111-1111"


def test_ciphertext_is_bound_to_its_context_and_key(tmp_path):
    one = load_cipher(Config(db_path=tmp_path / "a.db"))
    other = load_cipher(Config(db_path=tmp_path / "b.db"))
    sealed = one.encrypt("CODE-1234-5678", context=b"order:1:card_number")
    assert b"CODE-1234-5678" not in sealed
    with pytest.raises(DecryptionError):
        one.decrypt(sealed, context=b"order:2:card_number")
    with pytest.raises(DecryptionError):
        other.decrypt(sealed, context=b"order:1:card_number")


@pytest.mark.parametrize("content, message", [
    (b"", "is empty or damaged"),
    (b"short\n", "is empty or damaged"),
    (b"\xff\xfe not ascii at all, long enough\n", "is damaged"),
])
def test_a_damaged_key_file_is_a_config_error(tmp_path, content, message):
    config = Config(db_path=tmp_path / "pk.db")
    config.key_file.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_cipher(config)


def test_a_key_file_readable_by_others_is_warned_about(tmp_path, caplog):
    config = Config(db_path=tmp_path / "pk.db")
    load_cipher(config)
    config.key_file.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="partnerkit.crypto"):
        load_cipher(config)
    assert f"can be read by other users; run: chmod 600 {config.key_file}" in caplog.text


# --- a passphrase voucher key: kept as it is (what it sealed stays readable), but named at start ---

# Sealed with the passphrase below (context b"pin") by the release before the warning: the derivation must not
# change, or every value a partner sealed under a passphrase would become unreadable.
PASSPHRASE = "a human passphrase, never stretched"
SEALED_UNDER_PASSPHRASE = bytes.fromhex("76317960281cb97de6a67302caf768122d6fcb1382cf06d0abb1d486a5cfd8134aabaa16e512fd")


@pytest.mark.parametrize("key", ["aaaaaaaaaaaaaaaa", PASSPHRASE, "correct horse battery staple"])
def test_a_passphrase_voucher_key_is_warned_about_and_still_opens_what_it_sealed(tmp_path, caplog, key):
    config = Config(db_path=tmp_path / "pk.db", voucher_key=key)
    with caplog.at_level(logging.WARNING, logger="partnerkit.crypto"):
        cipher = load_cipher(config)
    assert caplog.messages == ["PARTNERKIT_VOUCHER_KEY is a passphrase, not a random key: what it seals can be guessed "
                               "offline from a copy of the database; make a random key with `partnerkit keys rotate` "
                               "and move to it (README, \"Rotate the voucher key\")"]
    assert key not in caplog.text
    if key == PASSPHRASE:
        assert cipher.decrypt(SEALED_UNDER_PASSPHRASE, context=b"pin") == "CODE-1234"


@pytest.mark.parametrize("key", [
    "BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSY=",  # new_key_text()'s shape, fixed (xdist needs one test id)
    "++//++//++//++//++//++//++//++//++//++//++8=",  # `openssl rand -base64 32`: standard base64, used as text
    "0123456789abcdef" * 4,  # `openssl rand -hex 32`
])
def test_a_random_voucher_key_is_not_warned_about(tmp_path, caplog, key):
    with caplog.at_level(logging.WARNING, logger="partnerkit.crypto"):
        load_cipher(Config(db_path=tmp_path / "pk.db", voucher_key=key))
    assert caplog.messages == []


def test_a_passphrase_first_in_the_key_file_is_warned_about(tmp_path, caplog):
    """A key file written by hand; a passphrase below the first line is a previous key, on its way out."""
    config = Config(db_path=tmp_path / "pk.db")
    write_key_file(config.key_file, ["a-hand-written-passphrase", new_key_text()])
    with caplog.at_level(logging.WARNING, logger="partnerkit.crypto"):
        load_cipher(config)
    assert caplog.messages == [f"the first key of the voucher key file {str(config.key_file)!r} is a passphrase, not a "
                               "random key: what it seals can be guessed offline from a copy of the database; make a "
                               "random key with `partnerkit keys rotate` and move to it (README, \"Rotate the voucher "
                               "key\")"]
    caplog.clear()
    write_key_file(config.key_file, [new_key_text(), "a-hand-written-passphrase"])
    with caplog.at_level(logging.WARNING, logger="partnerkit.crypto"):
        load_cipher(config)
    assert caplog.messages == []


@pytest.mark.parametrize("sealed", ["voucher", "webhook token"])
def test_no_new_key_beside_a_database_that_holds_values_sealed_with_the_old_one(tmp_path, sealed):
    """A restore that missed the key file: generating a key would leave the stored values unreadable
    (and seal new ones under it, so putting the old key back later would break those instead)."""
    config = Config(db_path=tmp_path / "pk.db")
    cipher = load_cipher(config)
    db = open_db(config.db_path)
    now = datetime(2025, 3, 14, tzinfo=timezone.utc)
    if sealed == "voucher":
        with transaction(db) as conn:
            vouchers.add(conn, 5001, [SealedVoucher(cipher.fingerprint("CODE-1"), cipher.encrypt(
                "CODE-1", context=b"voucher:5001:card_number"), None, None, None, None)], now=now)
    else:
        webhook_tokens.save(db, "7", cipher.encrypt("token-of-webhook-7", context=token_context("7")), now=now)
    [key] = read_key_file(config.key_file)
    config.key_file.unlink()
    with pytest.raises(ConfigError, match=r"voucher key file .* is missing, but .* holds 1 stored voucher\(s\) or "
                                          r"webhook token\(s\) sealed with it: restore the key file"):
        load_cipher(config)
    assert not config.key_file.exists()
    # Nor is one given in the environment taken for it (finding 1): only the key they were sealed with.
    with pytest.raises(ConfigError, match=r"^PARTNERKIT_VOUCHER_KEY opens none of the vouchers and webhook tokens "
                                          r"stored in .*PARTNERKIT_VOUCHER_KEY_PREVIOUS"):
        load_cipher(Config(db_path=config.db_path, voucher_key="given-in-the-environment-instead"))
    assert load_cipher(Config(db_path=config.db_path, voucher_key=key)) is not None
    assert not config.key_file.exists()


def test_a_key_is_still_generated_beside_a_database_with_nothing_sealed(tmp_path):
    config = Config(db_path=tmp_path / "pk.db")
    open_db(config.db_path)
    load_cipher(config)
    assert config.key_file.exists()


def test_a_cipher_opens_values_sealed_under_a_previous_key_and_seals_with_the_current_one():
    old, new = Cipher(b"old-key-of-16-bytes+"), Cipher(b"new-key-of-16-bytes+")
    both = Cipher(b"new-key-of-16-bytes+", [b"old-key-of-16-bytes+"])
    sealed = old.encrypt("CODE-1", context=b"c")
    assert both.open(sealed, context=b"c") == ("CODE-1", 1)
    assert both.decrypt(sealed, context=b"c") == "CODE-1"
    fresh = both.encrypt("CODE-2", context=b"c")
    assert new.decrypt(fresh, context=b"c") == "CODE-2" and both.open(fresh, context=b"c") == ("CODE-2", 0)
    with pytest.raises(DecryptionError):
        old.decrypt(fresh, context=b"c")
    with pytest.raises(DecryptionError):
        both.decrypt(Cipher(b"a-third-key-16-bytes").encrypt("x", context=b"c"), context=b"c")
    assert both.fingerprints("1", "CODE-1") == (new.fingerprint("1", "CODE-1"), old.fingerprint("1", "CODE-1"))
    assert both.fingerprint("1", "CODE-1") == new.fingerprint("1", "CODE-1")
    assert "key" not in repr(both) and both.previous_keys == 1


def test_a_key_file_of_several_lines_is_current_first_then_previous(tmp_path):
    config = Config(db_path=tmp_path / "pk.db")
    old = load_cipher(config)
    [old_key] = read_key_file(config.key_file)
    sealed = old.encrypt("CODE-1", context=b"c")
    write_key_file(config.key_file, ["bmV3LWtleS1uZXcta2V5LW5ldy1rZXktbmV3LWtleSE", old_key])
    assert config.key_file.stat().st_mode & 0o777 == 0o600
    assert config.key_file.read_text() == f"bmV3LWtleS1uZXcta2V5LW5ldy1rZXktbmV3LWtleSE\n{old_key}\n"
    rotated = load_cipher(config)
    assert rotated.open(sealed, context=b"c") == ("CODE-1", 1)
    assert rotated.open(rotated.encrypt("CODE-2", context=b"c"), context=b"c") == ("CODE-2", 0)
    with pytest.raises(DecryptionError):
        old.decrypt(rotated.encrypt("CODE-2", context=b"c"), context=b"c")
    config.key_file.write_text(f"{old_key}\nshort\n")
    with pytest.raises(ConfigError, match="is empty or damaged"):
        load_cipher(config)


# `keys rotate` killed between writing its temp key file and the rename, as far as the disk can tell.
KILLED_KEY_WRITE = """
import os, signal, sys
from pathlib import Path
from partnerkit.crypto import _private_temp
temp, lock = _private_temp(Path(sys.argv[1]), ["a2lsbGVkLXJvdGF0aW9uLW5ldy1rZXktMzItYnl0ZXMh", "b2xkLWtleQ"])
print(temp, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""

# A key write under way in another process (it holds its temp file until it renames it).
RUNNING_KEY_WRITE = """
import sys
from pathlib import Path
from partnerkit.crypto import _private_temp
temp, lock = _private_temp(Path(sys.argv[1]), ["cnVubmluZy13cml0ZS1uZXcta2V5LTMyLWJ5dGVzISE"])
print(temp, flush=True)
sys.stdin.read()
"""


def test_the_next_key_file_write_removes_the_key_copy_a_killed_one_left_but_not_one_being_written(tmp_path, caplog):
    import subprocess
    import sys
    from pathlib import Path

    config = Config(db_path=tmp_path / "pk.db")
    load_cipher(config)
    [key] = read_key_file(config.key_file)
    killed = subprocess.run([sys.executable, "-c", KILLED_KEY_WRITE, str(config.key_file)], capture_output=True,
                            text=True, timeout=60)
    assert killed.returncode == -9
    left = Path(killed.stdout.strip())
    assert left.parent == config.key_file.parent and "a2lsbGVk" in left.read_text()  # a second copy of a key
    running = subprocess.Popen([sys.executable, "-c", RUNNING_KEY_WRITE, str(config.key_file)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        held = Path(running.stdout.readline().strip())
        assert held.exists()
        with caplog.at_level(logging.WARNING, logger="partnerkit.crypto"):
            write_key_file(config.key_file, ["bmV4dC1rZXktYWZ0ZXItdGhlLWtpbGxlZC1vbmUtMzI", key])  # the next rotate
        assert not left.exists(), "a copy of a key lingers beside the key file"
        assert held.exists(), "the temp file a running key write holds was removed"
        assert f"removed {left}, a copy of the voucher key file that a killed key write left" in caplog.text
        assert "a2lsbGVk" not in caplog.text and "bmV4dC1r" not in caplog.text  # names, never keys
    finally:
        running.stdin.close()
        running.wait(timeout=30)
    assert read_key_file(config.key_file) == ["bmV4dC1rZXktYWZ0ZXItdGhlLWtpbGxlZC1vbmUtMzI", key]
    write_key_file(config.key_file, [key])  # the other writer ended without its rename: now a leftover too
    assert sorted(p.name for p in config.key_file.parent.iterdir() if p.name.startswith(f".{config.key_file.name}")) == []
