"""Structured logs: one JSON object per line, and a last line of defence against leaked secrets.

Every partnerkit process calls `configure_logging(config)` once. Log calls pass context as
`extra={"event_id": ..., "request_id": ...}`; those keys become JSON fields. Code never logs a
secret, token, voucher code or PIN in the first place; `Redactor` additionally replaces every
configured secret (API key and secret, webhook tokens, voucher keys current and previous) that reaches a formatted line,
so one careless `%r` cannot leak them.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import datetime, timezone
from typing import IO, Iterable

from partnerkit.config import Config

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {"message", "asctime", "taskName"}
_MIN_SECRET_LEN = 6  # shorter values would redact ordinary words; real secrets are long


class Redactor:
    """Replaces known secret values in text with '***'; thread-safe, extendable at run time."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        """Register more values to redact (e.g. a token saved by `webhooks register`)."""
        with self._lock:
            given = {s for s in secrets if s and len(s) >= _MIN_SECRET_LEN}
            # Lines are redacted after json.dumps, where a secret holding '"', '\\' or a control
            # character appears escaped: the escaped form is registered too.
            merged = set(self._secrets) | given | {json.dumps(s, ensure_ascii=False)[1:-1] for s in given}
            # Longest first, so a secret containing another is replaced whole.
            self._secrets = tuple(sorted(merged, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then any `extra=` fields."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        line = self.redactor(json.dumps(entry, default=str, ensure_ascii=False))
        # A lone surrogate (from a \\ud800 escape in some provider text) cannot be written to a UTF-8
        # stream: logging would print its own traceback instead of the line. backslashreplace turns
        # it into the JSON escape it came from.
        return line.encode("utf-8", "backslashreplace").decode("utf-8")


def secrets_of(config: Config) -> list[str]:
    """Every secret value a configuration holds."""
    values = [config.api_key, config.api_secret, config.voucher_key]
    values += [t.token for t in config.webhook_tokens] + list(config.voucher_key_previous)
    return [v for v in values if v]


_installed: dict[str, object] = {}


def process_redactor() -> Redactor:
    """This process's one redactor: the root handler's (`configure_logging`) and that of any handler
    partnerkit formats without owning it (gunicorn's error log), so a secret learned later by either
    path is redacted by both. A forked child shares its parent's until it learns its own."""
    redactor = _installed.get("redactor")
    if not isinstance(redactor, Redactor):
        redactor = _installed["redactor"] = Redactor()
    return redactor


def configure_logging(config: Config | None = None, *, level: str | None = None, stream: IO[str] | None = None) -> Redactor:
    """Install the JSON formatter on the root logger (idempotent); return its redactor."""
    root = logging.getLogger()
    redactor = process_redactor()
    if not isinstance(_installed.get("handler"), logging.Handler):
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(JsonFormatter(redactor))
        handler.set_name("partnerkit")
        for existing in list(root.handlers):
            if existing.get_name() == "partnerkit":
                root.removeHandler(existing)
        root.addHandler(handler)
        _installed["handler"] = handler
    elif stream is not None:
        _installed["handler"].setStream(stream)  # type: ignore[union-attr]
    if config is not None:
        redactor.add(*secrets_of(config))
    # Caller information (file, line, function) is not part of a partnerkit line: skip the frame
    # walk that finds it on every call, as the logging HOWTO's "Optimization" section describes.
    logging._srcfile = None  # type: ignore[attr-defined]
    root.setLevel(level or (config.log_level if config else "INFO"))
    # Chatty libraries stay at WARNING; their lines would also carry URLs with ids, not secrets.
    # The worker's jobs log their own line; apscheduler's would add two per run (the lease's every 10 s),
    # and its scheduler thirteen at start-up ("Adding job tentatively", "Added job ...") that repeat the
    # worker's own "worker started with jobs ..."; a missed run time is a WARNING and still shows.
    for name in ("urllib3", "apscheduler.scheduler", "apscheduler.executors.default", "apscheduler.executors.lease",
                 "werkzeug"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return redactor
