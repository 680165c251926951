"""The worker's one job table, and the wrapper that runs a job and logs one line about it.

Every job is a function `f(config, db, client)` named by dotted path and imported only when the
worker starts, so a part that is not installed is reported by job id instead of breaking the
import of the worker. Each job gets its own database connection and client (jobs run in threads;
SQLite transactions must not share a connection), which waits up to WORKER_BUSY_TIMEOUT_MS for another
process's write lock. A run that still meets the lock (a big day's match, a backup, a prune held it
longer) is a transient, not an error: outcome `busy`, one WARNING per episode, and the job runs again
at its next turn. A run that fails because PARTNERKIT_DB's filesystem is full or read-only is an
`error`, logged once per episode too (an ERROR saying what to do, then an INFO once the job writes
again): the 3- and 5-second jobs would otherwise log about 1,900 ERRORs an hour until someone frees space.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from partnerkit import disk
from partnerkit.config import Config
from partnerkit.errors import AccountMismatch, BudgetExhausted, PartnerKitError, RateLimited, base_url_hint
from partnerkit.status import note_worker_ran
from partnerkit.store import Database, open_db
from partnerkit.store.budget import REFUSAL_PAUSE_S  # noqa: F401 (JobSpec.calls_api names it; tests read it here)
from partnerkit.store.budget import Budget, refusal_dated_ahead, refusal_names_the_clock, refusal_pause_until
from partnerkit.store.db import WORKER_BUSY_TIMEOUT_MS, is_busy, is_unwritable
from partnerkit.timeutil import iso
from partnerkit.walks import WalkStopped

log = logging.getLogger("reconcile.worker")


@dataclass(frozen=True)
class JobSpec:
    """One scheduled job: id, target 'module:function', interval and misfire grace in seconds."""

    id: str
    target: str
    every_s: float
    misfire_grace_s: int
    # The label the budget counts the job's calls under (`budget show`, `status`: used_by_purpose): the one its
    # code spends under when it re-labels the client (`with_budget`), as the voucher jobs and the poller do.
    purpose: str
    # Result keys that describe the pass rather than count work done (a page read that held nothing).
    not_work: tuple[str, ...] = ()
    calls_api: bool = True  # paused while the provider refuses the API key (budget.REFUSAL_PAUSE_S)
    # After a run that ended in an error, the next one comes this many seconds on, doubling with each error
    # in a row up to `every_s`, instead of at the job's next turn (None: at its next turn).
    retry_after_error_s: float | None = None

    def __post_init__(self) -> None:
        if ":" not in self.target:
            raise ValueError(f"job {self.id}: target must be 'module:function', got {self.target!r}")
        if self.every_s <= 0 or self.misfire_grace_s <= 0:
            raise ValueError(f"job {self.id}: every_s and misfire_grace_s must be positive")
        if self.retry_after_error_s is not None and not 0 < self.retry_after_error_s < self.every_s:
            raise ValueError(f"job {self.id}: retry_after_error_s must be positive and shorter than every_s")

    def retry_in(self, errors_in_row: int) -> float | None:
        """Seconds to the next run after `errors_in_row` runs in a row ended in an error; None: at its next turn."""
        if self.retry_after_error_s is None or errors_in_row < 1:
            return None
        delay = self.retry_after_error_s * 2 ** min(errors_in_row - 1, 16)
        return delay if delay < self.every_s else None

    def is_idle(self, result: Any) -> bool:
        """Whether a run's result reports nothing done: every count 0, every list and map empty, nothing set."""
        if isinstance(result, dict):
            return all(_empty(v) for k, v in result.items() if k not in self.not_work)
        return _empty(result)


