"""The worker side of partnerkit: recharge submit and polling, syncs, matching and the nightly report.

Reconciliation: `sync` (provider -> SQLite), `ledger` (the one transaction alias mapping), `matcher`
(set-based rules, drifts with stable ids), `report` (JSON / CSV / HTML), `jobs` (`sync_recent`,
`nightly`). See docs/reconcile.md.
"""
