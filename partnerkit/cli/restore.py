"""`partnerkit restore BACKUP`: put a backup in place of the database, with the services stopped."""

from __future__ import annotations

import click

from partnerkit.cli.context import AppContext, pass_app


@click.command("restore")
@click.argument("backup", type=click.Path(dir_okay=False))
@pass_app
def restore_command(app: AppContext, backup: str) -> None:
    """Replace the database (PARTNERKIT_DB) with BACKUP, a file `partnerkit backup` wrote; stop the receiver,
    the worker and partnerkit-status.timer first.

    Refuses while another process has the database open or a running worker holds its lease. Checks the
    backup (`PRAGMA integrity_check`, a partnerkit schema no newer than this release's), copies it beside
    the database (mode 0600) and renames it into place. The database it replaces is moved aside with its
    -wal and -shm files (PARTNERKIT_DB.replaced-TIME), never deleted, and never left where SQLite would
    replay a stale -wal onto the restored file. The backup is not migrated: the release that made it can
    still open it, so restore before reinstalling an older release (docs/upgrade.md).
    """
    from partnerkit.release import schema_version
    from partnerkit.store.backup import restore

    config = app.config
    _refuse_while_a_worker_runs(config)
    done = restore(backup, config.db_path, latest_schema=schema_version())
    click.echo(f"restored {backup} to {done.path} (schema {done.schema_version}, integrity check ok, mode 0600)",
               err=True)
    if done.replaced is not None:
        extra = f" with its {' and '.join(p.name.rsplit('-', 1)[1] for p in done.replaced_files)}" \
            if done.replaced_files else ""
        click.echo(f"the database it replaced is kept as {done.replaced}{extra}: delete it once the restore "
                   "is confirmed", err=True)
    elif done.replaced_files:
        click.echo(f"moved stale {', '.join(str(p) for p in done.replaced_files)} aside", err=True)
    _say_which_key(app, done.keyed_values)
    click.echo("start the receiver, the worker and partnerkit-status.timer again; the syncs refill from the "
               "provider what happened since the backup", err=True)


def _refuse_while_a_worker_runs(config) -> None:
    """Name a running worker by its lease (`restore` would refuse anyway: it holds the database open)."""
    import sqlite3

    from partnerkit.errors import PartnerKitError
    from partnerkit.status import WORKER_LEASE, worker_running
    from partnerkit.store import locks
    from partnerkit.store.db import connect
    from partnerkit.timeutil import utcnow

    path = config.db_path
    if not path.is_file():
        return
    try:
        db = connect(path)
    except PartnerKitError:
        return  # the file being replaced may well be damaged; `restore` still checks that nothing has it open
    try:
        lease = locks.current(db, WORKER_LEASE)
    except (sqlite3.Error, PartnerKitError, ValueError):  # the same: damaged, or not a partnerkit database
        lease = None
    finally:
        db.conn.close()
    if lease is not None and worker_running(lease, utcnow()):
        raise click.ClickException(f"the worker {lease.holder} holds the lease on {path}: stop it first "
                                   "(systemctl stop partnerkit-worker)")


def _say_which_key(app: AppContext, keyed: int) -> None:
    """The restored codes and tokens open only with the key they were sealed with: say where it must be."""
    config = app.config
    if not keyed:
        return
    if config.voucher_key:
        where = "PARTNERKIT_VOUCHER_KEY must be the key of the backup's time"
    elif config.key_file.exists():
        where = f"the key file {config.key_file} must hold the key of the backup's time (a rotated one still does)"
    else:
        where = (f"the voucher key file {config.key_file} is missing: put back the one saved with the backup, or "
                 "every command that needs the key stops")
    click.echo(f"{keyed} stored voucher(s) and webhook token(s) are sealed with the voucher key: {where}; "
               "`partnerkit keys status` shows whether they open", err=True)


def register(group: click.Group) -> None:
    group.add_command(restore_command)