def _empty(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    return not value  # 0, False, None, "", [] (a list holds what was done: escalated references, reports)


# Misfire grace: frequent jobs skip a run that is late by more than about one interval (the next
# one is seconds away and reads the same state); the hourly report check is kept even when late.
JOBS: tuple[JobSpec, ...] = (
    # `candidates` counts the PROCESSING recharges looked at, not work: a pass with none due did nothing.
    JobSpec("poll-recharges", "reconcile.poller:poll_once", 5, 4, "poller", not_work=("candidates",)),
    JobSpec("fetch-vouchers", "partnerkit.vouchers:run_voucher_fetches", 3, 3, "voucher_fetch"),
    JobSpec("catch-up-orders", "partnerkit.vouchers:catch_up_orders", 300, 120, "order_sync",
            not_work=("pages", "stopped", "since")),
    JobSpec("sync-recent", "reconcile.jobs:sync_recent", 900, 300, "sync"),
    # The nightly check runs hourly: a night is due once a day, and each attempt syncs the night in full
    # before writing its files. A run that failed (a report directory full or read-only, the provider failing
    # mid-sync) leaves the night due, and the files are what finance opens in the morning: the next attempt
    # comes 5 minutes on, then 10, 20, 40, then hourly again, so a night is written minutes after its cause
    # is fixed. Not every 5 minutes always: an attempt after a failure that came when the sync was done (the
    # files) reads the whole night again, which on a busy day is hundreds of the hour's requests.
    JobSpec("nightly-report", "reconcile.jobs:nightly_job", 3600, 3600, "report", retry_after_error_s=300),
    # Inbox rows past PARTNERKIT_INBOX_RETENTION_DAYS; a skipped run only leaves them a few hours longer.
    JobSpec("prune-events", "partnerkit.retention:prune_events", 6 * 3600, 3600, "housekeeping", calls_api=False),
)


# Which refusal (by database and its time) a job of this process has already said, at INFO, that the jobs pause
# on or that they ignore (dated ahead of this clock): the jobs run in threads, each its own JobRunner, and one
# line an episode is enough; the episode's other paused runs are DEBUG.
_said_lock = threading.Lock()
_said: dict[tuple[str, str], float] = {}


def _first_to_say(config: Config, what: str, refusal: dict) -> bool:
    """Whether this is the first run of the process to meet this refusal as `what` ("paused", "ahead")."""
    key = (str(config.db_path), what)
    with _said_lock:
        if _said.get(key) == refusal["at"]:
            return False
        _said[key] = refusal["at"]
        return True


class JobUnavailable(PartnerKitError):
    """A job's function cannot be imported (its part is missing or broken)."""


def resolve(spec: JobSpec) -> Callable[..., Any]:
    """Import the job's function; JobUnavailable names the job and the reason."""
    module_name, _, attr = spec.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise JobUnavailable(f"job {spec.id}: cannot import {module_name} ({exc})") from exc
    func = getattr(module, attr, None)
    if not callable(func):
        raise JobUnavailable(f"job {spec.id}: {module_name} has no function {attr}")
    return func


def _result(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool, dict, list)):
        return value
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


