"""The attention lines of `partnerkit status`: what needs a person now, in plain words, judged from the
facts `collect` gathered (a dict of the status fields), so each rule is a function of its inputs; and the
lines for finance (`for_finance`): drifts waiting on a decision, which are finance's queue, not an alarm."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from partnerkit import disk
from partnerkit.processes import holder_host
from partnerkit.store import reports
from partnerkit.store.budget import refusal_names_the_clock
from partnerkit.store.recharges import HELD_ADVICE, KEY_TAKEN, key_taken_advice
from partnerkit.timeutil import iso, parse_ts

# A 429's block of the shared budget that still has this long to run holds every job (voucher
# fetches, polls, syncs, the report) past what a passing rate limit explains: a person should know.
BLOCK_ATTENTION = timedelta(minutes=5)
# A worker lease taken over from a holder on another host is named this long after the takeover. It is one
# moment that nothing done afterwards undoes: long enough for the status timer (every 5 minutes) to fail a
# dozen times and reach whoever its alert reaches, and for a move to a new host to be over; not so long that
# one crash of an old host keeps the unit failed all day. Two hosts that go on sharing the file take the lease
# from each other whenever one's renewals lapse, and each takeover starts the hour again; the field itself
# (`worker_lease_previous_host`) stays while the worker that took the lease holds it.
TAKEOVER_ATTENTION = timedelta(hours=1)
# What to check when every delivery is refused, by the most frequent reason (receiver.signature, receiver.views).
_SIGNED_WITH_ANOTHER_TOKEN = ("the deliveries are signed with a token this receiver does not accept, or a proxy "
                              "changes their bodies: `partnerkit webhooks list` gives the webhook's id, "
                              "`partnerkit webhooks token set ID` saves the signing secret the provider's portal "
                              "shows now, and the proxy must pass bodies through unchanged")
REFUSAL_HINTS = {
    "signature_mismatch": _SIGNED_WITH_ANOTHER_TOKEN,
    "service_token_mismatch": _SIGNED_WITH_ANOTHER_TOKEN,
    "no_token": ("no accepted token is bound to the deliveries' X-Webhook-ID: `partnerkit webhooks list` gives the "
                 "webhooks, `partnerkit webhooks token set ID` saves the signing secret of one; a token nobody has "
                 "(registered after the backup a restore put back: the provider shows it only once) means "
                 "`partnerkit webhooks register` again, then `partnerkit webhooks delete` the old one"),
    "timestamp_out_of_tolerance": ("their X-Timestamp is more than PARTNERKIT_TOLERANCE_S from this host's clock: "
                                   "check the clock (`timedatectl`: is it NTP-synchronised?)"),
    "malformed_timestamp": "their X-Timestamp is not Unix seconds: a proxy that rewrites it, or not the provider",
    "malformed_signature": ("their X-Signature is neither 64 hex digits nor t=<ts>,v1=<64 hex digits>: a proxy that "
                            "rewrites it, or not the provider"),
    "signature_timestamp_mismatch": "their X-Signature's t= differs from X-Timestamp: a proxy that rewrites one "
                                    "header, or not the provider",
    "missing_timestamp": "X-Timestamp is missing: a proxy that drops the provider's headers, or not the provider",
    "missing_signature": "X-Signature is missing: a proxy that drops the provider's headers, or not the provider",
    "header_not_utf8": "a header is not UTF-8: a proxy that re-encodes headers, or not the provider",
    "body_too_large": "bodies over 1 MiB: a proxy that alters them, or not the provider",
}


# Refusals a scanner's request earns as well as a provider's behind a broken proxy: attention only from
# UNSIGNED_FLOOR of them in the hour (the provider's attempts at one delivery; see _every_delivery_refused).
UNSIGNED_REASONS = frozenset({"missing_timestamp", "missing_signature", "malformed_timestamp", "malformed_signature",
                              "header_not_utf8", "body_too_large"})
UNSIGNED_FLOOR = 5


# What `provider_refused` adds after the time of a refusal dated ahead of this host's clock (met while the clock ran
# ahead, put right since: the worker does not pause on it; partnerkit.store.budget.refusal_dated_ahead).
REFUSED_AHEAD = " (ahead of this host's clock)"

# How `order_intents_unknown` marks an intent whose answer named an order id this store holds for another order
# (partnerkit.ordering.held_elsewhere): its replay answers the same id, so the line's advice is not for it.
DO_NOT_REPLAY = "do not replay it"

def _silent_for(status: dict[str, Any], worker_stale_s: int) -> int | None:
    """Seconds since a worker last ran a job, when that is longer than `worker_stale_s`; else None (and
    None on a database no worker has run on yet: a fresh install is not an outage)."""
    last = status["worker_last_job_at"]
    silent = None if last is None else int((status["checked_at"] - last).total_seconds())
    return silent if silent is not None and silent > worker_stale_s else None


def _every_delivery_refused(status: dict[str, Any]) -> bool:
    """Deliveries were refused in the last hour and none was accepted (stored, whatever its outcome, or a
    duplicate of a stored one) since the first of them: arriving, and all turned away.

    A public endpoint is probed by scanners whose requests carry no signature headers, or broken ones.
    Those alone are the provider's only when there are several: it sends each delivery up to 5 times
    (Webhooks, delivery rule 2), so a proxy that drops the headers makes at least that many. A refusal
    of a well-formed signed request (a mismatch, an unknown webhook, a clock beyond tolerance) counts
    at once."""
    first = status["webhooks_refused_first_at"]
    if first is None:
        return False
    refused = status["webhooks_refused_last_hour"]
    unsigned = sum(count for reason, count in refused.items() if reason in UNSIGNED_REASONS)
    if unsigned == sum(refused.values()) and unsigned < UNSIGNED_FLOOR:
        return False
    answered = [parse_ts(status[key]) for key in ("last_webhook_at", "last_duplicate_at") if status[key]]
    return not answered or max(answered) < first


def _minutes(span: timedelta) -> int:
    return max(1, round(span.total_seconds() / 60))


def _room(status: dict[str, Any]) -> disk.Room:
    return disk.Room(status["db_free_bytes"], status["db_wal_bytes"], status["db_read_only"])


def _disk_line(room: disk.Room) -> str:
    """Why the database may not be written, and what to do (`room.low`)."""
    effect = ("every write fails: the receiver answers 503 (the provider retries each delivery for 15 minutes), the "
              "worker's jobs fail and its lease lapses; both resume by themselves once they can write")
    if room.read_only:
        return (f"PARTNERKIT_DB's filesystem is mounted read-only, so {effect}: remount it read-write "
                "(`findmnt -T PARTNERKIT_DB` names the mount; the kernel log says why it went read-only)")
    return (f"PARTNERKIT_DB's filesystem has {disk.megabytes(room.free_bytes or 0)} free, under the "
            f"{disk.megabytes(room.floor_bytes)} partnerkit asks for (100 MB, or the WAL's size when larger): free "
            "space there now (`df -h` and `du` on its directory), but never by deleting the database's `-wal` or "
            f"`-shm` files (the `-wal` holds committed data); when it is full {effect}")


def _provider_line(status: dict[str, Any]) -> str:
    """The provider failing every call: for how long, how, and whose side to look at."""
    since = status["provider_failing_since"]
    minutes = _minutes(status["checked_at"] - since)
    head = f"the provider has failed every call for {minutes} minutes since {iso(since)}: {status['provider_failing']}"
    # The failure kinds are partnerkit.client._http._failure_kind's: "HTTP 404 without the provider's error body"
    # is an answer in none of the provider's error shapes, from whatever PARTNERKIT_API_BASE_URL reaches instead.
    if "without the provider's error body" in status["provider_failing"]:  # ours to fix: it will not pass
        return (f"{head}: those answers are not the provider's (a web server at a wrong scheme, path or host, or a "
                "proxy answering in its place): check PARTNERKIT_API_BASE_URL (`partnerkit config` shows it) and any "
                "proxy towards it; every job that calls the provider fails until then, and this clears at the first "
                "call the provider answers; PROCESSING recharges are not read meanwhile")
    if "HTTP 5" in status["provider_failing"]:  # it answers, with errors: its side
        cause = "it answers with server errors: nothing to fix here"
    else:  # no answer at all: the network between may be ours
        cause = ("no answer at all: check this host's network, DNS and proxy towards PARTNERKIT_API_BASE_URL (`curl` "
                 "it); if they are fine the provider is down, nothing to fix here")
    return (f"{head}: {cause}; partnerkit retries by itself (the poller backs off to a pass a minute, the syncs read "
            "on from their page, voucher fetches retry and are re-armed) and this clears at the first call the "
            "provider answers; PROCESSING recharges are not read meanwhile")


def _clock_line(status: dict[str, Any]) -> str:
    """This host's clock more than 5 minutes from the provider's (partnerkit.store.provider_clock)."""
    off = status["clock_off_by_s"]
    size = abs(off)
    by = f"{size // 86400} d {size % 86400 // 3600} h" if size >= 86400 else (
        f"{size // 3600} h {size % 3600 // 60} min" if size >= 3600 else f"{size // 60} min {size % 60} s")
    line = (f"this host's clock is {by} {'ahead of' if off > 0 else 'behind'} the provider's (the Date of its answer "
            f"at {iso(status['clock_off_seen_at'])}, by this clock): put it right (`timedatectl`: is it "
            "NTP-synchronised?); the provider refuses signed requests (recharge submits, order creation) while it is "
            "more than 5 minutes off, and partnerkit dates what it stores by it")
    if off > 0:
        line += ("; ahead, the nightly run may report a day that has not ended as complete: once the clock is right, "
                 "`partnerkit reconcile --date D` reads and reports again each day reported meanwhile")
    return line + "; the provider's next answer within 5 minutes clears this"


def _refused_line(status: dict[str, Any]) -> str:
    """The provider's 401 to the key: what to check (this host's clock first when its message blames the request's
    timestamp), and whether the worker's jobs that call the provider are paused on it, until when."""
    refused = status["provider_refused"]
    head = f"the provider refused partnerkit's credentials ({refused})"
    # `provider_refused` ends with the provider's message, after the first ": " (its time has none).
    clock = refusal_names_the_clock(refused.partition(": ")[2])
    if clock:
        line = (f"{head}: it refused the request's timestamp, so check this host's clock first (`timedatectl`: is it "
                "NTP-synchronised?): the provider refuses every signed request (recharge submits, order creation) "
                "whose X-Timestamp is more than 5 minutes from its own time; if the clock is right, check "
                "PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET and that this host is on the key's IP allowlist")
    else:
        line = (f"{head}: every call fails until PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET are right and this host "
                "is on the key's IP allowlist")
    if status["provider_calls_paused_until"] is not None:
        line += (f"; the worker's jobs that call the provider (recharge polls, voucher fetches, syncs, the nightly "
                 f"report) are paused on it until {iso(status['provider_calls_paused_until'])}, then one tries again")
    elif REFUSED_AHEAD in refused:
        line += ("; it is dated ahead of this host's clock: met while the clock ran ahead, put right since, so the "
                 "worker does not pause on it")
    if clock and REFUSED_AHEAD not in refused:  # the store's rule (partnerkit.store.budget: `_refusals.forget`)
        return line + ("; the next accepted write clears this (a read carries no timestamp: reads pass while the "
                       "clock is off, and clear nothing): once the clock is right, `partnerkit recharges quote "
                       "--operator-id ID --amount A` is one that places nothing")
    return line + "; the next accepted call clears this"


