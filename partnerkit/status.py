"""`partnerkit status`: what an operator needs at a glance, assembled from the store.

Every figure comes from the shared database, so the command works beside a running receiver and
worker without talking to either (or to the provider: it spends no API budget).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from partnerkit import disk
from partnerkit.config import Config
from partnerkit.crypto import unreadable_tokens
from partnerkit.money import from_cents
from partnerkit.processes import holder_alive, holder_is_gone
from partnerkit.store import (Database, drifts, inbox, jobs, ledger, locks, meta, order_intents, provider_failures,
                              recharges, reports, webhook_refusals)
from partnerkit.store.budget import Budget, poller_cap
from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp
from partnerkit.timeutil import iso, parse_ts, utcnow

ESCALATE_AFTER_S = 30 * 60  # the document: beyond 30 minutes, escalate to support with reference_number
WORKER_LEASE = "worker"  # reconcile.scheduler.LEASE_NAME (partnerkit does not import reconcile)
# The nightly job checks hourly whether a report is due (sooner after a failed run), and a busy day's sync
# takes a while: a report not there two hours past PARTNERKIT_DUE_HOUR_UTC is late, not merely in progress.
REPORT_GRACE = timedelta(hours=2)
# An order intent still INTENT this long after its send began was left by a process that died while
# sending (a send lasts at most a few client timeouts): its outcome is as unknown as an UNKNOWN one's.
INTENT_ABANDONED_AFTER = timedelta(minutes=15)
# When a worker last ran a job, long-running or `worker --once` from cron alike (the lease alone cannot
# say: a clean stop deletes it). Written at most once a minute; `status` names a worker silent for longer
# than PARTNERKIT_WORKER_STALE_S.
WORKER_RAN_KEY = "worker.last_job_at"
WORKER_RAN_EVERY = timedelta(minutes=1)
# A submit keeps its recharge INTENT while it waits for the budget (the client waits up to a minute) and
# for the provider's answer; one INTENT much older than that was killed mid-send (its answer is lost).
SUBMIT_BUDGET_WAIT_S = 60
INTENT_STALE_FLOOR_S = 120
SHOWN_IDS = 10  # local ids named in an attention line
# A 429's block of the shared budget that still has this long to run holds every job (voucher
# fetches, polls, syncs, the report) past what a passing rate limit explains: a person should know.
BLOCK_ATTENTION = timedelta(minutes=5)
# The provider failing every call (partnerkit.store.provider_failures) is named once it has failed at least
# PROVIDER_FAILING_CALLS calls over PROVIDER_FAILING_AFTER with no answer between: one failed call, or a blip
# the retries ride out (a deploy at the provider, a dropped connection), pages nobody. Five minutes is the
# status timer's interval, and the poller alone still tries about once a minute while it backs off.
PROVIDER_FAILING_AFTER = timedelta(minutes=5)
PROVIDER_FAILING_CALLS = 3
# Refused webhook deliveries are counted by the minute (receiver.refusals); `status` reads this far back.
REFUSALS_WINDOW = timedelta(hours=1)
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
    "malformed_signature": "their X-Signature is not 64 hex digits: a proxy that rewrites it, or not the provider",
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


def note_worker_ran(db: Database, now: datetime | None = None) -> None:
    """Record that a worker ran a job now (a write at most once per WORKER_RAN_EVERY)."""
    now = now or utcnow()
    seen = last_worker_run(db)
    if seen is not None and timedelta(0) <= now - seen < WORKER_RAN_EVERY:
        return
    with transaction(db) as conn:
        meta.put(conn, WORKER_RAN_KEY, stamp(now), now=now)


def last_worker_run(db: Database) -> datetime | None:
    """When a worker last ran a job on this database; None before the first (or an unreadable record)."""
    try:
        return parse_ts(meta.get(db, WORKER_RAN_KEY))
    except ValueError:
        return None


def intent_stale_after_s(config: Config) -> float:
    """How long a submit may keep its recharge INTENT: the budget wait and twice the request timeout."""
    return max(INTENT_STALE_FLOOR_S, SUBMIT_BUDGET_WAIT_S + 2 * config.http_timeout_s)


def lost_answers(config: Config, db: Database, now: datetime) -> list[int]:
    """Local ids of recharges whose submit's answer was lost: UNKNOWN, and INTENT past
    `intent_stale_after_s` (a submit killed mid-send, which never got to mark it UNKNOWN); oldest first."""
    cutoff = now - timedelta(seconds=intent_stale_after_s(config))
    stale = [r for r in recharges.list_rows(db, status="INTENT")
             if (parse_ts(r["submitted_at"]) or now) <= cutoff]
    return sorted(r["local_id"] for r in stale + recharges.list_rows(db, status="UNKNOWN"))


def worker_running(lease: locks.Lease | None, now: datetime) -> bool:
    """Whether the worker lease is held by a live worker.

    The worker renews its lease every few seconds: a lease past its expiry, or held by a process of
    this host that is gone (kill -9), was left by a worker that died (a clean stop deletes it); no
    lease at all means no worker has run since."""
    return lease is not None and lease.expires_at > now and not holder_is_gone(lease.holder)


def lease_holder_alive(lease: locks.Lease | None) -> bool | None:
    """Whether the worker lease's holder still runs (processes.holder_alive): True, False, or None when there
    is no lease or this process cannot see the holder's (another host or container)."""
    return None if lease is None else holder_alive(lease.holder, since=lease.acquired_at.timestamp())


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
    }


