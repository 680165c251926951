"""What every command gets: the configuration (loaded once, lazily) and the store."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Sequence

import click

from partnerkit.config import Config, load_config, setting_origin
from partnerkit.store import Database, open_db
from partnerkit.store.db import COMMAND_BUSY_TIMEOUT_MS, LockWait

# What a command that sends a write to the provider had not done when its wait for the database ran out.
# Each records its intent before sending and waits for the database there, and an answer that cannot be
# stored afterwards is not this error (exit 3, and the command says how it is located): so nothing was sent.
_NOT_SENT = {
    "recharges submit": "no recharge was sent to the provider; submit it again once the database is free",
    "orders create": "no order was sent to the provider; run the command again once the database is free",
}


# What a command that sends money would record in a new, empty database if PARTNERKIT_DB were mistyped: a real
# debit the worker never polls and no report matches against the right store (`AppContext.existing_db_to_send`).
_SENDS = {"recharges submit": "recharge", "orders create": "order"}

# The commands that say themselves that they created the database, after checks that must come first (a
# refused start leaves no database behind); `AppContext.db` says it for every other command.
_SAY_CREATED_THEMSELVES = {"serve", "run", "reconcile", "webhooks token set"}


def _command() -> str:
    """The running command's path without the program name ("recharges submit"), or "" outside click."""
    ctx = click.get_current_context(silent=True)
    return ctx.command_path.partition(" ")[2] if ctx is not None else ""


class MissingDatabase(click.ClickException):
    """A command that sends money was given a database that does not exist: exit 2, as a setting is wrong."""

    exit_code = 2


def lock_wait_notice(waited_s: float, writer: str) -> None:
    """The one line a command prints when it has waited a second for another process's write lock, naming who
    holds it (`writer`, `partnerkit.processes.database_writer`): partnerkit only when known to be."""
    click.echo(f"waiting for the database: {writer}; waiting up to {waited_s:.0f} s", err=True)


def command_lock_wait() -> LockWait:
    """How the running command waits for the write lock: the notice line, and what its error says if the wait
    runs out (for a command that sends a write, that nothing was sent)."""
    return LockWait(notice=lock_wait_notice, gave_up=_NOT_SENT.get(_command(), "try again in a minute"))


