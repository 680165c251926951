"""What the receiver's views share: configuration, per-thread connections, tokens, metrics."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from typing import Callable

from partnerkit.config import Config, WebhookToken
from partnerkit.crypto import Cipher, KeyFollower
from partnerkit.errors import PartnerKitError
from partnerkit.store import Database
from partnerkit.store.db import connect

from receiver.metrics import Metrics
from receiver.tokens import accepted_tokens

# The provider may give up after 5 s (docs/receiver.md): a locked database must become a 503
# well before that, so the provider retries, rather than a timeout.
RECEIVER_BUSY_TIMEOUT_MS = 2000
TOKEN_REFRESH_S = 5.0  # tokens saved by `webhooks register`, and a rotated key file, are picked up within this time
TOKEN_RETRY_S = 0.2    # ... or at once on a failed signature, at most this often
# WAL checkpoints copy the log back into the database file and fsync both: tens of ms on a
# real disk. SQLite runs them inside whichever commit crosses `wal_autocheckpoint` pages, i.e.
# inside a webhook request. The receiver's request connections raise that threshold to a
# backstop, and a background thread per worker process checkpoints (PASSIVE: it never waits for
# or blocks a writer) every CHECKPOINT_INTERVAL_S, off the request path.
CHECKPOINT_INTERVAL_S = 0.2
WAL_BACKSTOP_PAGES = 4000  # ~16 MB with 4 KiB pages: a request checkpoints only if the thread falls behind
# A checkpoint that keeps failing (a read-only database) fails on every pass, five times a second: it is
# logged once, then again only when the error changes or after this long, and once when it works again.
CHECKPOINT_FAILURE_REPEAT_S = 300.0

log = logging.getLogger(__name__)


class Checkpointer:
    """A daemon thread that checkpoints the WAL (PASSIVE) every `interval_s` on its own connection."""

    def __init__(self, db_path, *, interval_s: float = CHECKPOINT_INTERVAL_S,
                 failure_repeat_s: float = CHECKPOINT_FAILURE_REPEAT_S) -> None:
        self.db_path = db_path
        self.interval_s = interval_s
        self.failure_repeat_s = failure_repeat_s
        self._stop = threading.Event()
        self._conn: sqlite3.Connection | None = None
        self.last: tuple[int, int, int] | None = None  # the latest (busy, log frames, checkpointed)
        self.failing: str | None = None  # the error of the failing passes since the last good one
        self.failed_passes = 0  # passes failed since the last good one
        self._failure_logged_at = float("-inf")
        self._thread = threading.Thread(target=self._run, name="partnerkit-wal-checkpoint", daemon=True)

    def start(self) -> "Checkpointer":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: (busy, frames in the WAL, frames checkpointed)."""
        if self._conn is None:
            self._conn = connect(self.db_path, busy_timeout_ms=RECEIVER_BUSY_TIMEOUT_MS).conn
        self.last = tuple(self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone())  # type: ignore[assignment]
        return self.last  # type: ignore[return-value]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.checkpoint()
            except Exception as exc:  # keep going: the request connections' backstop still bounds the WAL
                self._failed(str(exc)[:200])
                self._close()
            else:
                self._recovered()
        self._close()

    def _failed(self, error: str) -> None:
        """Log a failing pass when the failure is new, its error changed, or it was last logged long ago."""
        self.failed_passes += 1
        now = time.monotonic()
        if error == self.failing and now - self._failure_logged_at < self.failure_repeat_s:
            return
        log.warning("WAL checkpoint failed" if error != self.failing else "WAL checkpoint still failing",
                    extra={"error": error, "failed_passes": self.failed_passes,
                           "logged_again_after_s": self.failure_repeat_s})
        self.failing, self._failure_logged_at = error, now

    def _recovered(self) -> None:
        """After failing passes, say once that the checkpoint works again."""
        if self.failing is None:
            return
        log.info("WAL checkpoint works again", extra={"failed_passes": self.failed_passes})
        self.failing, self.failed_passes, self._failure_logged_at = None, 0, float("-inf")

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