def collect(config: Config, db: Database, *, now: datetime | None = None) -> dict[str, Any]:
    """The operator's view: webhooks, voucher jobs, PROCESSING recharges, budget, report, drifts."""
    now = now or utcnow()
    latest = inbox.listing(db, limit=1)
    states = inbox.counts(db)
    job_states = jobs.counts_by_state(db)
    failing = provider_failing(db, now)
    processing, ages, unread = processing_ages(db, now, failing.since if failing else None)
    room = disk.room(config.db_path)
    key_budget = Budget.from_config(config, db) if config.api_key else None
    budget = key_budget.usage() if key_budget else {}
    refused = key_budget.refusal() if key_budget else None
    elsewhere = key_budget.others() if key_budget else None
    open_drifts = drifts.count_open(db)  # counted, never read: a busy store holds millions
    lease = locks.current(db, WORKER_LEASE)
    lost = lost_answers(config, db, now)
    worker_ran = last_worker_run(db)
    turned_away = webhook_refusals.since(db, now - REFUSALS_WINDOW)
    status: dict[str, Any] = {
        "checked_at": now,
        "last_webhook_at": latest[0]["received_at"] if latest else None,
        "last_webhook_age_s": _age_s(latest[0]["received_at"], now) if latest else None,
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
        "recharges_unknown_local_ids": lost[:SHOWN_IDS],
        # `orders create` whose answer was lost (or whose process died while sending): named, to replay.
        "order_intents_unknown": [f"#{i['id']} key {i['idempotency_key']} ref {i['ref']} (product {i['product_id']}, "
                                  f"{i['quantity']} x {from_cents(i['denomination_cents'])}, {i['state']} since "
                                  f"{i['updated_at']})"
                                  for i in order_intents.unresolved(db, open_before=now - INTENT_ABANDONED_AFTER)],
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
        # The provider's last 401 to this API key, until a call with it is accepted again.
        "provider_refused": (f"HTTP {refused['status']} to {refused['method']} {refused['path']} ({refused['purpose']}) "
                             f"at {iso(_moment(refused['at']))}: {refused['message']}"
                             if refused else None),
        # Every call since then failed, past PROVIDER_FAILING_CALLS calls and PROVIDER_FAILING_AFTER, by any process.
        "provider_failing_since": failing.since if failing else None,
        "provider_failing": (f"{failing.calls} calls ({failing.kinds_text()}), the last {failing.last_call} at "
                             f"{iso(failing.last_at)}" if failing else None),
        "last_report_date": reports.last_complete_report_date(db),  # a report of a day still running is partial
        "report_overdue_date": None,
        # Nights older than the nightly run's catch-up that have no report: only `reconcile --date` reports them.
        "nights_never_reported": reports.night_ranges(
            reports.unreported_nights(db, reports.latest_due_night(now, config.due_hour_utc))[1]),
        # A sync the budget or the provider stopped, reading on from its page at its next run.
        "syncs_reading_on": [f"{w['entity']} {w['from_day']}..{w['to_day']} from page {w['next_page']} (begun "
                             f"{w['started_at']})" for w in ledger.walk_positions(db)],
        "open_drifts": open_drifts["pending"],
        "escalated_drifts": open_drifts["escalated"],
        "worker_running": worker_running(lease, now),
        "worker_lease_holder": lease.holder if lease is not None else None,
        "worker_lease_expires_at": lease.expires_at if lease is not None else None,
        "worker_last_job_at": worker_ran,
        "worker_lease_holder_alive": lease_holder_alive(lease),
        # PARTNERKIT_DB's filesystem: what it leaves free (for this user), the WAL's size, a read-only mount.
        "db_free_bytes": room.free_bytes,
        "db_wal_bytes": room.wal_bytes,
        "db_read_only": room.read_only,
    }
    status["report_overdue_date"] = overdue_report(status["last_report_date"], now, config.due_hour_utc,
                                                   reports.store_first_day(db))
    status["attention"] = attention(status, worker_stale_s=config.worker_stale_s)
    return status


def _silent_for(status: dict[str, Any], worker_stale_s: int) -> int | None:
    """Seconds since a worker last ran a job, when that is longer than `worker_stale_s`; else None (and
    None on a database no worker has run on yet: a fresh install is not an outage)."""
    last = status["worker_last_job_at"]
    silent = None if last is None else int((status["checked_at"] - last).total_seconds())
    return silent if silent is not None and silent > worker_stale_s else None


