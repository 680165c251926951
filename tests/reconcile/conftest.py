"""Fixtures of the reconciliation tests."""

from __future__ import annotations

import pytest

from tests.reconcile.reconcile_helpers import Ledger


@pytest.fixture
def ledger(db):
    """A builder for one day of reconciliation data in the test database."""
    return Ledger(db)
