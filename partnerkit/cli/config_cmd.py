"""`partnerkit config`: the effective settings, secrets masked, where each came from and what the services make of
them (the database's absolute path, the webhook tokens saved in it, the voucher key file); `--check` exits 1
naming what a service would refuse to start without.

Nothing is created or written: a PARTNERKIT_DB that does not exist stays so (the database is opened read-only,
and only when it exists), and so does the voucher key file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

import click

from partnerkit.cli.context import AppContext, missing_directories, pass_app, refuse_uncreatable
from partnerkit.cli.output import counted, emit, format_option
from partnerkit.config import ENV_NAMES, Config, ConfigError, setting_origins
from partnerkit.crypto import load_cipher
from partnerkit.store import webhook_tokens
from partnerkit.store.vouchers import keyed_values

SECRET_FIELDS = {"api_key", "api_secret", "webhook_tokens", "voucher_key", "voucher_key_previous"}
COLUMNS = ["variable", "value", "source", "note"]
# What the worker (and `run`, and every command that calls the provider) cannot start without.
PROVIDER_FIELDS = ("api_base_url", "api_key", "api_secret")
NO_TOKEN = ("no webhook token is accepted (set PARTNERKIT_WEBHOOK_TOKENS, or run `partnerkit webhooks register`, "
            "which saves the provider's token in the database)")


def _mask(name: str, value: object) -> str:
    if value in (None, ()):
        return "(not set)"
    if name == "webhook_tokens":
        return ", ".join(f"{t.webhook_id + ':' if t.webhook_id else ''}***" for t in value)  # type: ignore[union-attr]
    if name == "voucher_key_previous":
        return f"*** ({len(value)} set)"  # type: ignore[arg-type]
    if name in SECRET_FIELDS:
        return "*** (set)"
    if isinstance(value, Path):  # resolved as every process resolves it: against the working directory
        return os.path.abspath(value)
    return str(value)


def _source(origin: str | None) -> str:
    """The source column: `setting_origin`'s answer in one word."""
    if origin is None:
        return "default"
    return "environment" if origin == "the environment" else "file"


def _ids(ids: list[str]) -> str:
    return f"webhook{'s' if len(ids) > 1 else ''} {', '.join(ids)}"


@dataclass(frozen=True)
class Found:
    """What `config` finds beside the settings, read-only: the webhook ids with a token saved in the database
    (None: there is no database, or it cannot be read as one), the voucher key file's key count (None: not
    used, or there is none), and why a service would refuse the database or the key file (None: it would not)."""

    saved_ids: list[str] | None
    key_count: int | None
    db_problem: str | None
    key_problem: str | None


def look(config: Config) -> Found:
    """Read what the settings point at, creating nothing."""
    path = config.db_path
    shown = repr(os.path.abspath(path))
    saved_ids, db_problem = None, None
    if path.is_file():
        saved_ids = webhook_tokens.saved_ids_in_file(path)
        if not os.access(path, os.R_OK | os.W_OK):
            db_problem = f"the database {shown} cannot be read and written by this user"
    elif path.exists():
        db_problem = f"PARTNERKIT_DB {shown} is not a file (a directory?)"
    else:
        try:
            refuse_uncreatable(path)
        except click.ClickException as exc:
            db_problem = exc.message
    key_count, key_problem = None, None
    key_file = config.key_file
    if config.voucher_key or key_file.exists():
        # As `crypto.check_voucher_key` at the worker's start: the key, or the key file, readable and opening at
        # least one stored value (a passphrase is warned about). Never without them: that would generate a key file.
        try:
            cipher = load_cipher(config)
            key_count = None if config.voucher_key else 1 + cipher.previous_keys
        except ConfigError as exc:
            key_problem = str(exc)
    elif path.is_file():
        if sealed := keyed_values(path):  # what a first seal refuses (crypto._read_or_create_key_file)
            key_problem = (f"the voucher key file {os.path.abspath(key_file)!r} is missing, but the database holds "
                           f"{sealed} stored voucher(s) or webhook token(s) sealed with it: restore it from its "
                           "backup (or set PARTNERKIT_VOUCHER_KEY to that key)")
    return Found(saved_ids, key_count, db_problem, key_problem)


