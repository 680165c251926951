"""Fixtures for the sandbox suite: a real server on loopback, signed API helpers, a receiver."""
from __future__ import annotations

import pytest

from tests.sandbox.sandbox_helpers import Api, Receiver, make_settings
from tests.sandbox_serving import serve_sandbox


@pytest.fixture
def settings():
    return make_settings()


@pytest.fixture
def server(settings):
    with serve_sandbox(settings, background=False) as srv:
        yield srv


@pytest.fixture
def sb(server):
    return server.sandbox


@pytest.fixture
def alpha(server):
    return Api(server, server.clients[0])


@pytest.fixture
def beta(server):
    return Api(server, server.clients[1])


@pytest.fixture
def gamma(server):
    return Api(server, server.clients[2])


@pytest.fixture
def receiver():
    rec = Receiver()
    yield rec
    rec.close()
