"""A receiver listening beyond loopback says, once as it starts, never to expose gunicorn directly: its sync
workers are held by slow clients (docs/receiver.md, "Never expose gunicorn directly"). Inside a container, where
0.0.0.0 is how the proxy's container reaches it (deploy/compose.yaml), it says nothing.

The master's `when_ready` hook is run here on gunicorn's own Arbiter, built from `gunicorn_options()` but never
started: no socket is bound to 0.0.0.0, and this machine may itself be a container, so the markers are the test's.
"""

from __future__ import annotations

import json

import pytest
from gunicorn.arbiter import Arbiter

from partnerkit.config import load_config
from partnerkit.status import collect
from partnerkit.store import open_db
from receiver import gunicorn_app
from receiver.gunicorn_app import GunicornApplication, exposure_warning, gunicorn_options
from tests.receiver.test_gunicorn import env_for

SAID = "beyond loopback: never expose gunicorn directly"


@pytest.mark.parametrize("addresses, exposed", [
    (["127.0.0.1:8000"], None),
    (["127.0.0.2:8000"], None),  # all of 127.0.0.0/8 is loopback
    (["[::1]:8000"], None),
    (["localhost:8000"], None),
    (["unix:/run/partnerkit/receiver.sock"], None),
    (["0.0.0.0:8000"], "0.0.0.0:8000"),
    (["[::]:8000"], "[::]:8000"),
    (["10.0.0.5:8000"], "10.0.0.5:8000"),  # a private network is still other hosts
    (["127.0.0.1:8000", "0.0.0.0:8001"], "0.0.0.0:8001"),
])
def test_a_bind_beyond_loopback_is_named_and_a_container_says_nothing(addresses, exposed):
    warning = exposure_warning(addresses, container=False)
    if exposed is None:
        assert warning is None
    else:
        assert warning.startswith(f"the receiver listens on {exposed}, {SAID}")
        assert "slow clients" in warning and "deploy/nginx/partnerkit.conf" in warning
    assert exposure_warning(addresses, container=True) is None


@pytest.mark.parametrize("bind, container, said", [
    ("127.0.0.1:8000", False, 0),
    ("0.0.0.0:8000", False, 1),
    ("0.0.0.0:8000", True, 0),
])
def test_the_master_says_it_once_as_it_listens(tmp_path, monkeypatch, capfd, bind, container, said):
    marker = tmp_path / "dockerenv"
    if container:
        marker.touch()
    monkeypatch.setattr(gunicorn_app, "CONTAINER_MARKERS", (str(marker),))
    for name, value in env_for(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SERVER_SOFTWARE", "")  # the Arbiter sets it; restored after the test
    open_db(tmp_path / "pk.db").conn.close()
    arbiter = Arbiter(GunicornApplication(lambda: None, gunicorn_options(bind, 1)))
    arbiter.LISTENERS = [f"http://{bind}"]  # what gunicorn's listeners show (str), none bound here
    options = arbiter.cfg
    options.when_ready(arbiter)
    options.on_exit(arbiter)  # the record of this master marked stopped, as a clean stop does
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if SAID in line]
    assert [(line["level"], line["logger"]) for line in lines] == [("WARNING", "gunicorn.error")] * said
    # The start was recorded all the same (and its stop): the warning never stops a receiver.
    [master] = collect(load_config(), open_db(tmp_path / "pk.db"))["receiver_masters"]
    assert master["bind"] == [bind] and master["stopped_at"] is not None
