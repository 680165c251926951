"""Fixtures of the reconciliation tests."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from tests.reconcile.reconcile_helpers import Ledger


@pytest.fixture
def ledger(db):
    """A builder for one day of reconciliation data in the test database."""
    return Ledger(db)


@pytest.fixture
def invoke(db_path, tmp_path, monkeypatch):
    """Run `partnerkit ...` against the test database (its reports under tmp_path)."""
    monkeypatch.setenv("PARTNERKIT_DB", str(db_path))
    monkeypatch.setenv("PARTNERKIT_REPORT_DIR", str(tmp_path / "reports"))
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args))
