"""The soak's load process: unique signed events at a fixed rate, retried the way the provider retries.

`python -m bench.soak.load --url URL --token T --events N --rate R --out FILE` sends event i at
start + i / R (open loop, so a receiver that falls behind is not hidden). Every delivery that is
not answered 2xx (a 503 while the database is locked, a reset while a gunicorn worker is killed,
a timeout) is retried with a new timestamp and signature and the same event id, as the document's
delivery rules say, until it is acknowledged or `--give-up-s` has passed. One event in
`--duplicate-every` is delivered a second time after its acknowledgement, like the provider's manual
retry. The results, one JSON object, go to FILE: per event its attempts, the statuses seen and the
latency of the acknowledged attempt.
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from receiver.signature import sign

RETRY_DELAYS_S = (0.25, 0.5, 1.0, 2.0, 4.0)  # then every 4 s until --give-up-s
REQUEST_TIMEOUT_S = 10.0


def event_body(prefix: str, index: int) -> bytes:
    """One unique event: an order moving to PROCESSING (no voucher fetch is queued for it)."""
    return json.dumps({"event_id": f"{prefix}-{index}", "event_type": "order.processing",
                       "created_at": "2026-01-01T10:00:00Z",
                       "data": {"id": 80_000_000 + index, "reference_code": f"SOAK{index}",
                                "status": "PROCESSING", "quantity": 1, "amount": "10.00"}},
                      separators=(",", ":")).encode()


class Sender:
    """Sends one event until acknowledged; records what happened."""

    def __init__(self, url: str, token: str, give_up_s: float) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        self.token = token
        self.give_up_s = give_up_s

    def attempt(self, body: bytes) -> tuple[int | str, float, str]:
        """(status or error name, seconds, outcome from the JSON answer)."""
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", "X-Timestamp": timestamp,
                   "X-Signature": sign(self.token, timestamp, body)}
        started = time.perf_counter()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            conn.request("POST", self.path, body, headers)
            response = conn.getresponse()
            answer = response.read()
            status: int | str = response.status
        except (OSError, http.client.HTTPException) as exc:
            return type(exc).__name__, time.perf_counter() - started, ""
        finally:
            conn.close()
        elapsed = time.perf_counter() - started
        outcome = ""
        if status == 200:
            try:
                outcome = str(json.loads(answer).get("status", ""))
            except ValueError:
                outcome = "unparseable"
        return status, elapsed, outcome

    def deliver(self, body: bytes) -> dict:
        """Attempt until a 2xx or give-up; the record of this delivery."""
        first = time.monotonic()
        seen: list[int | str] = []
        worst = 0.0
        for attempt in range(10_000):  # bounded: give_up_s ends it long before
            status, elapsed, outcome = self.attempt(body)
            seen.append(status)
            worst = max(worst, elapsed)
            if isinstance(status, int) and 200 <= status < 300:
                return {"acked": True, "outcome": outcome, "attempts": len(seen), "statuses": seen,
                        "ack_ms": round(elapsed * 1000, 2), "worst_ms": round(worst * 1000, 2)}
            if time.monotonic() - first > self.give_up_s:
                break
            time.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)])
        return {"acked": False, "outcome": "", "attempts": len(seen), "statuses": seen, "ack_ms": None,
                "worst_ms": round(worst * 1000, 2)}


def run(url: str, token: str, prefix: str, events: int, rate: float, duplicate_every: int,
        give_up_s: float, concurrency: int, progress: bool = False) -> dict:
    sender = Sender(url, token, give_up_s)
    start = time.monotonic() + 0.1
    results: list[dict | None] = [None] * events
    redeliveries: list[dict] = []
    lock = threading.Lock()
    done = [0]

    def one(index: int) -> None:
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        body = event_body(prefix, index)
        record = sender.deliver(body)
        results[index] = record
        if duplicate_every and index % duplicate_every == 0 and record["acked"]:
            again = sender.deliver(body)
            again["index"] = index
            with lock:
                redeliveries.append(again)
        with lock:
            done[0] += 1
            if progress and done[0] % max(1, events // 10) == 0:
                print(f"load: {done[0]}/{events} events delivered", flush=True)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(one, i) for i in range(events)]:
            future.result()
    return {"prefix": prefix, "events": events, "rate": rate, "seconds": round(time.monotonic() - start, 1),
            "results": results, "redeliveries": redeliveries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--prefix", default="soak")
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="events per second")
    parser.add_argument("--duplicate-every", type=int, default=20)
    parser.add_argument("--give-up-s", type=float, default=120.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()
    if args.events < 1 or args.rate <= 0:
        parser.error("--events and --rate must be positive")
    outcome = run(args.url, args.token, args.prefix, args.events, args.rate, args.duplicate_every,
                  args.give_up_s, args.concurrency, args.progress)
    args.out.write_text(json.dumps(outcome), encoding="utf-8")


if __name__ == "__main__":
    main()
