"""Who sends an open intent: the lock its submit holds while the request is in flight (owned by partnerkit.senders).

A recharge intent (`recharges`, migration 4) and an order intent (`order_intents`, migration 10) are INTENT
from before their request exists until the answer is stored. `sender_lock` is the byte of
`<database>-senders` the sending process locks for that time (`partnerkit.senders.hold`), so `partnerkit status`,
`recharges locate` and the holds tell a send in flight from one whose process died (`partnerkit.senders.running`);
`sender` says who it is ("pid 4242 on web-1"), for their messages. Both are NULL on every row written before (and
on rows the sync stores): those keep the time rules. Two columns on each table: `ALTER TABLE ... ADD COLUMN`
changes the schema alone, whatever the table's size.
"""

VERSION = 15
NAME = "intent_senders"
STATEMENTS: tuple[str, ...] = (
    "ALTER TABLE recharges ADD COLUMN sender_lock INTEGER",
    "ALTER TABLE recharges ADD COLUMN sender TEXT",
    "ALTER TABLE order_intents ADD COLUMN sender_lock INTEGER",
    "ALTER TABLE order_intents ADD COLUMN sender TEXT",
)
