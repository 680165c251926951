"""`partnerkit webhooks token set|forget`: the signing tokens saved for the provider's webhooks, read
from stdin or a hidden prompt (never the command line), saved encrypted."""

from __future__ import annotations

import re
import sys

import click

from partnerkit.cli.context import AppContext, created_line, pass_app, refuse_uncreatable
from partnerkit.cli.params import ID
from partnerkit.cli.webhooks import _none_left, webhooks_group
from partnerkit.config import MIN_TOKEN_LENGTH
from partnerkit.crypto import KeyFollower, check_voucher_key
from partnerkit.store import webhook_tokens
from partnerkit.timeutil import utcnow


@webhooks_group.group("token")
def token_group() -> None:
    """Replace or forget the signing token saved for a webhook (the webhook at the provider is untouched)."""


TOKEN_INPUT_LIMIT = 4096  # characters read from stdin: a token is a line, not a file
# A delivery header pasted whole ("X-SERVICE-WEBHOOK-TOKEN: ..." from a captured request); the document's
# token is a plain string, and none begins with a header's name and a colon.
_HEADER_LINE = re.compile(r"^X-[A-Za-z0-9-]+\s*:", re.IGNORECASE)


class NotAToken(click.ClickException):
    """What was given cannot be a signing token: one line, exit 2 (bad input, as a usage error is)."""

    exit_code = 2


def check_token(token: str, webhook_id: str) -> list[str]:
    """Refuse (NotAToken) a string that cannot be a webhook signing token; return warnings about one that may
    be, but looks copied with something around it.

    The document gives a token no format or length ("token: string, signing secret, returned only at
    creation"; with a credential_id it is that credential's signing secret), so only what no secret can be is
    refused: nothing, whitespace or a control character inside (it is one header value), fewer than
    MIN_TOKEN_LENGTH characters (the floor PARTNERKIT_WEBHOOK_TOKENS has), a header line. What a real token
    could also be (quotes around it, an `ID:` prefix, `sha256=`) is saved, with a warning. The value of
    X-SERVICE-WEBHOOK-TOKEN is the signing secret itself (Webhooks, "Delivery headers"), so it is the token.
    No message quotes the token."""
    if not token:
        raise NotAToken("no token given: pipe it on stdin (e.g. `... webhooks token set 12 < new.token`) "
                        "or run the command in a terminal to type it")
    header = _HEADER_LINE.match(token)
    if header:
        name = header.group(0).rstrip(": \t")
        raise NotAToken(f"that is a header line ({name}: ...), not a token: give only the value after the colon "
                        "(X-SERVICE-WEBHOOK-TOKEN's value is the signing token; X-Signature's is a signature, "
                        "which changes with every delivery)")
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise NotAToken("the token holds a space, a line break or a control character: give the signing token "
                        "alone, on one line")
    if len(token) < MIN_TOKEN_LENGTH:  # the same floor as PARTNERKIT_WEBHOOK_TOKENS
        raise NotAToken(f"the token is shorter than {MIN_TOKEN_LENGTH} characters; use the signing token the "
                        "provider issued")
    warnings = []
    if len(token) > 2 and token[0] == token[-1] and token[0] in "\"'`":
        warnings.append("the token begins and ends with a quote; if the quotes came with a copy (JSON, a shell "
                        "line), they are not part of it")
    if token.startswith(f"{webhook_id}:"):
        warnings.append(f"the token begins with '{webhook_id}:', as a PARTNERKIT_WEBHOOK_TOKENS entry binding a "
                        "token to this webhook does; that prefix is not part of the token")
    if token.lower().startswith("sha256="):
        warnings.append("the token begins with 'sha256=', as an X-Signature value may: a signature is not the "
                        "token (it changes with every delivery)")
    return warnings


def _read_token() -> str:
    """The token, from stdin when that is a pipe or a file, else typed twice at a hidden prompt; never
    from the command line, where `ps` and the shell's history would show it."""
    stdin = sys.stdin
    if stdin.isatty():
        text = click.prompt("signing token", hide_input=True, confirmation_prompt=True, err=True)
    else:
        text = stdin.read(TOKEN_INPUT_LIMIT + 1)
        if len(text) > TOKEN_INPUT_LIMIT:
            raise NotAToken(f"stdin holds more than {TOKEN_INPUT_LIMIT} characters: give the token alone, on one "
                            "line")
    return text.strip()


@token_group.command("set")
@click.argument("webhook_id", type=ID)
@pass_app
def token_set_command(app: AppContext, webhook_id: int) -> None:
    """Save WEBHOOK_ID's signing token, replacing the one saved before.

    The token is read from stdin (`partnerkit webhooks token set 12 < new.token`) or typed twice at a
    hidden prompt, never taken from the command line, where `ps` and the shell's history would show it;
    it is saved encrypted and bound to WEBHOOK_ID. Running receivers accept it, and stop accepting the
    token it replaced, within seconds. Use it after the signing secret was rotated in the client portal
    (README, "Rotate the webhook token"); the webhook at the provider is not touched.

    What cannot be a token is refused with exit 2, nothing saved: nothing given, a space, line break or
    control character inside, fewer than 16 characters, a header line (`X-SERVICE-WEBHOOK-TOKEN: ...`: give
    the value alone). The document sets no other format, so a token in quotes, or beginning with
    `WEBHOOK_ID:` or `sha256=`, is saved with a warning (set it again if the warning is right). A
    PARTNERKIT_DB that does not exist yet is created, with a warning, once the token is accepted.
    """
    from receiver.tokens import save_sealed

    webhook = str(webhook_id)
    if app.config.db_path.exists():
        db = app.db  # the database and the key first: nothing to type into a command that cannot save it
        keys = KeyFollower(app.config)  # followed while the token is typed: sealed with the key file as it is then
        token = _read_token()
        warnings = check_token(token, webhook)
    else:  # a refused token must leave no new database (nor a generated key file) behind
        refuse_uncreatable(app.config.db_path)
        check_voucher_key(app.config)
        token = _read_token()
        warnings = check_token(token, webhook)
        db = app.db
        # Said before the key is read: a voucher key file generated beside the new database is named after it.
        said = created_line(app.config.db_path, origin=app.db_origin(), made=app.db_dirs_made)
        click.echo(f"warning: {said}", err=True)
        keys = KeyFollower(app.config)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    replaced = save_sealed(db, keys, webhook, token,
                           lambda sealed: webhook_tokens.set_token(db, webhook, sealed, now=utcnow()))
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
