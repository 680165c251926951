"""Worker fixtures: the sandbox as a real HTTP server with a frozen, advanceable clock, a real
PartnerClient, and a migrated SQLite file in tmp_path."""

from __future__ import annotations

import pytest

from partnerkit.store import open_db
from tests.sandbox_serving import serve_sandbox
from tests.worker.worker_helpers import Stats, make_config


@pytest.fixture
def server():
    """The sandbox on loopback, clock frozen (speed 0) so only the test moves time; no background thread."""
    from sandbox import SandboxSettings

    with serve_sandbox(SandboxSettings(speed=0, processing_delay_s=600, hourly_limit=100_000),
                       background=False) as running:
        yield running


@pytest.fixture
def config(server, tmp_path):
    """Config pointed at the sandbox."""
    return make_config(server, tmp_path, http_timeout_s="2")


@pytest.fixture
def wdb(config, migrated_file):
    """The worker's migrated database."""
    database = open_db(migrated_file(config.db_path))
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