class AppContext:
    """Loads configuration and opens the store on first use, so `--help` never needs either."""

    def __init__(self, config_file: str | None, config_source: str = "--config") -> None:
        self.config_file = config_file
        self.config_source = config_source  # how the file was named: --config or PARTNERKIT_CONFIG
        self._config: Config | None = None
        self._db: Database | None = None
        self.db_created = False  # `db` found no file and created a new, empty database
        self.db_dirs_made: tuple[Path, ...] = ()  # the directories `db` created for it (`missing_directories`)

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(config_file=self.config_file, config_source=self.config_source)
        return self._config

    @property
    def db(self) -> Database:
        """The store, created (empty, migrated) if the file does not exist yet, and then said so on stderr.

        A mistyped PARTNERKIT_DB (or a relative one from another working directory) lands here too: the
        warning names the absolute path and where the setting came from, once, before the command goes on
        (serve, run, reconcile and `webhooks token set` say it themselves, after their own checks)."""
        if self._db is None:
            path = self.config.db_path
            created = not path.exists()
            made = missing_directories(path)
            # A longer wait than the services' (partnerkit.store.db COMMAND_BUSY_TIMEOUT_MS): a person waits
            # out another process's long write (the nightly match) rather than meet "database is locked".
            self._db = open_db(path, busy_timeout_ms=COMMAND_BUSY_TIMEOUT_MS, lock_wait=command_lock_wait())
            self.db_created, self.db_dirs_made = created, made
            if created and _command() not in _SAY_CREATED_THEMSELVES:
                click.echo(f"warning: {created_line(path, origin=self.db_origin(), made=made)}", err=True)
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

    @property
    def existing_db_to_send(self) -> Database:
        """The store, for a command that sends money (`recharges submit`, `orders create`): a database that does
        not exist is refused (exit 2) before anything is recorded or sent.

        Created on the spot, it would hold the intent and the answer of a real debit where the worker never
        polls it and the nightly match never finds it. A path that could not be created anyway is named as
        opening it would (exit 1, `refuse_uncreatable`), as for every command."""
        if self._db is None:
            path = self.config.db_path
            if not path.exists():
                refuse_uncreatable(path)
                what = _SENDS.get(_command(), "request")
                raise MissingDatabase(
                    f"database {os.path.abspath(path)!r} does not exist ({self.db_origin()}): no {what} was sent, "
                    "as it would be recorded in a new, empty database; check PARTNERKIT_DB or --config, or, if "
                    "this is a first start, create the database on purpose by starting the worker once "
                    f"(`{self.command_line('worker --once')}`) and run this command again")
        return self.db

    def existing_path(self) -> Path:
        """PARTNERKIT_DB, named in a ClickException when there is no such file (see `existing_db`)."""
        path = self.config.db_path
        if not path.exists():
            relative = "" if path.is_absolute() else f"; {self.db_origin()}"
            raise click.ClickException(f"cannot open database {os.path.abspath(path)!r}: it does not exist "
                                       f"(check PARTNERKIT_DB or --config; the worker creates it{relative})")
        return path

    def command_line(self, command: str) -> str:
        """`partnerkit COMMAND` as this run would have to be given it to read the same settings: with the --config
        file it was given (PARTNERKIT_CONFIG, like every other setting, is inherited by the next command)."""
        if self.config_file and self.config_source == "--config":
            return f"partnerkit --config {shlex.quote(self.config_file)} {command}"
        return f"partnerkit {command}"

    def db_origin(self) -> str:
        """Where PARTNERKIT_DB came from, as the messages about a missing database say it: "PARTNERKIT_DB, from
        the environment", "PARTNERKIT_DB 'var/pk.db' from --config file 'x.env', relative to the working
        directory", "PARTNERKIT_DB not set: the default 'var/partnerkit.db', relative to the working directory".

        A relative path is resolved against the working directory, as systemd and a shell hand the process
        the same text (README, "Configuration"); the messages show it made absolute beside this."""
        path = self.config.db_path
        where = setting_origin("PARTNERKIT_DB", config_file=self.config_file, config_source=self.config_source)
        if path.is_absolute():
            return f"PARTNERKIT_DB, from {where}" if where else "PARTNERKIT_DB not set: the default"
        said = (f"PARTNERKIT_DB {str(path)!r} from {where}" if where
                else f"PARTNERKIT_DB not set: the default {str(path)!r}")
        return f"{said}, relative to the working directory"


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


def missing_directories(path: Path) -> tuple[Path, ...]:
    """The directories that creating the file `path` makes (`partnerkit.files.make_private_dirs`), absolute,
    outermost first; none when its directory exists. Creates nothing."""
    missing = []
    folder = Path(os.path.abspath(path)).parent
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return tuple(reversed(missing))


def created_line(path: Path, *, done: bool = True, origin: str | None = None, made: Sequence[Path] = ()) -> str:
    """What a service or a command that may create the database says when it does (`AppContext.db_created`;
    `done=False`: about to, for the worker, which opens it itself), the path made absolute; `origin`
    (`AppContext.db_origin`) says where PARTNERKIT_DB came from; `made`, the directories created for it
    (`AppContext.db_dirs_made`; `missing_directories` before the worker opens it).

    Creating it is right at a first start (the receiver's, the worker's), but a mistyped PARTNERKIT_DB
    creates one too, and then the receiver stores events the worker never reads, or the worker reports a
    day from an empty store: the path is named, so that one line in the log tells the two apart. A typo in
    a directory's name makes that directory too (`/srv/partnerkti/pk.db`): each one made is named as well."""
    what = "did not exist and was created" if done else "does not exist: the worker creates it"
    first = "a first start"
    if made:
        dirs = ", ".join(repr(str(folder)) for folder in made)
        first += (f"; {'created' if done else 'it creates'} {'directory' if len(made) == 1 else 'directories'} "
                  f"{dirs} for it, mode 0700")
    named = f"{os.path.abspath(path)!r}" + (f" ({origin})" if origin else "")
    return (f"database {named} {what} ({first}); if partnerkit already keeps its database elsewhere, "
            "check PARTNERKIT_DB or --config: the receiver, the worker and the commands must all use the same one")


pass_app = click.make_pass_decorator(AppContext)
