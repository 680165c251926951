"""The `partnerkit` command line.

One click group; each concern's commands live in their own module of this package and are
found automatically: any module here that defines `register(group)` adds its commands. Errors
are turned into one-line messages at this edge: a ConfigError exits 2, any other partnerkit
error exits 1, and neither prints a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from partnerkit import __version__
from partnerkit.cli.context import AppContext
from partnerkit.config import ConfigError
from partnerkit.errors import PartnerKitError


class ConfigExit(click.ClickException):
    """A configuration problem: exit code 2, the message names the setting."""

    exit_code = 2


class PartnerKitGroup(click.Group):
    """A click group that turns partnerkit's errors into one-line messages, never tracebacks."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise ConfigExit(str(exc)) from exc
        except PartnerKitError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=PartnerKitGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--config", "config_file", type=click.Path(dir_okay=False), envvar="PARTNERKIT_CONFIG",
              help="A .env-style file of PARTNERKIT_* settings; the environment overrides it.")
@click.version_option(__version__, prog_name="partnerkit")
@click.pass_context
def cli(ctx: click.Context, config_file: str | None) -> None:
    """partnerkit: receive the provider's signed webhooks, settle recharges, reconcile the wallet.

    Settings come from PARTNERKIT_* environment variables (or --config FILE); run
    `partnerkit config` to see the effective values.
    """
    ctx.obj = AppContext(config_file)


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in {"context", "output"} or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(cli)


_register_commands()


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="partnerkit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
