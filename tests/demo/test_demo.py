"""`partnerkit demo` end to end, as a user runs it: a subprocess, its output, its files, its children.

The demo runs with a fast sandbox clock here (the default is slower, to be read); each run still
starts the real receiver (gunicorn) and worker processes.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from partnerkit.demo.processes import group_members
from partnerkit.processes import alive

SPEED = "150"
RUN_TIMEOUT_S = 90
HUNG_S = 120  # waits for a signalled demo to stop: only one that does not stop at all takes this long
REPORT_LINE = re.compile(r"^\s+(HTML|CSV|JSON)\s+(\S+)\s*$", re.M)


def demo_env() -> dict[str, str]:
    """The user's environment with PARTNERKIT_* settings the demo must ignore (one is not even valid)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    env.update(PARTNERKIT_DB="/nonexistent/dir/partnerkit.db", PARTNERKIT_API_KEY="not-the-demo-key",
               PARTNERKIT_NOT_A_SETTING="1")
    return env


def demo_argv(workdir: Path) -> list[str]:
    return [sys.executable, "-m", "partnerkit", "demo", "--workdir", str(workdir), "--speed", SPEED]


def recorded_pids(workdir: Path) -> list[int]:
    groups = json.loads((workdir / "pids.json").read_text())
    return sorted({pid for pids in groups.values() for pid in pids})


def assert_no_survivors(workdir: Path) -> None:
    pids = recorded_pids(workdir)
    assert len(pids) >= 2, pids  # at least the receiver and the worker were recorded
    deadline = time.monotonic() + 30  # processes ending on a busy machine; the bound only ends a broken run
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if alive(p)] == []


def revealed_codes(workdir: Path, order_id: int) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "partnerkit", "--config", str(workdir / "partnerkit.env"),
                           "vouchers", str(order_id), "--reveal", "--format", "json"],
                          capture_output=True, text=True, timeout=60, cwd=workdir,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")})
    assert done.returncode == 0, done.stderr
    return [v["card_number"] for v in json.loads(done.stdout)]


def secrets_of_the_run(workdir: Path) -> dict[str, str]:
    """Every secret the run handled: API secret, voucher key, webhook tokens, voucher codes and PINs."""
    from partnerkit.config import load_config
    from partnerkit.crypto import load_cipher
    from partnerkit.store import open_db
    from partnerkit.store import vouchers as stored_vouchers
    from partnerkit.vouchers import unseal
    from receiver.tokens import accepted_tokens

    config = load_config(environ={}, config_file=workdir / "partnerkit.env")
    cipher = load_cipher(config)
    db = open_db(config.db_path)
    found = {"api secret": config.api_secret, "voucher key": config.voucher_key}
    tokens = accepted_tokens(config, db, cipher)  # configured ones and the one `webhooks register` saved
    assert tokens
    found.update({f"webhook token {i}": t.token for i, t in enumerate(tokens)})
    order_ids = [row[0] for row in db.execute("SELECT DISTINCT order_id FROM vouchers")]
    for order_id in order_ids:
        for row in stored_vouchers.for_order(db, order_id):
            plain = unseal(cipher, row)
            found[f"order {order_id} voucher {row['id']} code"] = plain["card_number"]
            found[f"order {order_id} voucher {row['id']} pin"] = plain["pin_code"]
    db.conn.close()
    return {name: value for name, value in found.items() if value}


def assert_logs_carry_no_secret(done: subprocess.CompletedProcess, workdir: Path) -> None:
    """The whole run's logs and output: no token, API secret, voucher key, voucher code or PIN."""
    secrets = secrets_of_the_run(workdir)
    assert sum(1 for name in secrets if name.endswith(" code")) >= 50  # the demo stored its vouchers
    logs = sorted((workdir / "logs").glob("*.log"))
    assert {p.name for p in logs} >= {"receiver.log", "worker.log"}
    text = done.stdout + done.stderr + "".join(p.read_text(errors="replace") for p in logs)
    assert "webhook" in text and len(text) > 10_000  # the logs are really there
    leaked = [name for name, value in secrets.items() if value in text]
    assert leaked == []


