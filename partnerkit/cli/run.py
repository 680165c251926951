"""`partnerkit run`: the receiver and the worker together, for a single box.

The receiver runs as its own gunicorn master (a child process: gunicorn forks its web workers,
and the worker must never be inside one of them); the worker's scheduler runs in this process.
SIGTERM or SIGINT stops both: gunicorn finishes in-flight requests within its graceful timeout,
and the scheduler lets a running job finish its transaction. Every job is restartable, so
nothing is lost if a stop comes mid-job. If either half dies, the other is stopped too and the
command exits non-zero, so a supervisor (systemd, compose) restarts the pair. If this process is
killed outright (SIGKILL, the OOM killer), Linux sends the receiver SIGTERM (a parent-death
signal): an orphaned gunicorn would keep the port, and the restarted pair could not bind it.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
from typing import Any

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.serve import bind_option, receiver_process, workers_option
from partnerkit.processes import die_with_parent

log = logging.getLogger("partnerkit.run")

RECEIVER_STOP_TIMEOUT_S = 20.0  # gunicorn's graceful_timeout plus a margin


def _stop_receiver(receiver: subprocess.Popen) -> None:
    if receiver.poll() is None:
        receiver.send_signal(signal.SIGTERM)  # gunicorn: graceful shutdown of its workers
        try:
            receiver.wait(timeout=RECEIVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.error("receiver did not stop in %.0f s; killing it", RECEIVER_STOP_TIMEOUT_S)
            receiver.kill()
            receiver.wait()


@click.command("run")
@bind_option
@workers_option
@pass_app
def run_command(app: AppContext, bind: str, workers: int) -> None:
    """Run the receiver (gunicorn) and the worker together; SIGTERM stops both cleanly."""
    from partnerkit.logs import configure_logging
    from reconcile.scheduler import run_worker
    from reconcile.worker_jobs import check_account

    config = app.config.require("api_base_url", "api_key", "api_secret")
    argv, env = receiver_process(app, bind, workers)
    configure_logging(config)
    check_account(config, app.db)  # another provider account's key: exit 2 before the receiver starts
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def handle(signum: int, _frame: Any) -> None:
        log.info("run received %s; stopping receiver and worker", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)

    click.echo(f"partnerkit receiver on http://{bind}{config.webhook_path} with {workers} workers, "
               "and the worker, in one process group", err=True)
    receiver = subprocess.Popen(argv, env=env, preexec_fn=die_with_parent())  # no other thread runs yet

    def worker_main() -> None:
        try:
            outcome["worker"] = run_worker(config, wait_for_lease=True, stop=stop)
        except Exception as exc:  # reported below; the receiver is stopped with it
            log.exception("worker failed")
            outcome["worker"] = 1
            outcome["error"] = str(exc)
        finally:
            stop.set()

    worker = threading.Thread(target=worker_main, name="partnerkit-worker", daemon=True)
    worker.start()
    try:
        while not stop.is_set():
            if receiver.poll() is not None:
                outcome["receiver"] = receiver.returncode
                log.error("receiver exited with code %s; stopping the worker", receiver.returncode)
                stop.set()
            stop.wait(0.5)
    finally:
        stop.set()
        _stop_receiver(receiver)
        worker.join(timeout=120)
    if "receiver" in outcome or outcome.get("worker"):
        reason = outcome.get("error") or (f"receiver exited with code {outcome['receiver']}"
                                          if "receiver" in outcome else "worker stopped with an error")
        raise click.ClickException(reason)


def register(group: click.Group) -> None:
    group.add_command(run_command)
