"""One database serves one provider account: which one it is, and the guard that refuses any other.

The document scopes every call to "the authenticated client" ("one client cannot read another client's
data") and issues keys "per partner organization ... rotatable on request", yet no response names the
account. The wallets do: `GET /api/v1/wallets` lists the account's own wallets (no client reads another's
data, and an order naming another's `wallet_id` is "Wallet not found"), a rotated key of the same account
lists the same ones, and no wallet belongs to two accounts. So a database remembers the ids of its account's wallets (partnerkit.store.account, migration
12), and an API key is that account's when the wallets it lists share an id with them (README, "Where the
provider's document is silent"). Two accounts sharing a database read each other's recharges, orders and
transactions as drifts, and a full read withdrew the other's transactions; with this, the second one is
refused after that one read of its wallets, before it sends or stores anything else.

`AccountGuard` is what `PartnerClient` runs before the first call a key makes on a database (its
`check_account()`): a key the database knows costs one SELECT, a key new to it one `GET /wallets`, then
`judge` decides, in one IMMEDIATE transaction so two processes of two accounts cannot both adopt an empty
database:

| the database | the key's wallets | verdict |
|---|---|---|
| serves no account yet | any (none too) | `adopt`: the key and its wallets are the account's |
| has wallets | share an id with them | `same`: a rotated key; it and any new wallet are recorded |
| has wallets | none of them | `other_account`: AccountMismatch |
| has no wallet id, or the list shows none | - | `cannot_tell`: AccountMismatch, until `AccountGuard.trust` |

The wallet list's shape is not shown in the document: it is read from `data`, `wallets` or `items` (or the
body itself), a wallet's id from `id` or `wallet_id` (`wallet_list`, `wallet_id`: the one reader, which the
sync's wallet snapshots use too).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

from partnerkit.errors import AccountMismatch
from partnerkit.store import account as account_store
from partnerkit.store.budget import key_hash
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import utcnow

ADOPT, SAME, OTHER_ACCOUNT, CANNOT_TELL = "adopt", "same", "other_account", "cannot_tell"
TRUST_COMMAND = "`partnerkit account trust-key` (PartnerClient.trust_account)"
SEPARATE = ("one database serves one account: give this key its own PARTNERKIT_DB, PARTNERKIT_REPORT_DIR, "
            "receiver and worker (README, Configuration)")


def wallet_list(body: Any) -> list | None:
    """The wallet records of a `GET /wallets` answer (in `data`, `wallets` or `items`, or the body), or None."""
    if isinstance(body, dict):
        body = body.get("data", body)
        if isinstance(body, dict):
            body = body.get("wallets", body.get("items", [body]))
    return body if isinstance(body, list) else None


def wallet_id(record: Mapping[str, Any]) -> str:
    """A wallet record's id (`id`, else `wallet_id`; keys in any case) as text, '' when it shows none."""
    lowered = {str(k).lower(): v for k, v in record.items()}
    value = lowered.get("id", lowered.get("wallet_id"))
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return ""
    return str(value).strip()


def wallets_of(body: Any) -> dict[str, str | None]:
    """The wallet ids a `GET /wallets` answer shows, each with its currency (None if unreadable)."""
    found: dict[str, str | None] = {}
    for record in wallet_list(body) or ():
        if isinstance(record, dict) and wallet_id(record):
            currency = {str(k).lower(): v for k, v in record.items()}.get("currency")
            found[wallet_id(record)] = currency.strip().upper() if isinstance(currency, str) else None
    return found


def judge(account_wallets: set[str], has_account: bool, key_wallets: set[str]) -> str:
    """Whether a key new to the database is its account's (the table in the module docstring)."""
    if not account_wallets and not has_account:
        return ADOPT
    if account_wallets & key_wallets:
        return SAME
    if account_wallets and key_wallets:
        return OTHER_ACCOUNT
    return CANNOT_TELL


def _ids(ids: set[str] | Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(ids, key=lambda i: (len(i), i)))


