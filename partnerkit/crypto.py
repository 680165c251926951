"""Encryption at rest for voucher codes, PINs, claim URLs and saved webhook tokens.

AES-256-GCM (cryptography's AESGCM) with a random 96-bit nonce per value; a stored value is
`b"v1" + nonce + ciphertext`. Keys are derived with HKDF from one secret: PARTNERKIT_VOUCHER_KEY,
else a key generated once into `config.key_file` (mode 0600) with a warning. A second derived
key makes fingerprints (HMAC-SHA256), so "is this voucher already stored?" is answerable
without decrypting and without keeping a plain hash of a code. Plaintexts are never logged.

Rotation: a Cipher also holds the keys a rotation replaced (PARTNERKIT_VOUCHER_KEY_PREVIOUS, or
the key file's lines below the first). New values are sealed and fingerprinted with the current
key only; a stored value opens with whichever key's GCM tag matches, so the stored format is the
same before and after a rotation. `partnerkit keys` (partnerkit.rotation) moves the stored values
to the current key.
"""

from __future__ import annotations

import base64
import errno
import glob
import hashlib
import hmac
import logging
import os
import re
import secrets
from pathlib import Path
from typing import Callable, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from partnerkit.config import Config, ConfigError
from partnerkit.errors import PartnerKitError
from partnerkit.files import sync_directory, warn_if_readable_by_others
from partnerkit.store import webhook_tokens
from partnerkit.store.copies import hold, remove_unless_held
from partnerkit.store.vouchers import KeyedSample, keyed_samples, keyed_values

log = logging.getLogger(__name__)
VERSION = b"v1"
NONCE_BYTES = 12
# How often a running receiver re-reads the accepted webhook tokens and follows the key file (`KeyFollower`,
# at receiver.state.Receiver.tokens): tokens saved by `webhooks register`, and a rotated key file, are picked up
# within this time; `keys rewrap` and `keys retire` wait it out (partnerkit.rotation.KEY_PICKUP_S).
TOKEN_REFRESH_S = 5.0


class DecryptionError(PartnerKitError):
    """A stored value cannot be decrypted with this key (wrong key or damaged data)."""


def _derive(secret: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"partnerkit", info=purpose).derive(secret)


