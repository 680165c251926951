"""`partnerkit keys status|rotate|rewrap|retire`: rotate the voucher key (partnerkit.rotation does the work).

No key is ever printed or logged, except the new key `keys rotate` prints on stdout when the keys
come from the environment (partnerkit cannot set them there itself).
"""

from __future__ import annotations

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import Progress, counted, emit_one
from partnerkit.crypto import load_cipher, new_key_text
from partnerkit.rotation import (DEFAULT_BATCH, KEY_PICKUP_S, Census, census, key_file_changed_at, retire_key_file,
                                 rewrap, rotate_key_file, wait_for_key_pickup, whole_seconds)

PICKUP = whole_seconds(KEY_PICKUP_S)
NEXT_STEP_FILE = ("next: run `partnerkit keys rewrap` (running receivers and workers re-read the key file and seal "
                  f"with the new key within {PICKUP} s; no restart is needed: rewrap and retire wait that out)")
NEXT_STEP_ENV = ("next: restart the receiver and the worker with the new settings so they seal with the new key, "
                 "then run `partnerkit keys rewrap`")
# With PARTNERKIT_VOUCHER_KEY a process takes a new key only when it starts: nothing partnerkit can see
# tells whether they were restarted, so what rewrap and retire conclude holds only if they were.
RESTARTED = ("provided the receiver and the worker were restarted with the new PARTNERKIT_VOUCHER_KEY before this "
             "command (one started before still seals with the previous key)")
SHOWN = 20  # rows named in a message before "... and N more" (`keys status --format json` lists all)


def _source(app: AppContext) -> str:
    """Where the keys come from, never the keys."""
    config = app.config
    return "PARTNERKIT_VOUCHER_KEY" if config.voucher_key else f"key file {config.key_file}"


def _place(item: dict) -> str:
    if item["kind"] == "webhook_token":
        return f"webhook token of webhook {item['webhook_id']}"
    if item["kind"] == "webhook_body":
        return f"body of webhook event {item['event_id']}"
    field = f" ({item['field']})" if item.get("field") else ""
    return f"order {item['order_id']} voucher {item['voucher_id']}{field}"


