"""Logs are JSON lines and never carry a configured secret."""

import io
import json
import logging

from partnerkit.config import load_config
from partnerkit.logs import JsonFormatter, Redactor, configure_logging


def test_json_line_with_extra_fields():
    record = logging.LogRecord("partnerkit.test", logging.INFO, __file__, 1, "stored %s", ("evt_1",), None)
    record.event_id = "evt_1"
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert entry["msg"] == "stored evt_1"
    assert entry["event_id"] == "evt_1"
    assert entry["level"] == "INFO"
    assert "\n" not in line


def test_configured_secrets_are_redacted():
    stream = io.StringIO()
    config = load_config(environ={"PARTNERKIT_API_SECRET": "sk_live_abcdef123", "PARTNERKIT_WEBHOOK_TOKENS": "whsec_token_42_abc"})
    redactor = configure_logging(config, stream=stream)
    redactor.add("registered-token-xyz")
    log = logging.getLogger("partnerkit.test")
    log.warning("careless %r", {"secret": "sk_live_abcdef123", "token": "whsec_token_42_abc"},
                extra={"header": "registered-token-xyz"})
    output = stream.getvalue()
    assert "sk_live_abcdef123" not in output
    assert "whsec_token_42_abc" not in output
    assert "registered-token-xyz" not in output
    assert output.count("***") == 3


def test_previous_voucher_keys_are_redacted():
    stream = io.StringIO()
    config = load_config(environ={"PARTNERKIT_VOUCHER_KEY": "vk-current-16-bytes",
                                  "PARTNERKIT_VOUCHER_KEY_PREVIOUS": "vk-old-one-16-bytes,vk-old-two-16-bytes"})
    configure_logging(config, stream=stream)
    logging.getLogger("partnerkit.test").warning("careless %s %s", *config.voucher_key_previous)
    assert "vk-old" not in stream.getvalue() and stream.getvalue().count("***") == 2


def test_short_values_are_not_treated_as_secrets():
    assert Redactor(["abc"])("abc def") == "abc def"


def test_a_lone_surrogate_is_logged_as_its_escape_not_a_logging_error():
    stream = io.BytesIO()
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="strict", write_through=True)
    handler = logging.StreamHandler(text)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("partnerkit.test.surrogate")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("event %s", "\ud800", extra={"event_id": "e\udcff"})
    finally:
        log.removeHandler(handler)
    entry = json.loads(stream.getvalue().decode("utf-8"))
    assert entry["msg"] == "event \ud800" and entry["event_id"] == "e\udcff"


def test_a_secret_that_json_escapes_is_redacted_in_its_escaped_form():
    # Lines are redacted after json.dumps: '"', '\' and control characters appear escaped there.
    secrets = ['correct"horse\\battery', "whsec_tab\tinside_it"]
    formatter = JsonFormatter(Redactor(secrets))
    for secret in secrets:
        record = logging.LogRecord("partnerkit.test", logging.WARNING, __file__, 1, "careless %s", (secret,), None)
        record.header = secret
        line = formatter.format(record)
        assert json.loads(line)["msg"] == "careless ***" and json.loads(line)["header"] == "***"
        assert "horse" not in line and "inside_it" not in line
