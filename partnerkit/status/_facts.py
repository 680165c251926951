"""The facts of `partnerkit status`, gathered from the store (`collect`), and the gauges /metrics carries.

Every figure comes from the shared database, so the command works beside a running receiver and
worker without talking to either (or to the provider: it spends no API budget).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Collection

from partnerkit import disk, senders
from partnerkit.config import Config
from partnerkit.crypto import unreadable_tokens
from partnerkit.money import from_cents
from partnerkit.ordering import held_elsewhere, never_sent
from partnerkit.status._attention import DO_NOT_REPLAY, REFUSED_AHEAD, attention, for_finance
from partnerkit.status._receiver import receiver_facts
from partnerkit.status._worker import (WORKER_LEASE, last_worker_run, lease_holder_alive, taken_from_another_host,
                                       worker_running)
from partnerkit.store import (Database, drifts, inbox, jobs, ledger, locks, meta, nightly_failure, order_intents,
                              orders, provider_clock, provider_failures, recharges, reports, webhook_refusals)
from partnerkit.store.budget import Budget, poller_cap, refusal_dated_ahead, refusal_pause_until
from partnerkit.store.db import database_file
from partnerkit.timeutil import iso, parse_ts, utcnow

ESCALATE_AFTER_S = 30 * 60  # the document: beyond 30 minutes, escalate to support with reference_number
# The nightly job checks hourly whether a report is due (sooner after a failed run), and a busy day's sync
# takes a while: a report not there two hours past PARTNERKIT_DUE_HOUR_UTC is late, not merely in progress.
REPORT_GRACE = timedelta(hours=2)
# An INTENT whose sender's lock is free (partnerkit.senders: its `recharges submit` or `orders create` died while
# sending) is named at once. The time rules below are for the others: a row that carries no lock (written by an
# older release, or by a sender that could not take one) or whose lock cannot be seen from here, and a sender
# still holding its lock past the longest send (hung, or a network filesystem keeping a dead client's lock).
# An order intent still INTENT this long after its send began was left by a process that died while
# sending (a send lasts at most a few client timeouts): its outcome is as unknown as an UNKNOWN one's.
INTENT_ABANDONED_AFTER = timedelta(minutes=15)
# A submit keeps its recharge INTENT while it waits for the budget (the client waits up to a minute) and
# for the provider's answer; one INTENT much older than that was killed mid-send (its answer is lost).
SUBMIT_BUDGET_WAIT_S = 60
# Not sooner, for an INTENT whose sender cannot be seen: it may be a submit still waiting for its answer.
# Meanwhile a rerun of the same submit is refused, naming it (reconcile.recharge_hold).
INTENT_STALE_FLOOR_S = 120
# How long after its submit `recharges locate` sends an intent's Idempotency-Key again by itself when the provider
# shows no such recharge: reconcile.locate.REPLAY_WINDOW (partnerkit does not import reconcile; a test holds the
# two equal). The attention line says so for each listed recharge still inside it.
LOCATE_REPLAY_WINDOW = timedelta(minutes=5)
SHOWN_IDS = 10  # local ids named in an attention line
# The provider failing every call (partnerkit.store.provider_failures) is named once it has failed at least
# PROVIDER_FAILING_CALLS calls over PROVIDER_FAILING_AFTER with no answer between: one failed call, or a blip
# the retries ride out (a deploy at the provider, a dropped connection), pages nobody. Five minutes is the
# status timer's interval, and the poller alone still tries about once a minute while it backs off.
PROVIDER_FAILING_AFTER = timedelta(minutes=5)
PROVIDER_FAILING_CALLS = 3
# Refused webhook deliveries are counted by the minute (receiver.refusals); `status` reads this far back.
REFUSALS_WINDOW = timedelta(hours=1)


def overdue_report(last_report: str | None, now: datetime, due_hour: int, first_day: str | None = None) -> str | None:
    """The latest day whose nightly report should exist by now (REPORT_GRACE after its due hour) when the
    last complete report is older, or, before the first report, when the store's first day (its first
    synced day: `reports.store_first_day`) is not later: the nightly run reports from that day on, so a new
    install whose first night failed is late too. None when nothing is late, or on a store with no day yet."""
    then = now - REPORT_GRACE
    latest = (then.date() - timedelta(days=1 if then.hour >= due_hour else 2)).isoformat()
    if last_report is None:
        return latest if first_day is not None and first_day <= latest else None
    return latest if last_report < latest else None


def _moment(epoch: float | None) -> datetime | None:
    """A unix time from the store (the budget keeps its own as floats) as an aware UTC datetime."""
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)


def _ahead(refusal: dict, now: datetime) -> str:
    """What `provider_refused` adds after the time of a refusal dated ahead of `now` (`refusal_dated_ahead`)."""
    return REFUSED_AHEAD if refusal_dated_ahead(refusal, now.timestamp()) else ""


def _age_s(moment: str | None, now: datetime) -> int | None:
    parsed = parse_ts(moment) if moment else None
    return None if parsed is None else max(0, int((now - parsed).total_seconds()))


def processing_ages(db: Database, now: datetime, unread_since: datetime | None = None) -> tuple[int, list[int], int]:
    """How many recharges are PROCESSING, the seconds since each was sent (or created at the provider, for
    one partnerkit did not send), oldest first, and how many of those over 30 minutes old the poller has not
    read since `unread_since` (when the provider began failing every call; None: none counted)."""
    processing = recharges.list_rows(db, status="PROCESSING")
    aged = [(age, r) for r in processing
            if (age := _age_s(r.get("submitted_at") or r.get("provider_created_at"), now)) is not None]
    unread = 0 if unread_since is None else sum(
        1 for age, r in aged if age > ESCALATE_AFTER_S
        and ((last := parse_ts(r.get("last_polled_at"))) is None or last < unread_since))
    return len(processing), sorted((age for age, _ in aged), reverse=True), unread


def provider_failing(db: Database, now: datetime) -> provider_failures.Failing | None:
    """The provider's failures, once they call for a person: PROVIDER_FAILING_CALLS or more failed calls, the
    first PROVIDER_FAILING_AFTER ago or more, none answered since; else None."""
    failing = provider_failures.standing(db)
    if failing is None or failing.calls < PROVIDER_FAILING_CALLS or now - failing.since < PROVIDER_FAILING_AFTER:
        return None
    return failing


def intent_stale_after_s(config: Config) -> float:
    """How long a submit may keep its recharge INTENT: the budget wait and twice the request timeout."""
    return max(INTENT_STALE_FLOOR_S, SUBMIT_BUDGET_WAIT_S + 2 * config.http_timeout_s)


def senders_gone(db: Database, rows: list[dict], read_again: Callable[[dict], dict | None]) -> set[int]:
    """The ids of the INTENT `rows` whose sender no longer holds its lock (partnerkit.senders): its process died
    while sending, or its send ended without resolving the row; nobody will store its answer. `read_again` reads
    a row anew: a sender frees its lock only after storing its answer, so a row read before that and judged
    after is asked again, and counts only if it is still the same INTENT."""
    database = database_file(db)
    gone = set()
    for row in rows:
        if senders.row_running(database, row) is False:
            fresh = read_again(row) or {}
            if fresh.get("sender_lock") == row["sender_lock"] and senders.row_running(database, fresh) is False:
                gone.add(_row_id(row))
    return gone


def _row_id(row: dict) -> int:
    return row["local_id"] if "local_id" in row else row["id"]


def lost_answers(config: Config, db: Database, now: datetime) -> list[dict]:
    """Recharges whose submit's answer was lost: UNKNOWN, INTENT whose submit is no longer running (it died while
    sending, and never got to mark it UNKNOWN), and INTENT past `intent_stale_after_s` (a submit whose lock
    cannot be seen, or that is still running so long); oldest first (by local id). An INTENT whose submit is gone
    carries `sender_gone`. Not one an operator closed (`recharges close`)."""
    cutoff = now - timedelta(seconds=intent_stale_after_s(config))
    intents = recharges.list_rows(db, status="INTENT")
    gone = senders_gone(db, intents, lambda r: recharges.get(db, r["local_id"]))
    stale = [{**r, "sender_gone": r["local_id"] in gone} for r in intents
             if r["local_id"] in gone or (parse_ts(r["submitted_at"]) or now) <= cutoff]
    # One an operator closed (`recharges close`: checked with the provider, never made) nobody waits on.
    return sorted((r for r in stale + recharges.list_rows(db, status="UNKNOWN") if recharges.closure(db, r) is None),
                  key=lambda r: r["local_id"])


def lost_orders(db: Database, now: datetime) -> tuple[list[dict], list[dict]]:
    """Order intents nobody will resolve by themselves, oldest first: (those whose outcome nobody knows, those never
    sent). Unknown: UNKNOWN, INTENT whose `orders create` is no longer running, and INTENT since before
    INTENT_ABANDONED_AFTER (a send never takes that long); an INTENT whose sender is gone carries `sender_gone`.
    Never sent (`partnerkit.ordering.never_sent`): an INTENT never marked sending whose `orders create` is gone,
    left by a release that committed the mark apart (a full disk failed it): nothing was placed. Not one an operator
    closed (`orders close`)."""
    # One an operator closed (`orders close`: checked with the provider, never placed) nobody waits on.
    open_ones = [i for i in order_intents.open_ones(db) if order_intents.closure(db, i) is None]
    gone = senders_gone(db, [i for i in open_ones if i["state"] == "INTENT"], lambda i: order_intents.get(db, i["id"]))
    abandoned = now - INTENT_ABANDONED_AFTER
    named = [{**i, "sender_gone": i["id"] in gone} for i in open_ones
             if i["state"] == "UNKNOWN" or i["id"] in gone or (parse_ts(i["updated_at"]) or now) < abandoned]
    database = database_file(db)
    unsent = [i for i in named if i["sent_at"] is None and
              never_sent(i, False if i["sender_gone"] else senders.row_running(database, i), now)]
    return [i for i in named if i not in unsent], unsent


def _unsent_named(intent: dict) -> str:
    """An order intent of `order_intents_never_sent`: what it was, and when it was recorded."""
    who = f" ({intent['sender']})" if intent["sender"] else ""
    return (f"#{intent['id']} key {intent['idempotency_key']} ref {intent['ref']} (product {intent['product_id']}, "
            f"{intent['quantity']} x {from_cents(intent['denomination_cents'])}, recorded {intent['created_at']}; the "
            f"`orders create` that recorded it{who} stopped before sending it)")


def _order_named(intent: dict) -> str:
    """An order intent of `order_intents_unknown`: what replays it, and why it is named."""
    who = f" ({intent['sender']})" if intent["sender"] else ""
    gone = f"; the `orders create` that recorded it{who} is no longer running" if intent["sender_gone"] else ""
    if held_elsewhere(intent.get("error")):  # its replay answers the same id: compare with the provider instead
        gone += f"; {DO_NOT_REPLAY}: {intent['error']}; compare both orders with the provider"
    return (f"#{intent['id']} key {intent['idempotency_key']} ref {intent['ref']} (product {intent['product_id']}, "
            f"{intent['quantity']} x {from_cents(intent['denomination_cents'])}, {intent['state']} since "
            f"{intent['updated_at']}{gone})")


def recharges_held_elsewhere(lost: list[dict]) -> list[tuple[dict, recharges.HeldId]]:
    """Of the recharges `lost` names, those whose answer named a recharge id another local row holds
    (`recharges.held_elsewhere`, their last_error), with what it says: `recharges locate` only searches them, since
    their key is answered with the same id."""
    return [(row, held) for row in lost if (held := recharges.held_elsewhere(row["last_error"])) is not None]


def _held_named(row: dict, held: recharges.HeldId) -> str:
    """A recharge of `recharges_unknown_held_elsewhere`: its answer, and the row that holds that id."""
    return (f"#{row['local_id']} key {row['idempotency_key']} client_reference {row['client_reference']} "
            f"({row['mobile_number']}, {from_cents(row['amount_cents'])}): its answer named {held.answered}, which "
            f"local #{held.holder} holds (`partnerkit recharges show {held.holder}`)")


def recharges_key_taken(lost: list[dict]) -> list[tuple[dict, recharges.KeyTaken]]:
    """Of the recharges `lost` names, those whose Idempotency-Key answered another request's recharge
    (`recharges.key_taken`, their last_error), with what it says: not made under that key; `recharges locate` only
    searches them, since their key brings the same answer back."""
    return [(row, taken) for row in lost if (taken := recharges.key_taken(row["last_error"])) is not None]


def _taken_named(row: dict, taken: recharges.KeyTaken) -> str:
    """A recharge of `recharges_unknown_key_taken`: its request, and the recharge its key answered instead."""
    return (f"#{row['local_id']} key {row['idempotency_key']} client_reference {row['client_reference']} "
            f"({row['mobile_number']}, {from_cents(row['amount_cents'])}): its key answered {taken.answered}, another "
            f"recharge ({taken.differences})")


def locate_replays(lost: list[dict], now: datetime, besides: Collection[int] = ()) -> list[str]:
    """Of the recharges `lost` names, those `recharges locate` would still send again under their own key by
    itself (submitted less than LOCATE_REPLAY_WINDOW ago), as `#N until TIME`; never one of `besides` (local ids
    whose key locate never sends again: `recharges_held_elsewhere`, `recharges_key_taken`)."""
    replays = []
    for row in lost[:SHOWN_IDS]:
        submitted = parse_ts(row["submitted_at"])
        if submitted is not None and now < submitted + LOCATE_REPLAY_WINDOW and row["local_id"] not in besides:
            replays.append(f"#{row['local_id']} until {iso(submitted + LOCATE_REPLAY_WINDOW)}")
    return replays


# The wallet verdicts of a report under which the provider's balance differs from the ledger's and nothing explains
# it (reconcile.matcher.compare_wallet; reconcile.report.STANDING).
STANDING_WALLET = ("unexplained", "unconfirmed")


def wallet_differences(db: Database, day: str | None) -> list[str]:
    """The wallets of the report of `day` (the latest complete one) whose provider's balance differs from the
    ledger's and nothing explains ("INR 50.00 below the ledger's at 2026-11-23T00:05:00Z (unexplained, drift
    d_...)"), but
    those whose drift finance or a later run has resolved. A report stored before the verdict existed: none.
    The stored report's body (no drift table) and a drift by its id."""
    report = reports.get_report(db, day) if day is not None else None
    found = []
    for currency, w in sorted(((report or {}).get("wallets") or {}).items()):
        verdict, difference = w.get("provider_difference_status"), w.get("provider_difference")
        if verdict not in STANDING_WALLET or difference in (None, "0.00"):
            continue
        if verdict == "unexplained" and w.get("provider_difference_drift"):
            try:
                if drifts.get_drift(db, w["provider_difference_drift"]).resolution == "resolved":
                    continue
            except drifts.UnknownDrift:
                pass
        way = "below" if difference.startswith("-") else "above"
        drift = f", drift {w['provider_difference_drift']}" if w.get("provider_difference_drift") else ""
        found.append(f"{currency} {difference.lstrip('-')} {way} the ledger's at {w.get('provider_balance_at')} "
                     f"({verdict}{drift})")
    return found