def _worker_line(status: dict[str, Any]) -> str:
    """A lease that lapsed: a worker that died, or one that runs and cannot write the database."""
    holder, expiry = status["worker_lease_holder"], status["worker_lease_expires_at"]
    verb = "expired" if expiry <= status["checked_at"] else "expires"  # gone before its lease ran out
    room = _room(status)
    if status["worker_lease_holder_alive"]:
        cause = ("PARTNERKIT_DB's filesystem is full or read-only (its own line says what to do)" if room.low else
                 "its log's `worker lease renewal failed` lines say why (a lock another process holds: a long "
                 f"backup, a hung command), or it is stopped (`ps -o stat= -p {holder.split(':')[1]}` shows T)")
        return (f"the worker {holder} still runs on this host but has not renewed its lease (expired {iso(expiry)}): "
                f"it cannot write the database: {cause}; it carries on by itself once it can write, and starting "
                "another worker would not help")
    line = (f"the worker {holder} stopped without releasing its lease ({verb} {iso(expiry)}): it crashed or was "
            "killed; start it again (`systemctl start partnerkit-worker`, or `partnerkit worker`), or, where cron "
            "runs `partnerkit worker --once`, its next run takes over (or run one now)")
    if status["worker_lease_holder_alive"] is None and room.low:
        line += ("; or, if it still runs where this command cannot see it (another container or host), it cannot "
                 "write the database (PARTNERKIT_DB's filesystem: its own line says what to do)")
    return line


