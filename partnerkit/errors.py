"""partnerkit's one exception tree.

    PartnerKitError
    ├── ApiError                      anything that went wrong talking to the provider; a write's
    │   │                             error carries `idempotency_key` (re-use it to locate/replay)
    │   ├── TransportError            no HTTP answer (connection refused, reset, DNS);
    │   │   │                         `request_sent` is False only when nothing can have arrived
    │   │   └── ApiTimeout            no answer in time; for a write the outcome is UNKNOWN
    │   ├── BudgetExhausted           the local, shared request budget has no room (nothing sent)
    │   ├── MalformedResponse         an answer that is not what the document describes; `field`
    │   │                             names the offending field (callers quarantine the record)
    │   ├── ReplayMismatch            a 2xx for an Idempotency-Key that answers another request (its
    │   │                             product, denomination or quantity differ): the key is taken
    │   ├── AccountCheckFailed        the wallet read that tells a key new to the database which account
    │   │                             it is failed before a write (`__cause__` says how): the write was
    │   │                             not sent
    │   └── ApiStatusError            an HTTP error status; carries status, code, message,
    │       │                         retryable, retry_after, trace_id, body; `from_provider` False
    │       │                         for an answer that is not the provider's (`not_the_providers`)
    │       ├── BadRequest (400)
    │       │   ├── IdempotencyKeyError        IDEMPOTENCY_KEY_REQUIRED / _TOO_SHORT
    │       │   ├── InsufficientBalance        "insufficient wallet balance" / "Insufficient funds"
    │       │   ├── InvalidRecharge            mobile number, amount, operator, circle, kind
    │       │   └── DuplicateOrderReference    "Duplicate reference code": an order with this ref exists
    │       ├── Unauthorized (401)
    │       ├── Forbidden (403)
    │       │   └── RechargeNotEnabled         the four per-client enablement flags
    │       ├── NotFound (404)
    │       │   └── WalletNotFound             "no INR wallet found for this client"
    │       ├── Conflict (409)
    │       │   └── DuplicateRecharge          the duplicate guard; resend with force=true only deliberately
    │       │       └── reconcile.recharges.DuplicateSubmit   the same, raised by the kit's submit,
    │       │                                                 its message naming --force
    │       ├── RateLimited (429)              obey retry_after
    │       └── ServerError (5xx)
    │           └── ServiceUnavailable (503)
    │               └── RechargeUnavailable    kill switch or account paused; retry with backoff
    ├── reconcile.recharges.RechargeInputError   (also a ValueError) a submit field refused locally,
    │                                            before anything is recorded or sent
    ├── reconcile.recharge_hold.UnresolvedRecharge   a new recharge refused locally, nothing recorded
    │                                            or sent: an earlier one of the same number and amount
    │                                            is still INTENT or UNKNOWN; `held` names each (settle
    │                                            it with `recharges locate`, or force=True / --force)
    ├── partnerkit.ordering.OrderInputError      (also a ValueError) an order refused locally, before
    │                                            anything is sent (a bad field, a key reused with
    │                                            other fields)
    ├── partnerkit.ordering.UnresolvedOrder      a new order refused locally, nothing recorded or
    │                                            sent: an earlier one of the same fields is still
    │                                            UNKNOWN or INTENT; `held` names each (replay its
    │                                            key, or force=True / --force for another order)
    ├── partnerkit.store.recharges.RechargeHeldElsewhere   a recharge answer names an id another
    │                                            local row holds, and it is not the same recharge
    │                                            (another key, other fields): nothing merged or
    │                                            written, the intent stays open
    ├── partnerkit.store.recharges.AnswerOfAnotherRequest   a recharge answer to the intent's
    │                                            Idempotency-Key is another request's (its number,
    │                                            operator, face or client_reference differ): nothing
    │                                            linked, the intent stays open, the key never re-sent
    ├── partnerkit.crypto.DecryptionError        a stored value (a voucher's card_number, pin_code or
    │                                            claim_url, a sealed inbox body, a saved webhook
    │                                            token) opens with none of the voucher keys: another
    │                                            key, or damaged data (`partnerkit.vouchers.unseal`)
    ├── partnerkit.store.drifts.UnknownDrift     no drift has this id (`drifts resolve`, `escalate`)
    ├── reconcile.scheduler.WorkerBusy           another worker holds this database's lease (it names
    │                                            the holder), or the worker stopped waiting for it
    ├── reconcile.scheduler.WorkerRefused        the worker must not start here (inside gunicorn)
    ├── reconcile.worker_jobs.JobUnavailable     a job's function cannot be imported (its part is
    │                                            missing or broken); the other jobs still run
    ├── partnerkit.walks.WalkStopped             the worker is stopping (SIGTERM), or a command was
    │                                            interrupted (Ctrl-C): a sync walk ended at a batch,
    │                                            what it read stored and its place kept
    ├── AccountMismatch               the API key is not the provider account's this database serves
    │                                 (`reason`: other_account, cannot_tell): nothing but the wallet
    │                                 read that told it was sent, nothing stored
    ├── VerificationError             a webhook failed verification; `reason` says which check
    └── StorageError                  the SQLite store cannot be read or written; raised by the
        │                             client before a request left, `request_sent` is False
        └── DatabaseBusy              another process held the write lock past the busy timeout:
                                      a transient; nothing was written by the transaction

The classes named with their module live beside the code that raises them, which owns their
checks (partnerkit never imports reconcile).
`is_ambiguous(exc)` says whether a write that raised `exc` may still have taken effect.
An error whose `from_provider` is False (a web server's HTML 404 under a wrong PARTNERKIT_API_BASE_URL, a proxy's
403/407, a redirect) is the provider failing the call, never what the provider says of the record: a 404 of that
kind is not "no such webhook/order/recharge". `base_url_hint(exc, base_url)` is the clause that says what to check.

Bad configuration is `partnerkit.config.ConfigError`, a ValueError outside this tree: it is
the operator's mistake, not a runtime condition. Third-party exceptions (requests, sqlite3)
are converted once, at the boundary that calls them, with `raise ... from exc`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit


class PartnerKitError(Exception):
    """Root of every error partnerkit raises on purpose."""


class ApiError(PartnerKitError):
    """A call to the provider did not give a usable answer."""

    retryable: bool = False
    retry_after: float | None = None
    # Set by the client on every error raised for a keyed write (order create, recharge submit):
    # the caller re-uses it to replay or locate the request, never a new key.
    idempotency_key: str | None = None
    # What the write's caller established of a refusal it raises (that nothing was made, when to retry): the end of
    # an HTTP error's message (`ApiStatusError.__str__`), after the provider's own words.
    outcome: str | None = None


class TransportError(ApiError):
    """No HTTP answer at all (connection refused, reset, name resolution)."""

    retryable = True

    def __init__(self, message: str, *, method: str = "", path: str = "", request_sent: bool = True) -> None:
        super().__init__(message)
        self.method = method
        self.path = path
        # False only when the connection was never established: a write cannot have arrived.
        self.request_sent = request_sent


class ApiTimeout(TransportError):
    """The provider did not answer within the timeout; a write may or may not have happened."""


class BudgetExhausted(ApiError):
    """The shared request budget has no room for this call; nothing was sent."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, budget_class: str = "general") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.budget_class = budget_class