def nightly_last_error(db: Database) -> nightly_failure.NightlyFailure | None:
    """The nightly run's last failure while no run has succeeded since (partnerkit.store.nightly_failure); None
    as well once every night it was reporting has a complete report made since (`reconcile --date` by hand)."""
    failure = nightly_failure.last(db)
    if failure is None or nightly_failure.reported_since(db, failure):
        return None
    return failure


def report_dir_state(config: Config) -> tuple[int | None, str | None]:
    """PARTNERKIT_REPORT_DIR as the nightly run would meet it: the bytes its filesystem leaves this user (None:
    unknown), and why the report's files cannot be written there (None: nothing seen), naming the folder looked
    at. That is the directory, or the nearest folder above it that exists (the run makes the rest): a file in
    the way, a read-only mount, a folder this user may not write, or under disk.FREE_FLOOR_BYTES free (a bad
    day's report is tens of MB) on a filesystem other than PARTNERKIT_DB's, which has its own line."""
    folder = Path(config.report_dir).absolute()
    for _ in range(len(folder.parts)):  # bounded: up to the root
        if folder.exists() or folder == folder.parent:
            break
        folder = folder.parent
    if not folder.is_dir():
        return None, f"{folder} is a file, not a directory"
    try:
        fs = os.statvfs(folder)
    except OSError as exc:
        return None, f"{folder} cannot be read ({exc.strerror or exc})"
    free = fs.f_bavail * fs.f_frsize
    if fs.f_flag & os.ST_RDONLY:
        return free, f"{folder} is on a filesystem mounted read-only"
    if not os.access(folder, os.W_OK | os.X_OK):
        return free, f"{folder} is not writable by this user"
    if free < disk.FREE_FLOOR_BYTES and not _same_filesystem(folder, Path(config.db_path).absolute().parent):
        return free, f"{folder} is on a filesystem with {disk.megabytes(free)} free"
    return free, None


