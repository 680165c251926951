"""What gunicorn refuses itself, before the app sees it, is answered in the app's small JSON too.

Raw bytes over a socket to real `partnerkit serve` on loopback (requests would refuse to send
them): each row breaks one thing gunicorn checks and asserts gunicorn's status, with the body the
app gives its own errors (docs/receiver.md), never gunicorn's HTML page or a traceback.
"""

from __future__ import annotations

import inspect
import json
import socket

import pytest
import requests
from gunicorn.config import Config
from gunicorn.http.errors import InvalidRequestLine
from gunicorn.workers.sync import SyncWorker

from receiver.gunicorn_app import JsonErrorWorker, gunicorn_options
from tests.receiver.conftest import envelope, signed_headers
from tests.receiver.servers import ServedReceiver, deploy_gunicorn_config
from tests.receiver.test_gunicorn import env_for
from tests.reliability.hostile_http import build, send, worker_pids

HOST = b"Host: 127.0.0.1\r\nConnection: close\r\n"

# (id, raw request, status, word): gunicorn's status, werkzeug's name for it in snake case.
REFUSED = [
    ("not HTTP at all", b"GARBAGE\r\n\r\n", 400, "bad_request"),
    ("request line without a version", b"GET /healthz\r\n" + HOST + b"\r\n", 400, "bad_request"),
    ("unknown HTTP version", b"GET /healthz HTTP/9.9\r\n" + HOST + b"\r\n", 400, "bad_request"),
    ("lower-case method", b"get /healthz HTTP/1.1\r\n" + HOST + b"\r\n", 400, "bad_request"),
    ("header line without a colon", b"GET /healthz HTTP/1.1\r\n" + HOST + b"no colon here\r\n\r\n", 400,
     "bad_request"),
    ("space in a header name", b"GET /healthz HTTP/1.1\r\n" + HOST + b"X Signature: 1\r\n\r\n", 400,
     "bad_request"),
    ("control character in a header value", b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-Note: a\x00b\r\n\r\n", 400,
     "bad_request"),
    ("two Content-Lengths that differ", b"POST /webhooks/partner HTTP/1.1\r\n" + HOST
     + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "bad_request"),
    ("request line over 4094 bytes", b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n" + HOST + b"\r\n", 414,
     "request_uri_too_long"),
    ("header over 8190 bytes", b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-Big: " + b"b" * 9000 + b"\r\n\r\n", 431,
     "request_header_fields_too_large"),
    ("over 100 headers", b"GET /healthz HTTP/1.1\r\n" + HOST + b"".join(b"X-H%d: 1\r\n" % i for i in range(120))
     + b"\r\n", 431, "request_header_fields_too_large"),
    ("unknown transfer coding", b"POST /webhooks/partner HTTP/1.1\r\n" + HOST
     + b"Transfer-Encoding: br, chunked\r\n\r\n0\r\n\r\n", 501, "not_implemented"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("refusals")
    with ServedReceiver(env_for(tmp_path), tmp_path / "serve.log", workers=1) as receiver:
        yield receiver


@pytest.mark.parametrize("raw, status, word", [pytest.param(*row[1:], id=row[0]) for row in REFUSED])
def test_a_request_gunicorn_refuses_is_answered_in_json(served, raw, status, word):
    answer = send(served.port, raw)
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["connection"] == "close"
    assert int(answer.headers["content-length"]) == len(answer.body)
    assert answer.body == json.dumps({"status": word}, separators=(",", ":")).encode() + b"\n"


def test_refusals_leave_the_worker_serving_and_the_log_free_of_tracebacks(served):
    workers = worker_pids(served.process.pid)
    for _, raw, _, _ in REFUSED:
        send(served.port, raw)
    body = envelope("evt_after_refusals")
    ok = send(served.port, build(b"POST", b"/webhooks/partner",
                                 [(k.encode(), v.encode()) for k, v in signed_headers(body).items()], body))
    assert (ok.status, json.loads(ok.body)) == (200, {"status": "accepted"})
    assert requests.get(served.base_url + "/nope", timeout=5).json() == {"status": "not_found"}
    assert worker_pids(served.process.pid) == workers, "no worker died or was replaced"
    log = served.log()
    assert "Invalid request from ip=127.0.0.1" in log  # gunicorn still logs each refusal its way
    assert "Traceback" not in log and "<html" not in log


def test_the_worker_overrides_only_the_error_path():
    # Anything more would change what a request that parses costs (the benchmark's bare app runs
    # under the same options, so it would hide the change rather than show it).
    assert issubclass(JsonErrorWorker, SyncWorker)
    own = {name for name, value in vars(JsonErrorWorker).items()
           if not name.startswith("__") and inspect.isfunction(value)}
    assert own == {"handle_error"}


class _Log:
    """What handle_error logs through the worker's gunicorn logger."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        return lambda msg, *args, **kwargs: self.lines.append((level, msg % args if args else msg))


@pytest.mark.parametrize("exc, status, word, level", [
    (InvalidRequestLine("GARBAGE"), 400, "bad_request", "warning"),
    (RuntimeError("a bug past the app's own handlers"), 500, "internal_server_error", "exception"),
])
def test_handle_error_answers_json_and_leaves_gunicorns_logging_as_it_is(exc, status, word, level):
    worker = object.__new__(JsonErrorWorker)  # handle_error needs only its logger and settings
    worker.log, worker.cfg = _Log(), Config()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        worker.handle_error(None, ours, ("127.0.0.1", 40000), exc)
        ours.close()
        answer = theirs.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ")[1] == str(status).encode()
    assert b"Content-Type: application/json" in head.split(b"\r\n")
    assert body == json.dumps({"status": word}, separators=(",", ":")).encode() + b"\n"
    assert [lvl for lvl, _ in worker.log.lines] == [level]


def test_serve_and_the_plain_gunicorn_config_use_that_worker(monkeypatch):
    cfg = deploy_gunicorn_config(monkeypatch)
    assert cfg.worker_class is JsonErrorWorker
    assert cfg.worker_class_str == gunicorn_options()["worker_class"]
