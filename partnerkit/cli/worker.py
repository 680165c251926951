"""`partnerkit worker [--once]`: the APScheduler worker, or one pass of every job for cron."""

from __future__ import annotations

import logging
import sys

import click
from click.core import ParameterSource

from partnerkit.cli.context import AppContext, created_line, missing_directories, pass_app
from partnerkit.cli.output import FORMATS, emit

log = logging.getLogger("partnerkit.worker")


@click.command("worker")
@click.option("--once", is_flag=True, help="Run one pass of every job, ignoring intervals, and exit (for cron): "
              "exit 1 when a job failed, could not be loaded, was paused because the provider refused the API "
              "key, or was busy (another process held the database's write lock past the worker's 15 s wait), "
              "or when SIGTERM or SIGINT stopped the pass (a running sync ends at its next batch, its place kept, the "
              "order catch-up after its page; "
              "the jobs after it are not run).")
@click.option("--no-wait", is_flag=True, help="Exit instead of standing by when another worker holds the lease.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="With --once (refused without it), the format of its table of job results; json and csv go to "
              "stdout alone.")
@click.pass_context
@pass_app
def worker_command(app: AppContext, ctx: click.Context, fmt: str, once: bool, no_wait: bool) -> None:
    """Poll recharges, fetch vouchers, sync and report on schedule; one worker per database.

    A first start creates the database (PARTNERKIT_DB), with a WARNING log line naming it. SIGTERM or Ctrl-C
    stops it within seconds: a running sync ends at its next batch, everything read stored and its place kept
    (the next start reads on from there), and the order catch-up after the page it reads. Exit code 2 for a missing or malformed setting or
    an API key of another provider account (no restart helps: the systemd unit stays failed)."""
    from partnerkit.crypto import check_voucher_key
    from partnerkit.logs import configure_logging
    from reconcile.scheduler import run_once, run_worker

    if not once and ctx.get_parameter_source("fmt") is not ParameterSource.DEFAULT:
        # The long-running worker prints no table, only its JSON log lines on stderr.
        raise click.UsageError("--format applies only with --once (the running worker logs JSON lines on stderr)")
    config = app.config.require("api_base_url", "api_key", "api_secret")
    configure_logging(config)
    check_voucher_key(config)  # a key that opens none of the stored vouchers: refused before any job seals
    if not config.db_path.exists():  # the worker opens (and creates) it itself: said before, in its log
        log.warning(created_line(config.db_path, done=False, origin=app.db_origin(),
                                 made=missing_directories(config.db_path)))
    if once:
        results = run_once(config)
        emit(results, ["job", "outcome", "duration_ms", "result"], fmt)
        # paused: the provider refused the API key moments ago, so the jobs that call it did nothing; busy:
        # another process held the database's write lock past the worker's wait, so that job did nothing.
        # stopped: SIGTERM or SIGINT came during the pass, and the jobs after it did not run.
        if any(r["outcome"] in ("error", "unavailable", "paused", "busy", "stopped") for r in results):
            sys.exit(1)
        return
    sys.exit(run_worker(config, wait_for_lease=not no_wait))


def register(group: click.Group) -> None:
    group.add_command(worker_command)
