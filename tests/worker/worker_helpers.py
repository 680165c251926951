"""Helpers shared by the worker tests (a uniquely named module, safe beside other directories' conftests)."""

from __future__ import annotations

import itertools
import threading
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env, load_config

_numbers = itertools.count(1)

# Where the tests that move the sandbox's clock with ours start. A module that imports `frozen` (autouse:
# imported, it applies to that module only) and `later` freezes our clock at START before the sandbox is built.
START = datetime(2026, 3, 10, 10, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def frozen():
    """Our clock, frozen at START before the sandbox (whose clock then starts there too) is built."""
    with freeze_time(START) as clock:
        yield clock


@pytest.fixture
def later(frozen, server):
    """Move both clocks on by `seconds`."""
    def move(seconds: float) -> None:
        frozen.tick(seconds)
        server.advance(seconds)
    return move


@pytest.fixture
def run(config, monkeypatch):
    """`partnerkit ARGS...` in this process with `config`'s environment: `run("recharges", "list")`."""
    for name, value in config_as_env(config).items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args))


def mobile(last_digit: int) -> str:
    """A fresh 10-digit number ending in `last_digit` (the sandbox scripts outcomes by it)."""
    return f"98{next(_numbers):07d}{last_digit}"


def make_config(server, tmp_path, **extra: str):
    """A Config for the sandbox's first client; `extra` sets PARTNERKIT_* names (lower-case, no prefix)."""
    client = server.clients[0]
    return config_for(server.base_url, client.key, client.secret, tmp_path, **extra)


def config_for(base_url: str, key: str, secret: str, tmp_path, **extra: str):
    """A Config for any provider address and credentials, with the database in tmp_path."""
    env = {
        "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"),
        "PARTNERKIT_API_BASE_URL": base_url,
        "PARTNERKIT_API_KEY": key,
        "PARTNERKIT_API_SECRET": secret,
        "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"),
    }
    env.update({f"PARTNERKIT_{k.upper()}": str(v) for k, v in extra.items()})
    return load_config(environ=env)


class Stats:
    """The sandbox's call counters (GET /sandbox/stats), as deltas from a mark.

    Read through the sandbox app's test client: the same endpoint without a connection of its own, 1 ms a read
    where a request on loopback took 6-12 ms (test_poller reads them every step of 41 minutes, 1,500 times)."""

    def __init__(self, server) -> None:
        self._app = server.app.test_client()
        self.mark()

    def _now(self) -> dict:
        answer = self._app.get("/sandbox/stats")
        assert answer.status_code == 200, answer.text
        return answer.get_json()

    def mark(self) -> None:
        self._base = self._now()

    def calls(self, template: str | None = None) -> int:
        now = self._now()
        if template is None:
            return now["total"] - self._base["total"]
        return now["calls"].get(template, 0) - self._base["calls"].get(template, 0)

    def rate_limited(self) -> int:
        return self._now()["rate_limited"] - self._base["rate_limited"]


LIST = "GET /api/v1/recharges"
SINGLE = "GET /api/v1/recharges/:id"
SUBMIT = "POST /api/v1/recharges"


class Hold:
    """Holds the first POST /api/v1/recharges at the sandbox (received, not yet done) until released."""

    def __init__(self, app) -> None:
        self.held, self.release = threading.Event(), threading.Event()
        app.before_request(self._before)

    def _before(self):
        from flask import request

        if request.method == "POST" and request.path == "/api/v1/recharges" and not self.held.is_set():
            self.held.set()
            self.release.wait(30)
        return None
