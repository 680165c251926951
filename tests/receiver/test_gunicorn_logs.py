"""gunicorn's own log lines (start-up, workers, refused requests) are partnerkit's JSON lines, through the
redactor: real `partnerkit serve` on loopback, its output read after shutdown."""

from __future__ import annotations

import json

from tests.receiver.conftest import TOKEN
from tests.receiver.servers import ServedReceiver
from tests.receiver.test_gunicorn import env_for
from tests.reliability.hostile_http import send


def test_gunicorn_lines_are_json_and_a_token_a_client_sent_is_redacted(tmp_path):
    with ServedReceiver(env_for(tmp_path), tmp_path / "serve.log", workers=1) as served:
        # A header line without a colon is refused by gunicorn, which logs the line as it came.
        answer = send(served.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nleaked " + TOKEN.encode()
                      + b"\r\n\r\n")
        assert answer.status == 400
    log = served.log()
    assert TOKEN not in log
    gunicorn = [json.loads(line) for line in log.splitlines() if '"logger": "gunicorn.error"' in line]
    messages = [entry["msg"] for entry in gunicorn]
    assert any(m.startswith("Booting worker with pid") for m in messages)
    refused = [e for e in gunicorn if "Invalid HTTP Header" in e["msg"]]
    assert len(refused) == 1 and refused[0]["level"] == "WARNING" and "***" in refused[0]["msg"]
    # gunicorn's own text form, "[2026-01-01 00:00:00 +0000] [123] [INFO] ...", is gone.
    assert not [line for line in log.splitlines() if line.startswith("[")]


def test_one_request_is_one_access_line_whatever_its_path_decodes_to(tmp_path):
    """gunicorn's `%(U)s` is the decoded path: `%0A` was a raw line break in the access log, and what followed it
    (here a forged JSON line) read as a line of its own; `%1B` and `%9B` (CSI) start escape sequences for the
    terminal reading it (WSGI's PATH_INFO holds a byte as the latin-1 character of that code)."""
    forged = '{"level": "CRITICAL", "msg": "forged"}'
    path = "/x%0A" + "".join(f"%{b:02X}" for b in forged.encode()) + "%1B%5B2J%9B2J"
    with ServedReceiver(env_for(tmp_path), tmp_path / "serve.log", workers=1) as served:
        answer = send(served.port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        assert answer.status == 404
    log = served.log()
    [line] = [line for line in log.splitlines() if '"GET /x' in line]
    assert line.startswith('127.0.0.1 "GET /x\\n{\\"level\\": \\"CRITICAL\\", \\"msg\\": \\"forged\\"}'
                           '\\x1b[2J\\x9b2J" 404 ')
    assert not [entry for entry in log.splitlines() if entry.startswith('{"level": "CRITICAL"')]
    assert "\x1b" not in log and "\x9b" not in log
