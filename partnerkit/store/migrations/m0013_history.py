"""What a store with months of history needs so that nothing every night, every 15 minutes or per
`partnerkit status` reads the whole of a table that grows each day (owned by the store; docs/reconcile.md,
"Benchmark", has the measurements behind each).

- `orders_transaction`: an order's named transaction, looked up from a transaction (matching's orphan
  test), where every match used to copy the whole order table into a temp table, twice.
- `orders_open`: orders not yet final, by placed_at (the order sync's low-water mark walked every
  final order from the oldest on). Partial: only open orders whose placed_at is known have an entry,
  so a webhook creating an order (no placed_at yet) writes nothing here.
- `drifts_open`: drifts by resolution, then day: what `partnerkit status` counts (it read every pending
  drift into memory), `drifts list --resolution`, and the nightly run's days with open drifts.
- `transaction_quarantine_day`: a day's quarantined records (every report, `transactions list --date`).
- `recharges_newest`, `recharges_status_newest`: `recharges list`, newest first, with or without a
  status (the whole table was sorted to print the newest). The second replaces `recharges_status_next_poll`:
  every `status = ?` read (the poller's PROCESSING rows, `count_status`) uses its first column as well, and
  nothing reads `next_poll_at` through an index, which each poll rewrote (`mark_polled`); so a recharge's
  writes maintain one index more than before, not two.
- `tallies`: how many inbox rows and voucher fetch jobs there are in each state, and the duplicate
  deliveries the inbox absorbed, kept by triggers in the same transaction as the row that changes them,
  so `partnerkit status` and every /metrics scrape read a few rows instead of counting the inbox (with
  its bodies) and every job ever run. Names: `inbox.<state>`, `inbox.duplicates`, `jobs.<kind>.<state>`.
  Seeded here from the rows already stored.
"""

VERSION = 13
NAME = "history"
_INBOX_STATES = ("processed", "quarantined", "test")
_JOB_STATES = ("pending", "done", "dead")


def _tally(name: str, by: str) -> str:
    """A trigger statement adding `by` to the tally `name` (both SQL expressions)."""
    return (f"INSERT INTO tallies (name, n) VALUES ({name}, {by})"
            " ON CONFLICT (name) DO UPDATE SET n = n + excluded.n;")


_JOB = "'jobs.' || {row}.kind || '.' || {row}.state"
STATEMENTS: tuple[str, ...] = (
    "CREATE INDEX orders_transaction ON orders (CAST(transaction_id AS TEXT)) WHERE transaction_id IS NOT NULL",
    # The terms as partnerkit.store.orders.OPEN writes them: a partial index serves only a query that states them.
    "CREATE INDEX orders_open ON orders (placed_at)"
    " WHERE placed_at IS NOT NULL AND status NOT IN ('CANCELLED', 'DELIVERED', 'FAILED')",
    "CREATE INDEX drifts_open ON drifts (resolution, report_date)",
    "CREATE INDEX transaction_quarantine_day ON transaction_quarantine (day)",
    "CREATE INDEX recharges_newest ON recharges (COALESCE(submitted_at, provider_created_at))",
    "CREATE INDEX recharges_status_newest ON recharges (status, COALESCE(submitted_at, provider_created_at))",
    "DROP INDEX recharges_status_next_poll",
    "CREATE TABLE tallies (name TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO tallies (name, n) VALUES "
    + ", ".join(f"('inbox.{state}', 0)" for state in _INBOX_STATES) + ", ('inbox.duplicates', 0), "
    + ", ".join(f"('jobs.voucher_fetch.{state}', 0)" for state in _JOB_STATES),
    "INSERT INTO tallies (name, n) SELECT 'inbox.' || state, COUNT(*) FROM inbox GROUP BY state"
    " ON CONFLICT (name) DO UPDATE SET n = excluded.n",
    "UPDATE tallies SET n = (SELECT COALESCE(SUM(duplicate_count), 0) FROM inbox) WHERE name = 'inbox.duplicates'",
    "INSERT INTO tallies (name, n) SELECT 'jobs.' || kind || '.' || state, COUNT(*) FROM jobs GROUP BY kind, state"
    " ON CONFLICT (name) DO UPDATE SET n = excluded.n",
    # One upsert per delivery stored (the receiver's transaction); the duplicates only when there are some.
    f"""CREATE TRIGGER inbox_tally_insert AFTER INSERT ON inbox BEGIN
        {_tally("'inbox.' || new.state", "1")}
    END""",
    f"""CREATE TRIGGER inbox_tally_insert_duplicates AFTER INSERT ON inbox WHEN new.duplicate_count != 0 BEGIN
        {_tally("'inbox.duplicates'", "new.duplicate_count")}
    END""",
    f"""CREATE TRIGGER inbox_tally_delete AFTER DELETE ON inbox BEGIN
        {_tally("'inbox.' || old.state", "-1")}
    END""",
    f"""CREATE TRIGGER inbox_tally_delete_duplicates AFTER DELETE ON inbox WHEN old.duplicate_count != 0 BEGIN
        {_tally("'inbox.duplicates'", "-old.duplicate_count")}
    END""",
    f"""CREATE TRIGGER inbox_tally_state AFTER UPDATE OF state ON inbox WHEN old.state IS NOT new.state BEGIN
        {_tally("'inbox.' || old.state", "-1")}
        {_tally("'inbox.' || new.state", "1")}
    END""",
    f"""CREATE TRIGGER inbox_tally_duplicates AFTER UPDATE OF duplicate_count ON inbox
        WHEN old.duplicate_count IS NOT new.duplicate_count BEGIN
        {_tally("'inbox.duplicates'", "new.duplicate_count - old.duplicate_count")}
    END""",
    f"""CREATE TRIGGER jobs_tally_insert AFTER INSERT ON jobs BEGIN
        {_tally(_JOB.format(row="new"), "1")}
    END""",
    f"""CREATE TRIGGER jobs_tally_delete AFTER DELETE ON jobs BEGIN
        {_tally(_JOB.format(row="old"), "-1")}
    END""",
    f"""CREATE TRIGGER jobs_tally_state AFTER UPDATE OF kind, state ON jobs
        WHEN old.kind IS NOT new.kind OR old.state IS NOT new.state BEGIN
        {_tally(_JOB.format(row="old"), "-1")}
        {_tally(_JOB.format(row="new"), "1")}
    END""",
)
