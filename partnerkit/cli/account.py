"""`partnerkit account show|trust-key`: the provider account a database serves (partnerkit.account)."""

from __future__ import annotations

import click

from partnerkit.account import describe
from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import FORMATS, emit_one

VERDICTS = {
    "known": "PARTNERKIT_API_KEY was already known as this database's account's: nothing changed",
    "adopt": "this database served no account yet: it now serves PARTNERKIT_API_KEY's",
    "same": "PARTNERKIT_API_KEY lists wallets of this database's account: it is recorded as that account's",
    "cannot_tell": "PARTNERKIT_API_KEY is now trusted as this database's account's",
}


@click.group("account")
def account_group() -> None:
    """The provider account this database serves: one database, report directory, receiver and worker per account.

    The account is known by its wallets (GET /api/v1/wallets): a key of the same account, rotated, lists
    them too and is taken on its first call; a key whose wallets are none of them belongs to another
    account and every call with it is refused (exit 2) after that one read, before anything else is sent or stored.
    """


@account_group.command("show")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="Output format; json and csv go to stdout alone.")
@pass_app
def show_command(app: AppContext, fmt: str) -> None:
    """The account's wallets and the API keys known as its own (by fingerprint: the first 12 hex digits of the
    key's SHA-256, never the key), and whether PARTNERKIT_API_KEY is one of them. Reads the database only.

    A database that serves no account yet adopts the account of the first key that calls the provider. A
    configured key not known yet is checked by its first call (one GET /api/v1/wallets).
    """
    found = describe(app.existing_db, app.config.api_key)
    known = found["configured_key_known"]
    record = {"wallets": [w["wallet_id"] for w in found["wallets"]],
              "currencies": sorted({w["currency"] for w in found["wallets"] if w["currency"]}),
              "keys": [k["fingerprint"] for k in found["keys"]],
              "configured_key": "not set" if known is None else "known" if known else "not checked yet"}
    rows = ([{"wallet_id": w["wallet_id"], "currency": w["currency"], "first_seen_at": w["first_seen_at"],
              "source": w["source"]} for w in found["wallets"]])
    if fmt == "json":
        emit_one(record, fmt, json_value={**found, "configured_key": record["configured_key"]})
        return
    if not found["wallets"] and not found["keys"]:
        click.echo("this database serves no provider account yet: the first key that calls the provider is "
                   "adopted", err=True)
        return
    emit_one(record, fmt, rows=rows, columns=["wallet_id", "currency", "first_seen_at", "source"])
    for key in found["keys"]:
        mark = " (PARTNERKIT_API_KEY)" if key["configured"] else ""
        click.echo(f"key {key['fingerprint']}{mark}: {key['how']} {key['first_used_at']}", err=True)
    if known is False:
        click.echo("PARTNERKIT_API_KEY is not known yet: its first call checks it (one GET /api/v1/wallets)", err=True)


@account_group.command("trust-key")
@pass_app
def trust_key_command(app: AppContext) -> None:
    """Take PARTNERKIT_API_KEY as this database's account's when the provider's wallet list cannot tell.

    Only needed when a key new to the database is refused with "partnerkit cannot tell" (the wallet list
    shows no wallet id to compare): run it once after rotating the key of the same account. It reads the
    wallets once with the key; a key whose wallets are another account's is refused all the same (exit 2).
    """
    from partnerkit.client import PartnerClient

    config = app.config.require("api_base_url", "api_key", "api_secret")
    with PartnerClient(config, app.db, purpose="account") as client:
        verdict = client.trust_account()
    click.echo(VERDICTS[verdict], err=True)


def register(group: click.Group) -> None:
    group.add_command(account_group)
