"""`partnerkit status`: what an operator needs at a glance, assembled from the store.

Every figure comes from the shared database, so the command works beside a running receiver and
worker without talking to either (or to the provider: it spends no API budget). The receiver's
/metrics carries the same judgement as gauges (`gauges`).

One module a concern, all re-exported here (import from `partnerkit.status`): `_facts` (gathering
the fields from the store: `collect`, `gauges`), `_worker` (the worker's lease and its last job run,
also written by the worker: `note_worker_ran`) and `_attention` (the lines that need a person,
judged from the gathered fields). The CLI renders them (`partnerkit.cli.status`).
"""

from partnerkit.status._attention import (BLOCK_ATTENTION, REFUSAL_HINTS, TAKEOVER_ATTENTION, UNSIGNED_FLOOR,
                                          UNSIGNED_REASONS, attention)
from partnerkit.status._facts import (ESCALATE_AFTER_S, INTENT_ABANDONED_AFTER, INTENT_STALE_FLOOR_S,
                                      PROVIDER_FAILING_AFTER, PROVIDER_FAILING_CALLS, REFUSALS_WINDOW, REPORT_GRACE,
                                      SHOWN_IDS, SUBMIT_BUDGET_WAIT_S, collect, gauges, intent_stale_after_s,
                                      lost_answers, overdue_report, processing_ages, provider_failing)
from partnerkit.status._worker import (WORKER_LEASE, WORKER_RAN_EVERY, WORKER_RAN_KEY, last_worker_run,
                                       lease_holder_alive, note_worker_ran, taken_from_another_host, worker_running)

__all__ = [
    "BLOCK_ATTENTION",
    "ESCALATE_AFTER_S",
    "INTENT_ABANDONED_AFTER",
    "INTENT_STALE_FLOOR_S",
    "PROVIDER_FAILING_AFTER",
    "PROVIDER_FAILING_CALLS",
    "REFUSALS_WINDOW",
    "REFUSAL_HINTS",
    "REPORT_GRACE",
    "SHOWN_IDS",
    "SUBMIT_BUDGET_WAIT_S",
    "TAKEOVER_ATTENTION",
    "UNSIGNED_FLOOR",
    "UNSIGNED_REASONS",
    "WORKER_LEASE",
    "WORKER_RAN_EVERY",
    "WORKER_RAN_KEY",
    "attention",
    "collect",
    "gauges",
    "intent_stale_after_s",
    "last_worker_run",
    "lease_holder_alive",
    "lost_answers",
    "note_worker_ran",
    "overdue_report",
    "processing_ages",
    "provider_failing",
    "taken_from_another_host",
    "worker_running",
]
