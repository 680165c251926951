"""`partnerkit webhooks token set|forget`: the signing tokens saved for the provider's webhooks, read
from stdin or a hidden prompt (never the command line), saved encrypted."""

from __future__ import annotations

import sys

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.params import ID
from partnerkit.cli.webhooks import _none_left, webhooks_group
from partnerkit.config import MIN_TOKEN_LENGTH
from partnerkit.crypto import load_cipher
from partnerkit.store import webhook_tokens
from partnerkit.timeutil import utcnow


@webhooks_group.group("token")
def token_group() -> None:
    """Replace or forget the signing token saved for a webhook (the webhook at the provider is untouched)."""


TOKEN_INPUT_LIMIT = 4096  # characters read from stdin: a token is a line, not a file


def _read_token() -> str:
    """The token, from stdin when that is a pipe or a file, else typed twice at a hidden prompt; never
    from the command line, where `ps` and the shell's history would show it."""
    stdin = sys.stdin
    if stdin.isatty():
        text = click.prompt("signing token", hide_input=True, confirmation_prompt=True, err=True)
    else:
        text = stdin.read(TOKEN_INPUT_LIMIT + 1)
        if len(text) > TOKEN_INPUT_LIMIT:
            raise click.ClickException(f"stdin holds more than {TOKEN_INPUT_LIMIT} characters: give the token "
                                       "alone, on one line")
    token = text.strip()
    if not token:
        raise click.ClickException("no token given: pipe it on stdin (e.g. `... webhooks token set 12 < new.token`) "
                                   "or run the command in a terminal to type it")
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise click.ClickException("the token holds a space, a line break or a control character: give the "
                                   "signing token alone, on one line")
    # The same floor as PARTNERKIT_WEBHOOK_TOKENS (the message never quotes the token).
    if len(token) < MIN_TOKEN_LENGTH:
        raise click.ClickException(f"the token is shorter than {MIN_TOKEN_LENGTH} characters; use the signing "
                                   "token the provider issued")
    return token


@token_group.command("set")
@click.argument("webhook_id", type=ID)
@pass_app
def token_set_command(app: AppContext, webhook_id: int) -> None:
    """Save WEBHOOK_ID's signing token, replacing the one saved before.

    The token is read from stdin (`partnerkit webhooks token set 12 < new.token`) or typed twice at a
    hidden prompt, never taken from the command line, where `ps` and the shell's history would show it;
    it is saved encrypted and bound to WEBHOOK_ID. Running receivers accept it, and stop accepting the
    token it replaced, within seconds. Use it after the signing secret was rotated in the client portal
    (README, "Rotate the webhook token"); the webhook at the provider is not touched. Exit 0; 1 when no
    usable token was given.
    """
    from receiver.tokens import seal_token

    db = app.db  # the database and the key first: nothing to type into a command that cannot save it
    cipher = load_cipher(app.config)
    token = _read_token()
    webhook = str(webhook_id)
    replaced = webhook_tokens.set_token(db, webhook, seal_token(cipher, webhook, token), now=utcnow())
    click.echo(f"webhook {webhook_id}: " + ("its saved token is replaced; running receivers accept the new one and "
                                            "refuse the old within seconds" if replaced else
                                            "token saved; running receivers accept it within seconds"), err=True)


@token_group.command("forget")
@click.argument("webhook_id", type=ID)
@pass_app
def token_forget_command(app: AppContext, webhook_id: int) -> None:
    """Forget WEBHOOK_ID's saved signing token; the webhook at the provider is not touched.

    Running receivers stop accepting that token within seconds. Deliveries for WEBHOOK_ID are then
    checked against the tokens PARTNERKIT_WEBHOOK_TOKENS binds to it, else its unbound ones. To remove
    the webhook too, use `webhooks delete`. Exit 0; 1 when no token of WEBHOOK_ID is saved.
    """
    webhook = str(webhook_id)
    if not webhook_tokens.forget(app.existing_db, webhook):
        raise click.ClickException(f"no token of webhook {webhook_id} is saved (`partnerkit webhooks list` shows "
                                   "TOKEN_SAVED)")
    configured = app.config.webhook_tokens
    if any(t.webhook_id == webhook for t in configured):
        then = "its deliveries are checked against the tokens PARTNERKIT_WEBHOOK_TOKENS binds to it"
    elif any(t.webhook_id is None for t in configured):
        then = "its deliveries are checked against the unbound tokens of PARTNERKIT_WEBHOOK_TOKENS"
    else:
        then = "its deliveries are refused (401) until a token of it is accepted again"
    said = [f"webhook {webhook_id}: its saved token is forgotten (running receivers stop accepting it within "
            f"seconds); {then}"]
    click.echo("; ".join(said + _none_left(app)), err=True)
