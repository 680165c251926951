"""Transport: one request with budget, signing, timeouts and the retry rules.

Retries are a small loop here rather than urllib3's Retry: every attempt must first take a
request from the shared SQLite budget (and a 429 must block the class for every process), and
urllib3 retries inside the adapter where the budget cannot be consulted between attempts. The
adapter is therefore mounted with retries off, and requests' exceptions are converted to
partnerkit's tree once, here, with `raise ... from exc`.

Which failures are retried (decision, see docs/client.md):
- GET: 429 (after Retry-After, else X-RateLimit-Reset, at most one window of the budget class),
  5xx, connection errors and a 2xx body that is not JSON (cut off on the way), up to
  RetryPolicy.max_attempts.
- POST/PUT/DELETE: only when the failure proves nothing was processed: the connection was
  never established, 429, or 503 with Retry-After. Same body bytes, same Idempotency-Key.
  A timeout, a reset after sending, a 500, or a redirect (a MalformedResponse: never followed)
  is ambiguous and is raised to the caller (Errors, "Recharge submit": 500 -> "check for a
  created recharge before re-sending").
- The charge preview is a POST that places nothing, and its 500 row says "retry with backoff":
  it is sent with repeatable=True and retried like a GET.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter

from partnerkit import errors, money
from partnerkit.account import AccountGuard
from partnerkit.client._errors import error_from_response
from partnerkit.client._signing import SIGNED_METHODS, encode_body, signature_headers
from partnerkit.errors import provider_said
from partnerkit.store import provider_clock, provider_failures
from partnerkit.store.budget import Budget
from partnerkit.store.db import Database
from partnerkit.timeutil import utcnow

log = logging.getLogger("partnerkit.client")

USER_AGENT = "partnerkit/0.1 (+requests)"


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: attempt n waits min(cap, base * 2**(n-1)), partly randomised."""

    max_attempts: int = 4
    base: float = 0.5
    cap: float = 8.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if self.base < 0 or self.cap < self.base:
            raise ValueError("RetryPolicy needs 0 <= base <= cap")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("RetryPolicy.jitter is a fraction between 0 and 1")

    def interval(self, attempt: int, retry_after: float | None = None, rand: float | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based); never less than Retry-After."""
        backoff = min(self.cap, self.base * (2 ** max(0, attempt - 1)))
        r = random.random() if rand is None else rand
        delay = backoff * (1.0 - self.jitter + self.jitter * r)
        return max(delay, retry_after or 0.0)


@dataclass(frozen=True)
class Spend:
    """How one client view spends the budget: purpose label, waiting, the reserve it leaves, and its own cap."""

    purpose: str = "default"
    wait: bool = True
    max_wait: float = 60.0
    keep_free: int = 0
    own_cap: int | None = None  # at most this many of the window's requests under `purpose` (None: no cap)
    attempts: int | None = None  # at most this many attempts per call (None: the RetryPolicy's)


@dataclass(frozen=True)
class Response:
    """A successful answer: status, headers and the body parsed with Decimal money (None if empty)."""

    status: int
    headers: Mapping[str, str]
    body: Any


def _new_session() -> requests.Session:
    session = requests.Session()
    # read=False: a read timeout is re-raised as itself (requests' ReadTimeout -> ApiTimeout); with
    # read=0 urllib3 wraps it, for GET, in MaxRetryError and requests reports a "connection error".
    adapter = HTTPAdapter(max_retries=urllib3.Retry(total=0, connect=0, read=False, redirect=0, status=0,
                                                    raise_on_status=False))
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def _never_reached_server(exc: requests.RequestException) -> bool:
    """True when the connection was never established, so the request cannot have arrived."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if not isinstance(exc, requests.exceptions.ConnectionError):
        return False
    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError,
                              urllib3.exceptions.NameResolutionError, ConnectionRefusedError)):
            return True
        reason = getattr(cause, "reason", None)
        cause = reason if isinstance(reason, BaseException) else (cause.args[0] if cause.args and isinstance(cause.args[0], BaseException) else cause.__cause__)
    return False


def _transport_error(exc: requests.RequestException, method: str, path: str) -> errors.TransportError:
    unsent = _never_reached_server(exc)
    if isinstance(exc, requests.exceptions.Timeout):
        what = "connect timed out" if unsent else "no answer within the timeout (outcome unknown)"
        return errors.ApiTimeout(f"{method} {path}: {what}", method=method, path=path, request_sent=not unsent)
    what = "connection failed before sending" if unsent else f"connection error ({type(exc).__name__})"
    return errors.TransportError(f"{method} {path}: {what}", method=method, path=path, request_sent=not unsent)