class Receiver:
    """One per app: opens a connection per thread (and per process after a fork)."""

    def __init__(self, config: Config, cipher: Cipher, metrics: Metrics, busy_timeout_ms: int, *,
                 on_tokens: Callable[..., None] = lambda *tokens: None) -> None:
        self.config = config
        self._keys = KeyFollower(config, cipher)
        self.metrics = metrics
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._tokens: tuple[WebhookToken, ...] = ()
        self._tokens_at = float("-inf")
        self._tokens_lock = threading.Lock()
        self._on_tokens = on_tokens  # e.g. the log redactor learns tokens saved at run time
        self._token_error: str | None = None  # why the accepted tokens cannot be read now (logged once)
        self._checkpointer: Checkpointer | None = None
        self._checkpointer_pid: int | None = None
        self._checkpointer_lock = threading.Lock()

    def db(self) -> Database:
        """This thread's connection, opened on first use (and this process's checkpoint thread)."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            db = connect(self.config.db_path, busy_timeout_ms=self.busy_timeout_ms)
            db.conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_BACKSTOP_PAGES}")
            self._ensure_checkpointer()
            local.db, local.writer = db, None
            local.pid = os.getpid()
        return local.db

    def writer(self) -> Database:
        """This thread's connection for the webhook's write transaction: its BEGIN waits for the other
        workers' commits in short steps instead of SQLite's 1, 2, 5 ms sleeps (store.db._begin_immediate).
        Reads (tokens, metrics, readiness) use `db()`, which keeps SQLite's busy handler."""
        self.db()
        local = self._local
        if local.writer is None:
            writer = connect(self.config.db_path, busy_timeout_ms=self.busy_timeout_ms, short_lock_waits=True)
            writer.conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_BACKSTOP_PAGES}")
            local.writer = writer
        return local.writer

    def reopen_later(self) -> None:
        """Drop this thread's connections after a failed write, so that the next request opens new ones.

        A connection SQLite opened read-only (the file could not be written at that moment) stays so for
        its life, and with it every delivery would be a 503 after the disk came back. Opening again costs
        a millisecond, only on a request that failed anyway."""
        local = self._local
        for name in ("db", "writer"):
            db = getattr(local, name, None)
            if db is not None:
                try:
                    db.conn.close()
                except sqlite3.Error:
                    pass
        local.db = local.writer = None
        local.pid = None

    def _ensure_checkpointer(self) -> None:
        """Start the checkpoint thread of this process (threads do not survive a fork)."""
        with self._checkpointer_lock:
            if self._checkpointer_pid != os.getpid() or self._checkpointer is None or not self._checkpointer.alive():
                self._checkpointer = Checkpointer(self.config.db_path).start()
                self._checkpointer_pid = os.getpid()

    @property
    def checkpointer(self) -> Checkpointer | None:
        """This process's checkpoint thread, once a connection was opened."""
        return self._checkpointer if self._checkpointer_pid == os.getpid() else None

    def close(self) -> None:
        """Stop this process's checkpoint thread (tests; a gunicorn worker just exits)."""
        with self._checkpointer_lock:
            if self._checkpointer is not None and self._checkpointer_pid == os.getpid():
                self._checkpointer.stop()
            self._checkpointer = None

    def tokens(self, *, refresh: bool = False) -> tuple[WebhookToken, ...]:
        """Accepted tokens, re-read from the database every few seconds (or now, if `refresh`).

        Raises (PartnerKitError, sqlite3.Error) while they cannot be read, e.g. a saved token sealed
        with a key this process cannot read: every delivery is then a 503 and /readyz says so. That is
        logged once when it starts and once when it clears; each later call tries again, so the
        receiver recovers without a restart once the key file can be read."""
        age = time.monotonic() - self._tokens_at
        if age > TOKEN_REFRESH_S or (refresh and age > TOKEN_RETRY_S):
            with self._tokens_lock:
                self._keys.current()  # `keys rotate` put a new key first: seal with it from now on
                try:
                    tokens = accepted_tokens(self.config, self.db(), self.cipher)
                except (PartnerKitError, sqlite3.Error) as exc:
                    self._token_trouble(exc)
                    raise
                self._token_trouble(None)
                self._tokens = tokens
                self._on_tokens(*(t.token for t in self._tokens))
                self._tokens_at = time.monotonic()
        return self._tokens

    @property
    def token_error(self) -> str | None:
        """Why the accepted tokens could not be read at the last try, or None."""
        return self._token_error

    def _token_trouble(self, exc: Exception | None) -> None:
        error = None if exc is None else f"{type(exc).__name__}: {exc}"[:300]
        if error == self._token_error:
            return
        if error is not None:
            log.error("cannot read accepted tokens: every delivery is answered 503 until they can be read",
                      extra={"error": error})
        else:
            log.info("accepted tokens can be read again")
        self._token_error = error

    @property
    def cipher(self) -> Cipher:
        """The cipher to seal webhook bodies and read tokens with: the key file's first key, followed
        (partnerkit.crypto.KeyFollower) at each token refresh, so within seconds of `keys rotate`."""
        return self._keys.cipher
