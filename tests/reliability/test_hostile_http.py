"""A fuzz run over HTTP against the real receiver (`partnerkit serve`, gunicorn, 2 workers).

Every request is written byte by byte over a socket (tests.reliability.hostile_http), so header
bytes that are not UTF-8, duplicate or underscore headers, lying Content-Lengths and chunked
bodies reach gunicorn as a hostile client would send them. The run is seeded and bounded.

After the run: no answer was 5xx; the gunicorn workers are the same processes as before; the
inbox holds exactly the dedup keys of the validly signed requests (nothing else got in), each
once, with every re-delivery counted as a duplicate; a captured request replayed inside the
window was a duplicate, and replayed after it is refused with 401.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import pytest

from receiver.envelope import normalise
from receiver.signature import sign
from tests.receiver.conftest import VOUCHER_KEY
from tests.receiver.servers import ServedReceiver
from tests.reliability.hostile_http import alive, build, send, worker_pids
from tests.reliability.hostile_inputs import FORMS, WRONG_VALUES, dumps, random_mutation

TOKEN = "whsec_fuzz_token_3f9a1c"
TOLERANCE_S = 5  # short, so that a request captured early is outside the window by the end
PATH = b"/webhooks/partner"
EVENT_TYPES = ["order.created", "order.pending", "order.processing", "order.delivered",
               "order.partially_delivered", "order.cancelled", "order.failed"]


@dataclass
class Plan:
    """One request to send and what must come back."""

    kind: str
    raw: bytes
    signed: bool = False            # validly signed, so it must be stored (or be a duplicate)
    body: bytes = b""
    read_headers: dict[str, str] = field(default_factory=dict)
    expect: tuple[int, ...] = (200,)
    signed_at: int = 0              # its X-Timestamp: the receiver refuses it once TOLERANCE_S have passed


def _signed_headers(body: bytes, ts: int, token: str = TOKEN) -> list[tuple[bytes, bytes]]:
    return [(b"Content-Type", b"application/json"), (b"X-Timestamp", str(ts).encode()),
            (b"X-Signature", sign(token, ts, body).encode())]


def _form_body(rng: random.Random, n: int) -> tuple[bytes, dict[str, str]]:
    """A well-formed event in one of the three forms; form 3 sometimes relies on X-Event-ID."""
    name = rng.choice(sorted(FORMS))
    value = json.loads(dumps(FORMS[name]), parse_float=Decimal)
    order_id = rng.randint(1, 400)
    if name != "form3":
        value["event_id"] = f"fz-{n}"
    value["event_type" if name == "form1" else "event"] = rng.choice(EVENT_TYPES)
    value["data"]["id" if name == "form1" else "order_id"] = order_id
    headers = {"X-Event-ID": f"fz-hdr-{n}"} if name == "form3" and rng.random() < 0.5 else {}
    if name == "form3":
        value["data"]["ref"] = f"ORD-{n}"  # distinct bodies, distinct digests
    return dumps(value), headers


def _hostile_body(rng: random.Random, n: int) -> bytes:
    """A body that is signed correctly but hostile in content."""
    base, _ = _form_body(rng, n)
    choice = rng.randrange(9)
    if choice == 0:  # a wrong value in a random field
        value = json.loads(base, parse_float=Decimal)
        target = value if rng.random() < 0.4 else value["data"]
        target[rng.choice(sorted(target))] = rng.choice(WRONG_VALUES[:-1])
        return dumps(value)
    if choice == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(300)))
    if choice == 2:
        for _ in range(rng.randint(1, 3)):
            base = random_mutation(rng, base)
        return base
    if choice == 3:
        depth = rng.choice([100, 1000, 5000, 50_000])
        return base[:-2] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}}"
    if choice == 4:
        return base.replace(b'"data": {', b'"data": {"id": %s, "amount": 1e%d, ' % (
            b"9" * rng.choice([20, 400, 5000]), rng.choice([20, 400, 999999999])), 1)
    if choice == 5:
        return base.replace(b'"data": {', b'"data": {"amount": %s, ' % rng.choice([b"NaN", b"Infinity", b"-Infinity"]), 1)
    if choice == 6:
        return base[:-1] + b', "event_id": "dup-%d", "event_type": "order.failed"}' % n
    if choice == 7:
        return rng.choice([b"\xef\xbb\xbf", b"\xff\xfe", b""]) + base.replace(
            b'"data"', rng.choice([b'"x": "\\ud800", "data"', b'"x": "\xed\xa0\x80", "data"', b'"data"']), 1)
    return rng.choice([b"", b"null", b"[]", b'"text"', b"0", b"{}", b'{"event_type": "order.delivered"}'])


KINDS = ["valid"] * 20 + ["hostile"] * 20 + ["tampered_body"] * 4 + ["tampered_sig"] * 4 + [
    "no_signature", "no_timestamp", "token_only", "stale", "future", "duplicate_headers", "non_utf8_read_header",
    "non_utf8_other_header", "underscore_header", "wrong_content_type", "chunked", "lying_length", "longer_length",
    "wrong_method", "wrong_path", "garbage", "bad_timestamp", "other_token", "replay"]


def plan_request(rng: random.Random, n: int, now: int, recent: list[Plan]) -> Plan:
    """Request number `n`, signed at `now`; a replay repeats one of `recent` (signed moments ago)."""
    kind = rng.choice(KINDS)
    if n < 6:
        kind = ("oversize", "oversize_chunked")[n % 2]
    body, extra = _form_body(rng, n)
    ts = now
    extra_raw = [(k.encode(), v.encode()) for k, v in extra.items()]
    headers = _signed_headers(body, ts) + extra_raw
    plan = Plan(kind, b"", signed=True, body=body, read_headers=dict(extra), signed_at=ts)
    if kind == "valid":
        plan.raw = build(b"POST", PATH, headers, body)
    elif kind == "hostile":
        body = _hostile_body(rng, n)
        plan.body, plan.raw = body, build(b"POST", PATH, _signed_headers(body, ts) + extra_raw, body)
    elif kind in ("wrong_content_type", "non_utf8_other_header"):
        swapped = [(k, v) for k, v in headers if k != b"Content-Type"]
        swapped.append((b"Content-Type", b"text/plain") if kind == "wrong_content_type" else (b"X-Note", b"\xff\xfe\xfd"))
        plan.raw = build(b"POST", PATH, swapped, body)
    elif kind == "chunked":
        plan.raw = build(b"POST", PATH, headers, body, chunked=True)
    elif kind == "longer_length":  # declares 5 bytes more than it sends, then half-closes: what arrived is
        # exactly what was signed, so it is stored (the signature, not the header, decides), never a 500
        plan.raw = build(b"POST", PATH, headers + [(b"Content-Length", b"%d" % (len(body) + 5))], body,
                         content_length=False)
    elif kind == "replay" and recent:
        original = rng.choice(recent)
        plan = Plan("replay", original.raw, signed=True, body=original.body, read_headers=original.read_headers,
                    signed_at=original.signed_at)
    else:
        plan.signed, plan.expect = False, (401,)
        if kind == "oversize":  # declared: refused before a byte of the body is read (so: none sent)
            declared = [(b"Content-Length", b"%d" % (1024 * 1024 + 1))]
            plan.raw, plan.expect = build(b"POST", PATH, headers + declared, None), (413,)
        elif kind == "oversize_chunked":
            big = b"{" + b" " * (1024 * 1024) + b"}"
            plan.raw, plan.expect = build(b"POST", PATH, _signed_headers(big, ts), big, chunked=True), (413,)
        elif kind == "tampered_body":
            plan.raw = build(b"POST", PATH, headers, random_mutation(rng, body))
            plan.expect = (401,)
        elif kind == "tampered_sig":
            digest = bytearray(bytes.fromhex(sign(TOKEN, ts, body)))
            digest[rng.randrange(32)] ^= 1 << rng.randrange(8)
            plan.raw = build(b"POST", PATH, [(k, digest.hex().encode() if k == b"X-Signature" else v)
                                             for k, v in headers], body)
        elif kind == "no_signature":
            plan.raw = build(b"POST", PATH, [h for h in headers if h[0] != b"X-Signature"], body)
        elif kind == "no_timestamp":
            plan.raw = build(b"POST", PATH, [h for h in headers if h[0] != b"X-Timestamp"], body)
        elif kind == "token_only":
            plan.raw = build(b"POST", PATH, [h for h in headers if h[0] != b"X-Signature"]
                             + [(b"X-SERVICE-WEBHOOK-TOKEN", TOKEN.encode())], body)
        elif kind in ("stale", "future"):
            off = (TOLERANCE_S + rng.randint(5, 10**6)) * (-1 if kind == "stale" else 1)
            plan.raw = build(b"POST", PATH, _signed_headers(body, now + off), body)
        elif kind == "bad_timestamp":
            bad = rng.choice([b"", b"abc", b"-1", b"1e9", b"%d.5" % ts, b"9" * 40, b" ", b"0x10"])
            plan.raw = build(b"POST", PATH, [(k, bad if k == b"X-Timestamp" else v) for k, v in headers], body)
        elif kind == "other_token":
            plan.raw = build(b"POST", PATH, _signed_headers(body, ts, token="whsec_not_ours"), body)
        elif kind == "duplicate_headers":  # gunicorn joins them with ",": never 64 hex digits
            name = rng.choice([b"X-Signature", b"X-Timestamp"])
            plan.raw = build(b"POST", PATH, headers + [h for h in headers if h[0] == name], body)
        elif kind == "non_utf8_read_header":
            name = rng.choice([b"X-Event-ID", b"X-Signature", b"X-Webhook-ID", b"X-Event-Type"])
            bad = [(k, v) for k, v in headers if k != name] + [(name, b"\xff\xfe" + bytes([rng.randrange(0x80, 0x100)]))]
            plan.raw, plan.expect = build(b"POST", PATH, bad, body), (400, 401)
        elif kind == "underscore_header":  # X_Signature would map to the same WSGI key: gunicorn drops it
            plan.raw = build(b"POST", PATH, [(k.replace(b"-", b"_") if k == b"X-Signature" else k, v)
                                             for k, v in headers], body)
        elif kind == "lying_length":  # shorter: the signature cannot match what is read
            plan.raw = build(b"POST", PATH, headers + [(b"Content-Length", b"%d" % (len(body) - 5))], body,
                             content_length=False)
            plan.expect = (400, 401)
        elif kind == "wrong_method":
            method = rng.choice([b"GET", b"PUT", b"DELETE", b"PATCH", b"HEAD", b"OPTIONS", b"TRACE", b"FOO"])
            plan.raw, plan.expect = build(method, PATH, headers, body), (200, 400, 405)
        elif kind == "wrong_path":
            path = rng.choice([b"/", b"/admin", b"/webhooks", b"/webhooks/partner/x", b"/WEBHOOKS/PARTNER",
                               b"/webhooks/partner/../../etc/passwd", b"/sandbox/clock", b"/api/v1/orders",
                               b"/%ff%fe", b"/console", b"/metrics/../readyz", b"/webhooks/partner%00"])
            plan.raw, plan.expect = build(b"POST", path, headers, body), (400, 404, 405, 308)
        else:  # garbage: not HTTP at all
            plan.raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) + b"\r\n\r\n"
            plan.expect = (0, 400)
    return plan


@pytest.fixture
def receiver(tmp_path):
    env = {"PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_WEBHOOK_TOKENS": TOKEN,
           "PARTNERKIT_VOUCHER_KEY": VOUCHER_KEY, "PARTNERKIT_TOLERANCE_S": str(TOLERANCE_S),
           "PARTNERKIT_LOG_LEVEL": "WARNING"}
    with ServedReceiver(env, tmp_path / "serve.log", workers=2) as served:
        yield served


def fuzz(served: ServedReceiver, db_path, count: int, seed: int) -> None:
    master = served.process.pid
    deadline = time.monotonic() + 60  # /healthz answers as soon as the first worker is up
    while len(worker_pids(master)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = worker_pids(master)
    assert len(workers) == 2
    rng = random.Random(seed)
    expected_keys: set[str] = set()
    duplicates = 0
    statuses: Counter = Counter()
    recent: list[Plan] = []   # accepted requests of the last second or so, for in-window replays
    captured: list[Plan] = []  # accepted early on, replayed once the window has passed
    for n in range(count):
        plan = plan_request(rng, n, int(time.time()), recent)
        sent = time.time()
        answer = send(served.port, plan.raw)
        answered = time.time()
        statuses[answer.status] += 1
        assert answer.status < 500, (plan.kind, answer.status, answer.body[:200])
        if not plan.signed:
            assert answer.status in plan.expect, (plan.kind, answer.status, answer.body[:200], plan.raw[:300])
            if answer.status in (404, 405) and answer.body:  # the app's error answers: JSON, never HTML
                assert json.loads(answer.body)["status"] in ("not_found", "method_not_allowed"), answer.body[:200]
            continue
        # The window is judged by the clock, not by a guess at how fast this machine sends: a request (a replay
        # of one signed up to 50 requests ago, above all) is refused if the receiver read it past the window,
        # which is certain when it was sent after the window's end and possible when answered after it.
        expect, closes = plan.expect, plan.signed_at + TOLERANCE_S
        if sent > closes:
            expect = (401,)
        elif answered > closes:
            expect = plan.expect + (401,)
        assert answer.status in expect, (plan.kind, answer.status, answer.body[:200], plan.raw[:300])
        if answer.status == 401:
            assert json.loads(answer.body)["reason"] == "timestamp_out_of_tolerance", (plan.kind, answer.body[:200])
            continue  # refused: never stored, no duplicate counted
        if answer.status != 200:
            continue  # refused as a whole by the server (never stored: the final count checks it)
        event = normalise(plan.body, plan.read_headers)
        outcome = json.loads(answer.body)["status"]
        if event.event_id in expected_keys:
            assert outcome == "duplicate", (plan.kind, event.event_id)
            duplicates += 1
        else:
            assert outcome == ("ignored" if event.quarantine else "accepted"), (plan.kind, event, outcome)
            expected_keys.add(event.event_id)
        if plan.kind != "replay":
            recent = (recent + [plan])[-20:] if n % 50 else [plan]  # a fresh set now and then: all in the window
            if len(captured) < 20:
                captured.append(plan)
    assert statuses[413] >= 2 and statuses[401] > count // 10 and statuses[200] > count // 3, statuses

    # Replays of captured, accepted requests: refused once they are outside the window (sent a second after the
    # last one's window closed, by the same clock the receiver reads).
    wait = max((plan.signed_at for plan in captured), default=0) + TOLERANCE_S + 1 - time.time()
    if wait > 0:
        time.sleep(wait)
    for plan in captured:
        answer = send(served.port, plan.raw)
        assert answer.status == 401 and json.loads(answer.body)["reason"] == "timestamp_out_of_tolerance"

    conn = sqlite3.connect(db_path)
    keys = [row[0] for row in conn.execute("SELECT dedup_key FROM inbox")]
    stored_duplicates = conn.execute("SELECT COALESCE(SUM(duplicate_count), 0) FROM inbox").fetchone()[0]
    conn.close()
    assert len(keys) == len(set(keys))
    assert set(keys) == expected_keys  # nothing without a valid signature, nothing lost
    assert stored_duplicates == duplicates
    assert worker_pids(master) == workers and all(alive(pid) for pid in workers) and alive(master)
    log = served.log()
    assert "Traceback" not in log and "WORKER TIMEOUT" not in log
    assert not re.search(r'" 5\d\d ', log)  # the access log: no 5xx either


def test_fuzz_2000_requests_never_5xx_never_stored_unsigned(receiver, tmp_path):
    fuzz(receiver, tmp_path / "pk.db", 2000, seed=20240501)


@pytest.mark.slow
def test_fuzz_20000_requests(receiver, tmp_path):
    fuzz(receiver, tmp_path / "pk.db", 20000, seed=7)