def _same_filesystem(one: Path, other: Path) -> bool:
    try:
        return one.stat().st_dev == other.stat().st_dev
    except OSError:
        return False


def gauges(config: Config, db: Database, *, now: datetime | None = None) -> dict[str, int]:
    """What `attention` warns of, as numbers for a scrape (the receiver's /metrics): only cheap reads
    (index ranges, the small reports table), never the drift table, which grows with every day."""
    now = now or utcnow()
    failing = provider_failing(db, now)
    processing, ages, unread = processing_ages(db, now, failing.since if failing else None)
    overdue = overdue_report(reports.last_complete_report_date(db), now, config.due_hour_utc,
                             reports.store_first_day(db))
    return {
        "worker_up": int(worker_running(locks.current(db, WORKER_LEASE), now)),
        "recharges_processing": processing,
        # To escalate: not those the provider's failures kept the poller from reading (`status` says so).
        "recharges_processing_over_30m": sum(1 for a in ages if a > ESCALATE_AFTER_S) - unread,
        "recharges_unknown": len(lost_answers(config, db, now)),
        "report_overdue": int(overdue is not None),
        "provider_refusing": int(bool(config.api_key) and Budget.from_config(config, db).refusal() is not None),
        "provider_failing": int(failing is not None),
        "db_disk_low": int(disk.room(config.db_path).low),
        # The night's run failed and none has succeeded since: finance has no report this morning. It says so
        # at once, where report_overdue waits for the due hour to pass (a meta row and a statvfs: cheap).
        "clock_off": int(provider_clock.standing(db) is not None),
        "nightly_failed": int(nightly_last_error(db) is not None),
        "report_dir_unwritable": int(report_dir_state(config)[1] is not None),
    }


