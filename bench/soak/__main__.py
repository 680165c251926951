"""`python -m bench.soak [--quick] [--events N --rate R --orders K] [--workdir DIR]`.

A bounded soak of the real stack on loopback (see bench/soak/run.py for what runs and the fault
schedule). Prints what was sent, acknowledged and stored, the duplicates absorbed, what was lost
(must be 0), the vouchers expected and stored, and the worst acknowledgement latency. Exit 1 if
anything acknowledged was lost or a delivered order lacks vouchers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.soak.run import Plan, Soak
from partnerkit.demo.stack import DemoError

ROWS = (
    ("events sent (load + sandbox webhooks)", "events_sent"),
    ("delivery attempts (incl. retries)", "deliveries_attempted"),
    ("events acknowledged (2xx)", "acknowledged"),
    ("acknowledged and stored", "stored"),
    ("duplicates absorbed", "duplicates_absorbed"),
    ("lost (acknowledged, not stored)", "lost"),
    ("never acknowledged", "unacknowledged"),
    ("answers 503 (database locked)", "answered_503"),
    ("connection errors (worker killed)", "connection_errors"),
    ("other 5xx answers", "answered_5xx_other"),
    ("voucher orders created", "orders_created"),
    ("order creations refused by a fault", "order_create_errors"),
    ("vouchers expected", "vouchers_expected"),
    ("vouchers stored", "vouchers_stored"),
    ("vouchers stored twice", "vouchers_extra"),
    ("parked voucher jobs", "dead_jobs"),
    ("p99 acknowledgement latency (ms)", "p99_ack_ms"),
    ("worst acknowledgement latency (ms)", "worst_ack_ms"),
    ("worst single attempt (ms)", "worst_attempt_ms"),
)


def failures(counts: dict) -> list[str]:
    """The soak's pass conditions, each a line when it does not hold."""
    problems = []
    if counts["lost"]:
        problems.append(f"{counts['lost']} acknowledged events are not in the database")
    if counts["unacknowledged"]:
        problems.append(f"{counts['unacknowledged']} events were never acknowledged")
    if counts["vouchers_stored"] != counts["vouchers_expected"]:
        problems.append(f"vouchers stored {counts['vouchers_stored']} != expected {counts['vouchers_expected']}")
    if counts["vouchers_extra"]:
        problems.append(f"{counts['vouchers_extra']} vouchers stored more than once")
    if counts["answered_5xx_other"]:
        problems.append(f"{counts['answered_5xx_other']} answers were a 5xx other than 503")
    return problems


def print_table(outcome, echo=print) -> None:
    counts = outcome.counts
    plan = outcome.plan
    echo("")
    echo(f"soak: {plan.events} events at {plan.rate:g}/s, {plan.orders} voucher orders, "
         f"drained {outcome.drained_s:.0f} s after the load")
    echo("")
    echo("| fault (t = seconds into the load) | what |")
    echo("|---|---|")
    for at, name, what in outcome.faults:
        echo(f"| t={at:.0f} {name} | {what} |")
    echo("")
    echo("| measure | value |")
    echo("|---|---:|")
    for label, key in ROWS:
        echo(f"| {label} | {counts[key]} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 40 s variant (1200 events, 12 orders)")
    parser.add_argument("--events", type=int, help="events the load process sends (default 6000)")
    parser.add_argument("--rate", type=float, help="events per second (default 40)")
    parser.add_argument("--orders", type=int, help="voucher orders created on the sandbox (default 30)")
    parser.add_argument("--workdir", type=Path, help="keep the run's database and logs here (default: a temp dir)")
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    for name in ("events", "rate", "orders"):
        value = getattr(args, name)
        if value is not None:
            if value <= 0:
                parser.error(f"--{name} must be positive")
            setattr(plan, name, value)
    with tempfile.TemporaryDirectory(prefix="partnerkit-soak-") as scratch:
        soak = Soak(plan, args.workdir or Path(scratch) / "soak")
        try:
            soak.start()
            outcome = soak.run()
        except DemoError as exc:  # a child died outside a fault, or a set-up step failed: one line
            print(f"soak: error: {exc}", file=sys.stderr)
            return 2
        finally:
            soak.close()
    print_table(outcome)
    problems = failures(outcome.counts)
    for line in problems:
        print(f"soak: FAIL: {line}", file=sys.stderr)
    print("soak: " + ("FAILED" if problems else "passed: nothing acknowledged was lost, every voucher stored"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