def voucher_key(workdir: Path) -> str:
    """The voucher key the run wrote in its config file."""
    return next(line.split("=", 1)[1] for line in (workdir / "partnerkit.env").read_text().splitlines()
                if line.startswith("PARTNERKIT_VOUCHER_KEY="))


def check_run(done: subprocess.CompletedProcess, cwd: Path, workdir: Path) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "Reconciliation for" in out and "recharges" in out and "spend    INR" in out
    assert "missing_refund" in out  # the planted drift
    assert "HTTP 409" in out and "--force" in out  # the duplicate guard
    assert re.search(r"delivered on attempt [2-9]", out)  # the provider's retries after the outage
    printed = REPORT_LINE.findall(out)
    assert {kind for kind, _ in printed} == {"HTML", "CSV", "JSON"}
    for _, path in printed:
        assert (cwd / path).is_file() and (cwd / path).stat().st_size > 0
    # One report per day of the sandbox's clock: at 150x, a run begun after about 23:35 UTC crosses midnight and
    # reports both days (partnerkit.demo.script.ScriptedDay.sandbox_days), the planted drift in either.
    reports = [json.loads((cwd / path).read_text()) for kind, path in printed if kind == "JSON"]
    assert 1 <= len(reports) <= 2, [r["date"] for r in reports]
    assert any("missing_refund" in r["summary"]["drifts_by_kind"] for r in reports)
    spent = [r["summary"] for r in reports if "INR" in r["summary"]["spend"]]
    assert spent
    for summary in spent:  # the terminal's money lines are the reports', each named for what it counts
        assert f"debits   INR {summary['spend']['INR']}   (gross" in out
        assert f"spend    INR {summary['spend_as_documented']['INR']}   (SUCCESS and PROCESSING" in out
    # the demo fails and reverses some
    assert any(s["spend_as_documented"]["INR"] != s["spend"]["INR"] for s in spent)
    assert reports[-1]["partial"] and "partial: made before the day ended (UTC)" in out  # the demo reports its own day
    assert "stopped the worker, the receiver and the sandbox" in out
    assert_no_survivors(workdir)
    assert voucher_key(workdir) not in out + done.stderr


@pytest.mark.timeout(240)
def test_demo_runs_end_to_end_then_again_in_the_same_workdir(tmp_path: Path) -> None:
    workdir = tmp_path / "var" / "demo"
    first = subprocess.run(demo_argv(workdir), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                           env=demo_env(), cwd=tmp_path)
    check_run(first, tmp_path, workdir)
    codes = revealed_codes(workdir, 5001)
    assert codes and not any(code in first.stdout for code in codes)  # masked: never printed
    assert_logs_carry_no_secret(first, workdir)

    # The second run empties the directory first. Anything the first run left would show early: its database
    # refuses the new run's voucher key at `webhooks register`, before any order. So the second run is followed
    # until it has stored its first order (the first run's order ids again), then stopped as a user stops it.
    first_key = voucher_key(workdir)
    second, seen = _start_and_wait_for(workdir, tmp_path, "order 5001:")
    try:
        assert "a previous demo's state there was removed" in "".join(seen)
        assert voucher_key(workdir) != first_key  # its own config file
        # The first run's reports are gone. Not "the directory is empty": the new worker's catch-up of past nights
        # may already have written an earlier day's report (CI saw one of two days before).
        assert [path for _, path in REPORT_LINE.findall(first.stdout) if (tmp_path / path).exists()] == []
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=HUNG_S) == 128 + signal.SIGTERM
        assert "every process it started has been stopped" in second.stderr.read()  # type: ignore[union-attr]
        assert_no_survivors(workdir)
        assert voucher_key(workdir) not in "".join(seen)
    finally:
        if second.poll() is None:  # a failed check above: SIGTERM, so that it stops its children too
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=60)