def collect(config: Config, db: Database, *, now: datetime | None = None) -> dict[str, Any]:
    """The operator's view: webhooks, voucher jobs, PROCESSING recharges, budget, report, drifts."""
    now = now or utcnow()
    latest = inbox.listing(db, limit=1)
    states = inbox.counts(db)
    job_states = jobs.counts_by_state(db)
    failing = provider_failing(db, now)
    skew = provider_clock.standing(db)
    processing, ages, unread = processing_ages(db, now, failing.since if failing else None)
    room = disk.room(config.db_path)
    key_budget = Budget.from_config(config, db) if config.api_key else None
    budget = key_budget.usage() if key_budget else {}
    refused = key_budget.refusal() if key_budget else None
    elsewhere = key_budget.others() if key_budget else None
    open_drifts = drifts.count_open(db)  # counted, never read: a busy store holds millions
    lease = locks.current(db, WORKER_LEASE)
    moved = taken_from_another_host(db, lease)
    lost = lost_answers(config, db, now)
    held = recharges_held_elsewhere(lost)
    taken = recharges_key_taken(lost)
    held_ids = {row["local_id"] for row, _ in held} | {row["local_id"] for row, _ in taken}
    given_twice = recharges.given_twice(db)
    orders_given_twice = orders.given_twice(db)
    transactions_given_twice = ledger.given_twice(db)
    worker_ran = last_worker_run(db)
    nightly_failed = nightly_last_error(db)
    report_dir_free, report_dir_unwritable = report_dir_state(config)
    turned_away = webhook_refusals.since(db, now - REFUSALS_WINDOW)
    unknown_orders, unsent_orders = lost_orders(db, now)
    status: dict[str, Any] = {
        "checked_at": now,
        "last_webhook_at": latest[0]["received_at"] if latest else None,
        "last_webhook_age_s": _age_s(latest[0]["received_at"], now) if latest else None,
        # A delivery of an event already stored, answered 2xx: the provider got through all the same.
        "last_duplicate_at": meta.get(db, inbox.LAST_DUPLICATE),
        # Deliveries the receiver refused before storing anything, by reason (most first), and the first
        # and last of them, over the last hour by the minute; the receiver saves them every few seconds.
        "webhooks_refused_last_hour": turned_away.by_reason,
        "webhooks_refused_first_at": parse_ts(turned_away.first_at),
        "webhooks_refused_last_at": parse_ts(turned_away.last_at),
        "events_stored": sum(v for k, v in states.items() if k != "duplicates"),
        "events_quarantined": states.get("quarantined", 0),
        "duplicates_absorbed": states.get("duplicates", 0),
        # The saved webhook tokens, opened with the voucher key as this user reads it (the receiver's view).
        "webhook_tokens_unreadable": unreadable_tokens(config, db),
        "voucher_fetch_backlog": job_states.get("pending", 0),
        "voucher_fetch_parked": job_states.get("dead", 0),
        "recharges_processing": processing,
        "oldest_processing_age_s": ages[0] if ages else None,
        "recharges_past_30_min": sum(1 for a in ages if a > ESCALATE_AFTER_S),
        # Of those, the ones the poller has not read since the provider began failing every call: unknown yet.
        "recharges_past_30_min_unread": unread,
        "recharges_unknown": len(lost),
        "recharges_unknown_local_ids": [r["local_id"] for r in lost[:SHOWN_IDS]],
        # Of those, the INTENT ones whose `recharges submit` is no longer running (killed while sending), as
        # `#N (pid P on HOST)`: named at once, not after the time rule (partnerkit.senders).
        "recharges_unknown_senders_gone": [f"#{r['local_id']}" + (f" ({r['sender']})" if r["sender"] else "")
                                           for r in lost[:SHOWN_IDS] if r.get("sender_gone")],
        # Of those, the ones `recharges locate` sends again under their own key by itself if the provider shows
        # none (submitted under 5 minutes ago), and until when: the attention line says which.
        "recharges_unknown_locate_replays": locate_replays(lost, now, besides=held_ids),
        # Of those, every one whose answer named a recharge id another local recharge holds, with that one: locate
        # only searches them (their key is answered with the same id); compare both with the provider instead.
        "recharges_unknown_held_elsewhere": [_held_named(row, h) for row, h in held],
        # Of those, every one whose Idempotency-Key answered another request's recharge (the key was used first
        # elsewhere): not made under that key, and not linked to that recharge; locate only searches them (the same
        # answer would come back); if the customer still needs one, check, then submit it with a new key.
        "recharges_unknown_key_taken": [_taken_named(row, t) for row, t in taken],
        # Provider records held in the quarantine, not stored, because their id names a local recharge they are not
        # (an id given twice; a `--fixed-ids` sandbox started again beside this database): how many, and the local
        # ids of the first ten rows holding those ids, which keep what they held.
        "recharges_id_given_twice": len(given_twice),
        "recharges_id_given_twice_local_ids": sorted({local for _, local in given_twice})[:SHOWN_IDS],
        # `orders create` whose answer was lost (or whose process died while sending): named, to replay.
        "order_intents_unknown": [_order_named(i) for i in unknown_orders],
        # `orders create` that recorded its intent and stopped before sending it (an older release, its sending mark
        # failed on a full disk): nothing was placed, and none holds a new order back; replay it or close it.
        "order_intents_never_sent": [_unsent_named(i) for i in unsent_orders],
        # Stored orders a record of another order under their id was refused for (an id given twice; a `--fixed-ids`
        # sandbox started again beside this database): the order sync's quarantined list records and the voucher
        # fetches parked on another order's detail. How many orders, and the first ten ids; they keep what they held.
        "orders_id_given_twice": len(orders_given_twice),
        "orders_id_given_twice_ids": orders_given_twice[:SHOWN_IDS],
        # Stored wallet transactions a listed record of another transaction under their id is held for (an id given
        # twice; a `--fixed-ids` sandbox started again beside this database), not stored: how many, and the first ten
        # ids. They keep what they held and stay in the ledger (not withdrawn) while the record is held.
        "transactions_id_given_twice": len(transactions_given_twice),
        "transactions_id_given_twice_ids": transactions_given_twice[:SHOWN_IDS],
        "budget_used_this_hour": budget.get("general", {}).get("used"),
        "budget_remaining_this_hour": budget.get("general", {}).get("remaining"),
        # Who spent it (the poller's own share is counted on these; the syncs stop at two tenths left).
        "budget_used_by_purpose": budget.get("general", {}).get("by_purpose", {}),
        # What the recharge poller may take of the hour for itself (PARTNERKIT_POLLER_BUDGET_SHARE).
        "poller_requests_per_hour": poller_cap(config.hourly_budget, config.poller_budget_share),
        # After a 429 (at most an hour: the budget caps a wait at one window of its class), as UTC.
        "budget_blocked_until": _moment(budget.get("general", {}).get("blocked_until")),
        # Requests the provider counted against the key beyond this database's own (Budget.others): another user.
        "requests_elsewhere_this_hour": elsewhere["gap"] if elsewhere else None,
        # The provider's last 401 to this API key, until a call with it is accepted again (one that blames the request's
        # timestamp: a write, budget._refusals); its message last. One dated ahead of this clock was met while the clock
        # ran ahead: the worker does not pause on it.
        "provider_refused": (f"HTTP {refused['status']} to {refused['method']} {refused['path']} ({refused['purpose']}) "
                             f"at {iso(_moment(refused['at']))}{_ahead(refused, now)}: {refused['message']}"
                             if refused else None),
        # Until when the worker's jobs that call the provider wait after that 401 (the worker's own rule).
        "provider_calls_paused_until": _moment(refusal_pause_until(refused, now.timestamp())),
        # Every call since then failed, past PROVIDER_FAILING_CALLS calls and PROVIDER_FAILING_AFTER, by any process.
        "provider_failing_since": failing.since if failing else None,
        "provider_failing": (f"{failing.calls} calls ({failing.kinds_text()}), the last {failing.last_call} at "
                             f"{iso(failing.last_at)}" if failing else None),
        # This host's clock against the provider's (its answers' Date header), while off by more than 5 minutes.
        "clock_off_by_s": skew.seconds if skew else None,
        "clock_off_seen_at": skew.seen_at if skew else None,
        "last_report_date": reports.last_complete_report_date(db),  # a report of a day still running is partial
        "report_overdue_date": None,
        # The nightly run's last attempt failed, and none succeeded since: why, when, and the nights it was reporting.
        "nightly_last_error": nightly_failed.error if nightly_failed else None,
        "nightly_last_error_at": nightly_failed.at if nightly_failed else None,
        "nightly_last_error_dates": list(nightly_failed.dates) if nightly_failed else [],
        # The last complete report's wallets whose provider's balance differs from the ledger's, unexplained.
        "wallet_differences": [],
        # Nights older than the nightly run's catch-up that have no report: only `reconcile --date` reports them.
        "nights_never_reported": reports.night_ranges(
            reports.unreported_nights(db, reports.latest_due_night(now, config.due_hour_utc))[1]),
        # A sync the budget or the provider stopped, reading on from its page at its next run.
        "syncs_reading_on": [f"{w['entity']} {w['from_day']}..{w['to_day']} from page {w['next_page']} (begun "
                             f"{w['started_at']})" for w in ledger.walk_positions(db)],
        "open_drifts": open_drifts["pending"],
        "escalated_drifts": open_drifts["escalated"],
        # The receiver's gunicorn masters as each recorded itself, and whether one of this host runs.
        **receiver_facts(db),
        "worker_running": worker_running(lease, now),
        "worker_lease_holder": lease.holder if lease is not None else None,
        "worker_lease_expires_at": lease.expires_at if lease is not None else None,
        "worker_last_job_at": worker_ran,
        "worker_lease_holder_alive": lease_holder_alive(lease),
        # The lease was taken over from a worker on another host, whose lease had expired: two hosts on one file?
        "worker_lease_previous_host": moved[0] if moved else None,
        "worker_lease_taken_over_at": moved[1] if moved else None,
        # PARTNERKIT_DB's filesystem: what it leaves free (for this user), the WAL's size, a read-only mount.
        "db_free_bytes": room.free_bytes,
        "db_wal_bytes": room.wal_bytes,
        "db_read_only": room.read_only,
        # PARTNERKIT_REPORT_DIR: what its filesystem leaves free, and why the nightly report could not be written there.
        "report_dir_free_bytes": report_dir_free,
        "report_dir_unwritable": report_dir_unwritable,
    }
    status["report_overdue_date"] = overdue_report(status["last_report_date"], now, config.due_hour_utc,
                                                   reports.store_first_day(db))
    status["wallet_differences"] = wallet_differences(db, status["last_report_date"])
    # Drifts waiting on finance: shown, never attention (`status --check` passes over them).
    status["for_finance"] = for_finance(status)
    status["attention"] = attention(status, worker_stale_s=config.worker_stale_s)
    return status