def _failure_kind(err: errors.ApiError) -> str:
    """How the provider failed a call, as `partnerkit status` counts it: "HTTP 503", "timeout", "no connection",
    "HTTP 404 without the provider's error body"."""
    # A MalformedResponse too: a write's redirect. `partnerkit status` reads this wording.
    if isinstance(err, (errors.ApiStatusError, errors.MalformedResponse)) and not err.from_provider:
        return f"HTTP {err.status} without the provider's error body"
    if isinstance(err, errors.ApiStatusError):
        return f"HTTP {err.status}"
    if isinstance(err, errors.MalformedResponse):
        return "unreadable answer"
    if isinstance(err, errors.ApiTimeout):
        return "timeout" if err.request_sent else "connect timeout"
    return "connection error" if getattr(err, "request_sent", True) else "no connection"


def _rate_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    """X-RateLimit-Limit/Remaining/Reset as numbers; a garbled value is treated as absent, never trusted."""
    def number(name: str) -> float | None:
        try:
            value = float(headers[name]) if name in headers else None
        except ValueError:
            return None
        # "inf" and "nan" parse as floats; int() of them would raise out of the client.
        return value if value is not None and math.isfinite(value) else None
    limit, remaining, reset = (number(f"X-RateLimit-{n}") for n in ("Limit", "Remaining", "Reset"))
    # A limit below 1 is not a limit (Limits: 1000 per hour): believed, it would stop every process.
    return {"limit": int(limit) if limit is not None and limit >= 1 else None,
            "remaining": None if remaining is None else int(remaining), "reset": reset}