def _receiver_lines(status: dict[str, Any]) -> list[str]:
    """A receiver's gunicorn master of this host that is gone without stopping cleanly (kill -9, the OOM killer,
    a crash): nothing receives its deliveries. Never one stopped cleanly (a partner may stop it on purpose),
    nor one of another host or container (`running` is None: it cannot be seen from here)."""
    lines = []
    for master in status["receiver_masters"]:
        if master["running"] is False and master["stopped_at"] is None:
            bind = ", ".join(master["bind"]) or "an address it did not record"
            lines.append(f"the receiver (pid {master['pid']} on {master['host']}, bound to {bind}, started "
                         f"{master['started_at']}) is no longer running and did not stop cleanly: webhooks sent to "
                         "it are not being received; start it again on that address (`partnerkit serve --bind ADDRESS`, "
                         "or `systemctl start partnerkit-receiver`: that start clears this line; an address no "
                         "longer used is cleared by starting a receiver on it once and stopping it); the provider retries each delivery for 15 minutes, then gives up: "
                         "`partnerkit webhooks retry --failed` asks it to send those again (it may refuse one that "
                         "used all its attempts), and the worker's order catch-up repairs what they carried either "
                         "way")
    return lines


def _takeover_line(status: dict[str, Any]) -> str:
    """The worker lease taken from a worker on another host: two hosts on one file, or a move under way."""
    previous, taken_at = status["worker_lease_previous_host"], status["worker_lease_taken_over_at"]
    holder = status["worker_lease_holder"]
    host = holder_host(holder) if holder else None
    return (f"the worker lease was taken over at {iso(taken_at)} ({_minutes(status['checked_at'] - taken_at)} min "
            f"ago) by {holder} from a worker on another host, {previous}, whose lease had expired unreleased: two "
            "hosts open this one database file (a shared filesystem such as NFS, whose locks SQLite cannot rely on: "
            "the file can be corrupted; stop partnerkit on one of them for good), or the database moved to "
            f"{host} while the worker on {previous} still ran or had crashed (stop and disable its units there: "
            "README 'Move to a new host'); a container recreated after its worker was killed gets a new host name "
            "too, and then nothing is wrong. This line clears an hour after the takeover")


