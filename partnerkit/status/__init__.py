"""`partnerkit status`: what an operator needs at a glance, assembled from the store.

Every figure comes from the shared database, so the command works beside a running receiver and
worker without talking to either (or to the provider: it spends no API budget). The receiver's
/metrics carries the same judgement as gauges (`gauges`).

One module a concern, what other code uses re-exported here (import from `partnerkit.status`; the
thresholds and helpers behind each judgement stay in their module): `_facts` (gathering
the fields from the store: `collect`, `gauges`), `_worker` (the worker's lease and its last job run,
also written by the worker: `note_worker_ran`), `_receiver` (the receiver's gunicorn masters, each written
by its master as it starts and as it stops cleanly: `note_receiver_started`, `note_receiver_stopped`) and
`_attention` (the lines that need a person, judged from the gathered fields, and the drifts waiting on
finance, which are not attention). The CLI renders them
(`partnerkit.cli.status`).
"""

from partnerkit.status._attention import TAKEOVER_ATTENTION, attention, for_finance
from partnerkit.status._facts import collect, gauges, overdue_report, provider_failing
from partnerkit.status._receiver import note_receiver_started, note_receiver_stopped, receiver_facts
from partnerkit.status._worker import (WORKER_LEASE, last_worker_run, lease_holder_alive, note_worker_ran,
                                       worker_running)

__all__ = [
    "TAKEOVER_ATTENTION",
    "WORKER_LEASE",
    "attention",
    "collect",
    "for_finance",
    "gauges",
    "last_worker_run",
    "lease_holder_alive",
    "note_receiver_started",
    "note_receiver_stopped",
    "note_worker_ran",
    "overdue_report",
    "provider_failing",
    "receiver_facts",
    "worker_running",
]
