"""Reconciliation jobs: the incremental sync and the nightly report (with catch-up after downtime).

The scheduler calls `sync_recent` every few minutes and `nightly` every hour or so; both are
idempotent, so a missed, doubled or crashed run is repaired by the next one.
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import threading
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from partnerkit.errors import BudgetExhausted, RateLimited, StorageError
from partnerkit.files import sync_directory
from partnerkit.store import drifts as drift_store
from partnerkit.store.copies import hold, remove_unless_held
from partnerkit.store import matching as matching_store
from partnerkit.store import ledger as ledger_store
from partnerkit.store import nightly_failure
from partnerkit.store import reports as report_store
from partnerkit.store.db import is_busy
from partnerkit.timeutil import parse_ts, utcnow
from partnerkit.walks import WalkStopped
from reconcile import report as report_mod
from reconcile.matcher import MatchResult, match_day
from reconcile.sync import (SETTLED_AFTER, Progress, SyncSummary, days_between, incremental_start, sync_range,
                            transactions_from)

log = logging.getLogger(__name__)

MAX_CATCH_UP_DAYS = report_store.CATCH_UP_NIGHTS  # after a longer outage, older nights need `reconcile --date`
RECHECK_DAYS = 7  # earlier days with open drifts are matched again (a late refund resolves them)
# How far past its night a night's sync reads (sync_window). The matcher links a recharge's or an order's
# transactions on any day, and money does not stop at midnight: a recharge PROCESSING at 23:59 that fails at
# 00:50 is credited back the next day, an order that fails is refunded when it fails (fulfilment takes 2 to 30
# minutes: "Typical completion windows"), and the provider may stamp a debit at 23:59:59.9 for a recharge it
# creates at 00:00:00.1 (so the night's transactions need the next day's recharges). A day covers those: a
# recharge still PROCESSING after 30 minutes is escalated ("Beyond 30 min"). What comes later still (a second
# debit days on) is matched once a later sync has stored it: the nightly re-match (RECHECK_DAYS).
AFTER_NIGHT = timedelta(days=1)


def report_filename(day: str, fmt_name: str) -> str:
    """partnerkit-report-YYYY-MM-DD.{json,csv,html}."""
    return f"partnerkit-report-{day}.{fmt_name}"


# A write's temp files: `.NAME.XXXXXXXX.tmp` beside NAME (tempfile.mkstemp), held under a lock until renamed.
_TEMP = ".{name}.????????.tmp"
REPORT_TEMPS = _TEMP.format(name="partnerkit-report-*")


def _new_temp(path: Path) -> tuple[int, str, int]:
    """A new private temp file beside `path` (0600): (descriptor to write, name, descriptor holding its lock).

    Held from the moment it has a name (partnerkit.store.copies.hold, as a backup holds its copy), so that
    the next write can tell what a killed one left from what a running one writes (`_clear_killed_temps`).
    A cleanup that took the file in the instant before the lock (it was not held yet) leaves this write's
    name unlinked or its inode gone: checked, and made again."""
    for _ in range(5):  # bounded: it takes a cleanup in that instant each time to go round again
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            lock = hold(Path(tmp))
        except FileNotFoundError:
            os.close(fd)
            continue
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino == os.fstat(lock).st_ino:
                return fd, tmp, lock
        except FileNotFoundError:
            pass
        os.close(lock)
        os.close(fd)
    raise OSError(errno.EAGAIN, "another process removed each temp file made for it", str(path))


def _write_temp(path: Path, text: str) -> tuple[str, int]:
    """`text` in a new private temp file beside `path` (0600, flushed to disk): its name and the descriptor
    that holds its lock (`_new_temp`; close it once the file is renamed or removed). Removed on failure.
    An error names the file: ENOSPC from write() or fsync() carries no file name of its own."""
    fd, tmp, lock = _new_temp(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        os.close(lock)
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        os.close(lock)
        raise
    return tmp, lock


def _clear_killed_temps(directory: Path, pattern: str) -> list[Path]:
    """Remove the temp files matching `pattern` that writes killed before their renames left in `directory`
    (whole copies of a report, hidden names); return them. A running write holds a lock on each of its own
    (`_new_temp`): left alone, whichever process it is (the worker's nightly run, a `partnerkit report`)."""
    removed = []
    for leftover in sorted(directory.glob(pattern)):
        if leftover.is_file() and remove_unless_held(leftover, lambda path: path.unlink(missing_ok=True)):
            removed.append(leftover)
    if removed:
        log.info("removed %d temp file(s) that writes killed before their rename left in %s: %s", len(removed),
                 directory, ", ".join(p.name for p in removed))
    return removed


def write_atomic(path: Path, text: str) -> Path:
    """Write a file so readers see the old or the new content, never half (temp file + rename)."""
    return write_together([(path, text)])[0]


def write_together(files: Sequence[tuple[Path, str]]) -> list[Path]:
    """Write files of one directory as one set, as far as a filesystem allows: every text goes to a temp
    file beside its target first (flushed to disk), and only once all are written are they renamed into
    place, one right after the other, in the order given. A failure before the renames (a full disk, a
    target name taken by a directory) leaves every previous file as it was and no temp file behind; only
    a process killed between two renames leaves a mixed set (see `write_report_files` for how a reader
    tells). The temp files a killed write of the same names left are removed first (`_clear_killed_temps`).
    Returns the paths written."""
    return _write_set(files)[0]


def _write_set(files: Sequence[tuple[Path, str]], *, set_aside: str | None = None, clear: str | None = None
               ) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """`write_together`; with `set_aside`, each target that exists gets that suffix added to its name first
    (a hard link, once every temp file is written: the old file stays readable under both names until the
    new one is renamed over it). `clear`: the pattern of killed writes' temp files to remove first (default:
    those of the targets' own names). Returns the paths written and (old file's new name, path) pairs."""
    from partnerkit.files import make_private_dirs

    paths = [Path(path) for path, _ in files]
    if len({path.parent for path in paths}) > 1:
        raise ValueError("write_together writes into one directory")
    if not paths:
        return [], []
    make_private_dirs(paths[0].parent)  # reports hold finance's figures, at every level 0700
    for pattern in [clear] if clear else [_TEMP.format(name=glob.escape(path.name)) for path in paths]:
        _clear_killed_temps(paths[0].parent, pattern)
    temps: list[tuple[str, int]] = []
    kept: list[tuple[Path, Path]] = []
    renamed = 0
    try:
        for path, (_, text) in zip(paths, files):
            temps.append(_write_temp(path, text))
        for path in paths:
            # A rename onto a directory fails; found before the first rename, the previous set stays whole.
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if set_aside is not None:
            for path in paths:
                if path.is_file():
                    kept.append((_link_aside(path, set_aside), path))
        for (tmp, _), path in zip(temps, paths):
            os.replace(tmp, path)
            renamed += 1
    finally:
        for tmp, _ in temps[renamed:]:  # written but not renamed into place
            Path(tmp).unlink(missing_ok=True)
        for _, lock in temps:  # held until renamed or removed
            os.close(lock)
    sync_directory(paths[0].parent)
    return paths, kept


def _link_aside(path: Path, suffix: str) -> Path:
    """A second name for `path`: its name + `suffix` (+ -2, -3 ... when taken); a copy where links are not
    supported."""
    aside, number = path.with_name(path.name + suffix), 1
    while True:
        try:
            os.link(path, aside)
            return aside
        except FileExistsError:
            number += 1
            aside = path.with_name(f"{path.name}{suffix}-{number}")
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                raise
            shutil.copy2(path, aside)
            return aside


# The order the report's files are renamed into place: the JSON last, the CSV (which carries no
# generated_at) between the two that do. See write_report_files.
REPORT_FORMATS = ("html", "csv", "json")


def write_report_files(report_dir: Path, report: dict[str, Any], *, unrecorded: bool = False,
                       warn: Callable[[str], None] | None = None) -> list[Path]:
    """Write the report as JSON, CSV and HTML into report_dir, as one set (`write_together`).

    All three are rendered, then written to temp files, then renamed into place: HTML, CSV, JSON. A
    failure up to the renames leaves the previous files of the day untouched. The temp files that a
    report write killed before its renames left (`.partnerkit-report-D.FORMAT.XXXXXXXX.tmp`, any day D)
    are removed first, except those a running write (another process's) holds (`_clear_killed_temps`). A process killed between
    two renames leaves the first ones new and the rest old: the JSON and the HTML each carry generated_at
    (the HTML's "Generated ..." line), and since the CSV is renamed between them, a JSON and an HTML
    that show the same generated_at have that run's CSV beside them (docs/reconcile.md, "The report").

    `unrecorded`: the database has no stored report of the day (restored from a backup older than the
    night, or copied; or a `partnerkit report` wrote the files before the night was reported, or matches
    it by hand now), so files of the day already there are not its report's, and finance may have read
    them: they are kept under a second name, `NAME.replaced-TIME-not-in-database` (TIME: the new report's
    generated_at), and a warning names both sets: a WARNING log line, or `warn(message)` when given (the
    command line's own line). Files that hold this very report but for its generated_at (a `partnerkit
    report` run again on the same data) are replaced without being kept: nobody read anything else. An
    error names PARTNERKIT_REPORT_DIR and the file.
    """
    day = report["date"]
    stamp = str(report["generated_at"]).replace("-", "").replace(":", "")
    texts = {f: report_mod.render(report, f) for f in REPORT_FORMATS}
    folder = Path(report_dir)
    if unrecorded and _same_report(folder / report_filename(day, "json"), texts["json"], report):
        unrecorded = False
    try:
        written, kept = _write_set([(folder / report_filename(day, f), texts[f]) for f in REPORT_FORMATS],
                                   set_aside=f".replaced-{stamp}-not-in-database" if unrecorded else None,
                                   clear=REPORT_TEMPS)
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror or exc} (writing the report of {day} into PARTNERKIT_REPORT_DIR "
                      f"{report_dir})", exc.filename) from exc
    if kept:
        message = (f"report files of {day} replaced although the database has no stored report of that night (it "
                   "was restored from an older backup or copied, or the files were written by `partnerkit report` "
                   "before the night was reported): the files that were there, which finance may have read, are "
                   f"kept as {', '.join(str(old) for old, _ in kept)}; the new ones are "
                   f"{', '.join(str(new) for _, new in kept)}")
        if warn is None:
            log.warning("%s", message)
        else:
            warn(message)
    return sorted(written, key=lambda path: ("json", "csv", "html").index(path.suffix[1:]))