def _path_note(name: str, path: Path, creates: str) -> str:
    """A path setting's note: as given when relative, and whether it exists (what creates it if not)."""
    said = [] if path.is_absolute() else [f"{str(path)!r} relative to the working directory"]
    if path.exists():
        return "; ".join(said + ["exists"])
    made = missing_directories(path / "x") if name == "report_dir" else missing_directories(path)
    dirs = f", with {counted(len(made), 'new directory', 'new directories')} (mode 0700)" if made else ""
    return "; ".join(said + [f"does not exist yet: {creates}{dirs}"])


def note(name: str, config: Config, found: Found) -> str | None:
    """What the value of setting `name` comes to beyond itself, or None."""
    value = getattr(config, name)
    if name == "db_path":
        return _path_note(name, value, "the worker or the receiver creates it at a first start")
    if name == "report_dir":
        return _path_note(name, value, "created at the first report")
    if name in PROVIDER_FIELDS and not value:
        return "required: the worker, `run` and every command that calls the provider refuse to run without it"
    if name == "webhook_tokens":
        if found.saved_ids is None:
            saved = "no database yet" if not config.db_path.exists() else "the database cannot be read"
            return f"{saved}: no saved token counted" + ("" if value else "; the receiver refuses to start")
        ids = found.saved_ids
        if not ids:
            return "none saved in the database either: the receiver refuses to start" if not value else None
        them = "them" if len(ids) > 1 else "it"
        return (f"{'and ' if value else ''}{counted(len(ids), 'token')} saved in the database ({_ids(ids)}, by "
                f"`webhooks register` or `webhooks token set`): the receiver accepts {them}")
    if name == "voucher_key":
        where = repr(os.path.abspath(config.key_file))
        if found.key_problem:
            return f"{'this key' if value else f'key file {where}'} cannot be used (see `partnerkit config --check`)"
        if value:
            return None
        if found.key_count is None:
            return (f"key file {where}, not made yet: generated (mode 0600) at first use (the receiver's first start, "
                    "the worker's first voucher); back it up then")
        previous = found.key_count - 1
        return f"key file {where} ({counted(found.key_count, 'key')}{f': {previous} previous' if previous else ''})"
    return None


def refusals(config: Config, found: Found) -> list[str]:
    """What the worker and the receiver would refuse to start for, one line each (none: they would start)."""
    lines = []
    missing = [ENV_NAMES[name] for name in PROVIDER_FIELDS if not getattr(config, name)]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        lines.append(f"the worker (and `run`) would refuse to start: {', '.join(missing)} {verb} not set")
    if not config.webhook_tokens and not found.saved_ids:
        lines.append(f"the receiver (`serve`, and `run`) would refuse to start: {NO_TOKEN}")
    for problem in (found.db_problem, found.key_problem):
        if problem:
            lines.append(f"the receiver and the worker would refuse to start: {problem}")
    return lines


@click.command("config")
@format_option
@click.option("--check", is_flag=True,
              help="Exit 1 when the worker or the receiver would refuse to start (the same table is printed; each "
                   "reason is a line on stderr): an unset API base URL, key or secret; no accepted webhook token; a "
                   "database, voucher key or key file that cannot be used (a key that opens none of the stored values "
                   "included).")
@pass_app
def config_command(app: AppContext, fmt: str, check: bool) -> None:
    """Show the effective configuration (secrets masked) and check that it is valid.

    Each setting is read as the services read it: `source` says where its value came from (`file`: the
    --config or PARTNERKIT_CONFIG file; `environment`, which overrides the file; `default`), and paths are
    shown absolute, resolved against the working directory. `note` says what a value comes to: whether the
    database and the report directory exist, the webhook tokens `webhooks register` saved in the database
    (their webhook ids, never the tokens), the voucher key file in use when PARTNERKIT_VOUCHER_KEY is not set
    (its path and number of keys, never a key), and what an unset credential stops. Creates nothing: the
    database is read only when it exists, and never written.

    Exit codes: 0; 1 with --check when a service would refuse to start (a line on stderr for each reason); 2
    for a malformed setting or --config file.
    """
    config = app.config
    origins = setting_origins(config_file=app.config_file, config_source=app.config_source)
    found = look(config)
    rows = [{"variable": ENV_NAMES[f.name], "value": _mask(f.name, getattr(config, f.name)),
             "source": _source(origins.get(ENV_NAMES[f.name])), "note": note(f.name, config, found)}
            for f in fields(config)]
    emit(rows, COLUMNS, fmt)
    if check:
        problems = refusals(config, found)
        for line in problems:
            click.echo(line, err=True)
        if problems:
            raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(config_command)
