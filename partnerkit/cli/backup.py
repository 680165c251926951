"""`partnerkit backup FILE`: a consistent copy of the live database."""

from __future__ import annotations

import time
from pathlib import Path

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import PROGRESS_EVERY_S
from partnerkit.cli.params import output_file
from partnerkit.store.vouchers import keyed_values


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


class _Copied:
    """Says what is copied, once the copy has begun, then how far it is, to stderr, at most every
    PROGRESS_EVERY_S: a big store is seconds to minutes of copying on a slow disk, and silence looks
    like a hang."""

    def __init__(self, source: object, destination: str) -> None:
        self.source, self.destination = source, destination
        self.last: float | None = None

    def __call__(self, copied: int, total: int) -> None:
        now = time.monotonic()
        if self.last is None:
            self.last = now
            click.echo(f"backing up {self.source} ({_mb(total)}) to {self.destination}", err=True)
        elif now - self.last >= PROGRESS_EVERY_S and copied < total:
            self.last = now
            click.echo(f"backup: {_mb(copied)} of {_mb(total)} copied", err=True)


@click.command("backup")
@click.argument("destination", type=click.Path(dir_okay=False, writable=True), callback=output_file)
@pass_app
def backup_command(app: AppContext, destination: str) -> None:
    """Copy the live database to DESTINATION, a new file (mode 0600), with SQLite's online backup API;
    safe while running.

    The copy is the database as of the moment the backup starts, whatever the receiver and the worker
    write meanwhile (they are not held up; the -wal file grows until the copy ends). It is written
    beside DESTINATION as .NAME.backup-PID, checked (`PRAGMA integrity_check`) and renamed into place;
    a backup that was killed leaves that file, and the next backup into the same directory removes it
    and says so. Says how far it is every few seconds, and ends with the size and the time taken.
    DESTINATION's directory must exist: one that does not (a typo in its name) is refused with exit 2,
    nothing created or written.

    Back up the voucher key file (PARTNERKIT_DB + '.voucher.key') once as well, unless
    PARTNERKIT_VOUCHER_KEY is set: without the key, stored voucher codes cannot be read (a key file
    that is missing while the database holds values sealed with it is a warning, with their count). After a key
    rotation, a backup made before `partnerkit keys rewrap` still needs the old key: keep the old key
    as long as such backups are kept.
    """
    from partnerkit.store.backup import backup
    from partnerkit.store.db import connect

    # The file as it is, never migrated first: a backup taken right after installing a new release is
    # the way back to the old one, which refuses a newer schema (docs/upgrade.md).
    db = connect(app.existing_path())
    started = time.monotonic()
    try:
        done = backup(db, destination, progress=_Copied(app.config.db_path, destination))
    except OSError as exc:  # e.g. a parent that is a file
        raise click.ClickException(f"cannot write backup {destination}: {exc.strerror or exc}") from exc
    finally:
        db.conn.close()
    for leftover in done.leftovers:
        click.echo(f"removed {leftover}, the unfinished copy of a backup that was killed", err=True)
    if done.unclaimed:
        click.echo("left by killed backups of an earlier release (delete them unless such a backup is running): "
                   + ", ".join(str(path) for path in done.unclaimed), err=True)
    click.echo(f"backed up {app.config.db_path} to {done.path} ({_mb(done.size_bytes)} in "
               f"{time.monotonic() - started:.1f} s)", err=True)
    if not app.config.voucher_key:
        click.echo(_key_file_line(app.config.key_file, app.config.db_path), err=True)


def _key_file_line(key_file: Path, database: Path) -> str:
    """What the backup's reader needs besides it: the voucher key file, or, when that file is missing, a warning that
    the values sealed with it cannot be read without it (counted in the database backed up: `keyed_values`, read
    only; the copy is left alone, so nothing but it lands beside it)."""
    if key_file.exists():
        return (f"remember the voucher key file {key_file} (back it up once, keep it apart; after `partnerkit keys "
                "rotate` back it up again, and keep the old copy as long as backups made before the rewrap are kept)")
    sealed = keyed_values(database)
    if not sealed:
        return (f"no voucher key file at {key_file} yet, and no stored voucher or webhook token is sealed with one: "
                "partnerkit generates it when it first stores one; back it up once it exists")
    return (f"warning: the voucher key file {key_file} is missing, and the database backed up holds {sealed} stored "
            "voucher(s) or webhook token(s) sealed with it: neither it nor this backup can be read without that key. "
            "Restore the key file from its own backup (or set PARTNERKIT_VOUCHER_KEY to its key; `partnerkit keys "
            "status` then shows what it opens) and keep a copy apart from the database backups")


def register(group: click.Group) -> None:
    group.add_command(backup_command)