# When a report was made: the only fields in which the same day's report on the same data differs from run to
# run. Top-level keys of its JSON, which render_json writes first, indented by two.
_MADE_AT = ("generated_at", "resolutions_as_of")


def _same_report(path: Path, text: str, report: dict[str, Any]) -> bool:
    """Whether the JSON report at `path` is `text` (the JSON of `report`) but for when each was made."""
    try:
        old = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # none yet, or not a report's: kept aside if it exists
        return False
    for key in _MADE_AT:
        if key in report:
            found = re.search(rf'^  "{key}": "([^"\\]*)"', old, re.MULTILINE)
            if found is None:
                return False
            old = old[:found.start(1)] + str(report[key]) + old[found.end(1):]
    return old == text


def report_day(config: Any, db: Any, day: date, *, now: datetime | None = None,
               result: MatchResult | None = None, save: bool = True, files: bool = True,
               synced: SyncSummary | None = None) -> dict[str, Any]:
    """Match one day from the store (no network; or take `result`), keep the report in the DB and as files.

    `synced`: the sync run just before, for the wallet balances it read (stamped after `now`: see
    reconcile.matcher.wallet_balances).

    save=False writes the files but not the stored report, which is what marks the day as reported:
    a report matched without a sync (`partnerkit report` before the nightly run) must leave the
    night due, or the day would never be synced and reported by the nightly job. files=False (only
    with save=False) leaves the files to the caller (`partnerkit report` writes them best effort).
    """
    if save and not files:
        raise ValueError("a stored report needs its files: the stored row is what marks the day as reported")
    now = (now or utcnow()).replace(microsecond=0)
    read_at = parse_ts(synced.wallets_at, field="wallets_at") if synced is not None else None
    result = result or match_day(db, day, now=now, snapshots_through=read_at)
    # When the day was last read in full: a report matched from a store that has not read the whole day since
    # it ended (a worker down since before midnight) must not read as final (report.finality).
    read_at = {entity: ledger_store.coverage(db, entity, day.isoformat()) for entity in report_mod.READ_ENTITIES}
    report = report_mod.build_report(result, drift_store.iter_drift_rows(db, report_date=day.isoformat()),
                                     generated_at=now, day_read_at=read_at,
                                     quarantined=ledger_store.quarantined(db, day.isoformat()),
                                     transactions=matching_store.drift_transactions(db, report_date=day.isoformat()))
    # Files first: the stored row is what marks the day as reported, so a directory that refuses the
    # files (read-only, full) must leave the day due for the next nightly run.
    if files:
        write_report_files(config.report_dir, report, unrecorded=report_store.get_report(db, day.isoformat()) is None)
    if save:
        report_store.save_report(db, report)
    return report