def _mismatch(verdict: str, account_wallets: set[str], key_wallets: set[str]) -> AccountMismatch:
    shown = lambda ids: ", ".join(_ids(ids)) or "none"  # noqa: E731
    if verdict == OTHER_ACCOUNT:
        message = (f"PARTNERKIT_API_KEY belongs to another provider account than the one this database serves (the "
                   f"key's wallets: {shown(key_wallets)}; this database's: {shown(account_wallets)}): nothing else "
                   f"was sent and nothing was stored; {SEPARATE}")
    else:
        listed = "lists no wallet with an id" if not key_wallets else f"lists wallets {shown(key_wallets)}"
        known = (f"wallets {shown(account_wallets)}" if account_wallets
                 else "an account whose wallet list showed no id")
        message = (f"PARTNERKIT_API_KEY is new to this database and the provider {listed}, so partnerkit cannot tell "
                   f"whether it is the account this database serves ({known}): nothing else was sent and nothing stored. If it is "
                   f"that account's new key, run {TRUST_COMMAND}; another account needs its own PARTNERKIT_DB")
    return AccountMismatch(message, reason=verdict, key_wallets=_ids(key_wallets),
                           account_wallets=_ids(account_wallets))


def settle(db: Database, api_key: str, body: Any, *, trusted: bool = False) -> str:
    """Judge the key new to the database by its `GET /wallets` answer and record the verdict; return it
    (`adopt`, `same`, or `cannot_tell` when `trusted`). AccountMismatch, nothing recorded, for another account
    (even `trusted`) and, unless `trusted`, for one partnerkit cannot tell."""
    seen = wallets_of(body)
    now = utcnow()
    with transaction(db) as conn:
        account_wallets, has_account = account_store.state(conn)
        verdict = judge(account_wallets, has_account, set(seen))
        if verdict == OTHER_ACCOUNT or (verdict == CANNOT_TELL and not trusted):
            raise _mismatch(verdict, account_wallets, set(seen))
        how = {ADOPT: "adopted", SAME: "wallets", CANNOT_TELL: "trusted"}[verdict]
        account_store.add_key(conn, key_hash(api_key), how, now=now)
        account_store.add_wallets(conn, seen, now=now)
    return verdict


class AccountGuard:
    """Refuses every call of a PartnerClient whose API key is not the account's its database serves.

    One per client (and its views); `check(read_wallets)` runs at most once with success, under a lock."""

    def __init__(self, db: Database, api_key: str) -> None:
        self._db = db
        self._api_key = api_key
        self._lock = threading.Lock()
        self.checked = False

    def __repr__(self) -> str:
        return f"AccountGuard(checked={self.checked})"

    def check(self, read_wallets: Callable[[], Any]) -> None:
        """Nothing when the key is the account's; else AccountMismatch (or the wallet read's own error)."""
        if self.checked:
            return
        with self._lock:
            if self.checked:
                return
            if not account_store.key_known(self._db, key_hash(self._api_key)):
                settle(self._db, self._api_key, read_wallets())
            self.checked = True

    def trust(self, read_wallets: Callable[[], Any]) -> str:
        """Record the key as the account's even when its wallet list cannot tell (`partnerkit account
        trust-key`); return the verdict: `known` (nothing to do), `adopt` or `same` (recorded as `check` would)
        or `cannot_tell` (now trusted). A key whose wallets are another account's is refused all the same."""
        with self._lock:
            if account_store.key_known(self._db, key_hash(self._api_key)):
                verdict = "known"
            else:
                verdict = settle(self._db, self._api_key, read_wallets(), trusted=True)
            self.checked = True
            return verdict

    def note(self, body: Any) -> int:
        """Record the wallets a `GET /wallets` answer of this (checked) key shows as the account's: a wallet
        opened later is the account's too, and a rotated key may list only it. Returns how many were new."""
        if not self.checked:
            return 0
        seen = wallets_of(body)
        known = {row["wallet_id"] for row in account_store.wallets(self._db)}
        if not set(seen) - known:
            return 0  # the usual case: a read, no write
        with transaction(self._db) as conn:
            return account_store.add_wallets(conn, seen, now=utcnow())


def describe(db: Database, api_key: str | None) -> dict:
    """The account this database serves: its wallets, its keys (by a fingerprint: the first 12 hex digits of
    their SHA-256) and whether `api_key` is one of them (None without a key)."""
    keys = account_store.keys(db)
    mine = key_hash(api_key) if api_key else None
    return {
        "wallets": account_store.wallets(db),
        "keys": [{"fingerprint": k["key_hash"][:12], "first_used_at": k["first_used_at"], "how": k["how"],
                  "configured": k["key_hash"] == mine} for k in keys],
        "configured_key_known": None if mine is None else any(k["key_hash"] == mine for k in keys),
    }
