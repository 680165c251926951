"""Worker fixtures: the sandbox as a real HTTP server with a frozen, advanceable clock, a real
PartnerClient, and a migrated SQLite file in tmp_path."""

from __future__ import annotations

import threading

import pytest

from partnerkit.store import open_db
from tests.worker.worker_helpers import Stats, make_config


@pytest.fixture
def server():
    """The sandbox on loopback, clock frozen (speed 0) so only the test moves time; no background thread."""
    from sandbox import SandboxServer, SandboxSettings

    settings = SandboxSettings(speed=0, processing_delay_s=600, hourly_limit=100_000)
    running = SandboxServer(settings, background=False)
    http = getattr(running, "_server", None)
    if http is not None and getattr(running, "_thread", "absent") is None:
        # Serve with a short shutdown poll: the default 0.5 s would be most of each test's time.
        running._thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        running._thread.start()
    else:
        running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def config(server, tmp_path):
    """Config pointed at the sandbox."""
    return make_config(server, tmp_path, http_timeout_s="2")


@pytest.fixture
def wdb(config):
    """The worker's migrated database."""
    database = open_db(config.db_path)
    yield database
    database.conn.close()


@pytest.fixture
def client(config, wdb):
    """A real PartnerClient sharing the test database's budget."""
    from partnerkit.client import PartnerClient
    from partnerkit.client._http import RetryPolicy

    with PartnerClient(config, wdb, purpose="test", retry=RetryPolicy(max_attempts=1)) as real:
        yield real


@pytest.fixture
def stats(server):
    """Call counters, marked now."""
    return Stats(server)
