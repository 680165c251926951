"""Encryption at rest for voucher codes, PINs, claim URLs and saved webhook tokens.

AES-256-GCM (cryptography's AESGCM) with a random 96-bit nonce per value; a stored value is
`b"v1" + nonce + ciphertext`. Keys are derived with HKDF from one secret: PARTNERKIT_VOUCHER_KEY,
else a key generated once into `config.key_file` (mode 0600) with a warning. A second derived
key makes fingerprints (HMAC-SHA256), so "is this voucher already stored?" is answerable
without decrypting and without keeping a plain hash of a code. Plaintexts are never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from partnerkit.config import Config, ConfigError
from partnerkit.errors import PartnerKitError
from partnerkit.store.vouchers import keyed_values

log = logging.getLogger(__name__)
VERSION = b"v1"
NONCE_BYTES = 12


class DecryptionError(PartnerKitError):
    """A stored value cannot be decrypted with this key (wrong key or damaged data)."""


def _derive(secret: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"partnerkit", info=purpose).derive(secret)


class Cipher:
    """Encrypts and fingerprints secrets under one master key."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ConfigError("PARTNERKIT_VOUCHER_KEY must be at least 16 bytes (e.g. 32 random bytes, base64)")
        self._aead = AESGCM(_derive(secret, b"encrypt"))
        self._mac_key = _derive(secret, b"fingerprint")

    def __repr__(self) -> str:
        return "Cipher(***)"

    def encrypt(self, plaintext: str | None, *, context: bytes = b"") -> bytes | None:
        """Encrypt a text (None stays None); `context` binds it to where it is stored."""
        if plaintext is None:
            return None
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._aead.encrypt(nonce, plaintext.encode("utf-8"), context)

    def decrypt(self, stored: bytes | None, *, context: bytes = b"") -> str | None:
        """Inverse of `encrypt`; raises DecryptionError on a wrong key or damaged value."""
        if stored is None:
            return None
        blob = bytes(stored)
        if not blob.startswith(VERSION):
            raise DecryptionError("stored value has an unknown format")
        nonce, body = blob[2:2 + NONCE_BYTES], blob[2 + NONCE_BYTES:]
        try:
            return self._aead.decrypt(nonce, body, context).decode("utf-8")
        except InvalidTag as exc:
            raise DecryptionError("stored value cannot be decrypted with this key (was PARTNERKIT_VOUCHER_KEY changed?)") from exc

    def fingerprint(self, *parts: str | None) -> str:
        """A keyed, deterministic digest of `parts` (for unique constraints on secrets)."""
        message = "\x1f".join("" if p is None else p for p in parts).encode("utf-8")
        return hmac.new(self._mac_key, message, hashlib.sha256).hexdigest()


def _secret_from_text(text: str) -> bytes:
    """A base64 key is used as bytes; any other passphrase is used as its UTF-8 bytes."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        if len(raw) >= 16 and base64.urlsafe_b64encode(raw).rstrip(b"=") == text.rstrip("=").encode():
            return raw
    except (ValueError, TypeError):
        pass
    return text.encode("utf-8")


def _read_key_file(path: Path) -> bytes:
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 16:
        raise ConfigError(f"the voucher key file {str(path)!r} is empty or damaged; restore it from its backup "
                          "(without it stored vouchers cannot be read)")
    if path.stat().st_mode & 0o077:
        log.warning("the voucher key file %s can be read by other users; run: chmod 600 %s", path, path)
    return text.encode()


def _read_or_create_key_file(path: Path, db_path: Path) -> bytes:
    """Read the key file, or create it atomically with mode 0600 (safe when processes race).

    Never beside a database that already holds values sealed with a key (a restore that missed the
    key file): a new key would leave them unreadable and seal new values under it, so putting the
    old key back later would break those instead.
    """
    try:
        return _read_key_file(path)
    except FileNotFoundError:
        pass
    keyed = keyed_values(Path(db_path))
    if keyed:
        raise ConfigError(f"the voucher key file {str(path)!r} is missing, but {str(db_path)!r} holds {keyed} stored "
                          "voucher(s) or webhook token(s) sealed with it: restore the key file from its backup "
                          "(or set PARTNERKIT_VOUCHER_KEY to that key); a new key would make them unreadable")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new directory: private to the owner
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(base64.urlsafe_b64encode(os.urandom(32)).decode() + "\n")
    try:
        os.link(temp, path)  # fails if another process created it first: then theirs wins
        log.warning("PARTNERKIT_VOUCHER_KEY is not set: generated a voucher key in %s (mode 0600); "
                    "back it up, without it stored vouchers cannot be read", path)
    except FileExistsError:
        pass
    finally:
        os.unlink(temp)
    return _read_key_file(path)


def load_cipher(config: Config) -> Cipher:
    """The Cipher for `config`: PARTNERKIT_VOUCHER_KEY, else the generated key file."""
    if config.voucher_key:
        return Cipher(_secret_from_text(config.voucher_key))
    try:
        text = _read_or_create_key_file(config.key_file, config.db_path).decode()
    except OSError as exc:
        raise ConfigError(f"PARTNERKIT_VOUCHER_KEY is not set and the key file {str(config.key_file)!r} "
                          f"cannot be read or created: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise ConfigError(f"the voucher key file {str(config.key_file)!r} is damaged (not a base64 key); "
                          "restore it from its backup") from None
    return Cipher(_secret_from_text(text))
