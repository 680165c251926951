"""`partnerkit backup FILE`: a consistent copy of the live database."""

from __future__ import annotations

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.params import output_file


@click.command("backup")
@click.argument("destination", type=click.Path(dir_okay=False, writable=True), callback=output_file)
@pass_app
def backup_command(app: AppContext, destination: str) -> None:
    """Copy the live database to DESTINATION, a new file (mode 0600), with SQLite's online backup API;
    safe while running.

    Back up the voucher key file (PARTNERKIT_DB + '.voucher.key') once as well, unless
    PARTNERKIT_VOUCHER_KEY is set: without the key, stored voucher codes cannot be read. After a key
    rotation, a backup made before `partnerkit keys rewrap` still needs the old key: keep the old key
    as long as such backups are kept.
    """
    from partnerkit.store.backup import backup
    from partnerkit.store.db import connect

    # The file as it is, never migrated first: a backup taken right after installing a new release is
    # the way back to the old one, which refuses a newer schema (docs/upgrade.md).
    db = connect(app.existing_path())
    try:
        path = backup(db, destination)
    except OSError as exc:  # e.g. a parent that is a file: the store's cleanup meets it before its own try
        raise click.ClickException(f"cannot write backup {destination}: {exc.strerror or exc}") from exc
    finally:
        db.conn.close()
    click.echo(f"backed up {app.config.db_path} to {path}", err=True)
    if not app.config.voucher_key:
        click.echo(f"remember the voucher key file {app.config.key_file} (back it up once, keep it apart; after "
                   "`partnerkit keys rotate` back it up again, and keep the old copy as long as backups made "
                   "before the rewrap are kept)", err=True)


def register(group: click.Group) -> None:
    group.add_command(backup_command)