def sync_window(db: Any, last_night: date, now: datetime) -> tuple[date, date]:
    """(through, claim): the last day a sync reads to match the nights up to `last_night`, and the last day whose
    coverage it claims (`sync_range`'s claim_through). The nightly run and `partnerkit reconcile --date` both ask.

    Through the day after the night (AFTER_NIGHT), never past today: on time that is today so far. Not through
    today whatever the night: for a night months ago that is months of pages, from the hourly budget. The day
    after is left out when the store holds it read in full by a read that began SETTLED_AFTER after it ended
    (the nightly run that reported it made one): a ledger entry is not rewritten (`transactions_from`), and
    its recharges are there to link to. The day after read while it lasts (today) is not claimed as covered:
    a one-off read (`reconcile --date`) would leave the store vouching for its first hour as the whole day
    (`day_synced`, the balance chain across days); the 15-minute sync, which reads today again and again,
    claims it, and the nightly run that reports it reads it whole. The nights themselves are claimed, today
    too when it is the night asked for."""
    today = now.date()
    through = max(last_night, min(last_night + AFTER_NIGHT, today))
    after = [date.fromisoformat(d) for d in days_between(last_night + timedelta(days=1), through)]
    if after and all(_read_after_it_settled(db, d) for d in after):
        through = last_night
    return through, max(last_night, min(through, today - timedelta(days=1)))


