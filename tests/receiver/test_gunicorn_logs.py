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