class MalformedResponse(ApiError):
    """The provider answered, but not in a shape the document describes."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: Any = None,
        field: str | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.field = field
        self.method = method
        self.path = path

    @property
    def from_provider(self) -> bool:
        """False for a write's redirect (`not_the_providers`): no answer of the provider's at all. A body that cannot
        be read, or a record not in the document's shape, is the provider's answer, garbled or not."""
        return not (isinstance(self.status, int) and not_the_providers(self.status, self.body))


class ReplayMismatch(ApiError):
    """A 2xx for an Idempotency-Key that answers another request: the key was used for something else,
    and nothing was done for this request (a replay is the original answer, never a new write)."""

    def __init__(self, message: str, *, method: str = "", path: str = "") -> None:
        super().__init__(message)
        self.method = method
        self.path = path


class AccountCheckFailed(ApiError):
    """The read of `GET /wallets` that tells which account a key new to the database belongs to failed before a
    write (its error is `__cause__`): the write itself was not sent, so it is never ambiguous."""

    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.request_sent = False  # the write never left: `is_ambiguous` is False


class ApiStatusError(ApiError):
    """The provider answered with an error status; every field of its error body is kept."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        trace_id: str | None = None,
        body: Any = None,
        method: str = "",
        path: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.retryable = retryable
        self.retry_after = retry_after
        self.trace_id = trace_id
        self.body = body
        self.method = method
        self.path = path

    @property
    def from_provider(self) -> bool:
        """False for an answer that is not the provider's (`not_the_providers`: a web server's HTML 404 under a wrong
        PARTNERKIT_API_BASE_URL path, a proxy's 403/407, a redirect): the provider failing the call, which says
        nothing of the record asked for. Check it before reading a 404 as "no such record", a 400/403 as a refusal."""
        return not not_the_providers(self.status, self.body)

    def __str__(self) -> str:
        where = f" on {self.method} {self.path}" if self.method else ""
        code = f" [{self.code}]" if self.code and self.code != self.message else ""
        trace = f" (trace {self.trace_id})" if self.trace_id else ""
        outcome = f": {self.outcome}" if self.outcome else ""
        return f"HTTP {self.status}{code}: {self.message}{where}{trace}{outcome}"


