"""Retry-After as an HTTP-date is counted on the provider's clock, from its own `Date` header.

A real loopback server (http.server: pytest-httpserver and the sandbox write Date from our own frozen
clock, and the sandbox sends Retry-After as seconds only) answers 429 with an HTTP-date. Our clock is
frozen; the provider's runs two hours ahead of it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
from freezegun import freeze_time

from partnerkit import errors
from partnerkit.client import PartnerClient, parse_retry_after
from partnerkit.config import Config
from partnerkit.store import open_db
from partnerkit.store.budget import GENERAL

from tests.client.client_payloads import API_KEY, API_SECRET, FAST
from tests.sandbox_serving import POLL_S

NOW = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
AHEAD = NOW + timedelta(hours=2)  # the provider's clock


def _http_date(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


def test_an_http_date_counts_from_the_responses_date_header():
    assert parse_retry_after(_http_date(AHEAD + timedelta(seconds=30)), now=NOW, sent_at=_http_date(AHEAD)) == 30.0
    # Without a readable Date, from our clock (which here makes it two hours and 30 s).
    assert parse_retry_after(_http_date(AHEAD + timedelta(seconds=30)), now=NOW) == 7230.0
    assert parse_retry_after(_http_date(AHEAD + timedelta(seconds=30)), now=NOW, sent_at="garbage") == 7230.0
    assert parse_retry_after("30", now=NOW, sent_at=_http_date(AHEAD)) == 30.0  # seconds need no clock


@contextmanager
def provider_ahead(retry_after: str) -> Iterator[tuple[str, list]]:
    """A loopback server whose clock is two hours ahead: it answers every GET with a 429 carrying
    `retry_after` and its own `Date` (http.server writes Date from `date_time_string`)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def date_time_string(self, timestamp=None) -> str:
            return _http_date(AHEAD)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.path)
            body = b'{"error": "rate_limit_exceeded", "message": "Too many requests. Please try again later."}'
            self.send_response(429)
            self.send_header("Retry-After", retry_after)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@freeze_time(NOW)
@pytest.mark.parametrize("after, blocked", [
    (timedelta(seconds=30), 30.0),      # the provider's own 30 s, not 2 h 30 s by our clock
    (timedelta(days=1), 3600.0),        # a day: one window of the general budget
])
def test_a_429_with_an_http_date_blocks_for_what_the_provider_meant(tmp_path, after, blocked):
    with provider_ahead(_http_date(AHEAD + after)) as (base_url, seen):
        config = Config(db_path=tmp_path / "pk.db", api_base_url=base_url, api_key=API_KEY, api_secret=API_SECRET)
        client = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
        with pytest.raises(errors.RateLimited) as info:
            client.list_wallets()
    assert info.value.retry_after == blocked
    assert client.budget.usage()[GENERAL]["blocked_until"] == NOW.timestamp() + blocked
    assert seen == ["/api/v1/wallets"]