def _local_id(entry: str) -> int:
    """The local id of an entry of a status field that names recharges, each `#N ...`."""
    return int(entry.split()[0].lstrip("#"))


def _named_ids(named: list[str]) -> set[int]:
    """The local ids of a status field's entries (`_local_id`)."""
    return set(map(_local_id, named))


def _unknown_recharges_line(status: dict[str, Any]) -> str | None:
    """Submits whose answer was lost, and what `recharges locate` does with each: it searches, and within 5
    minutes of the submit it also sends the key again by itself if the provider shows none (reconcile.locate),
    which performs the recharge if the first send never arrived. Said per recharge, never "read only". Not of
    those whose answer named an id another local recharge holds, nor of those whose key answered another recharge
    (each their own line); None when only those are left."""
    held = _named_ids(status["recharges_unknown_held_elsewhere"]) | _named_ids(status["recharges_unknown_key_taken"])
    count = status["recharges_unknown"] - len(held)
    if count <= 0:
        return None
    shown = [i for i in status["recharges_unknown_local_ids"] if i not in held]
    ids = ", ".join(str(i) for i in shown)
    more = ", ..." if count > len(shown) else ""
    line = f"{count} recharge(s) with an unknown outcome (local id {ids or '...'}{more if ids else ''}): "
    gone = status["recharges_unknown_senders_gone"]
    if len(gone) == 1:
        # An INTENT named at once (partnerkit.senders), not minutes on: the command to run comes first. Its submit
        # was killed while sending, or got its answer and could not store it (a full disk: it printed the answer).
        line += (f"the submit that recorded {gone[0]} is no longer running; any answer it got was not stored: "
                 f"`partnerkit recharges locate --local-id {_local_id(gone[0])}`; ")
    elif gone:
        line += (f"the submits that recorded {', '.join(gone)} are no longer running; any answer they got was not "
                 "stored: `partnerkit recharges locate --local-id N` for each; ")
    line += ("`partnerkit recharges locate --local-id N` searches the provider for each and links what it finds; if "
             "the provider shows none, ")
    replays = status["recharges_unknown_locate_replays"]
    if replays:
        line += (f"it sends one submitted under 5 minutes ago again under its own Idempotency-Key by itself "
                 f"({', '.join(replays)}): if its first send never arrived, that performs the recharge then (once: "
                 "the same key never makes a second), for a customer who may still be waiting; for an older one "
                 "sending it again is a decision "
                 "(`--replay` performs it now)")
    else:
        line += ("sending it again under its own Idempotency-Key is a decision (`--replay` performs it now if its "
                 "first send never arrived)")
    return line + ("; never a new key: a new `recharges submit` of the same number and amount is refused while one "
                   "is open, unless `--force`; " + CLOSE_ADVICE)


