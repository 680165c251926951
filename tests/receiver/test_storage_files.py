"""Files the store creates for the receiver: the database file 0600, a new directory for it 0700."""

from __future__ import annotations

import os

from partnerkit.store.db import connect


def test_a_new_database_directory_is_private_and_an_existing_one_is_left_alone(tmp_path):
    connect(tmp_path / "fresh" / "pk.db").conn.close()
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "fresh" / "pk.db").stat().st_mode & 0o777 == 0o600
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    connect(shared / "pk.db").conn.close()
    assert shared.stat().st_mode & 0o777 == 0o755
