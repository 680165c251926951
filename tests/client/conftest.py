"""Fixtures: a real loopback HTTP server (pytest-httpserver), a migrated SQLite file, a client."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest

from partnerkit.client import PartnerClient
from partnerkit.config import Config
from partnerkit.store import open_db

from tests.client.client_payloads import API_KEY, API_SECRET, FAST
from tests.conftest import account_of


@pytest.fixture
def config(httpserver, tmp_path) -> Config:
    return Config(
        db_path=tmp_path / "partnerkit.db",
        api_base_url=httpserver.url_for("/").rstrip("/"),
        api_key=API_KEY,
        api_secret=API_SECRET,
        http_timeout_s=2.0,
    )


@pytest.fixture
def db(config, migrated_file):
    database = open_db(migrated_file(config.db_path))
    account_of(database, config.api_key)  # the server under test answers its endpoints only, not /wallets
    yield database
    database.conn.close()


@pytest.fixture
def sleeps() -> list[float]:
    """Every back-off sleep the client asked for (instead of sleeping)."""
    return []


@pytest.fixture
def client(config, db, sleeps) -> PartnerClient:
    with PartnerClient(config, db, retry=FAST, sleep=sleeps.append) as c:
        yield c


@contextmanager
def alpha_client(server, tmp_path) -> Iterator[PartnerClient]:
    """A client of the sandbox's seeded client alpha, on a migrated SQLite file in tmp_path."""
    alpha = next(c for c in server.clients if c.name == "alpha")
    config = Config(db_path=tmp_path / "pk.db", api_base_url=server.base_url, api_key=alpha.key,
                    api_secret=alpha.secret, http_timeout_s=5)
    with PartnerClient(config, open_db(config.db_path), retry=FAST) as client:
        yield client
