"""Recharges in SQLite: the intent before a submit, the provider's copy after, polling state.

Rows come from two places: `record_intent` (partnerkit is about to submit; origin 'partner') and
`upsert_from_provider` (a read of the provider's list or detail; origin 'provider' when partnerkit
never submitted it). Provider records may be the client's dataclasses or plain dicts (raw JSON);
both are read through `provider_fields`. Money is stored as integer paise, times as ISO 8601 UTC.

The store is one module a concern, all re-exported here (import from `partnerkit.store.recharges`):
`_provider` (the statuses, the fields of a provider record and the columns they set, checked at
import), `_intents` (the submit side, an answer that is another request's, and one naming a recharge another
row holds), `_upsert` (provider reads, a record naming a recharge it is not, and what the sync notes of its
list: `known_recharge_states`, `mark_recharges_seen`),
`_queries` (reads for the poller, locate and the CLI), `_held` (the submit guard's read: open intents
of the same number and amount) and `_closed` (open intents an operator closed by hand: `recharges close`).
"""

from partnerkit.store.recharges._closed import close_intent, closed_key, closure
from partnerkit.store.recharges._held import held
from partnerkit.store.recharges._intents import (
    HELD_ADVICE, HELD_ELSEWHERE, KEY_TAKEN, AnswerOfAnotherRequest, HeldId, KeyTaken, RechargeHeldElsewhere,
    discard_refused, held_elsewhere, key_taken, key_taken_advice, mark_unknown, note_error, note_performed_by_replay,
    record_intent, record_response, request_disagreements,
)
from partnerkit.store.recharges._provider import (
    FINAL, ID_GIVEN_TWICE, LEGACY_SUCCESS, OPEN_INTENT, OWN_REFERENCE_DIGITS, OWN_REFERENCE_PREFIX, PERFORMED_BY_REPLAY,
    UNREADABLE, check_provider_columns, normalise_status, provider_fields,
)
from partnerkit.store.recharges._queries import (
    by_idempotency_key, by_provider_id, count_status, day_counts, find, get, list_rows, mark_escalated, mark_polled,
    merged_into, merged_key, open_intents, poll_candidates,
)
from partnerkit.store.recharges._upsert import (
    UpsertResult, another_recharge, given_twice, known_recharge_states, mark_recharges_seen, note_unreadable,
    reject, release_quarantined, upsert_from_provider,
)

__all__ = [
    "AnswerOfAnotherRequest",
    "FINAL",
    "HELD_ADVICE",
    "HELD_ELSEWHERE",
    "HeldId",
    "ID_GIVEN_TWICE",
    "KEY_TAKEN",
    "KeyTaken",
    "LEGACY_SUCCESS",
    "OPEN_INTENT",
    "OWN_REFERENCE_DIGITS",
    "OWN_REFERENCE_PREFIX",
    "PERFORMED_BY_REPLAY",
    "RechargeHeldElsewhere",
    "UNREADABLE",
    "UpsertResult",
    "another_recharge",
    "by_idempotency_key",
    "by_provider_id",
    "check_provider_columns",
    "close_intent",
    "closed_key",
    "closure",
    "count_status",
    "day_counts",
    "discard_refused",
    "find",
    "get",
    "given_twice",
    "held",
    "held_elsewhere",
    "key_taken",
    "key_taken_advice",
    "known_recharge_states",
    "list_rows",
    "mark_escalated",
    "mark_polled",
    "mark_recharges_seen",
    "mark_unknown",
    "merged_into",
    "merged_key",
    "normalise_status",
    "note_error",
    "note_performed_by_replay",
    "note_unreadable",
    "open_intents",
    "poll_candidates",
    "provider_fields",
    "record_intent",
    "record_response",
    "reject",
    "request_disagreements",
    "release_quarantined",
    "upsert_from_provider",
]
