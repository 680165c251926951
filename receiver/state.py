"""What the receiver's views share: configuration, per-thread connections, tokens, metrics, and the
per-process housekeeping thread (WAL checkpoints, the refused deliveries' counts)."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from typing import Callable

from partnerkit.config import Config, WebhookToken
from partnerkit.crypto import TOKEN_REFRESH_S, Cipher, KeyFollower
from partnerkit.errors import PartnerKitError
from partnerkit.store import Database
from partnerkit.store.db import RECEIVER_BUSY_TIMEOUT_MS, connect, wal_checkpoint
from partnerkit.timeutil import utcnow

from receiver.metrics import Metrics
from receiver.refusals import REFUSALS_SAVE_S, RefusalCounts
from receiver.tokens import accepted_tokens

# RECEIVER_BUSY_TIMEOUT_MS (the request connections' busy timeout: partnerkit.store.db) and TOKEN_REFRESH_S (how
# often tokens and the key file are re-read: partnerkit.crypto) are partnerkit's, since key rotation waits them out.
TOKEN_RETRY_S = 0.2    # tokens are re-read at once on a failed signature, at most this often
# WAL checkpoints copy the log back into the database file and fsync both: tens of ms on a
# real disk. SQLite runs them inside whichever commit crosses `wal_autocheckpoint` pages, i.e.
# inside a webhook request. The receiver's request connections raise that threshold to a
# backstop, and a background thread per worker process (the Housekeeper) checkpoints (PASSIVE: it
# never waits for or blocks a writer) every CHECKPOINT_INTERVAL_S, off the request path.
CHECKPOINT_INTERVAL_S = 0.2
WAL_BACKSTOP_PAGES = 4000  # ~16 MB with 4 KiB pages: a request checkpoints only if the thread falls behind
# A chore that keeps failing (a read-only database) fails on every pass, five times a second: it is
# logged once, then again only when the error changes or after this long, and once when it works again.
FAILURE_REPEAT_S = 300.0

log = logging.getLogger(__name__)

# This process's id, refreshed by a fork hook in every child: each delivery asked which process it runs in to find
# its thread's connections, and os.getpid() is a system call (about 3 us on a loaded VM, in the middle of a request).
_PROCESS = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PROCESS.__setitem__(0, os.getpid()))


class FailureLog:
    """The failures of one background chore, logged once when they start, again when the error changes
    or after `repeat_s`, and once when the chore works again."""

    def __init__(self, chore: str, repeat_s: float = FAILURE_REPEAT_S) -> None:
        self.chore = chore
        self.repeat_s = repeat_s
        self.error: str | None = None  # the error of the failing passes since the last good one
        self.passes = 0  # passes failed since the last good one
        self._logged_at = float("-inf")

    def failed(self, error: str, *, exc_info: BaseException | None = None, **extra: object) -> None:
        """Count a failed pass; log it when the failure is new, its error changed, or it was last logged long ago
        (with `exc_info`'s traceback, when given: a bug's)."""
        self.passes += 1
        now = time.monotonic()
        if error == self.error and now - self._logged_at < self.repeat_s:
            return
        log.warning(f"{self.chore} failed" if error != self.error else f"{self.chore} still failing",
                    exc_info=exc_info,
                    extra={"error": error, "failed_passes": self.passes, "logged_again_after_s": self.repeat_s,
                           **extra})
        self.error, self._logged_at = error, now

    def worked(self) -> None:
        """After failing passes, say once that the chore works again."""
        if self.error is None:
            return
        log.info(f"{self.chore} works again", extra={"failed_passes": self.passes})
        self.error, self.passes, self._logged_at = None, 0, float("-inf")


class Housekeeper:
    """A daemon thread per worker process, on its own connection: a PASSIVE WAL checkpoint every
    `interval_s`, and the refusal tally (`refusals`, receiver.refusals) saved every `save_every_s`
    while there is one, and once more when it stops (a worker's exit)."""

    def __init__(self, db_path, *, refusals: RefusalCounts | None = None, interval_s: float = CHECKPOINT_INTERVAL_S,
                 save_every_s: float = REFUSALS_SAVE_S, failure_repeat_s: float = FAILURE_REPEAT_S) -> None:
        self.db_path = db_path
        self.refusals = refusals
        self.interval_s = interval_s
        self.save_every_s = save_every_s
        self._stop = threading.Event()
        self._conn: Database | None = None
        self.last: tuple[int, int, int] | None = None  # the latest checkpoint's (busy, log frames, checkpointed)
        self.checkpoints = FailureLog("WAL checkpoint", failure_repeat_s)
        self.refusal_saves = FailureLog("saving the refused deliveries' counts", failure_repeat_s)
        self.unexpected = FailureLog("housekeeping pass", failure_repeat_s)  # what no chore guards against
        self._thread = threading.Thread(target=self._run, name="partnerkit-housekeeper", daemon=True)

    def start(self) -> "Housekeeper":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, after its last save of the refusal tally."""
        self._stop.set()
        self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _db(self) -> Database:
        if self._conn is None:
            self._conn = connect(self.db_path, busy_timeout_ms=RECEIVER_BUSY_TIMEOUT_MS)
        return self._conn

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: (busy, frames in the WAL, frames checkpointed)."""
        self.last = wal_checkpoint(self._db())
        return self.last

    def save_refusals(self) -> int:
        """Save the refusal tally in one transaction; return how many refusals were saved. A failure keeps
        the tally for the next save and is logged as FailureLog says, never per request."""
        if self.refusals is None:
            return 0
        try:
            saved = self.refusals.save(self._db())
        except Exception as exc:  # locked, read-only, full: the tally waits for the next save
            self.refusal_saves.failed(str(exc)[:200], refusals_kept=self.refusals.pending())
            self._close()  # opened again for the next pass, as Receiver.reopen_later does for requests
            return 0
        if saved:
            self.refusal_saves.worked()
        return saved

    def _run(self) -> None:
        next_save: float | None = None
        while not self._stop.wait(self.interval_s):
            # The thread outlives any exception of a pass, a bug's included (a logging filter that raises, a
            # patched clock): ended, it would checkpoint and save nothing again, not even the tally at exit.
            try:
                next_save = self._pass(next_save)
            except Exception as exc:
                self._survive(exc)
            else:
                self.unexpected.worked()
        try:
            self.save_refusals()  # the worker exits: what it counted since the last save
            if self.refusals is not None and self.refusals.pending():
                log.warning("refused deliveries' counts lost at exit",
                            extra={"refusals_lost": self.refusals.pending()})
        except Exception as exc:
            self._survive(exc)
        finally:
            self._close()

    def _pass(self, next_save: float | None) -> float:
        """One checkpoint, and the tally's save when `next_save` (monotonic) has come; the next save's time."""
        if next_save is None:
            next_save = time.monotonic() + self.save_every_s
        try:
            self.checkpoint()
        except Exception as exc:  # keep going: the request connections' backstop still bounds the WAL
            self.checkpoints.failed(str(exc)[:200])
            self._close()
        else:
            self.checkpoints.worked()
        if time.monotonic() >= next_save:
            self.save_refusals()
            next_save = time.monotonic() + self.save_every_s
        return next_save

    def _survive(self, exc: Exception) -> None:
        """Log an exception no chore expected, as FailureLog does (with its traceback), and carry on."""
        try:
            self.unexpected.failed(f"{type(exc).__name__}: {exc}"[:200], exc_info=exc)
        except Exception:  # the logging itself failing: nothing is left to tell, the thread goes on all the same
            pass

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.conn.close()
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
        self.refusals = RefusalCounts()  # saved by this process's housekeeping thread, never by a request
        self.refusals_save_s = REFUSALS_SAVE_S
        self._housekeeper: Housekeeper | None = None
        self._housekeeper_pid: int | None = None
        self._housekeeper_lock = threading.Lock()

    def db(self) -> Database:
        """This thread's connection, opened on first use (and this process's housekeeping thread)."""
        local = self._local
        if getattr(local, "pid", None) != _PROCESS[0]:
            db = connect(self.config.db_path, busy_timeout_ms=self.busy_timeout_ms,
                         wal_autocheckpoint=WAL_BACKSTOP_PAGES)
            self._ensure_housekeeper()
            local.db, local.writer = db, None
            local.pid = _PROCESS[0]
        return local.db

    def writer(self) -> Database:
        """This thread's connection for the webhook's write transaction: its BEGIN waits for the other
        workers' commits in short steps instead of SQLite's 1, 2, 5 ms sleeps (store.db._begin_immediate).
        Reads (tokens, metrics, readiness) use `db()`, which keeps SQLite's busy handler."""
        self.db()
        local = self._local
        if local.writer is None:
            local.writer = connect(self.config.db_path, busy_timeout_ms=self.busy_timeout_ms, short_lock_waits=True,
                                   wal_autocheckpoint=WAL_BACKSTOP_PAGES)
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

    def refused(self, reason: str) -> None:
        """Count a refused delivery for `partnerkit status`: noted in memory, saved by this process's
        housekeeping thread within seconds (receiver.refusals), never written by the request itself."""
        self.refusals.note(reason, utcnow())
        if self._housekeeper is None or self._housekeeper_pid != os.getpid():
            self._ensure_housekeeper()  # a worker whose first request was refused before any connection

    def _ensure_housekeeper(self) -> None:
        """Start the housekeeping thread of this process (threads do not survive a fork)."""
        with self._housekeeper_lock:
            if (self._housekeeper_pid != os.getpid() or self._housekeeper is None
                    or not self._housekeeper.alive()):
                self._housekeeper = Housekeeper(self.config.db_path, refusals=self.refusals,
                                                 save_every_s=self.refusals_save_s).start()
                self._housekeeper_pid = os.getpid()

    @property
    def housekeeper(self) -> Housekeeper | None:
        """This process's housekeeping thread, once a connection was opened or a delivery refused."""
        return self._housekeeper if self._housekeeper_pid == os.getpid() else None

    def close(self) -> None:
        """Stop this process's housekeeping thread, after it saved the refusal tally (a gunicorn worker's
        exit: receiver.gunicorn_app's worker_exit hook; tests)."""
        with self._housekeeper_lock:
            if self._housekeeper is not None and self._housekeeper_pid == os.getpid():
                self._housekeeper.stop()
            self._housekeeper = None

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