def test_demo_refuses_a_workdir_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    done = subprocess.run(demo_argv(tmp_path), capture_output=True, text=True, timeout=60, env=demo_env())
    assert done.returncode == 1
    assert "was not made by `partnerkit demo`" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def _lines(process: subprocess.Popen) -> "queue.Queue[str]":
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _start_and_wait_for(workdir: Path, cwd: Path, after: str) -> tuple[subprocess.Popen, list[str]]:
    """A demo run, once it has printed a line containing `after`; with the lines it printed so far."""
    process = subprocess.Popen(demo_argv(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=demo_env(), cwd=cwd)
    lines, seen = _lines(process), []
    deadline = time.monotonic() + 60
    while not any(after in line for line in seen):
        assert time.monotonic() < deadline and process.poll() is None, "".join(seen)
        try:
            seen.append(lines.get(timeout=1))
        except queue.Empty:
            continue
    return process, seen


@pytest.mark.timeout(120)
def test_a_dead_worker_fails_the_demo_in_one_line_and_stops_the_rest(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    process, _ = _start_and_wait_for(workdir, tmp_path, "order 5003:")
    try:
        worker = json.loads((workdir / "pids.json").read_text())["worker"][0]
        os.kill(worker, signal.SIGKILL)
        assert process.wait(timeout=60) == 1
        errors = process.stderr.read().strip().splitlines()  # type: ignore[union-attr]
        assert len(errors) == 1 and errors[0].startswith("Error: demo failed: worker was killed by SIGKILL")
        assert_no_survivors(workdir)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# The line of a step that places something: `recharge 100001 (RCH...): 199.00 to 98...` or `order 5003: 25 x ...`
# (not the watcher's lines about what was placed before: `recharge 100003 (...): PROCESSING -> SUCCESS`).
PLACED = re.compile(r"^\[\s*\d+s\] (recharge \d+ \(\S+\): \d+\.\d\d to |order \d+: \d+ x )", re.M)


def _frozen(pids: list[int]) -> bool:
    """Every pid stopped by SIGSTOP (state T in /proc), or past running anything (a command that had just
    exited is a zombie until the stopped demo reaps it)."""
    def state(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (OSError, IndexError):
            return "gone"
    return all(state(pid) in ("T", "Z", "X", "gone") for pid in pids)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("signum, after, to_group", [
    (signal.SIGINT, "order 5001:", True),  # Ctrl-C in a terminal: the demo and the command it runs both get it
    (signal.SIGTERM, "order 5001:", False),  # kill: the demo alone gets it, and stops the command it runs
    (signal.SIGTERM, "worker: `partnerkit worker`", False),  # during the recharges, placed in this process
])
def test_a_signal_during_the_demo_stops_it_at_the_step_it_was_in_and_stops_every_child(
        tmp_path: Path, signum: int, after: str, to_group: bool) -> None:
    """The stage, not the time: the demo is frozen (SIGSTOP to its process group) when it has printed `after`,
    signalled, and let go. After that it may finish the one step it was in, never start another: before, it
    went on placing orders until its next pause, five of them on a busy machine."""
    workdir, out = tmp_path / "demo", tmp_path / "demo.out"
    with open(out, "w") as stdout:  # a file, not a pipe: what it holds when the demo is frozen is all it printed
        process = subprocess.Popen(demo_argv(workdir), stdout=stdout, stderr=subprocess.PIPE, text=True,
                                   env=demo_env(), cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + HUNG_S  # a broken run only, as every bound here
        while after not in out.read_text():
            assert time.monotonic() < deadline and process.poll() is None, out.read_text()
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGSTOP)  # the demo and the `partnerkit` command it may be running
        members = group_members(process.pid)
        while not _frozen(members):
            assert time.monotonic() < deadline, members
            time.sleep(0.01)
        before = out.read_text()
        pids = recorded_pids(workdir)
        assert pids and all(alive(p) for p in pids)
        if to_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        os.killpg(process.pid, signal.SIGCONT)
        assert process.wait(timeout=HUNG_S) == 128 + signum
        assert "every process it started has been stopped" in process.stderr.read()  # type: ignore[union-attr]
        printed = out.read_text()
        assert printed.startswith(before)
        later = printed[len(before):]
        assert "interrupted: stopping everything the demo started" in later
        # At most the step the demo was in: its command (or its call to the sandbox) had ended, its line not yet.
        assert len(PLACED.findall(later)) <= 1, later
        assert_no_survivors(workdir)
    finally:
        if process.poll() is None:  # a failed check above: SIGTERM, so that it stops its children too
            os.killpg(process.pid, signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=HUNG_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