class JobRunner:
    """Runs one job: its own connection and client, one structured log line per run, never raises."""

    def __init__(self, config: Config, spec: JobSpec, *, may_run: Callable[[], bool] = lambda: True,
                 client_factory: Callable[[Config, Database, str], Any] | None = None) -> None:
        self.config = config
        self.spec = spec
        self.may_run = may_run
        self._client_factory = client_factory or default_client
        self._db: Database | None = None
        self._client: Any = None
        self._func: Callable[..., Any] | None = None
        self.errors_in_row = 0  # runs in a row that ended in an error or busy (JobSpec.retry_in)
        self.busy_in_row = 0  # runs in a row that met the database locked past its busy timeout
        self._pause_begins = False  # this run is the first of the process to pause on the refusal standing
        # The runs that failed since the database's filesystem first refused a write (full, read-only), and when
        # that was (time.monotonic()): the episode `_log_unwritable` logs once, ended by a run that wrote again.
        self.unwritable_failures = 0
        self._unwritable_since = 0.0

    def close(self) -> None:
        """Close this job's connection."""
        if self._db is not None:
            self._db.conn.close()
            self._db = None

    def __call__(self) -> dict[str, Any]:
        """Run the job once; return (and log) its outcome."""
        started = time.monotonic()
        outcome, result, unwritable = "ok", None, False
        if not self.may_run():
            outcome, result = "skipped", "the worker lease is not held"
        else:
            try:
                if self._func is None:
                    self._func = resolve(self.spec)
                if self._db is None:
                    self._db = open_db(self.config.db_path, busy_timeout_ms=WORKER_BUSY_TIMEOUT_MS)
                self._pause_begins = False
                refused = self._refused_recently()
                if refused:
                    outcome, result = "paused", refused
                else:
                    if self._client is None:
                        self._client = self._client_factory(self.config, self._db, self.spec.purpose)
                    result = _result(self._func(self.config, self._db, self._client))
            except JobUnavailable as exc:
                outcome, result = "unavailable", str(exc)
            except (BudgetExhausted, RateLimited) as exc:
                outcome, result = "budget_exhausted", str(exc)
            except WalkStopped as exc:  # the worker is stopping: its sync ended at a batch, its place kept
                outcome, result = "stopped", str(exc)
            except Exception as exc:  # a job must never kill the scheduler; the log line says what broke
                outcome = "busy" if is_busy(exc) else "error"
                # An answer that is not the provider's (a wrong base URL's 404, a proxy's 403) says what to check.
                result = f"{type(exc).__name__}: {exc}{base_url_hint(exc, self.config.api_base_url)}"
                unwritable = outcome == "error" and is_unwritable(exc)
                log.debug("job %s failed", self.spec.id, exc_info=True)
        if outcome != "skipped":
            self._note_run()
            # A busy run is retried as soon as an error is (the nightly report: minutes on, not at its next hour).
            self.errors_in_row = self.errors_in_row + 1 if outcome in ("error", "busy") else 0
            self.busy_in_row = self.busy_in_row + 1 if outcome == "busy" else 0
        record = {"job": self.spec.id, "outcome": outcome, "duration_ms": round((time.monotonic() - started) * 1000),
                  "result": result}
        # A pass that found nothing to do (most runs of the 3-5 s jobs) is DEBUG; one that did work is INFO.
        # A pause after a refusal is INFO once an episode (the first job of the process to meet that refusal),
        # saying until when every job that calls the provider waits; the episode's other pauses are DEBUG.
        if outcome == "busy":
            # Another process's long write (a big day's match, a backup): expected, and the next run catches up.
            # One WARNING when an episode begins; its further busy runs are DEBUG.
            if self.busy_in_row == 1:
                log.warning("job %s: database busy; the job runs again at its next run (another process held the "
                            "write lock for more than %.0f s)", self.spec.id, WORKER_BUSY_TIMEOUT_MS / 1000,
                            extra=record)
            else:
                log.debug("job %s busy", self.spec.id, extra=record)
            return record
        if outcome == "paused" and self._pause_begins:
            log.info("job %s paused: %s; every job that calls the provider waits as long (their pauses are "
                     "logged at DEBUG)", self.spec.id, result, extra=record)
            return record
        if self._log_unwritable(record, unwritable):
            return record
        if (outcome == "ok" and self.spec.is_idle(result)) or outcome == "paused":
            level = logging.DEBUG
        else:
            level = logging.INFO if outcome in ("ok", "skipped", "budget_exhausted", "stopped") else logging.ERROR
        log.log(level, "job %s %s", self.spec.id, outcome, extra=record)
        return record

    def _log_unwritable(self, record: dict[str, Any], unwritable: bool) -> bool:
        """Log a run that failed because PARTNERKIT_DB's filesystem is full or read-only once per episode, as the
        busy runs are (True: logged here). The first such run is an ERROR that says what to do; the episode's
        further ones are DEBUG; the run that ends it adds an INFO line saying so, then is logged as usual.

        An `ok` run that did some work ends the episode. One that found nothing to do may have written nothing
        either: it ends the episode only when the filesystem shows room again (`disk.room`), else a job idle
        between two failures would log both again each time. A run that failed otherwise (the provider) is logged
        as usual and proves nothing about the disk: the episode goes on."""
        if unwritable:
            self.unwritable_failures += 1
            if self.unwritable_failures == 1:
                self._unwritable_since = time.monotonic()
                log.error("job %s error: the database cannot be written (%s): free space on PARTNERKIT_DB's "
                          "filesystem (`df -h` and `du` on its directory; never delete the database's -wal or -shm "
                          "files), or remount it read-write if it went read-only; `partnerkit status` says which. "
                          "The job runs again at each turn and catches up by itself; its further failures for this "
                          "reason are logged at DEBUG until it writes again", self.spec.id, record["result"],
                          extra=record)
            else:
                log.debug("job %s error (the database still cannot be written)", self.spec.id, extra=record)
            return True
        if not self.unwritable_failures or record["outcome"] != "ok":
            return False  # another error, paused, busy, budget_exhausted, stopped: no sign either way
        if record["outcome"] == "ok" and self.spec.is_idle(record["result"]) and disk.room(self.config.db_path).low:
            return False
        log.info("job %s: the database can be written again; its full or read-only filesystem cleared after %.0f s, "
                 "%d failure(s)", self.spec.id, time.monotonic() - self._unwritable_since, self.unwritable_failures,
                 extra={"job": self.spec.id, "failures": self.unwritable_failures})
        self.unwritable_failures = 0
        return False

    def _note_run(self) -> None:
        """Tell `partnerkit status` that a worker runs its jobs (at most one write a minute); never fails the job."""
        if self._db is None:
            return
        try:
            note_worker_ran(self._db)
        except (PartnerKitError, sqlite3.Error) as exc:  # a locked database: the next run notes it
            log.debug("could not note the job run: %s", exc)

    def _refused_recently(self) -> str | None:
        """Why this run is skipped: the provider refused the API key under REFUSAL_PAUSE_S ago.

        Instead of a 401 every 3-5 seconds from each job, one job tries again a minute on, and its
        first accepted call clears the refusal for all (Budget.refused/accepted). A refusal dated ahead
        of this clock (met while it ran ahead, put right since) pauses nothing: paused on, every job would
        wait for as long as the clock was off, and none would make the call that clears it
        (`partnerkit.store.budget.refusal_pause_until`, which `partnerkit status` reads as well)."""
        if not self.spec.calls_api or not self.config.api_key:
            return None
        refusal = Budget.from_config(self.config, self._db).refusal()
        if refusal is None:
            return None
        now = time.time()
        if refusal_dated_ahead(refusal, now):
            if _first_to_say(self.config, "ahead", refusal):
                log.info("the provider's refusal of the API key saved at %s (HTTP %s to %s %s) is dated %.0f s ahead "
                         "of this host's clock: it was met while the clock ran ahead, put right since; the jobs do "
                         "not pause on it, and their next accepted call clears it", _iso_at(refusal["at"]),
                         refusal["status"], refusal["method"], refusal["path"], refusal["at"] - now,
                         extra={"job": self.spec.id})
            return None
        until = refusal_pause_until(refusal, now)
        if until is None:
            return None
        self._pause_begins = _first_to_say(self.config, "paused", refusal)
        clock = (": the provider named the request's timestamp, so check this host's clock first (`timedatectl`: "
                 "is it NTP-synchronised?)" if refusal_names_the_clock(refusal["message"]) else "")
        age = max(0.0, now - refusal["at"])  # a refusal up to AHEAD_TOLERANCE_S ahead: "0s ago"
        return (f"the provider refused the API key {age:.0f}s ago (HTTP {refusal['status']} to {refusal['method']} "
                f"{refusal['path']}{clock}): trying again {until - now:.0f}s from now, at {_iso_at(until)}")


