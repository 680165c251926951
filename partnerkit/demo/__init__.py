"""`partnerkit demo`: the sandbox, the receiver and the worker on loopback, a scripted day, the report.

Modules: `stack` (working directory, sandbox, config file, child processes), `processes` (ports,
start, readiness, stop without orphans), `script` (the day), `watch` (reading back what the
receiver and the worker stored), `output` (progress lines and the summary), `signals` (Ctrl-C and
SIGTERM). See docs/demo.md.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

from partnerkit.demo.output import Progress, display_path, print_next_steps, print_report
from partnerkit.demo.signals import Interrupted, checkpoint, forget, ignored, interruptible, pause
from partnerkit.demo.stack import DemoError, Stack, prepare_workdir

DEFAULT_WORKDIR = Path("var/demo")
DEFAULT_SPEED = 40.0

__all__ = ["run_demo", "DemoError", "Interrupted", "DEFAULT_WORKDIR", "DEFAULT_SPEED"]


def run_demo(workdir: Path = DEFAULT_WORKDIR, speed: float = DEFAULT_SPEED, keep_running: bool = False,
             echo: Callable[[str], None] | None = None) -> None:
    """Run the whole demo; DemoError (one-line reason) or Interrupted on failure. Always cleans up."""
    progress = Progress(echo) if echo else Progress()
    stack: Stack | None = None
    log_stream = None
    with interruptible():
        try:
            paths = prepare_workdir(workdir)
            stack = Stack(paths, speed)
            log_stream = open(paths.logs / "demo.log", "a", encoding="utf-8")
            _play(stack, progress, log_stream, keep_running)
            checkpoint()  # a signal noted where it could not be raised is not a success
        except DemoError:
            raise
        except Interrupted:
            progress.step("interrupted: stopping everything the demo started")
            raise
        except Exception as exc:  # a bug or an unexpected API answer: one line, details in the log
            logging.getLogger("partnerkit.demo").exception("demo failed")
            where = f" (details in {display_path(stack.paths.logs / 'demo.log')})" if stack else ""
            raise DemoError(f"{type(exc).__name__}: {exc}{where}") from exc
        finally:
            with ignored():  # a second Ctrl-C must not leave children behind
                if stack is not None:
                    stack.close()
                    progress.step("stopped the worker, the receiver and the sandbox")
                if log_stream is not None:
                    log_stream.flush()  # left open: the root logger's handler writes to it until exit


def _play(stack: Stack, progress: Progress, log_stream, keep_running: bool) -> None:
    from partnerkit.client import PartnerClient
    from partnerkit.logs import configure_logging
    from partnerkit.store import open_db
    from reconcile.jobs import reconcile_day, report_filename

    from partnerkit.demo.script import ScriptedDay

    progress.echo("partnerkit demo: the provider's sandbox, the receiver (gunicorn) and the worker on loopback, "
                  "a scripted day of traffic, then the day's reconciliation.")
    progress.echo(f"Working directory {display_path(stack.paths.workdir)} (a previous demo's state there was "
                  "removed). Ctrl-C stops everything.")
    progress.section("Setting up")
    stack.start_sandbox()
    config = stack.write_config()
    configure_logging(config, stream=log_stream)
    progress.step(f"sandbox (the provider simulator) on {stack.sandbox_url}, client alpha with the public demo "
                  f"key {stack.alpha.key}")
    progress.detail(f"config: {display_path(stack.paths.env_file)}   logs: {display_path(stack.paths.logs)}/")
    db = open_db(config.db_path)
    try:
        created = stack.register_webhook()
        progress.step(f"`partnerkit webhooks register`: webhook {created['id']} -> {created['url']} "
                      "(its token is saved encrypted in the database)")
        started = time.monotonic()
        stack.start_receiver()
        progress.step(f"receiver: `partnerkit serve --bind 127.0.0.1:{stack.receiver_port} --workers 2` "
                      f"(gunicorn), /readyz ok after {time.monotonic() - started:.1f} s")
        stack.start_worker()
        progress.step("worker: `partnerkit worker` (polls recharges, fetches vouchers, syncs)")
        client = PartnerClient(config, db, purpose="demo")

        day = ScriptedDay(stack, db, client, progress)
        outcome = day.run()
        watched = day.watch
        progress.section("End of day")
        settled = len(watched.recharges)
        vouchers = sum(o.vouchers for o in watched.orders.values())
        progress.step(f"worker caught up: {settled} PROCESSING recharges settled, {vouchers} vouchers stored "
                      f"for the {sum(1 for o in watched.orders.values() if o.vouchers)} delivered orders")

        reports = []
        for one_day in day.sandbox_days(outcome.first_day):
            checkpoint()  # a reconciliation runs seconds without a pause
            progress.step(f"reconciling {one_day} (sync recharges, orders, transactions; match; report), as "
                          f"`partnerkit reconcile --date {one_day}` does")
            reports.append(reconcile_day(config, db, client, one_day))
        planted = next((d["id"] for r in reports for d in r["drifts"]
                        if d["kind"] == outcome.planted_kind and d["reference"] == str(outcome.planted_order)), None)
        for report in reports:
            progress.blank()
            paths = [config.report_dir / report_filename(report["date"], f) for f in ("html", "csv", "json")]
            print_report(progress.echo, report, paths)
        progress.blank()
        if planted is None:
            raise DemoError(f"reconciliation did not report the planted {outcome.planted_kind} for order "
                            f"{outcome.planted_order}")
        print_next_steps(progress.echo, stack.paths.env_file, outcome.delivered_order, planted,
                         reports[-1]["date"], keep_running)
        progress.blank()
        if keep_running:
            progress.step(f"still running: sandbox {stack.sandbox_url} (public demo key {stack.alpha.key}, secret "
                          f"{stack.alpha.secret}), receiver {stack.receiver_url}; Ctrl-C stops everything")
            try:
                while True:
                    stack.check_children()
                    pause(1)
            except Interrupted:
                forget()
                return  # the way --keep-running is meant to end: not a failure
    finally:
        db.conn.close()