class _Key:
    """The two keys HKDF derives from one secret: encryption and fingerprints."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ConfigError("PARTNERKIT_VOUCHER_KEY must be at least 16 bytes (e.g. 32 random bytes, base64)")
        self.aead = AESGCM(_derive(secret, b"encrypt"))
        self.mac_key = _derive(secret, b"fingerprint")

    def fingerprint(self, message: bytes) -> str:
        return hmac.new(self.mac_key, message, hashlib.sha256).hexdigest()


class Cipher:
    """Encrypts and fingerprints secrets under the current key; opens values sealed under previous ones.

    `source` names where the keys came from (PARTNERKIT_VOUCHER_KEY, or the key file's path) for
    messages; never the keys."""

    def __init__(self, secret: bytes, previous: Sequence[bytes] = (), *, source: str = "the voucher key") -> None:
        self._keys = [_Key(secret)] + [_Key(old) for old in previous]
        self.source = source

    def __repr__(self) -> str:
        return f"Cipher(***, previous={len(self._keys) - 1})"

    @property
    def previous_keys(self) -> int:
        """How many previous keys this cipher can still open values with."""
        return len(self._keys) - 1

    def encrypt(self, plaintext: str | None, *, context: bytes = b"") -> bytes | None:
        """Encrypt a text (None stays None) with the current key; `context` binds it to where it is stored."""
        if plaintext is None:
            return None
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._keys[0].aead.encrypt(nonce, plaintext.encode("utf-8"), context)

    def open(self, stored: bytes | None, *, context: bytes = b"") -> tuple[str, int] | None:
        """(plaintext, which key opened it: 0 current, n the n-th previous), or None if no key opens it."""
        blob = bytes(stored or b"")
        if not blob.startswith(VERSION):
            return None
        nonce, body = blob[2:2 + NONCE_BYTES], blob[2 + NONCE_BYTES:]
        for index, key in enumerate(self._keys):
            try:  # the GCM tag decides: a wrong key is InvalidTag, never a wrong plaintext
                return key.aead.decrypt(nonce, body, context).decode("utf-8"), index
            except InvalidTag:
                continue
        return None

    def decrypt(self, stored: bytes | None, *, context: bytes = b"") -> str | None:
        """Inverse of `encrypt` under any of the keys; raises DecryptionError when none opens it."""
        if stored is None:
            return None
        if not bytes(stored).startswith(VERSION):
            raise DecryptionError("stored value has an unknown format")
        opened = self.open(stored, context=context)
        if opened is None:
            raise DecryptionError(f"stored value cannot be decrypted with this key (was {self.source} changed?)")
        return opened[0]

    def fingerprint(self, *parts: str | None) -> str:
        """A keyed, deterministic digest of `parts` (for unique constraints on secrets), current key."""
        return self.fingerprints(*parts)[0]

    def fingerprints(self, *parts: str | None) -> tuple[str, ...]:
        """The fingerprint of `parts` under every key, current first (dedup across a rotation)."""
        message = "\x1f".join("" if p is None else p for p in parts).encode("utf-8")
        return tuple(key.fingerprint(message) for key in self._keys)


def token_context(webhook_id: str) -> bytes:
    """What a saved webhook token's ciphertext is bound to: its purpose and its webhook id."""
    return b"webhook_token:" + webhook_id.encode()


def _base64_key(text: str) -> bytes | None:
    """The bytes of a URL-safe base64 key of 16 bytes or more (what `new_key_text` makes), or None."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        if len(raw) >= 16 and base64.urlsafe_b64encode(raw).rstrip(b"=") == text.rstrip("=").encode():
            return raw
    except (ValueError, TypeError):
        pass
    return None


def _secret_from_text(text: str) -> bytes:
    """A base64 key is used as bytes; any other passphrase is used as its UTF-8 bytes (`warn_if_passphrase`)."""
    raw = _base64_key(text)
    return text.encode("utf-8") if raw is None else raw


def _random_looking(key: str) -> bool:
    """Whether `key` reads as a random key: URL-safe base64 as the key file holds it, or standard base64 (what
    `openssl rand -base64 32` prints, used as text: its 44 characters carry the same 32 random bytes), of at
    least 16 bytes. Hex is URL-safe base64 as well."""
    if _base64_key(key) is not None:
        return True
    try:
        return len(base64.b64decode(key + "=" * (-len(key) % 4), validate=True)) >= 16
    except ValueError:  # binascii.Error
        return False


def warn_if_passphrase(key: str, source: str) -> None:
    """A WARNING when the current voucher key (from `source`) is a passphrase rather than a base64 random key.

    `_secret_from_text` hands a passphrase to HKDF as it is, without stretching (changing that would leave
    every value sealed with it unreadable): whoever holds a copy of the database can try guesses offline, and
    the GCM tag confirms the right one. `partnerkit keys rotate` makes a random key, and the rotation moves
    the stored values to it (README, "Rotate the voucher key")."""
    if not _random_looking(key):
        log.warning("%s is a passphrase, not a random key: what it seals can be guessed offline from a copy of the "
                    "database; make a random key with `partnerkit keys rotate` and move to it (README, \"Rotate the "
                    "voucher key\")", source)


def new_key_text() -> str:
    """A new random 32-byte key as the key file holds it (URL-safe base64)."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def read_key_file(path: Path) -> list[str]:
    """The keys in a key file, current first (one per line; a one-line file has no previous keys)."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="ascii").splitlines()]
    except UnicodeDecodeError:
        raise ConfigError(f"the voucher key file {str(path)!r} is damaged (not a base64 key); "
                          "restore it from its backup") from None
    keys = [line for line in lines if line]
    if not keys or any(len(key) < 16 for key in keys):
        raise ConfigError(f"the voucher key file {str(path)!r} is empty or damaged; restore it from its backup "
                          "(without it stored vouchers cannot be read)")
    warn_if_readable_by_others(path, "the voucher key file", log)
    return keys


_TEMP_TAIL = re.compile(r"\d+\.[0-9a-f]{8}")  # `.NAME.PID.XXXXXXXX`: what _private_temp names


def _private_temp(path: Path, keys: Sequence[str]) -> tuple[Path, int]:
    """A new 0600 file beside `path` holding `keys`, one per line, flushed to disk; and the descriptor that
    holds its lock (partnerkit.store.copies.hold, as a backup holds its copy) from the moment it has a name:
    close it once the file is renamed, linked or removed. A killed write's copy is then told from a running
    one's (`_remove_killed_temps`). A cleanup that took the file in the instant before the lock leaves its
    name gone: made again."""
    for _ in range(5):  # bounded: it takes a cleanup in that instant each time to go round again
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        lock = hold(temp, create=True)
        try:
            fd = os.open(temp, os.O_WRONLY)
        except FileNotFoundError:
            os.close(lock)
            continue
        try:
            if os.fstat(fd).st_ino != os.fstat(lock).st_ino:
                os.close(fd)
                os.close(lock)
                continue
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write("".join(f"{key}\n" for key in keys))
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            temp.unlink(missing_ok=True)
            os.close(lock)
            raise
        return temp, lock
    raise OSError(errno.EAGAIN, "another process removed each temp file made for it", str(path))


def _remove_killed_temps(path: Path) -> None:
    """Remove the temp copies of the key file beside it (`.NAME.PID.XXXXXXXX`) that writes killed before their
    rename or link left: each holds keys, and a secret must not linger in a second file. One a running write
    holds (`_private_temp`) is left alone. One this user cannot remove is named in a WARNING, never a failure."""
    prefix = f".{path.name}."
    for leftover in sorted(path.parent.glob(glob.escape(prefix) + "*")):
        if not _TEMP_TAIL.fullmatch(leftover.name[len(prefix):]):
            continue
        try:
            removed = remove_unless_held(leftover, lambda copy: copy.unlink(missing_ok=True))
        except OSError as exc:
            log.warning("%s, a copy of the voucher key file that a killed key write left, could not be removed "
                        "(%s): remove it, it holds a key", leftover, exc.strerror or exc)
            continue
        if removed:
            log.warning("removed %s, a copy of the voucher key file that a killed key write left", leftover)


def _keep_owner(temp: Path, path: Path) -> None:
    """Give `temp` the owner and group of the file it is about to replace.

    `keys rotate` run as root (maintenance from a root shell) would otherwise leave a root-owned key
    file that the services, running as their own user, cannot read: the receiver would then answer
    503 to every delivery once `keys rewrap` sealed its saved token with the new key. Root can chown;
    anyone else who cannot (the file is another user's) is refused before anything is replaced."""
    try:
        old = path.stat()
    except FileNotFoundError:
        return
    new = temp.stat()
    if (old.st_uid, old.st_gid) == (new.st_uid, new.st_gid):
        return
    try:
        os.chown(temp, old.st_uid, old.st_gid)  # the mode stays 0600
    except PermissionError:
        raise PartnerKitError(f"the voucher key file {str(path)!r} belongs to uid {old.st_uid} gid {old.st_gid}; "
                              "a replacement written by this user could not keep that owner: run the command as "
                              "the file's owner (e.g. sudo -u partnerkit ...)") from None


def write_key_file(path: Path, keys: Sequence[str]) -> None:
    """Replace the key file with `keys` (current first) atomically: a 0600 temp file, fsynced, given the
    replaced file's owner and group, renamed.

    Killed at any point, the file holds either the old keys or the new ones, never a part. A write killed
    before its rename leaves its temp file, a copy of the keys: the next write removes it first
    (`_remove_killed_temps`)."""
    _remove_killed_temps(path)
    temp, lock = _private_temp(path, keys)
    try:
        _keep_owner(temp, path)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    finally:
        os.close(lock)
    sync_directory(path.parent)  # the rename itself survives a power cut


def _read_or_create_key_file(path: Path, db_path: Path) -> list[str]:
    """Read the key file, or create it atomically with mode 0600 (safe when processes race).

    Never beside a database that already holds values sealed with a key (a restore that missed the
    key file): a new key would leave them unreadable and seal new values under it, so putting the
    old key back later would break those instead.
    """
    try:
        return read_key_file(path)
    except FileNotFoundError:
        pass
    keyed = keyed_values(Path(db_path))
    if keyed:
        raise ConfigError(f"the voucher key file {str(path)!r} is missing, but {str(db_path)!r} holds {keyed} stored "
                          "voucher(s) or webhook token(s) sealed with it: restore the key file from its backup "
                          "(or set PARTNERKIT_VOUCHER_KEY to that key); a new key would make them unreadable")
    from partnerkit.files import make_private_dirs

    make_private_dirs(path.parent)  # a new directory: private to the owner, at every level
    _remove_killed_temps(path)
    temp, lock = _private_temp(path, [new_key_text()])
    try:
        os.link(temp, path)  # fails if another process created it first: then theirs wins
        log.warning("PARTNERKIT_VOUCHER_KEY is not set: generated a voucher key in %s (mode 0600); "
                    "back it up, without it stored vouchers cannot be read", path)
    except FileExistsError:
        pass
    finally:
        os.unlink(temp)
        os.close(lock)
    return read_key_file(path)


def key_file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a replaced key file from the one read before (inode, mtime, size); None when there is
    none. `keys rotate` and `keys retire` replace it by a rename, so its inode changes."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def cipher_from_keys(keys: Sequence[str], *, source: str = "the voucher key") -> Cipher:
    """A Cipher from key texts as configured or in the key file, current first."""
    return Cipher(_secret_from_text(keys[0]), [_secret_from_text(k) for k in keys[1:]], source=source)


def key_source(config: Config) -> str:
    """Where `config`'s voucher keys come from, for messages (never the keys)."""
    return "PARTNERKIT_VOUCHER_KEY" if config.voucher_key else f"the voucher key file {str(config.key_file)!r}"


def load_cipher(config: Config, *, check: bool = True,
                ignore: Callable[[KeyedSample], bool] | None = None) -> Cipher:
    """The Cipher for `config`: PARTNERKIT_VOUCHER_KEY (and _PREVIOUS), else the generated key file's lines.

    With `check` (every caller that seals or reveals), a key that opens none of the values already
    stored (but those `ignore` picks) is refused (`refuse_a_stranger`); `partnerkit keys status` alone
    looks without it, to say what the key opens."""
    source = key_source(config)
    if config.voucher_key:
        keys = [config.voucher_key, *config.voucher_key_previous]
    else:
        try:
            keys = _read_or_create_key_file(config.key_file, config.db_path)
        except OSError as exc:
            raise ConfigError(f"PARTNERKIT_VOUCHER_KEY is not set and the key file {str(config.key_file)!r} "
                              f"cannot be read or created: {exc.strerror}") from exc
    warn_if_passphrase(keys[0], "PARTNERKIT_VOUCHER_KEY" if config.voucher_key else f"the first key of {source}")
    cipher = cipher_from_keys(keys, source=source)
    if check:
        refuse_a_stranger(config, cipher, ignore=ignore)
    return cipher


class KeyFollower:
    """The Cipher of `config`, re-read whenever `partnerkit keys rotate` or `keys retire` replace the
    generated key file: the one place that says which key seals now.

    Whatever seals a value some time after it read the key follows the file with one: the receiver (its
    webhook bodies), a voucher fetch and `orders create` (the vouchers of a provider's answer that can take
    up to the HTTP timeout), `webhooks register` and `webhooks token set` (a token the provider returns
    once, or a person types). Made before the provider call or the wait, it opens the key then: a key file
    that cannot be read, or that opens none of the stored values, is refused before anything is sent.
    Sealing later with the key read then would store, after `keys rotate; keys rewrap; keys retire` ran
    beside it, values that no key in the file opens any more.

    `current()` costs one stat. Call it at sealing time, inside the transaction that stores what it seals,
    once that holds the write lock: a command waits up to 30 s for another process's lock, the worker 15 s,
    longer than `keys retire` waits for running processes (`rotation.KEY_PICKUP_S`), so a value sealed
    before that wait could be committed after the retire's check. Where a store function opens the
    transaction itself, seal right before it, and seal again under the write lock if `current()` moved on
    meanwhile (`receiver.tokens.save_sealed`). A key from PARTNERKIT_VOUCHER_KEY changes only with a
    restart. A file gone or unreadable keeps the keys read before (said once per version of the file, and
    tried again at the next call: a `chown` changes neither its inode, mtime nor size)."""

    def __init__(self, config: Config, cipher: Cipher | None = None) -> None:
        self.config = config
        # The file's version before reading it: one replaced in between is read again at the first `current()`.
        stamp = None if config.voucher_key else key_file_stamp(config.key_file)
        self.cipher = cipher or load_cipher(config)
        if stamp is None and not config.voucher_key:  # there was none: `load_cipher` generated it
            stamp = key_file_stamp(config.key_file)
        self._stamp = stamp
        self._failed: tuple[int, int, int] | None = None

    def current(self, *, ignore: Callable[[KeyedSample], bool] | None = None) -> Cipher:
        """The cipher to seal with now. `ignore`: stored values this process sealed itself with the keys it
        read before, left out of the check that a changed file's key is this database's (`refuse_a_stranger`):
        a retired key's value opens with no key of the new file, which says nothing of that file."""
        if self.config.voucher_key:
            return self.cipher
        stamp = key_file_stamp(self.config.key_file)
        if stamp is None or stamp == self._stamp:
            return self.cipher
        try:
            self.cipher = load_cipher(self.config, ignore=ignore)
        except (ConfigError, OSError) as exc:
            if stamp != self._failed:
                self._failed = stamp
                log.warning("the voucher key file changed and cannot be read; sealing with the keys read before",
                            extra={"error": str(exc)[:200]})
            return self.cipher
        self._stamp, self._failed = stamp, None
        log.info("the voucher key file changed: sealing with its first key from now on",
                 extra={"previous_keys": self.cipher.previous_keys})
        return self.cipher


def check_voucher_key(config: Config) -> None:
    """At a service's start (the worker): refuse, as `load_cipher` would at its first seal, a configured
    key or key file that cannot be read or opens none of the stored values. Generates nothing: without
    a key file, the first seal makes one (and only beside a database with nothing sealed)."""
    if config.voucher_key or config.key_file.exists():
        load_cipher(config)


def refuse_a_stranger(config: Config, cipher: Cipher, *,
                      ignore: Callable[[KeyedSample], bool] | None = None) -> None:
    """ConfigError when values sealed with the voucher key are stored and `cipher` opens none of them.

    A mistyped PARTNERKIT_VOUCHER_KEY (or another database's key file) would otherwise be taken as a
    new key: vouchers and tokens sealed with it could not be read once the right key is back, and
    `orders sync` would not fetch them again (their count is complete). It is the same rule as never
    generating a key beside stored values (`_read_or_create_key_file`). Cheap: a few stored values are
    tried (`keyed_samples`: the oldest and newest voucher and saved token), not all; opening one is
    enough, so a database where some values are unreadable, or a rotation's new key beside the old
    ones, passes. Samples `ignore` picks are left out (`KeyFollower.current`).
    """
    from partnerkit.rotation import opens_any  # rotation builds on this module

    samples = keyed_samples(Path(config.db_path))
    if samples and ignore is not None:
        samples = [sample for sample in samples if not ignore(sample)]
    if not samples or opens_any(cipher, samples):
        return
    if config.voucher_key:
        hint = ("set it back to the key they were sealed with (after `keys rotate`, that key goes in "
                "PARTNERKIT_VOUCHER_KEY_PREVIOUS)")
    else:
        hint = "restore this database's key file from its backup (or set PARTNERKIT_VOUCHER_KEY to its key)"
    raise ConfigError(f"{cipher.source} opens none of the vouchers and webhook tokens stored in "
                      f"{str(config.db_path)!r}, so it is not the key they were sealed with (what it sealed would be "
                      f"unreadable once that key is back); {hint}. Nothing was sealed (`partnerkit keys status` "
                      "shows what it opens)")


def unreadable_tokens(config: Config, db) -> str | None:
    """Why the webhook tokens saved in `db` cannot be opened with the voucher key as this process reads
    it, or None (they can, or none is saved). A receiver running as the same user answers 503 to every
    delivery meanwhile (`partnerkit status` asks: the status timer runs as the services' user). Cheap:
    the key file and a few tokens; generates no key (beside saved tokens a missing file is refused)."""
    sealed = webhook_tokens.sealed(db)
    if not sealed:
        return None
    try:
        cipher = load_cipher(config, check=False)
        for webhook_id, value in sealed:
            cipher.decrypt(value, context=token_context(webhook_id))
    except (ConfigError, DecryptionError) as exc:
        return str(exc)
    return None