def _every_delivery_refused(status: dict[str, Any]) -> bool:
    """Deliveries were refused in the last hour and none was accepted (stored, whatever its outcome)
    since the first of them: arriving, and all turned away.

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
    accepted = parse_ts(status["last_webhook_at"]) if status["last_webhook_at"] else None
    return accepted is None or accepted < first


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
    if "HTTP 5" in status["provider_failing"]:  # it answers, with errors: its side
        cause = "it answers with server errors: nothing to fix here"
    else:  # no answer at all: the network between may be ours
        cause = ("no answer at all: check this host's network, DNS and proxy towards PARTNERKIT_API_BASE_URL (`curl` "
                 "it); if they are fine the provider is down, nothing to fix here")
    return (f"{head}: {cause}; partnerkit retries by itself (the poller backs off to a pass a minute, the syncs read "
            "on from their page, voucher fetches retry and are re-armed) and this clears at the first call the "
            "provider answers; PROCESSING recharges are not read meanwhile")


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
            "killed; start `partnerkit worker`")
    if status["worker_lease_holder_alive"] is None and room.low:
        line += ("; or, if it still runs where this command cannot see it (another container or host), it cannot "
                 "write the database (PARTNERKIT_DB's filesystem: its own line says what to do)")
    return line


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


def attention(status: dict[str, Any], *, worker_stale_s: int = 900) -> list[str]:
    """Plain-language lines for what needs a person now (empty when all is well)."""
    lines = []
    if _room(status).low:
        lines.append(_disk_line(_room(status)))
    if status["provider_failing_since"] is not None:
        lines.append(_provider_line(status))
    if status["provider_refused"]:
        lines.append(f"the provider refused partnerkit's credentials ({status['provider_refused']}): every call "
                     "fails until PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET are right and this host is on the key's "
                     "IP allowlist; the next accepted call clears this")
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
    if status["voucher_fetch_parked"]:
        lines.append(f"{status['voucher_fetch_parked']} voucher fetch job(s) parked after their retries (`partnerkit "
                     "events list` says why): once the provider answers again, `partnerkit orders sync` re-arms now the "
                     "fetch of every delivering order it lists (`--since TIME` reaches orders placed earlier); the worker "
                     "re-arms those the provider's failure parked at its next answer, the others hourly")
    lines += _processing_lines(status)
    if status["recharges_unknown"]:
        ids = ", ".join(str(i) for i in status["recharges_unknown_local_ids"])
        more = ", ..." if status["recharges_unknown"] > len(status["recharges_unknown_local_ids"]) else ""
        lines.append(f"{status['recharges_unknown']} recharge(s) with an unknown outcome (local id {ids}{more}): "
                     "`partnerkit recharges locate --local-id N` searches the provider for each, read only; if it "
                     "shows none, sending it again is a decision (`--replay` performs it now), never a new key")
    if status["order_intents_unknown"]:
        lines.append(f"{len(status['order_intents_unknown'])} order creation(s) with an unknown outcome "
                     f"({'; '.join(status['order_intents_unknown'][:5])}): replay each with `partnerkit orders create "
                     "... --idempotency-key KEY` (its key and ref, never a new key), or let the order sync link it")
    if status["open_drifts"]:
        lines.append(f"{status['open_drifts']} open drift(s): `partnerkit drifts list --resolution pending`")
    if not status["worker_running"] and status["worker_lease_holder"] is not None:
        lines.append(_worker_line(status))
    elif not status["worker_running"] and (status["voucher_fetch_backlog"] or status["recharges_processing"]):
        lines.append("no worker is running, yet voucher fetches or PROCESSING recharges are waiting: "
                     "start `partnerkit worker`")
    elif (silent_s := _silent_for(status, worker_stale_s)) is not None:
        silent = (f"no worker has run a job for {silent_s // 60} minutes (last at {iso(status['worker_last_job_at'])}; "
                  f"PARTNERKIT_WORKER_STALE_S allows {worker_stale_s} s)")
        if status["worker_running"]:
            lines.append(f"{silent}: the worker {status['worker_lease_holder']} renews its lease but runs no job; "
                         "restart it")
        else:
            lines.append(f"{silent}: start `partnerkit worker` (or check the cron line that runs "
                         "`partnerkit worker --once`)")
    if status["report_overdue_date"]:
        last = (f"last complete report: {status['last_report_date']}" if status["last_report_date"]
                else "no complete report yet")
        lines.append(f"the nightly report for {status['report_overdue_date']} is overdue ({last}): the worker's `nightly-report` log lines say why (an error, or "
                     "`budget_exhausted` on a day with more pages than the hour's budget); `partnerkit reconcile --date "
                     f"{status['report_overdue_date']}` runs it by hand")
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