def _places(items: list[dict]) -> str:
    named = ", ".join(_place(item) for item in items[:SHOWN])
    return named + (f" ... and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _wait_for_followers(app: AppContext) -> int | None:
    """With the key file, wait until running receivers and workers seal with its first key (they follow
    it within KEY_PICKUP_S of a change), saying why and how long; return the change waited out."""
    if app.config.voucher_key:
        return None  # processes take PARTNERKIT_VOUCHER_KEY when they start, not from a file

    def announce(seconds: float) -> None:
        click.echo(f"waiting {whole_seconds(seconds)} s for running receivers and workers to take the new key "
                   f"(they follow the key file within {PICKUP} s of its change; until then they may still seal "
                   "with a previous key)", err=True)

    return wait_for_key_pickup(app.config.key_file, announce=announce)


def _needs(found: Census) -> str:
    return (f"{counted(found.previous, 'stored value')} open only with a previous key and "
            f"{counted(found.fingerprints_previous, 'voucher fingerprint')} "
            f"{'was' if found.fingerprints_previous == 1 else 'were'} made with one")


PINNED = ("kept under the previous key, their fingerprint cannot be recomputed (no code, reference or claim "
          "URL; it was made from the provider's whole record, which is not stored)")


@click.group("keys")
def keys_group() -> None:
    """Rotate the key that encrypts voucher codes, PINs, claim URLs, saved webhook tokens and webhook bodies.

    In order: `keys rotate`, `keys rewrap`, then `keys retire` (once no database backup made before
    the rewrap is kept: such a backup needs the old key). With the key file, running receivers and
    workers follow it within 9 s, and rewrap and retire first wait out what is left of those 9 s
    since the file changed; a command running beside them (`orders create`, `webhooks register` or
    `webhooks token set`, waiting for the provider's answer or a typed token) seals with the file as it
    is when it stores, and needs no care. With PARTNERKIT_VOUCHER_KEY, restart the receiver and the
    worker with the new settings before the rewrap.
    """


@keys_group.command("status")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format; json goes to stdout alone.")
@pass_app
def status_command(app: AppContext, fmt: str) -> None:
    """Where the key comes from (never the key), how many previous keys there are, and how many stored
    values open with the current key, with a previous key, and with none (those are named).

    Use it before retiring a key, or when `vouchers --reveal` cannot read a voucher. Exit 0.
    """
    db = app.existing_db
    cipher = load_cipher(app.config, check=False)  # a key that opens nothing is what this shows
    found = census(db, cipher)
    record = {"key_source": _source(app), "previous_keys": cipher.previous_keys,
              "values_current_key": found.current, "values_previous_key": found.previous,
              "values_unreadable": len(found.unreadable), "fingerprints_previous_key": found.fingerprints_previous,
              "webhook_bodies_in_clear": found.clear_bodies,
              "previous_keys_needed": not found.can_retire,
              "unreadable": found.unreadable, "kept_under_previous_key": found.pinned}
    rows = [{"item": key, "value": value} for key, value in record.items()
            if key not in ("unreadable", "kept_under_previous_key")]
    rows += [{"item": "unreadable", "value": _place(item)} for item in found.unreadable]
    rows += [{"item": "kept under previous key", "value": _place(item)} for item in found.pinned]
    emit_one(record, fmt, rows=rows, columns=["item", "value"])


@keys_group.command("rotate")
@pass_app
def rotate_command(app: AppContext) -> None:
    """Make a new random key the current one; the old keys stay, read only, until `keys retire`.

    With the key file (PARTNERKIT_VOUCHER_KEY not set) the new key becomes its first line, the old lines
    kept below; the file is replaced atomically (0600). With PARTNERKIT_VOUCHER_KEY nothing is changed:
    the new key is printed on stdout (the only time partnerkit prints a key) and stderr says what to set.
    Then run `keys rewrap` (with PARTNERKIT_VOUCHER_KEY, after restarting the receiver and the worker with
    the new settings; with the key file they follow it within 9 s, which rewrap waits out). Exit 0; 1
    when the key file is missing or cannot be written.
    """
    config = app.config
    db = app.existing_db  # rotating beside a database that does not exist is a wrong PARTNERKIT_DB
    if not config.voucher_key and not config.key_file.exists():  # before load_cipher would generate one
        raise click.ClickException(f"no voucher key file at {config.key_file}: nothing to rotate (partnerkit "
                                   "generates one when it first stores a voucher or token)")
    needing = census(db, load_cipher(config))
    if config.voucher_key:
        click.echo(new_key_text())
        previous = f",<the {counted(len(config.voucher_key_previous), 'key')} in it now>" * bool(
            config.voucher_key_previous)
        click.echo("PARTNERKIT_VOUCHER_KEY is set, so nothing was changed; to rotate, set:\n"
                   "  PARTNERKIT_VOUCHER_KEY=<the new key printed on stdout>\n"
                   f"  PARTNERKIT_VOUCHER_KEY_PREVIOUS=<your current PARTNERKIT_VOUCHER_KEY>{previous}", err=True)
        if "," in config.voucher_key:
            click.echo("your current key holds a comma, which PARTNERKIT_VOUCHER_KEY_PREVIOUS cannot: list it in "
                       "base64 instead, e.g. printf %s \"$OLD_KEY\" | base64 -w0 | tr '+/' '-_' | tr -d '='", err=True)
    else:
        previous = rotate_key_file(config.key_file)
        click.echo(f"rotated the voucher key in {config.key_file}: a new key is first, "
                   f"{counted(previous, 'previous key')} kept below it", err=True)
    # Counted by field (a voucher's code, PIN and claim URL each), where rewrap counts the rows it re-seals.
    click.echo(f"{counted(needing.current + needing.previous + needing.clear_bodies, 'sealed value')} (voucher codes, "
               "PINs and claim URLs, webhook tokens, webhook bodies) will need `keys rewrap`", err=True)
    click.echo(NEXT_STEP_ENV if config.voucher_key else NEXT_STEP_FILE, err=True)


@keys_group.command("rewrap")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=DEFAULT_BATCH, show_default=True,
              help="Values re-sealed per transaction; each batch is committed on its own.")
