"""A fork's own web app that stores the provider's signed webhook deliveries with partnerkit's receiver
core, then reads an order's vouchers (docs/receiver.md, "Embedding the receiver's core").

Against the sandbox, after the README quick start's `partnerkit webhooks register` (it saved the
webhook's token) and in place of `partnerkit serve` (it listens on the same address):

    .venv/bin/python docs/examples/fork_receiver.py var/try/partnerkit.env 8000

It places one order of product 7 (delivered at once), waits until the provider's order.delivered
delivery is stored, and prints the order's vouchers, codes masked. tests/receiver/test_fork_example.py
runs it.
"""

import json
import sys
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, make_server

from partnerkit.client import PartnerClient
from partnerkit.config import load_config
from partnerkit.crypto import load_cipher
from partnerkit.errors import StorageError, VerificationError
from partnerkit.ordering import place_order
from partnerkit.store import inbox, open_db
from partnerkit.store import vouchers as stored_vouchers
from partnerkit.timeutil import utcnow
from partnerkit.vouchers import run_voucher_fetches, unseal
from receiver.envelope import normalise
from receiver.signature import verify
from receiver.tokens import accepted_tokens

MAX_BODY = 1024 * 1024
config = load_config(config_file=sys.argv[1])  # the same settings as the CLI's --config
cipher = load_cipher(config)                    # opens the stored tokens and voucher codes
local = threading.local()


def say(line):
    """One write per line: the server's thread and the main thread both print, and print() writes the
    text and its newline apart, so two lines could run together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def thread_db():
    """This thread's database handle. One open_db() per thread is the fast way; a shared handle is safe too,
    but its threads wait for each other's transactions (docs/internals.md, "A handle and threads")."""
    if not hasattr(local, "db"):
        local.db = open_db(config.db_path)
    return local.db


def webhook(environ, start_response):
    """POST on the webhook path, in any WSGI framework: verify, normalise, store, then answer."""
    def answer(status, body):
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]

    if environ["PATH_INFO"] != config.webhook_path or environ["REQUEST_METHOD"] != "POST":
        return answer("404 Not Found", {"status": "not_found"})
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length > MAX_BODY:
        return answer("413 Content Too Large", {"status": "rejected", "reason": "body_too_large"})
    body = environ["wsgi.input"].read(length)  # the raw bytes: the signature is over them
    headers = {name[5:].replace("_", "-"): value for name, value in environ.items() if name.startswith("HTTP_")}
    db, now = thread_db(), utcnow()
    try:  # read the tokens at each delivery: a `webhooks register` a moment ago counts at once
        verify(headers, body, accepted_tokens(config, db, cipher), now=now.timestamp(),
               tolerance_s=config.tolerance_s)
    except VerificationError as exc:
        return answer("401 Unauthorized", {"status": "rejected", "reason": exc.reason})  # nothing stored
    event = normalise(body, headers)  # never raises: an unreadable body is a quarantined Event
    try:  # persist, then acknowledge: dedup, order state and the voucher fetch in one transaction
        recorded = inbox.record(db, event, body, cipher=cipher, now=now, webhook_id=headers.get("X-WEBHOOK-ID"))
    except StorageError:
        return answer("503 Service Unavailable", {"status": "unavailable"})  # the provider retries
    say(f"stored {event.event_type} of order {event.order_id}: {recorded.outcome}")
    return answer("200 OK", {"status": recorded.outcome})


class QuietHandler(WSGIRequestHandler):
    def log_request(self, *args):
        pass


def main():
    db = thread_db()
    if not accepted_tokens(config, db, cipher):
        sys.exit("no webhook token is accepted: run `partnerkit webhooks register --url ...` first")
    server = make_server("127.0.0.1", int(sys.argv[2]), webhook, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = PartnerClient(config, db, purpose="fork-example")
    placed = place_order(config, db, client, product_id=7, denomination=10, quantity=2)
    say(f"order {placed.order_id}: {placed.state}, {placed.vouchers_stored} vouchers stored")
    deadline = time.monotonic() + 30
    while not any(e["status"] == "DELIVERED" for e in inbox.listing(db, order_id=placed.order_id)):
        if time.monotonic() > deadline:
            sys.exit(f"no order.delivered delivery within 30 s: is a webhook registered for port {sys.argv[2]}?")
        time.sleep(0.2)
    run_voucher_fetches(config, db, client)  # what `partnerkit worker` does every few seconds
    for row in stored_vouchers.for_order(db, placed.order_id):
        voucher = unseal(cipher, row)  # card_number, pin_code, claim_url decrypted: never log them
        say(f"voucher {voucher['voucher_reference_number']}: code ...{voucher['card_number'][-4:]}")
    server.shutdown()


if __name__ == "__main__":
    main()
