"""The soak benchmark's quick variant as a test (slow: `make soak`): the real stack, faults on a schedule."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _value(table: str, label: str) -> float:
    match = re.search(rf"^\| {re.escape(label)} \| ([0-9.]+) \|$", table, re.MULTILINE)
    assert match, f"row {label!r} missing from the soak table:\n{table}"
    return float(match.group(1))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_quick_soak_loses_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.soak", "--quick", "--workdir", str(tmp_path / "soak")],
                          cwd=ROOT, capture_output=True, text=True, timeout=400)
    table = done.stdout
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _value(table, "lost (acknowledged, not stored)") == 0
    assert _value(table, "never acknowledged") == 0
    acknowledged = _value(table, "events acknowledged (2xx)")
    assert acknowledged == _value(table, "acknowledged and stored") >= 1200
    assert _value(table, "vouchers expected") > 0
    assert _value(table, "vouchers stored") == _value(table, "vouchers expected")
    assert _value(table, "vouchers stored twice") == 0
    # Every fault of the schedule fired (the table lists each with its time).
    for name in ("kill_receiver_worker", "provider_500", "kill_worker", "db_locked", "provider_429", "provider_slow", "provider_garbled",
                 "kill_receiver_worker_mid_request"):
        assert f" {name} |" in table, f"fault {name} did not fire:\n{table}"