@pass_app
def rewrap_command(app: AppContext, batch_size: int) -> None:
    """Re-seal every stored value that only a previous key opens with the current key, and recompute its
    voucher's fingerprint; values already under the current key are skipped.

    Run it after `keys rotate` (and, with PARTNERKIT_VOUCHER_KEY, a restart of the receiver and the worker
    with the new settings). With the key file, it first waits until 9 s passed since the file changed,
    saying so: running receivers and workers follow the file within that time, and a value one of them
    sealed with the previous key after the rewrap read past it would need that key. Each batch is
    committed on its own: stopped or killed, nothing is lost and a second run goes on. Values no key opens are named and
    left as they are. A voucher with no code, reference or claim URL keeps the previous key: its
    fingerprint was made from the provider's whole record, which is not stored, so it cannot be recomputed
    (see README, "Rotate the voucher key"). Exit 0 when the previous keys can be retired; 1 otherwise.
    """
    db = app.existing_db
    settled = _wait_for_followers(app)
    cipher = load_cipher(app.config)
    done = rewrap(db, cipher, batch_size=batch_size, progress=Progress("keys rewrap"))
    click.echo(f"re-sealed {counted(done.vouchers, 'voucher')}, {counted(done.tokens, 'webhook token')} and "
               f"{counted(done.bodies, 'webhook body', 'webhook bodies')} with the current key", err=True)
    if done.duplicates:
        click.echo(f"stored twice, left as they are: {_places(done.duplicates)}", err=True)
    found = census(db, cipher)
    if found.pinned:
        click.echo(f"{PINNED}: {_places(found.pinned)}", err=True)
    if found.unreadable:
        click.echo(f"no key opens these, left as they are: {_places(found.unreadable)}", err=True)
    if not found.can_retire:
        raise click.ClickException(
            f"the previous keys cannot be retired yet: {_needs(found)}"
            + (" (some changed meanwhile: run `keys rewrap` again)" if done.changed_meanwhile else ""))
    if found.unreadable:
        raise click.ClickException(f"no key opens {counted(len(found.unreadable), 'stored value')} (named above); "
                                   "the previous keys are not needed for the others")
    if settled is not None and key_file_changed_at(app.config.key_file) != settled:
        raise click.ClickException(f"the voucher key file {app.config.key_file} changed while the rewrap ran "
                                   "(another `keys rotate`?): run `partnerkit keys rewrap` again")
    if cipher.previous_keys:
        click.echo("every stored value opens with the current key: the previous keys can be retired "
                   "(`partnerkit keys retire`) once no database backup made before this rewrap is kept"
                   + (f", {RESTARTED}" if app.config.voucher_key else ""), err=True)
    else:
        click.echo("every stored value opens with the current key; there are no previous keys", err=True)


@keys_group.command("retire")
@pass_app
def retire_command(app: AppContext) -> None:
    """Drop the previous keys, after checking right then that no stored value still needs them.

    With the key file, it first waits until 9 s passed since the file changed, saying so (running
    receivers and workers follow the file within that time; what one sealed with a previous key after
    the check would be unreadable once that key is dropped), then its lines below the first are removed
    (the file is replaced atomically). With PARTNERKIT_VOUCHER_KEY, says whether
    PARTNERKIT_VOUCHER_KEY_PREVIOUS can be unset now (true only if the receiver and the worker were
    restarted with the new key before the check). A database
    backup made before `keys rewrap` still needs the old key: keep a copy of it as long as such backups
    are kept. Exit 0 when retired (or nothing to retire); 1 with the counts when a previous key is needed.
    """
    config = app.config
    db = app.existing_db
    if config.voucher_key:
        found = census(db, load_cipher(config))
        if not config.voucher_key_previous:
            click.echo("PARTNERKIT_VOUCHER_KEY_PREVIOUS is not set: there is nothing to retire", err=True)
        elif found.can_retire:
            click.echo(f"no stored value needs a previous key: PARTNERKIT_VOUCHER_KEY_PREVIOUS can be unset now, "
                       f"{RESTARTED} (then restart them)", err=True)
    elif not config.key_file.exists():
        raise click.ClickException(f"no voucher key file at {config.key_file}: nothing to retire (partnerkit "
                                   "generates one when it first stores a voucher or token)")
    else:
        found, dropped = retire_key_file(config.key_file, db, settled=_wait_for_followers(app))
        if found.can_retire:
            click.echo(f"retired {counted(dropped, 'previous key')} from {config.key_file}" if dropped else
                       f"{config.key_file} holds no previous key: there is nothing to retire", err=True)
    if not found.can_retire:
        raise click.ClickException(f"the previous keys are still needed: {_needs(found)}; "
                                   "run `partnerkit keys rewrap` first")


def register(group: click.Group) -> None:
    group.add_command(keys_group)
