"""What every command gets: the configuration (loaded once, lazily) and the store."""

from __future__ import annotations

import os
from pathlib import Path

import click

from partnerkit.config import Config, load_config
from partnerkit.store import Database, open_db
from partnerkit.store.db import COMMAND_BUSY_TIMEOUT_MS, LockWait

# What a command that sends a write to the provider had not done when its wait for the database ran out.
# Each records its intent before sending and waits for the database there, and an answer that cannot be
# stored afterwards is not this error (exit 3, and the command says how it is located): so nothing was sent.
_NOT_SENT = {
    "recharges submit": "no recharge was sent to the provider; submit it again once the database is free",
    "orders create": "no order was sent to the provider; run the command again once the database is free",
}


def lock_wait_notice(waited_s: float) -> None:
    """The one line a command prints when it has waited a second for another process's write lock."""
    click.echo(f"waiting for the database: another partnerkit process is writing (a big day's match, a backup, a "
               f"prune or a key rewrap can hold it for seconds); waiting up to {waited_s:.0f} s", err=True)


def command_lock_wait() -> LockWait:
    """How the running command waits for the write lock: the notice line, and what its error says if the wait
    runs out (for a command that sends a write, that nothing was sent)."""
    ctx = click.get_current_context(silent=True)
    path = ctx.command_path.partition(" ")[2] if ctx is not None else ""
    return LockWait(notice=lock_wait_notice, gave_up=_NOT_SENT.get(path, "try again in a minute"))


class AppContext:
    """Loads configuration and opens the store on first use, so `--help` never needs either."""

    def __init__(self, config_file: str | None, config_source: str = "--config") -> None:
        self.config_file = config_file
        self.config_source = config_source  # how the file was named: --config or PARTNERKIT_CONFIG
        self._config: Config | None = None
        self._db: Database | None = None
        self.db_created = False  # `db` found no file and created a new, empty database

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(config_file=self.config_file, config_source=self.config_source)
        return self._config

    @property
    def db(self) -> Database:
        """The store, created (empty, migrated) if the file does not exist yet."""
        if self._db is None:
            path = self.config.db_path
            created = not path.exists()
            # A longer wait than the services' (partnerkit.store.db COMMAND_BUSY_TIMEOUT_MS): a person waits
            # out another process's long write (the nightly match) rather than meet "database is locked".
            self._db = open_db(path, busy_timeout_ms=COMMAND_BUSY_TIMEOUT_MS, lock_wait=command_lock_wait())
            self.db_created = created
        return self._db

    @property
    def existing_db(self) -> Database:
        """The store, for commands that only read what the receiver and the worker recorded.

        A database that does not exist is named instead of created: a mistyped PARTNERKIT_DB would
        otherwise answer from a new empty one ("no events received yet", "nothing needs attention",
        an all-zero report, a backup of nothing)."""
        if self._db is None:
            self.existing_path()
        return self.db

    def existing_path(self) -> Path:
        """PARTNERKIT_DB, named in a ClickException when there is no such file (see `existing_db`)."""
        path = self.config.db_path
        if not path.exists():
            raise click.ClickException(f"cannot open database {str(path)!r}: it does not exist "
                                       "(check PARTNERKIT_DB or --config; the worker creates it)")
        return path


def refuse_uncreatable(path: Path) -> None:
    """Name a database path that does not exist and could not be created, as opening it would (exit 1), for a
    command that checks its input before creating the database: nothing to type into a command that
    cannot save it. Creates nothing (the directories `open_db` would make are only looked for)."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise click.ClickException(f"cannot open database {str(path)!r}: {folder} is a file where a directory is "
                                   "needed")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise click.ClickException(f"cannot open database {str(path)!r}: the directory {str(folder)!r} cannot be "
                                   "written by this user")


def created_line(path: Path, *, done: bool = True) -> str:
    """What a service or a command that may create the database says when it does (`AppContext.db_created`;
    `done=False`: about to, for the worker, which opens it itself).

    Creating it is right at a first start (the receiver's, the worker's), but a mistyped PARTNERKIT_DB
    creates one too, and then the receiver stores events the worker never reads, or the worker reports a
    day from an empty store: the path is named, so that one line in the log tells the two apart."""
    what = "did not exist and was created" if done else "does not exist: the worker creates it"
    return (f"database {str(path)!r} {what} (a first start); if partnerkit already keeps its database elsewhere, "
            "check PARTNERKIT_DB or --config: the receiver, the worker and the commands must all use the same one")


pass_app = click.make_pass_decorator(AppContext)