def _read_after_it_settled(db: Any, day: date) -> bool:
    """Whether the day's recharges and transactions were both read in full SETTLED_AFTER after the day ended."""
    settled = datetime.combine(day + timedelta(days=1), time(0), tzinfo=timezone.utc) + SETTLED_AFTER
    for entity in ("recharges", "transactions"):
        synced = ledger_store.coverage(db, entity, day.isoformat())
        if synced is None or parse_ts(synced, field="synced_at") < settled:
            return False
    return True


def reconcile_day(config: Any, db: Any, client: Any, day: date, *, now: datetime | None = None,
                  progress: Progress | None = None,
                  reading: Callable[[date, date], None] | None = None) -> dict[str, Any]:
    """Sync one UTC day (every page) and what its match needs after it (`sync_window`), match the day and
    write its report. `reading(first, through)` is told the range before the sync starts."""
    now = (now or utcnow()).replace(microsecond=0)
    through, claim = sync_window(db, day, now)
    if reading is not None:
        reading(day, through)
    synced = sync_range(config, db, client, day, through, now=now, progress=progress, claim_through=claim)
    return report_day(config, db, day, now=now, synced=synced)


def day_synced(db: Any, day: date) -> bool:
    """Whether a sync has read the day's recharges and wallet transactions in full (`sync_coverage`): without
    that, the local store cannot vouch for the day, and a report matched from it would read as clean."""
    return all(ledger_store.coverage(db, entity, day.isoformat()) for entity in ("recharges", "transactions"))


