"""The load process: sends unique signed events to one URL and prints one JSON line of results.

The line carries throughput, latency percentiles, status counts and the CPU this process spent
per event while sending (signing included, interpreter start-up and body generation not).

Closed loop (`--rate 0`): `--concurrency` threads send as fast as answers come back (peak).
Open loop (`--rate R`): sends are scheduled R per second; latency counts from the scheduled
moment, so a server falling behind is not hidden (no coordinated omission).
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from urllib.parse import urlsplit

from receiver.signature import sign


def _bodies(prefix: str, count: int) -> list[bytes]:
    return [json.dumps({"event_id": f"{prefix}-{i}", "event_type": "order.processing",
                        "created_at": "2024-05-01T10:00:00Z",
                        "data": {"id": 1_000_000 + i, "reference_code": f"B{i}", "status": "PROCESSING",
                                 "quantity": 1, "amount": "10.00"}}).encode() for i in range(count)]


def _send(host: str, port: int, path: str, body: bytes, token: str) -> int:
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "X-Timestamp": timestamp,
               "X-Signature": sign(token, timestamp, body)}
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def run(url: str, token: str, prefix: str, count: int, concurrency: int, rate: float) -> dict:
    """Send `count` events; return throughput, latency percentiles and status counts."""
    parts = urlsplit(url)
    bodies = _bodies(prefix, count)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    next_index = [0]
    start = time.perf_counter() + 0.05

    def worker() -> None:
        while True:
            with lock:
                index = next_index[0]
                next_index[0] += 1
            if index >= count:
                return
            scheduled = start + index / rate if rate else None
            if scheduled is not None:
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            began = scheduled if scheduled is not None else time.perf_counter()
            try:
                status = _send(parts.hostname, parts.port, parts.path, bodies[index], token)
            except OSError:
                status = 0
            elapsed = time.perf_counter() - began
            with lock:
                latencies.append(elapsed)
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    cpu_before = time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - start
    cpu = time.process_time() - cpu_before
    latencies.sort()
    ok = statuses.get(200, 0)

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else 0.0

    return {"sent": count, "ok": ok, "statuses": {str(k): v for k, v in statuses.items()},
            "per_s": ok / duration if duration > 0 else 0.0, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "duration_s": duration, "cpu_ms_per_event": cpu * 1000 / count}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.receiver.load")
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rate", type=float, default=0.0)
    args = parser.parse_args()
    host = urlsplit(args.url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("the load process only targets loopback")
    if not 0 < args.count <= 200_000:
        raise SystemExit("--count must be between 1 and 200000")
    print(json.dumps(run(args.url, args.token, args.prefix, args.count, args.concurrency, args.rate)))


if __name__ == "__main__":
    main()
