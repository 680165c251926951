"""`partnerkit webhooks register|list|test|update|delete`: the provider's webhooks, and the `webhooks`
group the other subcommands join: `webhooks token set|forget` (the signing tokens saved for them,
`_webhook_tokens`) and `webhooks deliveries|stats|retry` (the provider's deliveries, `_webhook_deliveries`)."""

from __future__ import annotations

import importlib
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import emit, emit_one, format_option
from partnerkit.cli.params import ID
from partnerkit.crypto import KeyFollower
from partnerkit.errors import ApiStatusError
from partnerkit.store import webhook_tokens
from partnerkit.timeutil import iso, utcnow

ORDER_EVENTS = ("order.created", "order.pending", "order.processing", "order.delivered",
                "order.partially_delivered", "order.cancelled", "order.failed")


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
@click.option("--again", is_flag=True,
              help="Register another webhook although an active one already delivers to this URL (each event then "
                   "arrives twice, stored once). Without it nothing is created: exit 0 when that webhook's token is "
                   "saved here (already registered), else 1.")
@format_option
@pass_app
def register_command(app: AppContext, url: str, name: str, events: tuple[str, ...], credential_id: int | None,
                     again: bool, fmt: str) -> None:
    """Create a webhook; its token (returned only once) is saved encrypted and accepted by the receiver.

    First it reads the provider's webhooks (one request), so that running README's setup again is safe (a
    second run used to create a second webhook, and every event then arrived twice). When an active webhook
    already delivers to the same URL nothing is created: if its token is saved here, it is printed as the
    one registered and the command exits 0 (nothing to do); if its token is not saved here (a register stopped
    after the provider created it: the token is shown only once), its deliveries are refused, and the command
    exits 1 saying how to save it (`partnerkit webhooks token set N`) or remove it (`partnerkit webhooks delete
    N`, then register). When the list cannot be read, the tokens saved here for the URL are named instead and
    the command exits 1 (nothing confirmed, nothing created). --again registers another all the same. After
    registering, it warns about every other webhook with the URL."""
    from receiver.tokens import save_sealed

    client = _client(app)
    client.check_account()  # another account's key: refused before a voucher key file is generated here
    listed, unlisted = _provider_webhooks(client)
    if not again and (existing := _already_registered(app, url, listed, unlisted)) is not None:
        _say_already_registered(app, existing, url, events, listed, fmt)
        return
    # The key is checked before the webhook is created: the token comes back only once, and a key
    # refused after that would leave a webhook at the provider whose deliveries nothing accepts. The
    # token is sealed with the key file as it is once the answer is in (`save_sealed`): a rotation and a
    # retire may have run while the provider answered.
    keys = KeyFollower(app.config)
    created = client.create_webhook(name=name, url=url, events=list(events or ORDER_EVENTS),
                                    credential_id=credential_id)
    webhook_id = str(created.id)
    save_sealed(app.db, keys, webhook_id, created.token,
                lambda sealed: webhook_tokens.save(app.db, webhook_id, sealed, now=utcnow(), name=created.name,
                                                   url=created.url, events=list(created.events)))
    emit_one({"id": created.id, "name": created.name, "url": created.url, "events": list(created.events)}, fmt)
    click.echo(f"webhook {created.id} registered; its signing token is saved encrypted and the receiver now "
               f"accepts deliveries signed with it for X-Webhook-ID {created.id} (running receivers pick it up "
               "within seconds)", err=True)
    _warn_off_path(app, url)
    for line in _same_url(app, listed, unlisted, {url, created.url}, webhook_id):
        click.echo(line, err=True)


def _provider_webhooks(client: Any) -> tuple[list | None, Exception | None]:
    """The provider's webhooks (read once, before the register: the check and the warnings after it share
    the read), or None and why they could not be read."""
    from partnerkit.errors import ApiError

    try:
        return client.list_webhooks(), None
    except ApiError as exc:
        return None, exc