def current_report(db: Any, day: date) -> dict[str, Any] | None:
    """The stored report of a day with its drift table brought up to date (finance's resolutions)."""
    stored = report_store.get_report(db, day.isoformat())
    if stored is None:
        return None
    return report_mod.with_drifts(stored, drift_store.iter_drift_rows(db, report_date=day.isoformat()),
                                  transactions=matching_store.drift_transactions(db, report_date=day.isoformat()))


# One sync at a time in a process: the worker runs its jobs in threads, and the nightly run (yesterday, in
# full) and sync-recent (yesterday and today) would otherwise read yesterday's pages at the same time, at
# 01:00 every night, from the same hourly budget. The nightly run waits for a sync-recent under way, then
# reads none of what it read in full (`nightly`). The worker lease keeps a second worker out.
_SYNCING = threading.Lock()


def sync_recent(config: Any, db: Any, client: Any, now: datetime | None = None) -> SyncSummary | dict[str, str]:
    """Incremental sync from the watermark (less the lookback) through today; transactions only from the
    first day not yet read in full after it ended (reconcile.sync.transactions_from). Skipped while
    another sync of this process runs (the nightly one reads the same days): the next turn is minutes away."""
    now = (now or utcnow()).replace(microsecond=0)
    if not _SYNCING.acquire(blocking=False):
        return {"skipped": "another sync of this worker is running"}
    try:
        first = incremental_start(db, now.date())
        return sync_range(config, db, client, first, now.date(), now=now,
                          transactions_first=transactions_from(db, first, now))
    finally:
        _SYNCING.release()


def due_dates(db: Any, now: datetime, due_hour: int) -> list[date]:
    """The nights whose report is due at `now`, oldest first: every night of the last MAX_CATCH_UP_DAYS, from
    the store's first day, without a complete report (partnerkit.store.reports.unreported_nights). Older
    nights never reported are named in a WARNING: only `partnerkit reconcile --date` reports them."""
    due, beyond = report_store.unreported_nights(db, report_store.latest_due_night(now, due_hour))
    if due and beyond:
        log.warning("%d night(s) older than the %d the nightly run catches up were never reported: %s; "
                    "`partnerkit reconcile --date D` reports each", len(beyond), MAX_CATCH_UP_DAYS,
                    ", ".join(report_store.night_ranges(beyond)))
    return due


def due_at(night: date, due_hour: int) -> datetime:
    """When the night's report became due: `due_hour` (UTC) on the day after it."""
    return datetime.combine(night + timedelta(days=1), time(due_hour), tzinfo=timezone.utc)


