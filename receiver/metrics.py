"""Prometheus metrics for the receiver.

Request counters live in prometheus_client; under gunicorn, `partnerkit serve` sets
PROMETHEUS_MULTIPROC_DIR to a private directory, so every worker writes its own files and a
scrape (answered by any worker) sums them. What other processes do (the worker's voucher
fetches, the API budget, whether the worker is alive) is read from the database at scrape time, so
it needs no mmap files.
Nothing secret is ever a label: reasons and outcomes are fixed words.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from partnerkit.store import Database
from partnerkit.store import inbox, jobs

# From a quarter of a millisecond: an acknowledgement takes about half a millisecond on an idle worker.
ACK_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# The worker's health, as `partnerkit status` judges it (partnerkit.status.gauges), so that an alert on
# a dead worker, a stuck recharge or a late report needs only this scrape.
HEALTH_GAUGES = {
    "worker_up": ("partnerkit_worker_up", "1 while a live worker holds the worker lease, else 0"),
    "recharges_processing": ("partnerkit_recharges_processing", "Recharges PROCESSING at the provider"),
    "recharges_processing_over_30m": ("partnerkit_recharges_processing_over_30m",
                                      "Recharges PROCESSING for over 30 minutes and read since: escalate with their "
                                      "reference_number (not those the provider's failures kept unread)"),
    "recharges_unknown": ("partnerkit_recharges_unknown",
                          "Recharges whose submit outcome is unknown: run `partnerkit recharges locate`"),
    "report_overdue": ("partnerkit_report_overdue", "1 while the nightly report of a finished day is late, else 0"),
    "provider_refusing": ("partnerkit_provider_refusing",
                          "1 while the provider's last answer to the API key's calls was a 401, else 0"),
    "provider_failing": ("partnerkit_provider_failing",
                         "1 while the provider has failed every call (5xx, timeouts, no connection) for 5 minutes "
                         "and 3 calls or more, else 0: its side; partnerkit retries by itself"),
    "db_disk_low": ("partnerkit_db_disk_low",
                    "1 while PARTNERKIT_DB's filesystem is read-only or has under 100 MB (or the WAL's size) free, "
                    "else 0: writes fail when it is full"),
    "clock_off": ("partnerkit_clock_off",
                  "1 while this host's clock is more than 5 minutes from the provider's (its answers' Date header), "
                  "else 0: `partnerkit status` says by how much"),
    "nightly_failed": ("partnerkit_nightly_failed",
                       "1 while the nightly reconciliation's last run failed and none has succeeded since, else 0: "
                       "`partnerkit status` says why; the worker tries again by itself"),
    "report_dir_unwritable": ("partnerkit_report_dir_unwritable",
                              "1 while PARTNERKIT_REPORT_DIR cannot take the nightly report's files (read-only, not "
                              "writable by this user, or under 100 MB free), else 0"),
}


class DatabaseCollector(Collector):
    """Voucher fetch outcomes, job states, the API budget and the worker's health, read from the shared
    database."""

    def __init__(self, db: Callable[[], Database], budget: Callable[[Database], int | None],
                 health: Callable[[Database], dict[str, int]] | None = None) -> None:
        self._db = db
        self._budget = budget
        self._health = health

    def collect(self) -> Iterator:
        db = self._db()
        outcomes = CounterMetricFamily("partnerkit_voucher_fetches", "Voucher fetch attempts by outcome",
                                       labels=["outcome"])
        for name, value in jobs.counters(db, "voucher_fetch.").items():
            outcomes.add_metric([name.split(".", 1)[1]], value)
        yield outcomes
        states = GaugeMetricFamily("partnerkit_voucher_fetch_jobs", "Voucher fetch jobs by state", labels=["state"])
        by_state = jobs.counts_by_state(db)
        for state in ("pending", "done", "dead"):
            states.add_metric([state], by_state.get(state, 0))
        yield states
        stored = GaugeMetricFamily("partnerkit_inbox_events", "Inbox rows by state", labels=["state"])
        for state, value in inbox.counts(db).items():
            stored.add_metric([state], value)
        yield stored
        remaining = self._budget(db)
        if remaining is not None:
            yield GaugeMetricFamily("partnerkit_api_budget_remaining", "Provider requests left in the current hour",
                                    value=remaining)
        if self._health is not None:
            for key, value in self._health(db).items():
                name, documentation = HEALTH_GAUGES[key]
                yield GaugeMetricFamily(name, documentation, value=value)


class Metrics:
    """The receiver's counters and histogram, in a registry of their own (no global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter("partnerkit_webhook_events", "Verified deliveries by outcome "
                              "(accepted, duplicate, ignored, unavailable)", ["outcome"], registry=self.registry)
        self.rejected = Counter("partnerkit_webhook_rejected", "Deliveries refused before parsing, by reason",
                                ["reason"], registry=self.registry)
        self.ack_seconds = Histogram("partnerkit_webhook_ack_seconds", "Time from request to 2xx acknowledgement",
                                     buckets=ACK_BUCKETS, registry=self.registry)
        self._db_collector: DatabaseCollector | None = None
        # Label children, looked up once: `labels()` takes a lock and builds a key per call.
        self._outcomes: dict[str, object] = {}
        self._reasons: dict[str, object] = {}

    def outcome(self, name: str):
        """The `events` counter child for one outcome (cached)."""
        child = self._outcomes.get(name)
        if child is None:
            child = self._outcomes[name] = self.events.labels(name)
        return child

    def rejected_total(self, reason: str):
        """The `rejected` counter child for one reason (cached)."""
        child = self._reasons.get(reason)
        if child is None:
            child = self._reasons[reason] = self.rejected.labels(reason)
        return child

    def attach_database(self, db: Callable[[], Database], budget: Callable[[Database], int | None],
                        health: Callable[[Database], dict[str, int]] | None = None) -> None:
        """Add the database-derived metrics to every scrape."""
        self._db_collector = DatabaseCollector(db, budget, health)
        if not multiprocess_dir():
            self.registry.register(self._db_collector)

    def render(self) -> bytes:
        """The Prometheus text exposition, summed over every gunicorn worker when multiprocess."""
        if multiprocess_dir():
            from prometheus_client.multiprocess import MultiProcessCollector

            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            if self._db_collector is not None:
                registry.register(self._db_collector)
            return generate_latest(registry)
        return generate_latest(self.registry)


def multiprocess_dir() -> str | None:
    """PROMETHEUS_MULTIPROC_DIR, when set (by `partnerkit serve`)."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