def _iso_at(epoch: float) -> str:
    """A unix time as the logs and `status` write a moment: ISO 8601 UTC, to the second."""
    return iso(datetime.fromtimestamp(round(epoch), timezone.utc))


def check_account(config: Config, db: Database,
                  client_factory: Callable[[Config, Database, str], Any] | None = None) -> None:
    """At the worker's start: AccountMismatch when PARTNERKIT_API_KEY is not the provider account's the
    database serves (partnerkit.account), which every job would otherwise meet every few seconds. Any other
    failure of the check (the provider unreachable, the budget spent, the database busy) is logged and the
    worker starts: each job's client checks again before its first call."""
    client = (client_factory or default_client)(config, db, "account")
    try:
        client.once().check_account()  # one wallet read at most: no retries, no wait for budget
    except AccountMismatch:
        raise
    except (PartnerKitError, sqlite3.Error) as exc:
        log.warning("could not check which provider account PARTNERKIT_API_KEY is (%s%s); each job checks "
                    "before its first call", exc, base_url_hint(exc, config.api_base_url))
    finally:
        if client_factory is None:  # ours to close; a factory's client may be shared with the jobs
            client.close()


def default_client(config: Config, db: Database, purpose: str) -> Any:
    """A PartnerClient for one job; never waits for budget inside a scheduler thread."""
    from partnerkit.client import PartnerClient

    return PartnerClient(config, db, purpose=purpose, wait_for_budget=False)