def nightly(config: Any, db: Any, client: Any, now: datetime | None = None, *,
            due: Callable[[list[date]], None] | None = None) -> list[dict[str, Any]]:
    """Report every due night (the previous UTC day from due_hour_utc on, and any missed ones). `due(nights)`
    is told the nights before their sync starts (nightly_job names them when the run fails).

    The sync reads from the first due night through the day after the last (`sync_window`), in one pass: a
    night's recharges are matched with their transactions on any day, and money does not stop at midnight.
    A recharge PROCESSING at 23:59 that fails at 00:50 is credited back on the next day, and a debit stamped
    at 23:59:59.9 may pay for a recharge created at 00:00:00.1. Read up to its last night only, a run after
    downtime (or one that came before the 15-minute sync had read the credit) reported a `missing_refund`
    or an `orphan_transaction` that the next night resolved. On time, the day after is today's first hour.

    What complete reads begun since the nights became due (`due_at`) have covered is not read again: the
    15-minute sync's read of the same days just before (the two jobs come due together, sync-recent first), or
    a walk of this run's that a restarted worker's sync-recent read on to its end. A walk stopped or killed
    part-way is read on from its place only if it began since then, else from page 1 (sync_range)."""
    now = (now or utcnow()).replace(microsecond=0)
    days = due_dates(db, now, config.due_hour_utc)
    if not days:
        return []
    if due is not None:
        due(days)
    log.info("nightly reconciliation for %s", ", ".join(d.isoformat() for d in days))
    through, claim = sync_window(db, days[-1], now)
    with _SYNCING:  # waits for a sync-recent run in progress (see _SYNCING)
        # What was read since the nights became due is not read again, and a walk is read on from where it was
        # stopped only if it began since then (reconcile.sync.sync_range, `fresh_since`).
        synced = sync_range(config, db, client, days[0], through, now=now, claim_through=claim,
                            fresh_since=due_at(days[-1], config.due_hour_utc))
    reports = [report_day(config, db, d, now=now, synced=synced) for d in days]
    # Earlier days matched again: those with drifts still open (a late refund resolves one), and those
    # whose recharges or orders got a transaction on the nights just reported (a refund of a SUCCESS
    # recharge, a second debit: linked, so never an orphan, and judged by its subject's day alone).
    since, first = (days[0] - timedelta(days=RECHECK_DAYS)).isoformat(), days[0].isoformat()
    again = set(drift_store.open_days(db, since=since, before=first))
    again.update(matching_store.days_with_late_entries(db, first, days[-1].isoformat(), since=since))
    # Nights already reported after the first one just reported (by hand, during an outage) were matched
    # while an earlier night was missing from the store: a refund or second debit on it, and the balance
    # chain across it (not judged over a night never synced), are judged now.
    latest = report_store.latest_due_night(now, config.due_hour_utc).isoformat()
    again.update(report_store.report_dates(db, after=first, through=latest))
    again.difference_update(d.isoformat() for d in days)
    for earlier in sorted(again):
        report_day(config, db, date.fromisoformat(earlier), now=now, synced=synced)
    return reports


def nightly_job(config: Any, db: Any, client: Any, now: datetime | None = None) -> list[dict[str, Any]]:
    """The worker's nightly-report job: `nightly`, each report summed up for the job's one log line.

    A report carries every drift of its day (100,000 on a bad day): the whole of it in the log line
    and in `worker --once` would bury the line that says what happened.

    A run that ends in an error is recorded (partnerkit.store.nightly_failure: when, why, which nights), and
    the next run that ends without one clears it, so `partnerkit status` names a failed night at once instead
    of two hours past the due hour. Not a run the lock, the budget or a stop ended: each is read on from
    where it stopped, and says so in its own job line.
    """
    nights: list[date] = []
    try:
        reports = nightly(config, db, client, now=now, due=nights.extend)
    except (BudgetExhausted, RateLimited, WalkStopped):
        raise
    except Exception as exc:
        if not is_busy(exc):
            _keep_failure(db, f"{type(exc).__name__}: {exc}", [d.isoformat() for d in nights])
        raise
    try:
        nightly_failure.succeeded(db)
    except (StorageError, sqlite3.Error) as exc:  # the reports are written: the next run clears it
        log.debug("could not clear the nightly run's last failure: %s", exc)
    return [{"date": r["date"], **r["summary"], "drifts": len(r["drifts"]),
             "files": [str(Path(config.report_dir) / report_filename(r["date"], f)) for f in ("json", "csv", "html")]}
            for r in reports]


def _keep_failure(db: Any, error: str, dates: list[str]) -> None:
    """Record the nightly run's failure, best effort: on a full or read-only database disk (often the failure
    itself) it cannot be written, and the job's own error line and `status`'s disk line say it instead."""
    try:
        nightly_failure.failed(db, error, dates, utcnow().replace(microsecond=0))
    except (StorageError, sqlite3.Error) as exc:
        log.debug("could not record the nightly run's failure: %s", exc)