# The last words of the unknown-recharges line: what ends one nobody will ever resolve (`recharges close`).
CLOSE_ADVICE = ("once the provider (or its support) confirms one was never made, `partnerkit recharges close N --note "
                "TEXT` searches once more and closes it: kept, no longer named here, holding no new submit back")


# The last words of the unknown-orders line: what ends one nobody will ever resolve (`orders close`).
ORDER_CLOSE_ADVICE = ("once the provider (or its support) confirms one was never placed, `partnerkit orders close N "
                      "--note TEXT` searches the order list once more and closes it: kept, no longer named here, "
                      "holding no new order back")


def _never_sent_orders_line(named: list[str]) -> str:
    """Order intents recorded and never sent (`partnerkit.ordering.never_sent`): nothing was ordered, and nothing
    holds a new order back; a person decides whether the customer still wants it."""
    return (f"{len(named)} order creation(s) recorded but never sent ({'; '.join(named[:5])}"
            f"{'; ...' if len(named) > 5 else ''}): nothing was ordered for them and none holds a new order back; if "
            "the customer still wants one, replay its key (`partnerkit orders create ... --idempotency-key KEY`, with "
            "its ref: it is sent then, once); if not, or once it was ordered anew, `partnerkit orders close N --note "
            "TEXT` closes it without a search (nothing was sent), and its key is never sent")


def _held_elsewhere_line(status: dict[str, Any]) -> str:
    """Submits whose answer named a recharge id another local recharge holds: `recharges locate` only searches them
    (their key is answered with the same id), so the line says what to do instead, in the submit's words
    (`partnerkit.store.recharges.HELD_ADVICE`)."""
    named = status["recharges_unknown_held_elsewhere"]
    return (f"{len(named)} recharge(s) whose answer named a recharge id another local recharge already holds "
            f"({'; '.join(named[:5])}{'; ...' if len(named) > 5 else ''}): their outcome stays UNKNOWN; `recharges "
            "locate` only searches for them and refuses --replay (their key would be answered with the same id), and a "
            "new key would be a second recharge; compare both with the provider (each entry's `partnerkit recharges "
            f"show`, and the reference number of the recharge its answer named): {HELD_ADVICE}")


def _key_taken_line(status: dict[str, Any]) -> str:
    """Submits whose Idempotency-Key answered another request's recharge (`partnerkit.store.recharges.key_taken`):
    not made under that key; `recharges locate` only searches them, and what is left is a new key, after checking
    (`key_taken_advice`, the submit's words)."""
    named = status["recharges_unknown_key_taken"]
    return (f"{len(named)} recharge(s) whose Idempotency-Key {KEY_TAKEN} ({'; '.join(named[:5])}"
            f"{'; ...' if len(named) > 5 else ''}): the provider answered with that recharge, so these were not made "
            "under their key and it is not linked to them; they stay UNKNOWN, `recharges locate` only searches for "
            "them and refuses --replay (the same answer would come back); " + key_taken_advice("N"))


def _first_of(count: int, ids: list[Any]) -> str:
    """The ids an id-given-twice line names (the first SHOWN_IDS of `count`), "..." after them when there are more."""
    return ", ".join(map(str, ids)) + (", ..." if count > len(ids) else "")


def _given_twice_line(status: dict[str, Any]) -> str:
    """Provider records a sync or the poller held in the quarantine because their id names a local recharge they are
    not (`partnerkit.store.recharges.another_recharge`): the rows keep what they held, and what to do is the
    submit's advice for an id given twice (`HELD_ADVICE`)."""
    count, ids = status["recharges_id_given_twice"], status["recharges_id_given_twice_local_ids"]
    shown = _first_of(count, [f"#{i}" for i in ids])
    return (f"{count} provider recharge record(s) quarantined, not stored, because their id names another local "
            f"recharge ({shown}), which keeps what it held: `partnerkit recharges show N` says which id and what "
            "differs, the day's report lists the provider's record; compare both with the provider: " + HELD_ADVICE)


def _orders_given_twice_line(status: dict[str, Any]) -> str:
    """Stored orders a record of another order under their id was refused for (`partnerkit.store.orders
    .another_order`): the list record quarantined, the voucher fetch parked; what to do is the advice for an id
    given twice (`HELD_ADVICE`)."""
    count, ids = status["orders_id_given_twice"], status["orders_id_given_twice_ids"]
    shown = _first_of(count, ids)
    return (f"{count} stored order(s) ({shown}) whose id the provider gave to another order: that order's record "
            "was not stored (quarantined by the order sync, or its voucher fetch parked, none of its vouchers stored), "
            "and each stored order keeps what it held; the day's report lists the quarantined record with what "
            "differs, `partnerkit orders show N` the parked fetch's reason; compare both with the provider (by both "
            "refs): " + HELD_ADVICE)