def _known_here(app: AppContext, webhook_id: str) -> bool:
    """Whether the receiver holds a token for this webhook: saved by a register, or bound in the settings."""
    return (any(row["webhook_id"] == webhook_id for row in webhook_tokens.listing(app.db))
            or any(t.webhook_id == webhook_id for t in app.config.webhook_tokens))


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _url_key(url: str | None) -> str:
    """A URL as the same receiver: scheme and host in lower case (RFC 3986 says they are case-insensitive), the
    scheme's default port dropped, an empty path as "/"; the path and query as given (a server may tell them
    apart by case). Text that does not parse is compared as it is."""
    from urllib.parse import urlsplit

    text = (url or "").strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return text
    if not parts.scheme or not parts.hostname:
        return text
    scheme = parts.scheme.lower()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname  # hostname is lower case already
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")


def _already_registered(app: AppContext, url: str, listed: list | None, unlisted: Exception | None) -> Any:
    """The active webhook at the provider that already delivers to `url` and whose token is saved here (the
    first, when several do), or None when none delivers there: a rerun of the setup has nothing to do. A state
    the command cannot settle by itself is an error (exit 1, nothing created), not a usage error: a webhook of
    that URL whose token is not saved here, and, when the provider's list could not be read, a URL the tokens
    saved here name (nothing can confirm it is still registered). Active: `is_active` not false (the list's
    fields are "not shown", so one without it counts as active)."""
    if listed is not None:
        same = [w for w in listed if _url_key(w.url) == _url_key(url) and w.is_active is not False]
        source = " (active at the provider)"
    else:
        same = [row["webhook_id"] for row in webhook_tokens.listing(app.db) if _url_key(row["url"]) == _url_key(url)]
        source = f", as far as the tokens saved here tell (the provider's webhooks could not be listed: {unlisted})"
    if not same:
        return None
    ids = [str(w) if listed is None else str(w.id) for w in same]
    said = (f"webhook {ids[0]} already delivers to {url}{source}" if len(ids) == 1
            else f"webhooks {', '.join(ids)} already deliver to {url}{source}")
    again = "; --again registers another webhook all the same (each event then arrives twice)"
    lost = [i for i in ids if not _known_here(app, i)]
    if lost:
        raise click.ClickException(
            f"{said}; the token of {', '.join(lost)} is not saved here (a register stopped after the provider created "
            "it: the token is shown only once), so the receiver refuses its deliveries; nothing registered: "
            f"`partnerkit webhooks token set {lost[0]}` saves its signing token (read from stdin; a lost one is "
            "replaced by rotating the signing secret in the provider's client portal), or `partnerkit webhooks "
            f"delete {lost[0]}`, then register again{again}")
    if listed is None:
        raise click.ClickException(f"{said}; nothing registered: run it again once the provider answers "
                                   f"(`partnerkit webhooks list` shows its webhooks){again}")
    return same[0]


def _say_already_registered(app: AppContext, webhook: Any, url: str, asked: tuple[str, ...], listed: list,
                            fmt: str) -> None:
    """Print the webhook a rerun found already registered (the shape a register prints), say so on stderr with
    what differs from what was asked, and warn about the other webhooks of the URL, as after a register."""
    webhook_id = str(webhook.id)
    saved = next((row for row in webhook_tokens.listing(app.db) if row["webhook_id"] == webhook_id), {})
    name = webhook.name if isinstance(webhook.name, str) else saved.get("name")
    events = list(webhook.events) if isinstance(webhook.events, (list, tuple)) else saved.get("events")
    emit_one({"id": webhook.id, "name": name, "url": _plain(webhook.url), "events": events}, fmt)
    how = "its token is saved here" if saved else "PARTNERKIT_WEBHOOK_TOKENS binds a token to it"
    click.echo(f"webhook {webhook.id} is already registered for {_plain(webhook.url)} and the receiver accepts its "
               f"deliveries ({how}): nothing to do; --again registers another webhook all the same (each event then "
               "arrives twice)", err=True)
    if asked and events is not None and set(asked) != set(events):
        click.echo(f"warning: webhook {webhook.id} subscribes to {', '.join(events) or 'no event'}, not to the events "
                   f"asked for: `partnerkit webhooks update {webhook.id} --events ...` changes them", err=True)
    _warn_off_path(app, url)
    for line in _same_url(app, listed, None, {url, _plain(webhook.url) or url}, webhook_id):
        click.echo(line, err=True)


