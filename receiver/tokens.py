"""Accepted webhook tokens: the configured ones plus those saved by `partnerkit webhooks register`, and
how one is sealed and saved (`save_sealed`)."""

from __future__ import annotations

from typing import Callable, TypeVar

from partnerkit.config import Config, ConfigError, WebhookToken
from partnerkit.crypto import Cipher, KeyFollower, token_context
from partnerkit.store import Database, transaction
from partnerkit.store import webhook_tokens
from partnerkit.store.vouchers import KeyedSample

Saved = TypeVar("Saved")


def saved_tokens(db: Database, cipher: Cipher) -> tuple[WebhookToken, ...]:
    """Decrypt the tokens saved in the database, each bound to its webhook id."""
    return tuple(WebhookToken(cipher.decrypt(sealed, context=token_context(wid)), wid)
                 for wid, sealed in webhook_tokens.sealed(db))


def accepted_tokens(config: Config, db: Database, cipher: Cipher) -> tuple[WebhookToken, ...]:
    """Every token the receiver accepts now: configuration first, then the database."""
    return tuple(config.webhook_tokens) + saved_tokens(db, cipher)


def unbound_left_out(tokens: tuple[WebhookToken, ...]) -> str | None:
    """A warning when configured unbound tokens are never tried for the webhooks partnerkit knows of.

    For an X-Webhook-ID with a bound token (saved by `webhooks register`, or an `ID:TOKEN` entry) only
    the bound tokens are tried (DESIGN.md, receiver step 3; `signature.candidate_tokens`), so an unbound
    token added for such a webhook, e.g. the new one of a rotation written as `old,new`, is never tried
    and every delivery signed with it is refused. None when there is no unbound or no bound token."""
    unbound = sum(1 for t in tokens if t.webhook_id is None)
    bound = sorted({t.webhook_id for t in tokens if t.webhook_id is not None}, key=lambda i: (len(i), i))
    if not unbound or not bound:
        return None
    return (f"PARTNERKIT_WEBHOOK_TOKENS holds {unbound} unbound token(s), which are never tried for webhook "
            f"{', '.join(bound)}: a delivery with an X-Webhook-ID that has a bound token (saved by `webhooks "
            "register`, or an ID:TOKEN entry) is checked against its bound tokens only. To accept another "
            f"token for one of them (a rotation), bind it: ID:TOKEN, e.g. {bound[0]}:<new token>")


NO_TOKEN = ("no webhook token is accepted: set PARTNERKIT_WEBHOOK_TOKENS or run "
            "`partnerkit webhooks register`; the receiver refuses to start without one")


def has_some_token(config: Config, db: Database) -> bool:
    """Whether any token is configured or saved (no voucher key needed to tell)."""
    return bool(config.webhook_tokens) or webhook_tokens.count(db) > 0


def require_some_token(config: Config, db: Database) -> None:
    """ConfigError unless a token is configured or saved; needs no voucher key (none is generated for it)."""
    if not has_some_token(config, db):
        raise ConfigError(NO_TOKEN)


def require_tokens(config: Config, db: Database, cipher: Cipher) -> tuple[WebhookToken, ...]:
    """Accepted tokens, or ConfigError: a receiver with no token would have to fail open."""
    tokens = accepted_tokens(config, db, cipher)
    if not tokens:
        raise ConfigError(NO_TOKEN)
    return tokens


def seal_token(cipher: Cipher, webhook_id: str, token: str) -> bytes:
    """Encrypt a token for `webhook_tokens.save`."""
    return cipher.encrypt(token, context=token_context(webhook_id))  # type: ignore[return-value]


def save_sealed(db: Database, keys: KeyFollower, webhook_id: str, token: str,
                save: Callable[[bytes], Saved]) -> Saved:
    """Seal `token` with the key file as it is now and store it with `save(sealed)`, a `webhook_tokens`
    function that opens its own transaction; return what `save` returns.

    That transaction may wait for another process's write lock (a command up to 30 s), longer than
    `keys retire` waits for running processes: sealed before the wait, a token could be committed after
    the retire dropped its key, and the receiver would answer 503 to every delivery. So when the key file
    moved on before the commit, the token is sealed again under the write lock with its new first key
    (only if it is still the one just saved: `webhook_tokens.reseal`); a receiver that reads the tokens
    in between answers 503, which the provider retries."""
    cipher = keys.current()
    sealed = seal_token(cipher, webhook_id, token)
    saved = save(sealed)

    def this_token(sample: KeyedSample) -> bool:  # sealed here: no sign that the new key file is a stranger's
        return sample.kind == "webhook_token" and sample.owner == webhook_id

    if keys.current(ignore=this_token) is not cipher:
        with transaction(db) as conn:
            webhook_tokens.reseal(conn, webhook_id, sealed,
                                  seal_token(keys.current(ignore=this_token), webhook_id, token))
    return saved