def _transactions_given_twice_line(status: dict[str, Any]) -> str:
    """Stored wallet transactions a listed record of another transaction under their id is held for
    (`partnerkit.store.ledger.GivenTwice`): the record quarantined, the stored entry kept; what to do is the advice
    for an id given twice (`HELD_ADVICE`)."""
    count, ids = status["transactions_id_given_twice"], status["transactions_id_given_twice_ids"]
    shown = _first_of(count, ids)
    return (f"{count} stored wallet transaction(s) ({shown}) whose id the provider lists for another transaction: "
            "that record was quarantined, not stored, and each stored transaction keeps what it held and stays in its "
            "day's figures (not withdrawn while the record is held); the day's report lists the quarantined record "
            "with what differs, `partnerkit transactions show ID` the stored one; compare both with the provider: "
            + HELD_ADVICE)


def _processing_lines(status: dict[str, Any]) -> list[str]:
    """PROCESSING past 30 minutes: escalate those read and still PROCESSING; not those the outage kept unread."""
    unread = status["recharges_past_30_min_unread"]
    lines = []
    if status["recharges_past_30_min"] - unread:
        lines.append(f"{status['recharges_past_30_min'] - unread} recharge(s) PROCESSING for over 30 minutes: escalate "
                     "to support with their reference_number (`partnerkit recharges list --status PROCESSING`)")
    if unread:
        lines.append(f"{unread} recharge(s) PROCESSING for over 30 minutes were not read since the provider began "
                     f"failing at {iso(status['provider_failing_since'])}: do not escalate them yet; the poller reads "
                     "them once it answers, and escalates (a `stuck_processing` drift) those still PROCESSING")
    return lines


def _nightly_failed_line(status: dict[str, Any]) -> str:
    """The nightly run's last attempt failed and none succeeded since: at once, not two hours past the due hour
    (`report_overdue_date`, which this line stands in for while it shows)."""
    nights = ", ".join(status["nightly_last_error_dates"])
    overdue = (f"; the report for {status['report_overdue_date']} is overdue" if status["report_overdue_date"] else "")
    day = status["report_overdue_date"] or (status["nightly_last_error_dates"] or ["D"])[-1]
    error = status["nightly_last_error"]
    fix = ("make PARTNERKIT_REPORT_DIR writable again (free space there, remount it read-write, or give the services' "
           "user write access)" if "PARTNERKIT_REPORT_DIR" in error else "fix what the error names")
    return (f"the nightly report run failed at {iso(status['nightly_last_error_at'])}"
            + (f" reporting {nights}" if nights else "") + f": {error}{overdue}. {fix[0].upper() + fix[1:]}: the "
            "worker tries again by itself (5 minutes after a failure, then 10, 20 and 40, then hourly; under cron at "
            "the next `worker --once`), and its next run that succeeds clears this; `partnerkit reconcile --date "
            f"{day}` runs it by hand")