class BadRequest(ApiStatusError):
    """400: the request was refused as invalid; do not retry it unchanged."""


class IdempotencyKeyError(BadRequest):
    """400 IDEMPOTENCY_KEY_REQUIRED or IDEMPOTENCY_KEY_TOO_SHORT."""


class InsufficientBalance(BadRequest):
    """400: the wallet cannot cover the amount; retry only after a top-up."""


class InvalidRecharge(BadRequest):
    """400: a recharge field was refused (number, amount, operator, circle, recharge kind)."""


class DuplicateOrderReference(BadRequest):
    """400 "Duplicate reference code": the client already has an order with this ref."""


class Unauthorized(ApiStatusError):
    """401: missing or invalid credentials (or request signature)."""


class Forbidden(ApiStatusError):
    """403: the account may not do this."""


class RechargeNotEnabled(Forbidden):
    """403: recharge, the API channel, the recharge type or the operator is not enabled."""


class NotFound(ApiStatusError):
    """404: no such resource for this client (another client's resource is also 404)."""


class WalletNotFound(NotFound):
    """404: no wallet in the needed currency for this client."""


class Conflict(ApiStatusError):
    """409: the request conflicts with an earlier one."""


class DuplicateRecharge(Conflict):
    """409: the duplicate guard; resend with force=true only if the repeat is intended."""


class RateLimited(ApiStatusError):
    """429: the provider's rate limit; `retry_after` seconds must pass first."""


class ServerError(ApiStatusError):
    """5xx: a fault on the provider's side."""


class ServiceUnavailable(ServerError):
    """503: temporarily unavailable; retry with backoff."""


class RechargeUnavailable(ServiceUnavailable):
    """503: recharge is switched off globally or paused for this client."""


