"""Locate a recharge whose submit answer was lost: search first, send its key again only when it should.

The document's "Locating a recharge after a submit timeout": (1) the same Idempotency-Key again,
(2) search by number and match client_reference, (3) search by number and from_date and match face
and created_at. Step 1 is a read only when the first send arrived: sent to a provider that never
received it, it is the first send, and it PERFORMS the recharge, now. Right after the submit (the
customer still waiting) that is what the document intends, so `locate_after_submit` keeps its
order, each lookup sent once. Any later `locate` searches first, and sends the key again only when
the provider shows nothing that could be this recharge and the intent is still the request someone
is waiting on (REPLAY_WINDOW), or when the operator asks for it (`replay=True`, `recharges locate
--replay`). A send whose answer is a recharge it made itself is said so ("The replay performed it
now") and noted on the row. An intent whose earlier answer named a recharge id another local row holds
is only searched: its key would be answered with the same id. So is one whose key answered another request's
recharge (`store.key_taken`): the same answer would come back; a send that meets such an answer raises
`errors.ReplayMismatch`, the row left open (`reconcile.recharges.answer_of_another`). So is one an operator closed
(`close`, `partnerkit recharges close`: the same search found nothing, and they said it was never made): searched,
linked if the provider shows it after all, never sent again. docs/worker.md, "Locate" and "Close".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from partnerkit import errors, senders
from partnerkit.config import Config
from partnerkit.errors import is_ambiguous
from partnerkit.money import from_cents
from partnerkit.store import Database, closures
from partnerkit.store import recharges as store
from partnerkit.store.db import database_file
from partnerkit.timeutil import iso, parse_ts, utcnow
from reconcile.recharges import (RechargeInputError, SubmitOutcome, SubmitRequest, answer_held_elsewhere,
                                 answer_not_stored, answer_of_another, describe, merged_answer, status_from_answer,
                                 stored_status, validate_amount, validate_key, validate_mobile)

log = logging.getLogger("reconcile.locate")

KEY_LIFETIME = timedelta(hours=24)  # Limits: idempotency record lifetime
# Those 24 hours run on the provider's clock, from when it received the key. A replay is sent only
# this far inside them: to a provider whose clock is ahead of ours, a key replayed at 23h59m by
# our clock may already be forgotten, and the "replay" is then a new request, a second recharge.
KEY_REPLAY_MARGIN = timedelta(hours=1)
LOCATE_WINDOW = timedelta(minutes=10)  # step 3: created_at within this of our submit (document silent)
# How long after its submit a later locate still sends an intent's key again by itself, when the
# provider shows no such recharge. The document's polling schedule watches a recharge closely for
# its first 5 minutes (every 5 s, then 15 s) before it slows to once a minute: that is how long a
# customer is expected to wait for an answer. Within it, a replay completes the request they are
# waiting on; after it they may have been told it failed, or paid another way, and a replay that
# performs it is the operator's decision (`recharges locate --replay`). The document's procedure itself
# begins with that send ("retry with the same Idempotency-Key"): inside this window locate keeps to it,
# only searching first. `partnerkit status` names the recharges locate would send again by its own copy,
# partnerkit.status._facts.LOCATE_REPLAY_WINDOW (a test holds the two equal).
REPLAY_WINDOW = timedelta(minutes=5)
# How far the provider's clock can be from ours: a signed request's X-Timestamp must be "within 5
# minutes of server time" (Authentication 4), and the submit is signed.
CLOCK_SKEW = timedelta(minutes=5)
LOCATE_MAX_PAGES = 5
LOCATE_PAGE_SIZE = 200


@dataclass
class _Search:
    """What steps 2 and 3 saw, when they linked nothing."""

    notes: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # lookups the provider did not answer: why
    candidates: list = field(default_factory=list)  # step 3: several recharges that could be this one
    served: list = field(default_factory=list)  # other recharges of the number and face since the submit
    replay_error: str | None = None  # what sending the key again met
    replay_ambiguous: bool = False  # ... and whether that send may have performed it (errors.is_ambiguous)
    # An INTENT's submit: still running (True), no longer (False), not known (None: partnerkit.senders); and who.
    sender: bool | None = None
    sender_who: str | None = None

    @property
    def shows_none(self) -> bool:
        """The provider answered every lookup and shows nothing that could be this recharge."""
        return not self.unchecked and not self.candidates


def locate(config: Config, db: Database, client: Any, *, local_id: int | None = None,
           mobile_number: str | None = None, amount: Any = None, client_reference: str | None = None,
           replay: bool = False, now: datetime | None = None) -> SubmitOutcome:
    """Find out what became of a local recharge (or a number and amount): search first, send its key only after.

    The same Idempotency-Key is sent again only when the search shows no such recharge and the intent
    is younger than REPLAY_WINDOW, or with `replay` (never past the key's replay window, and never
    with a new key): if its first send never arrived, that performs the recharge now. So locate is no
    read-only command within REPLAY_WINDOW of a submit, and whatever tells an operator to run it says
    so (`partnerkit status`, the submit hold's message). Never for an intent whose earlier answer named
    a recharge id another local row holds (`store.held_elsewhere`): the provider would answer the same
    id; nor for one whose key answered another request's recharge (`store.key_taken`): the same answer would
    come back. Such an intent is searched, and `replay` is refused (RechargeInputError, nothing sent). A send
    whose answer is another request's recharge raises `errors.ReplayMismatch`, the row left open.
    """
    now = now or utcnow()
    if local_id is not None:
        row = store.get(db, local_id)
        if row is None:
            return _merged_before(db, local_id)
    else:
        mobile = validate_mobile(mobile_number)
        face = validate_amount(amount)
        rows = store.open_intents(db, mobile_number=mobile, amount=face, client_reference=client_reference)
        row = rows[0] if rows else None
        if row is None:
            return _search_only(db, client, mobile, face, client_reference, now)
    if row["provider_id"] is not None:
        return SubmitOutcome(row["local_id"], row["status"], row["idempotency_key"], row["client_reference"],
                             located_by="already_known", message=describe(row), row=row)
    _close_if_never_sent(db, row)
    # An earlier answer named a recharge id another local row holds: sending the key again is answered with the
    # same id. Searched as usual; never sent again, by itself or asked.
    held = store.held_elsewhere(row["last_error"])
    if held is not None and replay:
        raise RechargeInputError(
            f"local recharge #{row['local_id']} is not sent again (--replay): its answer named {held.answered}, which "
            f"local recharge #{held.holder} already holds, and the provider would answer the same id; nothing was "
            f"sent; {held.compare}, and report an id given twice to support (without --replay locate only searches)")
    # An earlier answer to its key was another request's recharge: the key was used first elsewhere, and sending it
    # again brings the same answer back. Searched as usual (by number and client_reference); never sent again.
    taken = store.key_taken(row["last_error"])
    if taken is not None and replay:
        raise RechargeInputError(
            f"local recharge #{row['local_id']} is not sent again (--replay): its Idempotency-Key "
            f"{row['idempotency_key']} {store.KEY_TAKEN} ({taken.answered}: {taken.differences}), and the provider "
            f"would answer the same; nothing was sent; this recharge was not made under that key. What to do: "
            f"{store.key_taken_advice(row['local_id'])} (without --replay locate only searches)")
    # Closed by an operator (`recharges close`: the provider showed no such recharge, and they said it was never
    # made): searched, and linked if the provider shows it after all; its key is never sent again, which would make
    # the recharge now.
    closed = store.closure(db, row)
    if closed is not None and replay:
        raise RechargeInputError(
            f"local recharge #{row['local_id']} is not sent again (--replay): {closures.described(closed)}; sending its key "
            "now would make the recharge. If the customer still wants it, submit it again (a closed recharge holds "
            "no new submit back); without --replay locate only searches")
    # An INTENT's submit still running (partnerkit.senders) may be waiting for the budget or for the answer: the
    # search may not show its recharge yet, and it stores the answer itself. Its key is sent again only if asked.
    search = _Search(sender=senders.row_running(database_file(db), row), sender_who=row["sender"])
    found = _search(db, client, row, now, search)
    if found is not None:
        if closed is not None:
            found.message = f"{closures.described(closed)}; overtaken now: the provider shows it. " + found.message
        return found
    if closed is not None:
        seen = (f"the provider could not be checked now ({'; '.join(search.unchecked)})" if search.unchecked
                else "the provider still shows no such recharge")
        return _still_unknown(db, row, f"Local recharge #{row['local_id']} ({row['mobile_number']}, "
                                       f"{from_cents(row['amount_cents'])}) {closures.described(closed)}: {seen}. Its key "
                                       "is not sent again. If the customer still wants it, submit it again (a "
                                       "closed recharge holds no new submit back).", search)
    submitted = parse_ts(row["submitted_at"]) or now
    young = now - submitted < REPLAY_WINDOW
    if held is None and taken is None and _replayable(row, now) and (
            replay or (young and search.shows_none and not search.served and search.sender is not True)):
        sent = _replay_same_key(config, db, client, row, now, search, searched=True, asked=replay)
        if sent is not None:
            return sent
    return _unknown(db, row, now, search, young=young, asked=replay, held=held, taken=taken)


@dataclass
class CloseOutcome:
    """What `close` did: closed (`record`, the closure kept), or not, because the search found it (`located`)."""

    closed: bool
    row: dict
    message: str
    record: dict | None = None
    located: SubmitOutcome | None = None


def close(config: Config, db: Database, client: Any, local_id: int, *, note: str, by: str,
          without_search: bool = False, now: datetime | None = None) -> CloseOutcome:
    """Close an intent whose outcome is not known, which an operator checked with the provider: never made.

    Only an open intent (UNKNOWN; INTENT whose `recharges submit` no longer runs, or older than a submit can keep
    one) with no provider id: anything else is refused (RechargeInputError, nothing written). First the search
    `locate` runs (by number and client_reference, then face and time), never a send of its key: a recharge found
    is linked as locate links it, and not closed (`closed` False, `located`). A provider that cannot be read in
    full, or that shows several recharges that could be this one, refuses it (nothing written). `without_search`
    skips the search (an operator who confirmed with support another way); the note says how.

    Closing keeps the row and its status: a record of who, when, why and what the provider showed
    (`store.close_intent`) that `partnerkit status` and the submit hold leave out, and that `recharges show`
    prints. A sync that lists the recharge later still links it (the provider's record wins)."""
    from partnerkit.status._facts import intent_stale_after_s

    now = now or utcnow()
    row = store.get(db, local_id)
    if row is None:
        merged = store.merged_into(db, local_id)
        if merged is not None:
            raise RechargeInputError(f"local recharge #{local_id} was merged into local #{merged['into']} (provider "
                                     f"recharge {merged['provider_id']}): its outcome is known, nothing to close")
        raise RechargeInputError(f"no local recharge #{local_id}")
    if row["provider_id"] is not None or row["status"] not in store.OPEN_INTENT:
        known = f"recharge {row['provider_id']}, " if row["provider_id"] is not None else ""
        raise RechargeInputError(f"local recharge #{local_id} is {row['status']} ({known}the provider's record): its "
                                 "outcome is known, and only one whose outcome is not known (INTENT, UNKNOWN) can be "
                                 "closed; nothing was written")
    done = store.closure(db, row)
    if done is not None:
        return CloseOutcome(True, row, f"Local recharge #{local_id} {closures.described(done)}: nothing changed.", done)
    if row["status"] == "INTENT":
        running = senders.row_running(database_file(db), row)
        submitted = parse_ts(row["submitted_at"]) or now
        if running is True or (running is None and now - submitted < timedelta(seconds=intent_stale_after_s(config))):
            raise RechargeInputError(
                f"local recharge #{local_id} is not closed: "
                f"{senders.sending('recharges submit', running, row['sender'])}; it stores the answer itself. Run "
                "this again once that command has ended; nothing was written")
    if without_search:
        searched = "not searched (--without-search)"
    else:
        search = _Search()
        found = _search(db, client, row, now, search)
        if found is not None:
            found.message = (f"Local recharge #{local_id} is not closed: the provider shows it, so it is linked "
                             f"instead. " + found.message)
            return CloseOutcome(False, found.row or store.get(db, local_id) or row, found.message, located=found)
        if search.unchecked:
            raise RechargeInputError(f"local recharge #{local_id} is not closed: the provider could not be checked "
                                     f"({'; '.join(search.unchecked)}); nothing was written. Run this again when the "
                                     "provider answers")
        if search.candidates:
            raise RechargeInputError(f"local recharge #{local_id} is not closed: the provider shows several recharges "
                                     f"that could be this one ({_listed(search.candidates)}); nothing was written. "
                                     "Ask support which one it is, quoting its Idempotency-Key "
                                     f"{row['idempotency_key']} and client_reference {row['client_reference']}")
        searched = f"the provider showed no such recharge ({'; '.join(search.notes)})"
        if search.served:
            searched += f"; it showed other recharges of the number and face since: {_listed(search.served)}"
    try:
        record = store.close_intent(db, local_id, by=by, note=note, at=now.replace(microsecond=0), searched=searched)
    except errors.StorageError as exc:
        raise RechargeInputError(f"local recharge #{local_id} is not closed: {exc}") from None
    log.info("local recharge #%s closed by hand (%s)", local_id, searched, extra={"local_id": local_id})
    message = (f"Local recharge #{local_id} ({row['mobile_number']}, {from_cents(row['amount_cents'])}) is closed: "
               f"{searched}. It stays {row['status']} with the closure kept (`partnerkit recharges show {local_id}`); "
               "`partnerkit status` no longer names it and it holds no new submit back. If the provider lists it "
               "later, the sync links it (its record wins). The nightly match still reports it as "
               "`unknown_to_provider` for finance.")
    return CloseOutcome(True, store.get(db, local_id) or row, message, record)


def _merged_before(db: Database, local_id: int) -> SubmitOutcome:
    """A local id that is no longer a row: an intent merged into the row that already held its recharge
    (answered from the store, nothing sent), or no recharge at all."""
    merged = store.merged_into(db, local_id)
    row = store.get(db, merged["into"]) if merged is not None else None
    if merged is None or row is None:
        raise RechargeInputError(f"no local recharge #{local_id}")
    message = (f"Local recharge #{local_id} was merged into local #{row['local_id']} at {merged['merged_at']}: the "
               f"provider's recharge {merged['provider_id']} was already known there, synced from the provider, and "
               f"its key is recorded there. " + describe(row))
    return SubmitOutcome(row["local_id"], row["status"], row["idempotency_key"], row["client_reference"],
                         located_by="already_known", message=message, row=row, merged_from=local_id)


def _close_if_never_sent(db: Database, row: dict) -> None:
    """An intent whose stored Idempotency-Key the client refuses to send was never sent: close it as a
    refused submit's intent is closed (removed), and raise RechargeInputError saying so.

    Such a row was left by a submit from before `submit` checked its key as the client does: the
    intent was recorded, then the client refused the key. The client has checked every key before
    sending since its first version, so no request carrying this one can have reached the provider,
    and there is nothing to search for or replay (the replay could not be sent either)."""
    key = row["idempotency_key"]
    if key is None:
        return
    try:
        validate_key(key)
        return
    except RechargeInputError as exc:
        refused = exc
    local = row["local_id"]
    head = (f"local recharge #{local} ({row['mobile_number']}, {from_cents(row['amount_cents'])}) was never sent: "
            f"its Idempotency-Key {key!r} is one the client refuses to send ({refused}), so no request carrying it "
            "can have reached the provider")
    try:
        store.discard_refused(db, local)
    except errors.StorageError as exc:
        raise RechargeInputError(f"{head}; its intent could not be removed now ({exc}): run this again once the "
                                 "database takes writes") from None
    log.info("local recharge #%s was never sent (its Idempotency-Key is one the client refuses): intent removed",
             local, extra={"local_id": local})
    raise RechargeInputError(f"{head}. Its intent is removed, as a refused submit's is: no recharge exists for it. "
                             "If the customer still wants it, submit it again without --idempotency-key (a new key "
                             "is safe here, since the first was never sent).")


def locate_after_submit(config: Config, db: Database, client: Any, local_id: int, lost: Exception) -> SubmitOutcome:
    """Right after a submit's answer was lost, in the document's order: the same key, then the search.

    It runs inside the user's command, so it is bounded: each lookup is sent once, without waiting
    for budget (`client.once()`), and the search reads one page (the list is newest first, and the
    recharge, if any, is seconds old): about two client timeouts on top of the submit's own.
    """
    now = utcnow()
    row = store.get(db, local_id)
    if row is None:  # removed meanwhile (another process found the submit refused): nothing to locate
        raise lost
    quick = client.once()
    search = _Search()
    try:
        found = _replay_same_key(config, db, quick, row, now, search, searched=False, asked=False)
    except errors.ReplayMismatch as taken:
        # The key answered another request's recharge (the row stays open, saying so). The search may still find
        # this one by its client_reference; if not, the caller hears the replay's answer for what it is.
        found = _search(db, quick, row, now, search, pages=1)
        if found is None:
            raise errors.ReplayMismatch(f"The submit's answer was lost ({lost}). {taken}", method=taken.method,
                                        path=taken.path) from None
    if found is None:
        found = _search(db, quick, row, now, search, pages=1)
    if found is None:
        found = _unknown(db, row, now, search, young=True, asked=False, after_submit=True)
    found.message = f"The submit's answer was lost ({lost}). " + found.message
    return found


def _replay_same_key(config: Config, db: Database, client: Any, row: dict, now: datetime, search: _Search, *,
                     searched: bool, asked: bool) -> SubmitOutcome | None:
    """Step 1: the same Idempotency-Key within its replay window; the provider replays the original
    answer, recharge id included, or, if the first send never arrived, performs it now.

    None when nothing was linked: the key is too old to send, or the send met an error (kept in
    `search.replay_error`: that send's own outcome is unknown too). An answer that is another request's
    recharge (the key was used first elsewhere) raises `errors.ReplayMismatch`, the row left open saying so."""
    if not _replayable(row, now):
        search.notes.append(f"same Idempotency-Key: not tried (older than "
                            f"{_hours(KEY_LIFETIME - KEY_REPLAY_MARGIN)} hours; the provider forgets a key after "
                            f"{_hours(KEY_LIFETIME)} hours on its own clock)")
        return None
    request = SubmitRequest.of_row(row)
    log.info("local recharge #%s: sending its Idempotency-Key again%s", row["local_id"],
             " (asked for with --replay)" if asked else "", extra={"local_id": row["local_id"]})
    try:
        result = client.submit_recharge(**request.body(row["client_reference"]), idempotency_key=row["idempotency_key"])
        status = status_from_answer(result.http_status, result.recharge.status)
    except errors.PartnerKitError as exc:
        search.replay_error, search.replay_ambiguous = str(exc), is_ambiguous(exc)
        try:
            store.note_error(db, row["local_id"], f"locate step 1: {exc}", utcnow())
        except errors.StorageError as failed:  # a note: what locate tells the caller matters more
            log.warning("local recharge #%s: locate step 1's error could not be noted (%s)", row["local_id"],
                        failed, extra={"local_id": row["local_id"]})
        return None
    performed = _performed_now(config, row, result.recharge, shown_none=searched and search.shows_none)
    return _link(db, row, result.recharge, status, "idempotency_key", http_status=result.http_status,
                 performed=performed, replay_sent=now)


def _performed_now(config: Config, row: dict, recharge: Any, *, shown_none: bool) -> str | None:
    """Why a replay's answer is a recharge the replay itself created (None: it is the original's).

    Either the search just before it, complete, showed no such recharge (recharge reads are "never
    cached"), or the recharge was created well after the submit: later than the provider's clock can
    be off ours (CLOCK_SKEW) plus the first send's longest wait (connect and read timeouts)."""
    submitted = parse_ts(row["submitted_at"])
    created = getattr(recharge, "created_at", None)
    if submitted is not None and isinstance(created, datetime):
        after = created - submitted
        if after > CLOCK_SKEW + timedelta(seconds=2 * config.http_timeout_s):
            return f"created at {iso(created)}, {_minutes(after)} after the submit at {iso(submitted)}"
    if shown_none:
        return "the provider showed no such recharge a moment before the replay"
    return None


def _replayable(row: dict, now: datetime) -> bool:
    """True while the provider certainly still holds the row's Idempotency-Key (see KEY_REPLAY_MARGIN)."""
    submitted = parse_ts(row["submitted_at"])
    return bool(row["idempotency_key"]) and submitted is not None and now - submitted < KEY_LIFETIME - KEY_REPLAY_MARGIN


def _hours(span: timedelta) -> int:
    return int(span.total_seconds() // 3600)


def _minutes(span: timedelta) -> str:
    minutes = span.total_seconds() / 60
    return f"{minutes:.0f} min" if minutes >= 1 else f"{span.total_seconds():.0f} s"


def _candidates(client: Any, mobile: str, since: datetime, search: _Search, pages: int) -> list[Any]:
    """Recharges of one number created since the day before `since` (steps 2 and 3 share this walk);
    what could not be read is noted in `search.unchecked`."""
    found: list[Any] = []
    try:
        for page in range(1, pages + 1):
            result = client.list_recharges(page=page, limit=LOCATE_PAGE_SIZE, search=mobile,
                                           from_date=(since - timedelta(days=1)).date().isoformat())
            # search is a partial match on id, reference_number or number: keep exact numbers only.
            found += [r for r in result.items if r.mobile_number == mobile]
            if result.malformed:
                search.unchecked.append(f"search by number: {len(result.malformed)} record(s) could not be read")
            if not result.has_more:
                break
        else:
            search.unchecked.append(f"search by number: more than {pages * LOCATE_PAGE_SIZE} recharges, not all read")
    except errors.PartnerKitError as exc:
        search.notes.append(f"search by number: {exc}")
        search.unchecked.append(f"search by number: {exc}")
    return found


def _search(db: Database, client: Any, row: dict, now: datetime, search: _Search,
            pages: int = LOCATE_MAX_PAGES) -> SubmitOutcome | None:
    """Steps 2 and 3 over one list walk: client_reference first, then face and created_at."""
    submitted = parse_ts(row["submitted_at"]) or now
    unanswered = len(search.unchecked)
    found = _candidates(client, row["mobile_number"], submitted, search, pages)
    if not found and len(search.unchecked) > unanswered:
        return None
    # A record carrying this client_reference but not this request (another number's face, operator) is not it.
    by_reference = [r for r in found if row["client_reference"] and r.client_reference == row["client_reference"]
                    and not store.request_disagreements(row, r)]
    if len(by_reference) == 1:
        return _link(db, row, by_reference[0], by_reference[0].status, "client_reference")
    search.notes.append(f"search by number and client_reference {row['client_reference']}: "
                        f"{'several matches' if by_reference else 'no match'}")
    face = from_cents(row["amount_cents"])
    close = [r for r in found if r.face == face and abs(r.created_at - submitted) <= LOCATE_WINDOW
             and not isinstance(r.client_reference, str) and store.by_provider_id(db, r.id) is None]
    if len(close) == 1:
        return _link(db, row, close[0], close[0].status, "face_and_time")
    search.candidates = by_reference + close if (by_reference or len(close) > 1) else []
    search.notes.append(f"search by number, date, face {face} and created_at within "
                        f"{int(LOCATE_WINDOW.total_seconds() // 60)} minutes: {len(close)} candidates"
                        + (f" ({', '.join(str(r.id) for r in close)})" if close else ""))
    # Another recharge of the same number and amount since this one was asked for (another key, or
    # linked to another local row): the customer was probably served by it.
    search.served = [r for r in found if r.face == face and r.created_at >= submitted - CLOCK_SKEW
                     and r not in search.candidates and stored_status(r.status) in ("SUCCESS", "PROCESSING")]
    return None


def _link(db: Database, row: dict, recharge: Any, status: str, step: str, *, http_status: int | None = None,
          performed: str | None = None, replay_sent: datetime | None = None) -> SubmitOutcome:
    stored = stored_status(status)
    found = "The replay performed it now" if performed else f"Located by {step.replace('_', ' ')}"
    try:
        linked = store.record_response(db, row["local_id"], recharge, status=stored, seen_at=utcnow(),
                                       http_status=http_status, how=f"locate, by {step.replace('_', ' ')}")
    except store.AnswerOfAnotherRequest as exc:
        if step != "idempotency_key":
            raise  # the search links only records that are the request (`_search`): never met
        raise answer_of_another(db, row["local_id"], row["idempotency_key"], recharge, stored, exc,
                                head="Its Idempotency-Key was sent again: ") from None
    except store.RechargeHeldElsewhere as exc:
        return answer_held_elsewhere(db, row["local_id"], recharge, stored, exc, http_status=http_status,
                                     head=f"Located by {step.replace('_', ' ')}: ")
    except errors.StorageError as exc:
        return answer_not_stored(db, row["local_id"], recharge, stored, exc, http_status=http_status,
                                 head=f"{found}: ")
    if linked.get("local_id", row["local_id"]) != row["local_id"]:
        # The store held this recharge already, from a provider read: it existed before this locate,
        # so a replay's answer is the original's, never one the replay performed.
        return merged_answer(row["local_id"], linked, recharge, http_status=http_status, located_by=step,
                             head=f"Located by {step.replace('_', ' ')}: ")
    log.info("located local recharge #%s as %s by %s%s", row["local_id"], recharge.id, step,
             " (the replay performed it now)" if performed else "",
             extra={"local_id": row["local_id"], "recharge_id": recharge.id, "located_by": step})
    if performed:
        # Not found: made. Said so, and kept on the row (`recharges show`, last_error) for whoever
        # looks at this number's recharges later.
        note = (f"the same Idempotency-Key sent again at {iso(replay_sent)} made recharge {recharge.id} "
                f"({performed}); the first send never reached the provider")
        try:
            store.note_performed_by_replay(db, row["local_id"], note, utcnow())
            linked = store.get(db, row["local_id"]) or linked
        except errors.StorageError as failed:  # the recharge is stored; only the note is missing (the message says it)
            log.warning("local recharge #%s: %s; this note could not be kept on the row (%s)", row["local_id"],
                        note, failed, extra={"local_id": row["local_id"]})
        head = (f"The replay performed it now ({performed}): the first send never reached the provider, so "
                f"sending its Idempotency-Key again made the recharge at this moment. ")
    else:
        head = f"Located by {step.replace('_', ' ')}: "
    return SubmitOutcome(row["local_id"], stored, row["idempotency_key"], row["client_reference"], http_status,
                         recharge, located_by=step, message=head + describe(linked), row=linked,
                         performed_now=performed is not None)


def _search_only(db: Database, client: Any, mobile: str, face: Decimal, client_reference: str | None,
                 now: datetime) -> SubmitOutcome:
    """Manual locate without a local intent: report what the provider has, change nothing."""
    search = _Search()
    found = _candidates(client, mobile, now, search, LOCATE_MAX_PAGES)
    matches = [r for r in found if (r.client_reference == client_reference if client_reference else r.face == face)]
    lines = [f"{r.id} {r.reference_number} {r.status} face {r.face} created {iso(r.created_at)}" for r in matches]
    if search.unchecked:
        shown = (f"the provider could not be checked in full ({'; '.join(search.unchecked)}); it shows "
                 f"{len(matches)} matching recharge(s) so far")
    else:
        shown = f"the provider shows {len(matches)} matching recharge(s)"
    message = f"No local intent for {mobile} / {face}; {shown}" + (":\n  " + "\n  ".join(lines) if lines else "")
    return SubmitOutcome(0, "NOT_RECORDED", None, client_reference, recharge=matches[0] if len(matches) == 1 else None,
                         located_by="search" if matches else None, message=message, matches=matches,
                         unchecked=bool(search.unchecked))


def _unknown(db: Database, row: dict, now: datetime, search: _Search, *, young: bool, asked: bool,
             after_submit: bool = False, held: store.HeldId | None = None,
             taken: store.KeyTaken | None = None) -> SubmitOutcome:
    """The row stays UNKNOWN: what the provider showed (or why it could not be checked), and what to do."""
    local, key, reference = row["local_id"], row["idempotency_key"], row["client_reference"]
    submitted = parse_ts(row["submitted_at"]) or now
    face = from_cents(row["amount_cents"])
    if search.unchecked:
        seen = f"it could not be checked ({'; '.join(search.unchecked)})"
    elif search.candidates:
        seen = f"the provider shows several recharges that could be this one ({_listed(search.candidates)})"
    else:
        seen = "the provider shows no such recharge"
    text = f"Local recharge #{local} ({row['mobile_number']}, {face}) is UNKNOWN: {seen}"
    text += f" ({'; '.join(search.notes)})." if search.notes and not search.unchecked else "."
    if search.sender is not None:  # an INTENT whose submit can be seen (partnerkit.senders)
        text += f" Its row is still INTENT: {senders.sending('recharges submit', search.sender, search.sender_who)}."
    if search.served:
        text += (f" It does show {len(search.served)} other recharge(s) of {row['mobile_number']} for {face} made "
                 f"since this one was asked for ({_listed(search.served)}): the customer was probably served by it.")
    if search.replay_error:
        text += (f" Sending its Idempotency-Key again failed{' too' if after_submit else ''} ({search.replay_error})"
                 + ("; that send may have performed it, which only the next locate can tell (the same key never "
                    "makes a second recharge)." if search.replay_ambiguous else "; it was refused: nothing was done."))
    if taken is not None:
        # Not made under its key, which answers another recharge: a new key is what is left, once checked.
        text += (f" Its key was not sent again, and --replay is refused: its Idempotency-Key {key} {store.KEY_TAKEN}: "
                 f"the provider answered {taken.answered}, not this request ({taken.differences}), so this recharge "
                 f"was not made under that key, and sending it again would bring the same answer. What to do: "
                 f"{store.key_taken_advice(local)}. Support can trace this one by client_reference {reference}.")
        return _still_unknown(db, row, text, search)
    text += " Do NOT submit it again with a new key."
    if held is not None:
        text += (f" Its key was not sent again, and --replay is refused: an earlier answer named {held.answered}, "
                 f"which local recharge #{held.holder} already holds, and the provider would answer the same id. "
                 f"What to do: {held.compare}: {store.HELD_ADVICE}. Support can trace this one by Idempotency-Key "
                 f"{key} and client_reference {reference}.")
        return _still_unknown(db, row, text, search)
    if not _replayable(row, now):
        text += (f" Its Idempotency-Key ({key}) is too old to replay safely, so locate only searches now; contact "
                 f"support with that Idempotency-Key and client_reference {reference}.")
        return _still_unknown(db, row, text, search)
    until = iso(submitted + REPLAY_WINDOW)
    window = f"{int(REPLAY_WINDOW.total_seconds() // 60)} minutes"
    if after_submit:
        text += (f" Do not tell the customer it failed yet. Until {until} ({window} after the submit) `partnerkit "
                 f"recharges locate --local-id {local}` searches and, if the provider then shows no such recharge, "
                 f"sends it again under the same Idempotency-Key ({key}): that completes this request if its first "
                 "send never arrived, and can never make a second recharge. After that, locate only searches, and "
                 "sending it is your decision (`--replay`).")
    elif asked:
        text += (f" Run `partnerkit recharges locate --local-id {local} --replay` again when the provider answers "
                 "(the same key never makes a second recharge).")
    elif search.sender is True:
        text += (" Its key was not sent again: that submit stores the answer when it comes, and locates the recharge "
                 f"itself if the answer is lost. Once it has ended, if #{local} is still open, run `partnerkit "
                 f"recharges locate --local-id {local}` again.")
    elif search.unchecked or search.replay_error:
        text += (f" Run `partnerkit recharges locate --local-id {local}` again when the provider answers"
                 + (f" (until {until} it also sends the key again if the provider shows no such recharge)."
                    if young else "."))
    else:
        text += (f" Nothing was sent. If its first send never reached the provider, sending its Idempotency-Key "
                 f"again would perform the recharge now, {_minutes(now - submitted)} after it was asked for: only if "
                 "the customer still wants it and was not served " + ("by the recharge above" if search.served
                                                                      else "another way")
                 + f", run `partnerkit recharges locate --local-id {local} --replay`. Otherwise leave it: the day's "
                 "report lists it as `unknown_to_provider` for finance to close; once the provider (or its support) "
                 f"confirms it was never made, `partnerkit recharges close {local} --note TEXT` takes it out of "
                 "`partnerkit status`.")
    text += f" Support can trace it by Idempotency-Key {key} and client_reference {reference}."
    return _still_unknown(db, row, text, search)


def _listed(recharges: list) -> str:
    return ", ".join(f"{r.id} {r.status} created {iso(r.created_at)}" for r in recharges)


def _still_unknown(db: Database, row: dict, message: str, search: _Search) -> SubmitOutcome:
    fresh = store.get(db, row["local_id"]) or row
    return SubmitOutcome(row["local_id"], fresh["status"], row["idempotency_key"], row["client_reference"],
                         message=message, row=fresh, unchecked=bool(search.unchecked or search.replay_error))