def attention(status: dict[str, Any], *, worker_stale_s: int = 900) -> list[str]:
    """Plain-language lines for what needs a person now (empty when all is well)."""
    lines = []
    if _room(status).low:
        lines.append(_disk_line(_room(status)))
    if status["provider_failing_since"] is not None:
        lines.append(_provider_line(status))
    if status["provider_refused"]:
        lines.append(_refused_line(status))
    if status["clock_off_by_s"] is not None:
        lines.append(_clock_line(status))
    if status["webhook_tokens_unreadable"]:
        lines.append(f"the saved webhook tokens cannot be read with the voucher key as this user reads it: "
                     f"{status['webhook_tokens_unreadable']}; a receiver running as this user cannot verify deliveries "
                     "signed with them (it answers 503, or refuses to start) until they can (a key file rewritten "
                     "by another user: give it back to the services' user)")
    if _every_delivery_refused(status):
        refused = status["webhooks_refused_last_hour"]
        total = sum(refused.values())
        top, most = next(iter(refused.items()))
        others = "".join(f", {reason} {count}" for reason, count in list(refused.items())[1:])
        accepted = (f"the last accepted at {status['last_webhook_at']}" if status["last_webhook_at"]
                    else "none was ever accepted")
        lines.append(f"{total} webhook deliver{'y' if total == 1 else 'ies'} refused in the last hour "
                     f"({top} {most}{others}) and none accepted since the first of them at "
                     f"{iso(status['webhooks_refused_first_at'])} ({accepted}): "
                     f"{REFUSAL_HINTS.get(top, 'see the receiver log')}; the receiver's `webhook rejected` log lines "
                     "name each sender (remote, forwarded_for); the next accepted delivery clears this "
                     "(`partnerkit webhooks test ID` asks the provider for one)")
    elif no_token := status["webhooks_refused_last_hour"].get("no_token"):
        # Others are accepted: a second webhook of this receiver whose token was never saved here (a `webhooks
        # register` killed between the provider's answer and the save, one registered from elsewhere). Each of
        # its events is refused 5 times and ends failed at the provider; nothing else would say so.
        lines.append(f"{no_token} webhook deliver{'y' if no_token == 1 else 'ies'} refused in the last hour for an "
                     "X-Webhook-ID with no accepted token, while other deliveries are accepted: a webhook whose token "
                     "is not saved here (a `webhooks register` stopped before it saved it, or one registered "
                     "elsewhere); `partnerkit webhooks list` shows it (TOKEN_SAVED no): `partnerkit webhooks delete "
                     "ID` if it is a second webhook of this receiver, else `partnerkit webhooks token set ID` with its "
                     "signing secret")
    if status["voucher_fetch_parked"]:
        lines.append(f"{status['voucher_fetch_parked']} voucher fetch job(s) parked after their retries (`partnerkit "
                     "events list` says why): once the provider answers again, `partnerkit orders sync` re-arms now the "
                     "fetch of every delivering order it lists (`--since TIME` reaches orders placed earlier); the worker "
                     "re-arms those the provider's failure parked at its next answer, the others hourly")
    lines += _processing_lines(status)
    if status["recharges_unknown"] and (unknown := _unknown_recharges_line(status)):
        lines.append(unknown)
    if status["recharges_unknown_held_elsewhere"]:
        lines.append(_held_elsewhere_line(status))
    if status["recharges_unknown_key_taken"]:
        lines.append(_key_taken_line(status))
    if status["recharges_id_given_twice"]:
        lines.append(_given_twice_line(status))
    if status["order_intents_unknown"]:
        lines.append(f"{len(status['order_intents_unknown'])} order creation(s) with an unknown outcome "
                     f"({'; '.join(status['order_intents_unknown'][:5])}): replay each with `partnerkit orders create "
                     "... --idempotency-key KEY` (its key and ref, never a new key), or let the order sync link it"
                     + (f"; not those marked \"{DO_NOT_REPLAY}\"" if any(DO_NOT_REPLAY in named for named in
                                                                  status["order_intents_unknown"]) else "")
                     + "; " + ORDER_CLOSE_ADVICE)
    if status["order_intents_never_sent"]:
        lines.append(_never_sent_orders_line(status["order_intents_never_sent"]))
    if status["orders_id_given_twice"]:
        lines.append(_orders_given_twice_line(status))
    if status["transactions_id_given_twice"]:
        lines.append(_transactions_given_twice_line(status))
    lines += _receiver_lines(status)
    if not status["worker_running"] and status["worker_lease_holder"] is not None:
        lines.append(_worker_line(status))
    elif (not status["worker_running"] and status["worker_last_job_at"] is None
          and (status["voucher_fetch_backlog"] or status["recharges_processing"])):
        # Only where no worker ever ran: under cron (`worker --once`) no worker runs between two runs, and
        # work waiting for the next is normal; a cron line that stopped is the silent-worker line below.
        lines.append("no worker has run on this database, yet voucher fetches or PROCESSING recharges are waiting: "
                     "start `partnerkit worker` (or the cron line that runs `partnerkit worker --once`)")
    elif (silent_s := _silent_for(status, worker_stale_s)) is not None:
        silent = (f"no worker has run a job for {silent_s // 60} minutes (last at {iso(status['worker_last_job_at'])}; "
                  f"PARTNERKIT_WORKER_STALE_S allows {worker_stale_s} s)")
        if status["worker_running"]:
            lines.append(f"{silent}: the worker {status['worker_lease_holder']} renews its lease but runs no job; "
                         "restart it")
        else:
            lines.append(f"{silent}: start `partnerkit worker` (or check the cron line that runs "
                         "`partnerkit worker --once`)")
    taken_at = status["worker_lease_taken_over_at"]
    if taken_at is not None and status["checked_at"] - taken_at <= TAKEOVER_ATTENTION:
        lines.append(_takeover_line(status))
    if status["nightly_last_error"]:
        lines.append(_nightly_failed_line(status))
    if status["report_dir_unwritable"]:
        lines.append(f"PARTNERKIT_REPORT_DIR cannot take the nightly report's files: {status['report_dir_unwritable']}; "
                     "the nightly run fails at its files and finance gets no report until it can (the night stays "
                     "due, and the worker's next attempt after the fix writes it): make it a directory the services' "
                     "user can write, mounted read-write, with room (`ls -ld`, `findmnt -T`, `df -h` on it)")
    if status["report_overdue_date"] and not status["nightly_last_error"]:
        last = (f"last complete report: {status['last_report_date']}" if status["last_report_date"]
                else "no complete report yet")
        lines.append(f"the nightly report for {status['report_overdue_date']} is overdue ({last}): the worker's `nightly-report` log lines say why (an error, or "
                     "`budget_exhausted` on a day with more pages than the hour's budget); `partnerkit reconcile --date "
                     f"{status['report_overdue_date']}` runs it by hand")
    if status.get("wallet_differences"):
        day = status["last_report_date"]
        lines.append(f"the report of {day} holds the provider's wallet balance against the ledger's and no entry "
                     f"explains the difference: {'; '.join(status['wallet_differences'])}. An unexplained one is the "
                     "balance_discontinuity drift named (`partnerkit drifts show ID`): "
                     "escalate it to the provider's support with the currency, the time and both balances; an "
                     "unconfirmed one may be entries made while partnerkit read the wallets: once the worker's next "
                     f"sync has run, `partnerkit reconcile --date {day}` judges it again")
    if status["nights_never_reported"]:
        lines.append(f"night(s) older than the {reports.CATCH_UP_NIGHTS} the nightly run catches up were never "
                     f"reported: {', '.join(status['nights_never_reported'])}; `partnerkit reconcile --date D` syncs "
                     "and reports each")
    if status["poller_requests_per_hour"] == 0:
        lines.append("PARTNERKIT_POLLER_BUDGET_SHARE of PARTNERKIT_HOURLY_BUDGET leaves the recharge poller no request "
                     "of the hour: PROCESSING recharges settle only when a sync reads them; raise the share")
    blocked = status["budget_blocked_until"]
    if blocked is not None and blocked - status["checked_at"] > BLOCK_ATTENTION:
        lines.append(f"the provider answered 429 and no process calls it until {iso(blocked)} "
                     f"({_minutes(blocked - status['checked_at'])} min from now): voucher fetches, recharge polls "
                     "and syncs wait, `recharges submit` is refused; it clears by itself (partnerkit never waits longer than "
                     "one window of the budget, an hour); once the provider confirms it is back, `partnerkit budget "
                     "unblock` lifts it now (the next 429 blocks again; `partnerkit budget show` names the call that met "
                     "it); if it keeps coming back, ask the provider about the key's limits (PARTNERKIT_HOURLY_BUDGET)")
    if status["requests_elsewhere_this_hour"]:
        lines.append(f"another process uses this API key: the provider counted {status['requests_elsewhere_this_hour']} "
                     "requests in the last hour beyond this database's own (its X-RateLimit-Remaining, against this "
                     "database's count: `partnerkit budget show`); a second partnerkit on a copy of this database (a "
                     "move to a new host with the old one still running), another system with the key, or the last "
                     "hour of a database this one was restored over. Each plans on the whole budget, so the key meets "
                     "429s: stop the other one (never run both: see README 'Move to a new host'), or lower "
                     "PARTNERKIT_HOURLY_BUDGET to leave it room")
    if status["budget_remaining_this_hour"] == 0:
        lines.append("the hourly API budget is used up; calls resume as the window slides")
    return lines


def for_finance(status: dict[str, Any]) -> list[str]:
    """Plain-language lines for the drifts waiting on finance (empty when none): pending ones, and those escalated
    to the provider. Finance reads them each morning in the night's report, and many resolve themselves (a late
    refund, a sync gap closed within 7 days): a queue, not something that needs a person now, so never an
    attention line, and `status --check` passes over them. What a drift says that does need a person now has a
    line of its own in `attention` (an unexplained wallet difference: `wallet_differences`)."""
    lines = []
    if status["open_drifts"]:
        lines.append(f"{status['open_drifts']} open drift(s) pending a decision: `partnerkit drifts list --resolution "
                     "pending`")
    if status["escalated_drifts"]:
        lines.append(f"{status['escalated_drifts']} drift(s) escalated to the provider, awaiting its answer: "
                     "`partnerkit drifts list --resolution escalated`")
    return lines
