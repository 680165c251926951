"""Fixtures shared by every test directory: real parts only (SQLite files in tmp_path, the sandbox
as a real HTTP server on loopback)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from partnerkit.config import load_config
from partnerkit.store import open_db
from tests.sandbox_serving import serve_sandbox


@pytest.fixture(autouse=True)
def _root_log_level():
    """Put the root logger's level back after each test. `configure_logging` sets it from PARTNERKIT_LOG_LEVEL
    (ERROR in many tests, through the CLI), and a later test in the same process that waits for a WARNING or
    INFO line (a lock released when partnerkit says it waits) then never saw it: failures that depended on
    which test xdist had run before."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.fixture
def db_path(tmp_path):
    """A fresh SQLite file path for this test."""
    return tmp_path / "partnerkit.db"


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory) -> Path:
    """One database file per test process, made by `open_db` (every migration) and closed (no -wal left).

    The fixtures that hand a test a new migrated database copy it (`migrated_file`) and open the copy with
    `open_db`, which finds nothing left to apply. Migrating a new file (fifteen transactions of schema changes)
    took 75 ms (median) on the 2-core machine, the copy and its opening 14 ms, and over a thousand tests use
    such a fixture (tests/reconcile/test_matcher.py: 9.8 s of CPU before, 6.6 s after). The migrations still run here, in every test that opens a
    new file itself, and in every command run as a process."""
    path = tmp_path_factory.mktemp("migrated") / "partnerkit.db"
    open_db(path).conn.close()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the whole database, in one file
    return path


@pytest.fixture
def migrated_file(migrated_template):
    """`place(path)`: a copy of the migrated template at `path`, a new file in an existing directory (mode 0600,
    as open_db creates it; a directory open_db would create is made private, so it is left to open_db)."""
    def place(path: Path) -> Path:
        assert path.parent.is_dir() and not path.exists(), path
        shutil.copy(migrated_template, path)  # content and mode
        return path
    return place


@pytest.fixture
def db(db_path, migrated_file):
    """A migrated database in tmp_path."""
    database = open_db(migrated_file(db_path))
    yield database
    database.conn.close()


@pytest.fixture
def sandbox_server():
    """The provider simulator on a free loopback port, background work running."""
    with serve_sandbox() as server:
        yield server


@pytest.fixture
def sandbox_config(sandbox_server, tmp_path):
    """A partnerkit Config pointed at the running sandbox as its first seeded client."""
    client = sandbox_server.clients[0]
    return load_config(environ={
        "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"),
        "PARTNERKIT_API_BASE_URL": sandbox_server.base_url,
        "PARTNERKIT_API_KEY": client.key,
        "PARTNERKIT_API_SECRET": client.secret,
        "PARTNERKIT_WEBHOOK_TOKENS": "bootstrap-token-for-tests",
        "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"),
    })


def account_of(db, api_key: str, wallet_ids=("1",)) -> None:
    """Record in `db` that it serves the account of `api_key`, whose wallets are `wallet_ids`, as the key's first
    call would after one `GET /wallets` (partnerkit.account): for tests against a server that answers only the
    endpoint under test, so that they see that endpoint's requests alone."""
    from partnerkit.account import settle

    settle(db, api_key, [{"id": wallet_id, "currency": "INR"} for wallet_id in wallet_ids])