class AccountMismatch(PartnerKitError):
    """The API key is not known to be the provider account's this database serves (partnerkit.account):
    nothing but the wallet read that told it was sent, and nothing stored. `reason`: `other_account` (the key's wallets are none of the account's) or
    `cannot_tell` (the wallet list shows no id to compare); `key_wallets` and `account_wallets` are the ids."""

    def __init__(self, message: str, *, reason: str, key_wallets: tuple[str, ...] = (),
                 account_wallets: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reason = reason
        self.key_wallets = key_wallets
        self.account_wallets = account_wallets
        self.request_sent = False  # refused before the write was sent: `is_ambiguous` is False


class VerificationError(PartnerKitError):
    """A webhook request failed verification; `reason` names the failed check."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason


class StorageError(PartnerKitError):
    """The SQLite store could not be read or written (locked, read-only, disk full)."""

    # False when the client raised it before the request left (the budget could not be taken): a write
    # it stopped did not happen. None otherwise: raised while a write was in flight, its outcome is unknown.
    request_sent: bool | None = None


class DatabaseBusy(StorageError):
    """Another process held the database's write lock for the whole busy timeout; the transaction (or the
    migration, at open) that waited wrote nothing (partnerkit.store.db.begin)."""


def provider_said(body: Any) -> bool:
    """True when an error body is one of the provider's own error shapes (all four carry an `error` key),
    not a gateway's or load balancer's page."""
    return isinstance(body, dict) and "error" in body


def not_the_providers(status: int, body: Any) -> bool:
    """True for an error answer that is not the provider's: a 4xx whose body is none of its error shapes (the
    HTML 404 of a web server at a PARTNERKIT_API_BASE_URL with a wrong path or host, a proxy's 403 or 407), or
    a redirect (the document has none: an http:// base URL sent to https://, a login page). The provider says
    its 4xx in one of its shapes; a 401 and a 429 are told apart by their status alone (the document shows a
    401 with no message and promises only Retry-After on a 429), and keep their own handling. Such an answer
    counts as the provider failing the call (partnerkit.client._http), not as an answer."""
    return 300 <= status < 500 and status not in (401, 429) and not provider_said(body)


def is_ambiguous(exc: BaseException) -> bool:
    """True when a write (recharge submit, order creation) may have taken effect although no usable
    answer came back: replay its Idempotency-Key or locate it, never send it again with a new key.

    Definite (False) only when nothing was sent or the provider's answer says nothing was done: a
    connection never established, an empty local budget, a local error raised before the request
    left (`request_sent = False`: the client marks a StorageError taking the budget so), a 503 with
    the document's "temporarily unavailable/paused" message, any 4xx in the provider's own error shape,
    a replay of another request's key. Anything else raised while the write was in flight may have taken
    effect: a timeout or a connection lost after sending, a 4xx that is not the provider's
    (`not_the_providers`: a proxy's 408 or 502-page-as-4xx may come after it forwarded the request), a 5xx (Errors, "Recharge submit", 500: "check for a created
    recharge ... before re-sending"; "Order creation", 500 "Failed to create order"), a 2xx that
    cannot be read, and a local error after the request left (a StorageError: the database locked
    while the answer was on its way), which says nothing of what the provider did.
    """
    if getattr(exc, "request_sent", None) is False:
        return False  # it never left (a TransportError before connecting, a budget the store could not take)
    if isinstance(exc, TransportError):
        return True  # sent, and no answer
    if isinstance(exc, RechargeUnavailable):
        return False  # 503 with the document's message: nothing was done
    if isinstance(exc, (ServerError, MalformedResponse)):
        return True
    if isinstance(exc, ApiStatusError) and not exc.from_provider:
        return True  # a proxy's or web server's 4xx, not the provider's refusal: the write may have gone through it
    if isinstance(exc, (ApiStatusError, BudgetExhausted, ReplayMismatch)):
        return False  # the provider's refusal, or nothing sent
    return True  # a local error while the write was in flight: its outcome is unknown


def shown_base_url(base_url: str | None) -> str | None:
    """PARTNERKIT_API_BASE_URL for a message: host[:port] exactly as written (an IPv6 host keeps its brackets), never
    any user:password@ in it; None when there is none, or it does not parse."""
    if not base_url:
        return None
    try:
        parts = urlsplit(base_url)
    except ValueError:  # an unclosed IPv6 bracket: load_config refuses it, a Config made in code may not
        return None
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def base_url_hint(exc: BaseException, base_url: str | None) -> str:
    """What to check after an error on an answer that is not the provider's (`from_provider` False; for an
    AccountCheckFailed, its wallet read's): a clause naming PARTNERKIT_API_BASE_URL and its value `base_url`
    (`shown_base_url`); the CLI's errors and the worker's job lines end with it. "" for any other error."""
    if isinstance(exc, AccountCheckFailed):
        exc = exc.__cause__  # type: ignore[assignment]
    if not isinstance(exc, (ApiStatusError, MalformedResponse)) or exc.from_provider:
        return ""
    shown = shown_base_url(base_url)
    now = f" (now {shown})" if shown else ""
    return f": this is not the provider's answer; check PARTNERKIT_API_BASE_URL{now} and any proxy towards it"
