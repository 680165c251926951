"""Every error the receiver answers outside the webhook's own replies is a small JSON body too.

The table mirrors docs/receiver.md ("Nothing else is routed"): the status word is werkzeug's name
in snake case, the headers werkzeug sets (Allow on a 405) are kept, and no HTML page or traceback
ever reaches the caller.
"""

from __future__ import annotations

import json
import logging

import pytest

from partnerkit.logs import JsonFormatter
from tests.receiver.conftest import TOKEN, envelope, post


@pytest.mark.parametrize("method, path, status, word, allow", [
    ("GET", "/", 404, "not_found", None),
    ("GET", "/static/app.js", 404, "not_found", None),
    ("POST", "/webhooks/partner/x", 404, "not_found", None),
    ("GET", "/webhooks/partner", 405, "method_not_allowed", {"POST", "OPTIONS"}),
    ("PUT", "/webhooks/partner", 405, "method_not_allowed", {"POST", "OPTIONS"}),
    ("DELETE", "/webhooks/partner", 405, "method_not_allowed", {"POST", "OPTIONS"}),
    ("POST", "/healthz", 405, "method_not_allowed", {"GET", "HEAD", "OPTIONS"}),
    ("POST", "/readyz", 405, "method_not_allowed", {"GET", "HEAD", "OPTIONS"}),
    ("DELETE", "/metrics", 405, "method_not_allowed", {"GET", "HEAD", "OPTIONS"}),
])
def test_other_paths_and_methods_answer_json(client, method, path, status, word, allow):
    response = client.open(path, method=method)
    assert response.status_code == status
    assert response.content_type == "application/json"
    assert response.data == b'{"status":"%s"}\n' % word.encode()  # the webhook's own compact form
    if allow is None:
        assert "Allow" not in response.headers
    else:
        assert set(response.headers["Allow"].split(", ")) == allow


def test_head_on_an_unknown_path_is_a_json_404_without_a_body(client):
    response = client.head("/nope")
    assert (response.status_code, response.content_type, response.data) == (404, "application/json", b"")


def test_the_webhook_answers_are_unchanged(client):
    assert post(client, envelope()).get_json() == {"status": "accepted"}
    assert post(client, envelope()).get_json() == {"status": "duplicate"}
    unsigned = client.post("/webhooks/partner", data=envelope())
    assert (unsigned.status_code, unsigned.get_json()) == (401, {"status": "rejected", "reason": "missing_timestamp"})


def test_an_unexpected_error_is_a_json_500_and_one_logged_error_without_secrets(client, db, caplog):
    db.execute("DROP TABLE counters")  # a real fault under /metrics: the scrape reads that table
    with caplog.at_level(logging.ERROR, logger="receiver.app"):
        response = client.get(f"/metrics?token={TOKEN}", headers={"X-SERVICE-WEBHOOK-TOKEN": TOKEN})
    assert response.status_code == 500
    assert response.content_type == "application/json"
    assert response.data == b'{"status":"internal_server_error"}\n'
    error, = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert error.getMessage() == "request failed: unexpected error" and error.exc_info is not None
    line = json.loads(JsonFormatter().format(error))  # no redactor: nothing secret is logged at all
    assert (line["method"], line["path"], line["http_status"]) == ("GET", "/metrics", 500)
    assert "no such table: counters" in line["exc"] and TOKEN not in json.dumps(line)
    # The documented answers stay as they are: readyz's own 503, healthz's 200.
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").get_json() == {"status": "ok"}