def _same_url(app: AppContext, listed: list | None, unlisted: Exception | None, urls: set[str],
              new_id: str) -> list[str]:
    """A warning for each other webhook at the provider that delivers to this URL (after the new one's token is
    saved: a failure here loses nothing). A second webhook to the same receiver doubles every delivery; one whose
    token is not saved here is what a register stopped after the provider created it leaves (the token is shown
    only once), and its deliveries are refused. Read from the provider's list (read before the register), not
    from the saved tokens alone, which never hold such a webhook; when the list cannot be read, from the saved
    tokens, saying so."""
    saved = {row["webhook_id"]: row for row in webhook_tokens.listing(app.db)}
    bound = {t.webhook_id for t in app.config.webhook_tokens if t.webhook_id is not None}
    lines = []
    keys = {_url_key(u) for u in urls}
    saved_here = [i for i, row in saved.items() if _url_key(row["url"]) in keys and i != new_id]
    paused: set[str] = set()
    if listed is None:
        others = saved_here
        lines.append(f"warning: the provider's webhooks could not be listed ({unlisted}) to look for another webhook "
                     "delivering to this URL; `partnerkit webhooks list` shows them, and whether each one's token "
                     "is saved")
    else:
        others = [str(w.id) for w in listed if _url_key(w.url) in keys and str(w.id) != new_id]
        paused = {str(w.id) for w in listed if w.is_active is False}
        gone = [i for i in saved_here if i not in {str(w.id) for w in listed}]
        lines += [f"warning: a token is still saved for webhook {i}, which delivered to this URL but which the "
                  f"provider no longer lists; `partnerkit webhooks delete {i}` forgets it" for i in gone]
    for other in others:
        if other in paused:
            lines.append(f"warning: webhook {other} (inactive) has this URL too: `partnerkit webhooks update {other} "
                         f"--active` would make each event arrive twice; `partnerkit webhooks delete {other}` removes it")
            continue
        if other in saved or other in bound:
            lines.append(f"warning: webhook {other} already delivers to this URL: each event now arrives twice "
                         f"(stored once); `partnerkit webhooks delete {other}` removes the old one")
            continue
        unbound = any(t.webhook_id is None for t in app.config.webhook_tokens)
        refused = ("the receiver checks its deliveries only against the unbound tokens of PARTNERKIT_WEBHOOK_TOKENS "
                   "and refuses them unless one of those signs them" if unbound else
                   "the receiver refuses each of its deliveries (401, reason no_token) and the provider marks them "
                   "failed after its retries")
        lines.append(f"warning: webhook {other} also delivers to this URL, and its token is not saved here (a "
                     "`webhooks register` stopped after the provider created it leaves such a webhook: the token "
                     f"is shown only once): {refused}; `partnerkit webhooks delete {other}` removes it")
    return lines


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
    (its own 404) still has its saved token forgotten; run it again after a failure, it is safe to repeat.
    """
    try:
        _client(app).delete_webhook(webhook_id)
        deleted = True
    except ApiStatusError as exc:
        # Only the provider's own 404 says it has no such webhook: a web server's HTML 404 under a wrong
        # PARTNERKIT_API_BASE_URL says nothing of it, and the token stays (the error names the setting).
        if exc.status != 404 or not exc.from_provider:
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
        if not exc.from_provider:
            raise  # a web server's page or a proxy's refusal, not the provider's: the error names the base URL
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


def register(group: click.Group) -> None:
    # Their commands join webhooks_group as they are imported (imported here: each imports this module).
    for module in ("partnerkit.cli._webhook_deliveries", "partnerkit.cli._webhook_tokens"):
        importlib.import_module(module)

    group.add_command(webhooks_group)
