"""`partnerkit webhooks register|list|test|update|delete|deliveries|stats|retry`: the provider's webhooks;
`webhooks token set|forget`: the signing tokens saved for them."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import Progress, counted, emit, emit_one, format_option
from partnerkit.cli.params import ID, at_most_int64
from partnerkit.crypto import load_cipher
from partnerkit.config import MIN_TOKEN_LENGTH
from partnerkit.errors import ApiError, ApiStatusError
from partnerkit.store import webhook_tokens
from partnerkit.timeutil import iso, utcnow

ORDER_EVENTS = ("order.created", "order.pending", "order.processing", "order.delivered",
                "order.partially_delivered", "order.cancelled", "order.failed")
DELIVERY_COLUMNS = ["id", "webhook_url_id", "order_id", "event_type", "event_id", "status", "attempt_count",
                    "max_attempts", "response_status", "response_time_ms", "delivered_at", "created_at"]


def _client(app: AppContext):
    from partnerkit.client import PartnerClient

    return PartnerClient(app.config, app.db, purpose="cli")


def _plain(value: Any) -> Any:
    """A client record field for output (the client's MISSING sentinel becomes empty); a time is UTC
    with a Z suffix, as in every other command."""
    if isinstance(value, datetime):
        return iso(value)
    return value if isinstance(value, (str, int, float, bool, list, tuple, dict)) or value is None else (
        value.isoformat() if hasattr(value, "isoformat") else None)


SECRET_WORDS = ("token", "secret")


def _masked(answer: Any) -> Any:
    """An answer with the value of every key naming a token or a secret replaced by '***': the document
    shows the token only in the create answer (saved by `register`), but update, test and retry answers
    are "not shown", and a signing secret printed there would end up in a terminal's scrollback or a
    ticket."""
    if isinstance(answer, dict):
        return {key: "***" if any(word in str(key).lower() for word in SECRET_WORDS) and value not in (None, "")
                else _masked(value) for key, value in answer.items()}
    if isinstance(answer, list):
        return [_masked(item) for item in answer]
    return answer


def _answer_fields(answer: Any) -> dict | None:
    """The fields of an answer whose shape the document does not show: its `data` object, else the
    body itself when that is an object, else None."""
    if not isinstance(answer, dict):
        return None
    data = answer.get("data")
    return data if isinstance(data, dict) else answer


def _answer_row(webhook_id: int, answer: Any) -> dict:
    """One table row for an answer whose shape the document does not show: its fields (see
    `_answer_fields`) instead of a Python repr of the whole body; the output module shows a list
    of names comma-joined and any other nested value as JSON."""
    fields = _answer_fields(answer)
    row: dict[str, Any] = {"webhook_id": webhook_id}
    for key, value in (fields if fields is not None else {"response": answer}).items():
        if key != "success":
            row[str(key)] = _plain(value)
    return row


def _warn_off_path(app: AppContext, url: str | None) -> None:
    """Warn when a webhook URL's path is not the one the receiver listens on: it answers 404 on any
    other, and the provider's retries then run out without anything reaching the inbox."""
    if url is None:
        return
    try:
        path = urlsplit(url).path or "/"
    except ValueError:  # the provider accepted it; not ours to judge further
        return
    if path != app.config.webhook_path:
        click.echo(f"warning: the URL's path {path} is not PARTNERKIT_WEBHOOK_PATH ({app.config.webhook_path}): "
                   "the receiver answers 404 there unless a proxy in front of it rewrites the path", err=True)


@click.group("webhooks")
def webhooks_group() -> None:
    """Webhook configurations and deliveries at the provider."""


@webhooks_group.command("register")
@click.option("--url", required=True, help="Your receiver's public HTTPS URL, ending in the webhook path.")
@click.option("--name", default="partnerkit", show_default=True, help="A label for the webhook at the provider.")
@click.option("--events", "events", multiple=True, type=click.Choice(ORDER_EVENTS),
              help="Event type to subscribe to (repeat; default: all order events).")
@click.option("--credential-id", type=ID, help="Sign with this API credential's signing secret.")
@format_option
@pass_app
def register_command(app: AppContext, url: str, name: str, events: tuple[str, ...], credential_id: int | None,
                     fmt: str) -> None:
    """Create a webhook; its token (returned only once) is saved encrypted and accepted by the receiver."""
    from receiver.tokens import seal_token

    client = _client(app)
    client.check_account()  # another account's key: refused before a voucher key file is generated here
    # The key is checked before the webhook is created: the token comes back only once, and a key
    # refused after that would leave a webhook at the provider whose deliveries nothing accepts.
    cipher = load_cipher(app.config)
    created = client.create_webhook(name=name, url=url, events=list(events or ORDER_EVENTS),
                                    credential_id=credential_id)
    webhook_id = str(created.id)
    # Saved before this one: a second webhook to the same receiver doubles every delivery.
    same_url = [row["webhook_id"] for row in webhook_tokens.listing(app.db)
                if row["url"] == url and row["webhook_id"] != webhook_id]
    webhook_tokens.save(app.db, webhook_id, seal_token(cipher, webhook_id, created.token),
                        now=utcnow(), name=created.name, url=created.url, events=list(created.events))
    emit_one({"id": created.id, "name": created.name, "url": created.url, "events": list(created.events)}, fmt)
    click.echo(f"webhook {created.id} registered; its signing token is saved encrypted and the receiver now "
               f"accepts deliveries signed with it for X-Webhook-ID {created.id} (running receivers pick it up "
               "within seconds)", err=True)
    _warn_off_path(app, url)
    for other in same_url:
        click.echo(f"warning: webhook {other} already delivers to this URL: each event now arrives twice (stored "
                   f"once); `partnerkit webhooks delete {other}` removes the old one", err=True)


@webhooks_group.command("list")
@format_option
@pass_app
def list_command(app: AppContext, fmt: str) -> None:
    """Webhooks at the provider, and whether the receiver holds each one's token."""
    saved = {row["webhook_id"] for row in webhook_tokens.listing(app.db)}
    rows = [{"id": w.id, "name": _plain(w.name), "url": _plain(w.url),
             "events": list(w.events) if isinstance(w.events, (list, tuple)) else None,
             "is_active": _plain(w.is_active), "created_at": _plain(w.created_at), "token_saved": str(w.id) in saved}
            for w in _client(app).list_webhooks()]
    emit(rows, ["id", "name", "url", "events", "is_active", "created_at", "token_saved"], fmt,
         empty_message="no webhooks registered at the provider")


@webhooks_group.command("test")
@click.argument("webhook_id", type=ID)
@format_option
@pass_app
def test_command(app: AppContext, webhook_id: int, fmt: str) -> None:
    """Ask the provider to send a test delivery (`events list` shows it with state test)."""
    result = _client(app).test_webhook(webhook_id)
    result = _masked(result)
    emit_one(_answer_row(webhook_id, result), fmt, json_value=result)


@webhooks_group.command("delete")
@click.argument("webhook_id", type=ID)
@format_option
@pass_app
def delete_command(app: AppContext, webhook_id: int, fmt: str) -> None:
    """Delete a webhook at the provider and forget its saved token.

    Running receivers stop accepting that token within seconds. A webhook the provider no longer has
    (404) still has its saved token forgotten; run it again after a failure, it is safe to repeat.
    """
    try:
        _client(app).delete_webhook(webhook_id)
        deleted = True
    except ApiStatusError as exc:
        if exc.status != 404:
            raise
        deleted = False
    forgotten = webhook_tokens.forget(app.db, str(webhook_id))
    if not deleted and not forgotten:
        raise click.ClickException(f"webhook {webhook_id}: the provider has no such webhook and no token of it "
                                   "is saved (`partnerkit webhooks list` shows both)")
    emit_one({"id": webhook_id, "deleted_at_provider": deleted, "token_forgotten": forgotten}, fmt)
    said = [f"webhook {webhook_id} " + ("deleted at the provider" if deleted else "was already gone at the provider")]
    if forgotten:
        said.append("its saved token is forgotten (running receivers stop accepting it within seconds)")
    if any(t.webhook_id == str(webhook_id) for t in app.config.webhook_tokens):
        said.append("PARTNERKIT_WEBHOOK_TOKENS still binds a token to this id: remove it from the configuration")
    said += _none_left(app)
    click.echo("; ".join(said), err=True)


def _none_left(app: AppContext) -> list[str]:
    """The warning for when no webhook token is accepted any more (after a token was forgotten)."""
    from receiver.tokens import has_some_token

    if has_some_token(app.config, app.db):
        return []
    return ["no webhook token is accepted any more: the receiver rejects every delivery and will refuse to "
            "start until `partnerkit webhooks register`, `webhooks token set` or PARTNERKIT_WEBHOOK_TOKENS gives it one"]


@webhooks_group.command("update")
@click.argument("webhook_id", type=ID)
@click.option("--name", help="New friendly name.")
@click.option("--url", help="New public HTTPS URL of your receiver (the provider refuses plain HTTP).")
@click.option("--events", "events", multiple=True, type=click.Choice(ORDER_EVENTS),
              help="Event type to subscribe to (repeat; replaces the subscribed list).")
@click.option("--active/--inactive", "is_active", default=None,
              help="Resume or pause deliveries to this webhook.")
@format_option
@pass_app
def update_command(app: AppContext, webhook_id: int, name: str | None, url: str | None, events: tuple[str, ...],
                   is_active: bool | None, fmt: str) -> None:
    """Change a webhook's name, URL, events or active state at the provider (give at least one).

    Its saved token stays as it is; the name, URL and events saved beside it follow the change.
    """
    fields = {key: value for key, value in (("name", name), ("url", url), ("events", list(events) or None),
                                            ("is_active", is_active)) if value is not None}
    if not fields:
        raise click.UsageError("give at least one of --name, --url, --events, --active/--inactive")
    try:
        answer = _client(app).update_webhook(webhook_id, **fields)
    except ApiStatusError as exc:
        if exc.status == 404:
            raise click.ClickException(f"webhook {webhook_id}: the provider has no such webhook "
                                       "(`partnerkit webhooks list` shows yours)") from exc
        if not 400 <= exc.status < 500:
            raise
        hint = ("; --url is plain HTTP, and the provider delivers to HTTPS URLs only"
                if url is not None and url.lower().startswith("http:") else "")
        raise click.ClickException(f"webhook {webhook_id} not updated: {exc}{hint}") from exc
    saved = webhook_tokens.update_details(app.db, str(webhook_id), **_saved_details(fields, answer))
    shown = _masked(answer)
    emit_one(_answer_row(webhook_id, shown), fmt, json_value=shown)
    said = f"webhook {webhook_id} updated at the provider"
    if saved and fields.keys() & {"name", "url", "events"}:
        said += "; the name, URL and events saved with its token follow the change"
    if is_active is False:
        said += f"; it is paused: the provider sends it nothing until `webhooks update {webhook_id} --active`"
    click.echo(said, err=True)
    _warn_off_path(app, url)


def _saved_details(sent: dict, answer: Any) -> dict:
    """name, url and events to keep beside a saved token: as the provider's answer shows them
    (its shape is not in the document), else as sent and accepted."""
    shown = _answer_fields(answer) or {}
    details = {}
    for key, kind in (("name", str), ("url", str), ("events", list)):
        for source in (shown, sent):
            value = source.get(key)
            if isinstance(value, kind) and (kind is not list or all(isinstance(e, str) for e in value)):
                details[key] = value
                break
    return details


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


@webhooks_group.command("deliveries")
@click.option("--status", type=click.Choice(["pending", "delivered", "failed"]),
              help="Only deliveries in this state (failed: the provider gave up retrying).")
@click.option("--event-type", type=click.Choice(ORDER_EVENTS), help="Only deliveries of this event type.")
@click.option("--order-id", type=ID, help="Only deliveries about this order.")
@click.option("--webhook-id", "webhook_url_id", type=ID,
              help="Only deliveries to this webhook (an ID of `webhooks list`).")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True, callback=at_most_int64,
              help="Which page of deliveries, newest first.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True, help="Deliveries per page.")
@format_option
@pass_app
def deliveries_command(app: AppContext, fmt: str, **filters: Any) -> None:
    """Delivery attempts as the provider records them."""
    page = _client(app).list_deliveries(**filters)
    rows = [{c: _plain(getattr(d, c, None)) for c in DELIVERY_COLUMNS} for d in page.items]
    past_the_end = not rows and page.total_pages and page.page > page.total_pages
    empty = (f"no deliveries on page {page.page}: there are {page.total_pages} page(s) of {page.total_count}"
             if past_the_end else "no deliveries")
    emit(rows, DELIVERY_COLUMNS, fmt, empty_message=empty)
    if fmt == "table" and rows and page.total_pages:
        click.echo(f"page {page.page} of {page.total_pages} ({counted(page.total_count or 0, 'delivery', 'deliveries')})", err=True)


@webhooks_group.command("stats")
@format_option
@pass_app
def stats_command(app: AppContext, fmt: str) -> None:
    """Delivery statistics: totals and the last 24 hours."""
    stats = _client(app).delivery_stats()
    emit_one({k: v for k, v in vars(stats).items() if k != "raw"}, fmt)


RETRY_COLUMNS = ["delivery_id", "outcome", "message"]


@webhooks_group.command("retry")
@click.argument("delivery_ids", nargs=-1, type=ID)
@click.option("--failed", "all_failed", is_flag=True,
              help="Re-queue every delivery the provider lists as failed (read 100 a page first, then re-queued).")
@format_option
@pass_app
def retry_command(app: AppContext, delivery_ids: tuple[int, ...], all_failed: bool, fmt: str) -> None:
    """Re-queue failed deliveries (only while they have attempts left): the ids given, and/or --failed.

    One id prints the provider's answer as one object, and a refusal is the error (exit 1). Several
    ids, or --failed, print one row per delivery (re-queued, or refused with the provider's message)
    and go on past a refusal; they leave the hour's last requests to the worker (as the syncs do) and
    stop when only those are left, saying how many remain (run the same command again later). Progress
    goes to stderr. Exit 0 when every one was re-queued; 1 otherwise.
    """
    if not delivery_ids and not all_failed:
        raise click.UsageError("give one or more DELIVERY_IDs, or --failed")
    if len(delivery_ids) == 1 and not all_failed:
        _retry_one(app, delivery_ids[0], fmt)
        return
    from partnerkit.store.budget import walk_reserve

    client = _client(app).leaving(walk_reserve(app.config.hourly_budget, app.config.poller_budget_share))
    progress = Progress("webhooks retry")
    wanted = list(dict.fromkeys(delivery_ids + (tuple(_failed_ids(client, progress)) if all_failed else ())))
    rows: list[dict] = []
    stopped = None
    for number, delivery_id in enumerate(wanted, 1):
        try:
            answer = _masked(client.retry_delivery(delivery_id))
            message = answer.get("message") if isinstance(answer, dict) else None
            rows.append({"delivery_id": delivery_id, "outcome": "re-queued", "message": message or "re-queued"})
        except ApiStatusError as exc:
            if not 400 <= exc.status < 500 or exc.status in (401, 429):  # the provider, not this delivery
                stopped = exc
                break
            rows.append({"delivery_id": delivery_id, "outcome": "refused", "message": str(exc)})
        except ApiError as exc:  # no room left in the budget (BudgetExhausted), or no answer: the rest wait
            stopped = exc
            break
        progress("deliveries re-queued or refused", number)
    emit(rows, RETRY_COLUMNS, fmt, empty_message="none re-queued" if wanted else "no failed deliveries to re-queue")
    if not wanted:
        return
    queued = sum(1 for row in rows if row["outcome"] == "re-queued")
    click.echo(f"re-queued {counted(queued, 'delivery', 'deliveries')} of {len(wanted):,}"
               + (f"; {len(rows) - queued:,} refused by the provider" if len(rows) > queued else ""), err=True)
    if stopped is not None:
        raise click.ClickException(f"stopped after {len(rows):,} of {len(wanted):,}: {stopped}; the rest were not "
                                   "sent: run the same command again later")
    if queued < len(rows):
        sys.exit(1)


def _failed_ids(client: Any, progress: Progress) -> list[int]:
    """Every delivery id the provider lists as failed, read page by page before any is re-queued.

    Re-queuing while walking would move each one out of the `failed` filter, the rest up a place,
    and the next page (read by offset) would skip as many (docs/client.md, "Walking lists"); read
    first, nothing of ours moves them. A record that cannot be read is counted and skipped."""
    from partnerkit.client import iterate

    unreadable: list[Any] = []
    ids = []
    for delivery in iterate(lambda n: client.list_deliveries(page=n, limit=100, status="failed"),
                            on_malformed=unreadable.append):
        ids.append(delivery.id)
        progress("failed deliveries listed", len(ids))
    if unreadable:
        click.echo(f"warning: {counted(len(unreadable), 'failed delivery', 'failed deliveries')} could not be read "
                   "from the provider's list and are left out", err=True)
    return ids


def _retry_one(app: AppContext, delivery_id: int, fmt: str) -> None:
    """One delivery: the provider's answer as one object; a refusal is the command's error."""
    result = _masked(_client(app).retry_delivery(delivery_id))
    fields = dict(result) if isinstance(result, dict) else {}
    row = {"delivery_id": fields.pop("delivery_id", delivery_id),
           "message": fields.pop("message", None) or f"delivery {delivery_id} re-queued"}
    row.update({str(k): _plain(v) for k, v in fields.items()})
    emit_one(row, fmt, json_value=result)


def register(group: click.Group) -> None:
    group.add_command(webhooks_group)
