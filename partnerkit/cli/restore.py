"""`partnerkit restore BACKUP`: put a backup in place of the database, with the services stopped."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import click

from partnerkit.cli.context import AppContext, pass_app

if TYPE_CHECKING:
    from partnerkit.store.backup import BackupTimes


@click.command("restore")
@click.argument("backup", type=click.Path(dir_okay=False))
@pass_app
def restore_command(app: AppContext, backup: str) -> None:
    """Replace the database (PARTNERKIT_DB) with BACKUP, a file `partnerkit backup` wrote; stop the receiver,
    the worker and partnerkit-status.timer first.

    Refuses while another process has the database open or a running worker holds its lease. Checks the
    backup (`PRAGMA integrity_check`, a partnerkit schema no newer than this release's), copies it beside
    the database (mode 0600), clears the worker lease it carries and renames it over the database in one
    step: PARTNERKIT_DB always holds the old database or the backup, whenever the command is killed. The
    database it replaces is kept as PARTNERKIT_DB.replaced-TIME (with its -wal, if a crash left one),
    never deleted, and no stale -wal is left where SQLite would replay it onto the restored file. The copy
    a killed run left behind is removed by the next run. The backup is not migrated: the release that
    made it can still open it, so restore before reinstalling an older release (docs/upgrade.md).

    It ends by naming what the backup holds last and what a restore loses for good (the provider cannot
    give it back: drift decisions, webhook tokens, submit intents and key rotations made since), and what
    to run next (README, "Back up and restore the SQLite file").
    """
    from partnerkit.release import schema_version
    from partnerkit.status import WORKER_LEASE
    from partnerkit.store.backup import restore

    config = app.config
    _refuse_while_a_worker_runs(config)
    done = restore(backup, config.db_path, latest_schema=schema_version(), forget_leases=(WORKER_LEASE,))
    say = functools.partial(click.echo, err=True)
    for leftover in done.leftovers:
        say(f"removed {leftover}, the copy of an earlier restore that was killed before it finished")
    say(f"restored {backup} to {done.path} (schema {done.schema_version}, integrity check ok, mode 0600)")
    if done.replaced is not None:
        extra = f" with its {' and '.join(p.name.rsplit('-', 1)[1] for p in done.replaced_files)}" \
            if done.replaced_files else ""
        say(f"the database it replaced is kept as {done.replaced}{extra}: delete it once the restore is confirmed")
    elif done.replaced_files:
        say(f"moved stale {', '.join(str(p) for p in done.replaced_files)} aside")
    for holder in done.leases_forgotten:
        say(f"cleared the worker lease the backup carried ({holder}): that worker is not running")
    _say_which_key(app, done.keyed_values)
    _say_what_is_lost(done.times)


def _say_what_is_lost(times: BackupTimes) -> None:
    """What a restore loses for good (the provider cannot give it back), from when, and what to run next."""
    say = functools.partial(click.echo, err=True)
    report = f"{times.report_date} (generated {times.report_generated_at})" if times.report_date else "none"
    decision = times.decision_at or "none"
    say(f"the backup's newest drift decision: {decision}; newest report: {report}; newest webhook token saved: "
        f"{times.token_at or 'none'}")
    decisions = "made after that decision" if times.decision_at else "made since the backup, which holds none"
    tokens = "saved after that token" if times.token_at else "saved since the backup, which holds none"
    say(f"lost for good with the restore (the provider cannot give them back): drift resolutions and escalations "
        f"{decisions}, with their history; webhook tokens {tokens} (the provider shows a token only once); the "
        "submit records (Idempotency-Key, client_reference) of recharges and orders placed since the backup; "
        "voucher key rotations since")
    say("start the receiver, the worker and partnerkit-status.timer again: the syncs refill from the provider "
        "the recharges, orders, vouchers and transactions since the backup, and the nightly run reports again "
        "the nights after the newest report. Then:")
    again = f"the drift decisions made after {decision}" if times.decision_at else \
        "every drift decision made since the backup, which holds none"
    say(f"  - finance re-applies {again} (`partnerkit drifts list --resolution pending`)")
    say("  - `partnerkit webhooks list`: a webhook with TOKEN_SAVED no was registered after the backup and its "
        "token is gone: `partnerkit webhooks register` a new one, then `partnerkit webhooks delete` the old one; "
        "a token saved for a webhook the provider no longer lists: `partnerkit webhooks token forget ID`")
    say("  - recharges partnerkit submitted after the backup come back as `unknown_to_partner` drifts whose detail "
        "says they carry partnerkit's own client_reference: the kit's own, not someone else's use of the key")
    say("  - report files of those nights already in PARTNERKIT_REPORT_DIR are kept aside, not overwritten "
        "(the worker logs each as a WARNING)")
    say("  - a `partnerkit keys rotate` done after the backup is undone: rotate again if it was for a leaked key")


def _refuse_while_a_worker_runs(config) -> None:
    """Name a running worker by its lease (`restore` would refuse anyway: it holds the database open)."""
    from partnerkit.status import WORKER_LEASE, worker_running
    from partnerkit.store.backup import stored_lease
    from partnerkit.timeutil import utcnow

    lease = stored_lease(config.db_path, WORKER_LEASE)  # the file being replaced may well be damaged: None
    if lease is not None and worker_running(lease, utcnow()):
        raise click.ClickException(f"the worker {lease.holder} holds the lease on {config.db_path}: stop it first "
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
