"""`partnerkit config`: the effective settings, secrets masked."""

from __future__ import annotations

from dataclasses import fields

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import emit, format_option
from partnerkit.config import ENV_NAMES
from partnerkit.crypto import warn_if_passphrase

SECRET_FIELDS = {"api_key", "api_secret", "webhook_tokens", "voucher_key", "voucher_key_previous"}


def _mask(name: str, value: object) -> str:
    if value in (None, ()):
        return "(not set)"
    if name == "webhook_tokens":
        return ", ".join(f"{t.webhook_id + ':' if t.webhook_id else ''}***" for t in value)  # type: ignore[union-attr]
    if name == "voucher_key_previous":
        return f"*** ({len(value)} set)"  # type: ignore[arg-type]
    if name in SECRET_FIELDS:
        return "*** (set)"
    return str(value)


@click.command("config")
@format_option
@pass_app
def config_command(app: AppContext, fmt: str) -> None:
    """Show the effective configuration (secrets masked) and check that it is valid."""
    config = app.config
    if config.voucher_key:  # a key file's keys are warned about where they are read (crypto.load_cipher)
        warn_if_passphrase(config.voucher_key, "PARTNERKIT_VOUCHER_KEY")
    rows = [{"variable": ENV_NAMES[f.name], "value": _mask(f.name, getattr(config, f.name))} for f in fields(config)]
    emit(rows, ["variable", "value"], fmt)


def register(group: click.Group) -> None:
    group.add_command(config_command)
