"""The `partnerkit` command line.

One click group; each concern's commands live in their own module of this package and are
found automatically: any module here that defines `register(group)` adds its commands. Errors
are turned into one-line messages at this edge: a ConfigError exits 2, and so does an API key of
another provider account than the database's (AccountMismatch); any other partnerkit error exits 1,
and none prints a traceback. So do the two families of third-party errors a
command can meet through its input (a path: OSError; the database file: sqlite3.Error), and an
argument that is not valid UTF-8 (the shell hands such bytes over as lone surrogates) is a usage
error before any command runs.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sqlite3
import sys

import click
from click.core import ParameterSource

from partnerkit.cli.context import AppContext
from partnerkit.config import ConfigError
from partnerkit.errors import (AccountCheckFailed, AccountMismatch, ApiStatusError, MalformedResponse, PartnerKitError,
                               TransportError, Unauthorized, base_url_hint, shown_base_url)
from partnerkit.store.budget import refusal_names_the_clock


REFUSED_KEY = (" (the provider refused PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET: check both, and that this host is "
               "on the key's IP allowlist)")
# A 401 whose message blames the request's timestamp (partnerkit.store.budget.refusal_names_the_clock): the key is
# most likely fine, and this host's clock is off by over the provider's 5 minutes.
REFUSED_CLOCK = (" (the provider refused the request's timestamp: check this host's clock first (`timedatectl`: is "
                 "it NTP-synchronised?); a signed request is taken only within 5 minutes of the provider's time. If "
                 "the clock is right, check PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET and that this host is on the "
                 "key's IP allowlist)")


def _refused(exc: Unauthorized) -> str:
    """What to check after a 401: this host's clock first when its message names the timestamp, else the key."""
    return REFUSED_CLOCK if refusal_names_the_clock(exc.message) else REFUSED_KEY


class ConfigExit(click.ClickException):
    """A configuration problem: exit code 2, the message names the setting."""

    exit_code = 2


class PartnerKitGroup(click.Group):
    """A click group that turns partnerkit's errors into one-line messages, never tracebacks."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                raise click.UsageError(f"argument {arg!r} is not valid UTF-8 text", ctx) from None
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise ConfigExit(str(exc)) from exc
        except AccountMismatch as exc:  # PARTNERKIT_API_KEY and PARTNERKIT_DB do not go together
            raise ConfigExit(str(exc)) from exc
        except PartnerKitError as exc:
            raise click.ClickException(explain(ctx, exc)) from exc
        except BrokenPipeError:
            raise  # click's own handling: `partnerkit ... | head` ends quietly
        except OSError as exc:  # a path given on the command line or in the configuration
            raise click.ClickException(os_error_line(exc)) from exc
        except sqlite3.Error as exc:  # reads outside a transaction are not converted by the store
            raise click.ClickException(f"database error: {exc}") from exc


def _configured_base_url(ctx: click.Context) -> str | None:
    """PARTNERKIT_API_BASE_URL as configured (None before a configuration)."""
    app = ctx.obj
    return getattr(app.config, "api_base_url", None) if isinstance(app, AppContext) else None


def _unreachable(ctx: click.Context, exc: PartnerKitError) -> str:
    """No answer from the provider: say which base URL was tried (without any user:password in it)."""
    shown = shown_base_url(_configured_base_url(ctx))
    return f"{exc} (provider at {shown}, from PARTNERKIT_API_BASE_URL)" if shown else str(exc)


def _elsewhere(ctx: click.Context, exc: PartnerKitError) -> str:
    """For an answer that is not the provider's (a web server's HTML 404 under a wrong base URL path, a proxy's
    403/407, a redirect): what to check, naming the base URL (`errors.base_url_hint`); "" for the provider's own."""
    return base_url_hint(exc, _configured_base_url(ctx))


def explain(ctx: click.Context, exc: PartnerKitError) -> str:
    """The one line a partnerkit error is shown as, with what to check where the error says it (the base URL for
    no answer or one that is not the provider's, the key for a 401). A command that goes on past an error and
    stops later (`webhooks retry` of several) quotes the error with it, as the group would print it."""
    if isinstance(exc, TransportError):
        return _unreachable(ctx, exc)
    if isinstance(exc, Unauthorized):
        return f"{exc}{_refused(exc)}"
    if isinstance(exc, (ApiStatusError, MalformedResponse)):  # a MalformedResponse: a write's redirect among others
        return f"{exc}{_elsewhere(ctx, exc)}"
    if isinstance(exc, AccountCheckFailed):  # the wallet read before a write: explained as that read's error would be
        if isinstance(exc.__cause__, TransportError):
            return _unreachable(ctx, exc)
        return f"{exc}{_refused(exc.__cause__) if isinstance(exc.__cause__, Unauthorized) else _elsewhere(ctx, exc)}"
    return str(exc)


def os_error_line(exc: OSError) -> str:
    """One line for an OSError; mkdir's "File exists" on a file where a directory belongs is named as such."""
    if isinstance(exc, FileExistsError) and exc.filename and os.path.isfile(exc.filename):
        return f"{exc.filename} is a file where a directory is needed"
    return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc.strerror or exc)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """--version: the release in one line (partnerkit.release), without loading any configuration."""
    if not value or ctx.resilient_parsing:
        return
    from partnerkit.release import describe

    click.echo(describe())
    ctx.exit()


@click.group(cls=PartnerKitGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
# A plain path: load_config names a missing file or a directory in one line (click's own check would be
# a usage error about '--config', even when PARTNERKIT_CONFIG named it).
@click.option("--config", "config_file", type=click.Path(), metavar="FILE", envvar="PARTNERKIT_CONFIG",
              help="A .env-style file of PARTNERKIT_* settings; the environment overrides it.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, the database schema it migrates to and the git commit it was built from, "
                   "and exit.")
@click.pass_context
def cli(ctx: click.Context, config_file: str | None) -> None:
    """partnerkit: receive the provider's signed webhooks, settle recharges, reconcile the wallet.

    Settings come from PARTNERKIT_* environment variables (or --config FILE); run
    `partnerkit config` to see the effective values.
    """
    named_by = ctx.get_parameter_source("config_file")
    ctx.obj = AppContext(config_file, "PARTNERKIT_CONFIG" if named_by is ParameterSource.ENVIRONMENT else "--config")


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in {"context", "output", "params"} or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(cli)


def _first_sentence(text: str) -> str:
    """The first sentence of a help text's first paragraph, whole (click's own short help is cut to fit the line
    with "...", which left a command's summary mid-sentence in `partnerkit --help`; a definition list wraps it)."""
    words = text.partition("\n\n")[0].split()
    if words and words[0] == "\b":
        words = words[1:]
    for i, word in enumerate(words):
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            return " ".join(words[:i + 1])
    return " ".join(words)


def _whole_summaries(group: click.Group) -> None:
    """Give every command under `group` that has no short help of its own its help's first sentence as one."""
    for command in group.commands.values():
        if not command.short_help and command.help:
            command.short_help = _first_sentence(command.help)
        if isinstance(command, click.Group):
            _whole_summaries(command)


_register_commands()
_whole_summaries(cli)


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="partnerkit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
