"""What each drift kind means and what finance does about it, in the words the report's page prints.

docs/reconcile.md, "Drift kinds", is the long form (with the commands); this is the page's short form, so
that a reader of a printed or e-mailed report can act on a drift without the docs. `KIND_ORDER` is the
order the page lists kinds in: money that left the wallet and may not come back first, then what the
provider's figures do not explain, then what may still be charged or was given back.
"""

from __future__ import annotations

from partnerkit.store.drifts import KINDS

# (what it means, what to do next); every kind of partnerkit.store.drifts.KINDS has one (a test holds it).
KIND_GUIDE: dict[str, tuple[str, str]] = {
    "duplicate_debit": (
        "The wallet was debited more than once for one recharge or order (expected: what it costs; actual: "
        "what was taken, less any credit back).",
        "Escalate: ask the provider to credit the extra debit, quoting the reference. It resolves itself when "
        "that credit arrives within 7 days."),
    "missing_refund": (
        "A FAILED or REVERSED recharge, or a FAILED or CANCELLED order, was not credited back in full "
        "(expected: the refund due; actual: what was credited).",
        "Refunds can arrive late: wait one night (it resolves itself), then escalate with the reference."),
    "amount_mismatch": (
        "The debit differs from what the recharge quoted (payable, not face) or the order costs, or was "
        "taken in another currency.",
        "Escalate with the reference: the provider debited a different amount than it quoted."),
    "orphan_transaction": (
        "A wallet transaction linked to no recharge or order partnerkit knows (the detail names what it "
        "claims to pay for; the reference is the transaction id).",
        "Find what it pays for; a debit nobody placed must be escalated with its transaction id."),
    "unknown_to_partner": (
        "The provider lists a recharge partnerkit never submitted: spend on this API key from outside "
        "partnerkit, or, with partnerkit's own client_reference (pk-...), from a restored or copied database.",
        "Find out who submitted it. If it is partnerkit's own (a restore), check it against what was sold "
        "and resolve it; otherwise treat the key as leaked."),
    "stuck_processing": (
        "A recharge still PROCESSING more than 30 minutes after it was submitted: the outcome is unknown "
        "(expected: what it costs; actual: what the wallet was debited for it so far, less any credit back, "
        "empty while no debit is seen).",
        "Escalate to the provider's support with the reference_number, and the debit's transaction id when "
        "actual shows one: that money is held until it settles. Never resubmit it."),
    "balance_discontinuity": (
        "A transaction's balance_after does not follow from the one before it (the reference is the transaction "
        "id where the chain breaks), or the provider's wallet balance differs from the ledger's at the time it "
        "was read (reference `wallet INR after 700005`, the entry the money moved after; expected: the ledger's balance, actual: the provider's): the "
        "provider's history is missing or has altered a movement.",
        "Escalate with the transaction id, or for a wallet the currency, the time the balance was read and "
        "both balances."),
    "voucher_shortfall": (
        "An order delivered fewer vouchers than it was paid for, as stored (expected and actual are voucher "
        "counts, not money).",
        "Usually a voucher fetch still waiting: partnerkit orders show ID says why; it resolves itself once "
        "the vouchers are stored. If not, escalate with the order id."),
    "unexpected_refund": (
        "A credit nobody expected: a SUCCESS recharge or a kept order credited back (actual: the credit).",
        "Check that the recharge or order really succeeded (the customer may not have received it); "
        "escalate if unclear: the provider may take the credit back."),
    "missing_debit": (
        "A SUCCESS or PROCESSING recharge, or a kept order, with no wallet debit (expected: what it costs): "
        "the provider may still debit it. Or a FAILED or REVERSED recharge with neither its debit nor its "
        "credit back (expected and actual 0.00): the wallet nets to zero as it should, nothing is at stake, "
        "only the provider's history lacks the pair.",
        "Usually a sync gap that resolves itself within 7 days; if it stays, ask support, quoting the "
        "reference. A FAILED or REVERSED one costs nothing: resolve it, or ask support for the missing pair "
        "if your books need it."),
    "unknown_to_provider": (
        "partnerkit recorded a recharge the provider's complete list for the day does not have (the "
        "reference may be the Idempotency-Key of a submit that was never answered). Actual is what the "
        "wallet was debited for it, less any credit back; the detail says whether a debit was seen.",
        "If actual shows a debit, the provider took that money for a recharge it does not list: ask support "
        "for the recharge or a credit, quoting the reference and the debit's transaction id. If actual is "
        "0.00 (no debit seen), ask support whether it exists; the customer may have been charged nothing."),
}
KIND_ORDER: tuple[str, ...] = tuple(KIND_GUIDE)  # money at risk first: see the module's docstring

_missing = set(KINDS) - set(KIND_GUIDE)
if _missing:  # a new kind (docs/internals.md, "Extending") needs its words for the report's readers
    raise RuntimeError(f"reconcile.drift_guide: no words for drift kind(s) {sorted(_missing)}")