class Transport:
    """Sends requests for a PartnerClient: budget first, then headers, signature, retries."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        api_secret: str,
        budget: Budget,
        session: requests.Session | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] | None = None,
        account: AccountGuard | None = None,
        db: Database | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.account = account  # the client checks it before its first call (PartnerClient.check_account)
        self._api_key = api_key
        self._api_secret = api_secret
        self.budget = budget
        self.session = session or _new_session()
        self.timeout = (timeout, timeout)  # connect, read
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._db = db  # the shared database, where the provider's failures are kept (None: nowhere)
        self._books_failing = False  # a budget write after an answer failed, not logged again until one succeeds

    def __repr__(self) -> str:
        return f"Transport(base_url={self.base_url!r})"

    def sleep(self, seconds: float) -> None:
        """Sleep between attempts (injectable for tests)."""
        (self._sleep or time.sleep)(seconds)

    def request(
        self,
        method: str,
        path: str,
        *,
        spend: Spend,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotency_key: str | None = None,
        budget_class: str = "general",
        repeatable: bool | None = None,
    ) -> Response:
        """Send one logical request (maybe several attempts) and return its 2xx Response.

        `repeatable`: sending it twice has no more effect than once, so any failure may be retried
        like a read. Defaults to True for GET and False for writes; a write that only reads (the
        charge preview: "Nothing is placed") passes True.
        """
        method = method.upper()
        url = self.base_url + path
        signed = method in SIGNED_METHODS
        if repeatable is None:
            repeatable = not signed
        if signed and params:
            raise ValueError(f"{method} {path}: writes never carry a query string (the signed path has none)")
        # Serialize once: these exact bytes are signed and sent on every attempt.
        if method in ("POST", "PUT") and body is None:
            body = {}  # a bodyless POST still sends a JSON object, signed as sent
        content = b"" if body is None else encode_body(body)
        headers = {"X-API-Key": self._api_key, "X-API-Secret": self._api_secret, "Accept": "application/json", "User-Agent": USER_AGENT}
        if content:
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        clean_params = {k: v for k, v in (params or {}).items() if v is not None}
        attempts = min(self.retry.max_attempts, spend.attempts or self.retry.max_attempts)
        attempt = 0
        while True:
            attempt += 1
            try:
                ticket = self.budget.acquire(budget_class, purpose=spend.purpose, wait=spend.wait,
                                             max_wait=spend.max_wait, keep_free=spend.keep_free,
                                             own_cap=spend.own_cap)
            except errors.StorageError as exc:
                # Raised before this attempt left, and a write's earlier attempt is re-sent only when it
                # proved nothing was done: nothing can have taken effect (errors.is_ambiguous reads this).
                exc.request_sent = False
                raise
            if signed:
                headers.update(signature_headers(self._api_secret, method, urlsplit(url).path, content))
            log.debug("%s %s attempt %d", method, path, attempt)
            try:
                resp = self.session.request(method, url, params=clean_params or None, data=content or None,
                                            headers=headers, timeout=self.timeout, allow_redirects=False)
            except requests.RequestException as exc:
                err = _transport_error(exc, method, path)
                self._failed(err, method, path, spend)
                if attempt < attempts and (repeatable or not err.request_sent):
                    log.info("%s; retrying", err)  # err names the method and path already
                    self.sleep(self.retry.interval(attempt))
                    continue
                raise err from exc
            rate = _rate_headers(resp.headers)
            if resp.status_code == 429:
                # The block below alone says when the class reopens. A 429's Remaining (0) without
                # a Reset would be trusted for a whole window and outlast the provider's Retry-After.
                rate["remaining"] = None
            # From here the provider has answered: the budget's bookkeeping never replaces its answer.
            self._keep_books(method, path, lambda: self.budget.observe(ticket, **rate),
                             writes=rate["limit"] is not None or rate["remaining"] is not None)
            if 200 <= resp.status_code < 300:
                self._keep_books(method, path, lambda: self.budget.accepted(signed=signed), writes=False)
                try:
                    answer = Response(resp.status_code, resp.headers, self._parse(resp, method, path))
                except errors.MalformedResponse as bad:
                    self._failed(bad, method, path, spend)
                    # A garbled read (cut off on the way) is read again like a 5xx; a write's lost
                    # answer is never re-sent here: the caller replays its key or locates it.
                    if not repeatable or attempt >= attempts:
                        raise
                    log.info("%s %s: HTTP %d body is not JSON; retrying (attempt %d)", method, path,
                             resp.status_code, attempt)
                    self.sleep(self.retry.interval(attempt))
                    continue
                self._answered(method, path, resp.headers.get("Date"))
                return answer
            if 300 <= resp.status_code < 400 and not repeatable:
                # A write answered by a redirect (never followed: it would carry X-API-Secret elsewhere) may
                # have been done: "303 See Other" is the usual answer to a POST that created something. No
                # row of the document's error tables says nothing was done, so it is a MalformedResponse
                # (an answer not in a shape the document describes), which `errors.is_ambiguous` reads as
                # "locate it, replay its key", never as a refusal that deletes the intent. Nor is it the
                # provider answering (`from_provider` False): counted as its failure, as a GET's redirect is.
                redirect = errors.MalformedResponse(
                    f"{method} {path}: unexpected redirect (HTTP {resp.status_code}), not followed; the write may "
                    "have been done", status=resp.status_code, body=resp.text[:2000], method=method, path=path)
                self._failed(redirect, method, path, spend)
                raise redirect
            err = self._status_error(resp, method, path)
            if err.status >= 500 or not err.from_provider:
                # A 4xx in none of the provider's error shapes (a web server's HTML 404 under a wrong
                # PARTNERKIT_API_BASE_URL, a proxy's 403/407) is not the provider answering: counted like
                # a 5xx, so `status` names it instead of every job failing quietly. Never retried all the same.
                self._failed(err, method, path, spend)
            else:  # the provider's own 4xx is an answer (a 401 and a 429 are kept by the budget below)
                self._answered(method, path, resp.headers.get("Date"))
            if err.status == 401:  # every job stops on it: `status` and /metrics say so until a call passes
                said = err.message or ""
                for secret in filter(None, (self._api_secret, self._api_key)):  # never replace ""
                    said = said.replace(secret, "***")
                self._keep_books(method, path, lambda: self.budget.refused(
                    status=401, message=said, method=method, path=path, purpose=spend.purpose))
            if err.status == 429:
                if err.retry_after is None:
                    # Errors, "Other" promises Retry-After on a 429; without it X-RateLimit-Reset
                    # (Limits) says when the window reopens, read by the budget's one rule. Neither
                    # usable: None, and the budget blocks for its default.
                    err.retry_after = self.budget.until_reset(budget_class, rate["reset"])
                else:
                    # The same rule for Retry-After: at most one window of the class (an hour, a
                    # minute), so the error, the sleep and every process's block say the same.
                    err.retry_after = self.budget.block_seconds(budget_class, err.retry_after)
                asked = (resp.headers.get("Retry-After") or "none")[:40]
                why = f"HTTP 429 to {method} {path} ({spend.purpose}), Retry-After: {asked}"
                self._keep_books(method, path, lambda: self.budget.block(budget_class, err.retry_after, why=why))
            if not self._should_retry(err, repeatable, attempt, attempts, spend):
                raise err
            log.info("%s %s: HTTP %d; retrying (attempt %d)", method, path, err.status, attempt)
            self.sleep(self.retry.interval(attempt, err.retry_after))

    def _failed(self, err: errors.ApiError, method: str, path: str, spend: Spend) -> None:
        """The provider failed this attempt (5xx, timeout, no connection, unreadable answer, a 4xx that is not
        its own): counted for `partnerkit status` (partnerkit.store.provider_failures), which says so once every
        call fails."""
        if self._db is not None:
            self._keep_books(method, path, lambda: provider_failures.failed(
                self._db, kind=_failure_kind(err), method=method, path=path, purpose=spend.purpose))

    def _answered(self, method: str, path: str, date_header: str | None = None) -> None:
        """The provider answered this attempt: the failures before it no longer stand (a read; a write only then),
        and its `Date` says how far this host's clock is from its own (partnerkit.store.provider_clock)."""
        if self._db is not None:
            self._keep_books(method, path, lambda: provider_failures.answered(self._db), writes=False)
            self._keep_books(method, path, lambda: provider_clock.observe(self._db, date_header, utcnow()),
                             writes=False)

    def _keep_books(self, method: str, path: str, write: Callable[[], object], *, writes: bool = True) -> None:
        """Run one of the budget's writes about an answer already received; a database that cannot take
        it (locked past its busy timeout, full, a read-only file) is logged once per episode, not per
        call, and the answer is returned (or its error raised) all the same.

        Dropping the write never lets a request go uncounted: each one was reserved in the budget's
        log before it was sent (`acquire`), and the sliding window counts that. What is lost, until a
        later answer's write gets through: the provider's X-RateLimit figures (the local count alone
        then stands; a provider that counts more, such as another system on the key, answers 429 a
        little sooner), a 429's block (other processes send until they meet their own 429, and this
        caller still gets RateLimited with its retry_after), and a 401's record or its clearing
        (`partnerkit status` shows the key's refusal late, or until a later answer clears it)."""
        try:
            write()
        except errors.StorageError as exc:
            if not self._books_failing:
                self._books_failing = True
                log.warning("%s %s: the request budget's bookkeeping could not be written (%s); the provider's "
                            "answer is used all the same, and each request is still counted (reserved before it was "
                            "sent), but its X-RateLimit figures, 429 blocks and 401 records are missed until the "
                            "database takes writes again", method, path, exc)
            return
        if writes and self._books_failing:
            self._books_failing = False
            log.info("the request budget's bookkeeping is written again")

    def _should_retry(self, err: errors.ApiStatusError, repeatable: bool, attempt: int, attempts: int,
                      spend: Spend) -> bool:
        if attempt >= attempts:
            return False
        if err.retry_after is not None and err.retry_after > spend.max_wait:
            return False
        if err.status == 429:
            # The class is now blocked for every process; a caller that will not wait for
            # budget gets the RateLimited error at once instead of sleeping here.
            return spend.wait
        if err.status >= 500:
            # Any other write is re-sent only on a 503 with Retry-After in one of the provider's error shapes (an
            # `error` key): the provider says it did nothing. A gateway's 503 (an empty body, an HTML page, its own
            # JSON) may come after it forwarded the request, and a write without an Idempotency-Key (POST
            # /webhooks) sent again would then be made twice: raised instead, as `is_ambiguous` reads it.
            return repeatable or (err.status == 503 and err.retry_after is not None and provider_said(err.body))
        return False

    @staticmethod
    def _status_error(resp: requests.Response, method: str, path: str) -> errors.ApiStatusError:
        if 300 <= resp.status_code < 400:
            # Redirects are never followed: they would carry X-API-Secret to another address.
            return errors.ApiStatusError(f"unexpected redirect (HTTP {resp.status_code})", status=resp.status_code,
                                         trace_id=resp.headers.get("X-Trace-ID"), method=method, path=path)
        return error_from_response(resp.status_code, resp.content, resp.headers, method=method, path=path,
                                   reason=resp.reason or "")

    @staticmethod
    def _parse(resp: requests.Response, method: str, path: str) -> Any:
        if not resp.content or not resp.content.strip():
            return None
        try:
            return money.loads(resp.content)
        except ValueError as exc:
            raise errors.MalformedResponse(f"{method} {path}: HTTP {resp.status_code} body is not JSON",
                                           status=resp.status_code, body=resp.text[:2000],
                                           method=method, path=path) from exc
