"""`python -m bench.receiver.cpu`: the CPU one webhook costs the receiver's app against the bare app's.

`python -m bench.receiver` measures throughput through gunicorn and loopback, which a shared 2-core
machine moves by 20% from one minute to the next. This measures what decides that ratio, and what a
change to the accepted path moves: CPU time per event inside the WSGI call. In one process, on a
database in a temporary directory, it builds the real receiver (`receiver.app.create_app`, with a
configuration and token as `bench.receiver` gives `partnerkit serve`, PROMETHEUS_MULTIPROC_DIR set
as `partnerkit serve` sets it, `gc.freeze()` as each gunicorn worker does) and the bare app
(`bench.receiver.bare.create_bare_app`), and calls each with hand-built WSGI environs carrying the
same unique signed events `bench.receiver.load` sends, in alternating blocks A/B/A/B. Each block's
`time.process_time()` (the whole process: the receiver's WAL-checkpoint thread included, as the
workers' /proc ticks include it, and the checkpoint of what a receiver block left in the WAL) and
`time.thread_time()` (the calling thread alone) are divided by its events; environs are built and
signed before a block's clock starts. The medians over blocks are printed for both apps, with their
difference. Afterwards the inbox is counted (every event stored exactly once), and the SQL
statements one delivery runs are counted on a few more events.

`--profile N` adds one receiver block under cProfile and prints its N costliest functions. Nothing
is left behind: the database and the metrics files live in a temporary directory removed at exit.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

TOKEN = "bench-webhook-token-0123456789"  # bench.receiver's
VOUCHER_KEY = "YmVuY2gtdm91Y2hlci1rZXktMzItYnl0ZXMtbG9uZyE"
PATH = "/webhooks/partner"
MAX_EVENTS = 50_000   # per block: bounded, a block's environs are built in memory first
MAX_BLOCKS = 40       # per app
STATEMENT_EVENTS = 50  # deliveries whose SQL statements are counted (untimed)


def _environs(bodies: list[bytes], sign: Callable[[str, str, bytes], str]) -> list[dict]:
    """One WSGI environ per body, with the headers gunicorn hands over for `bench.receiver.load`'s request."""
    timestamp = str(int(time.time()))
    environs = []
    for body in bodies:
        environs.append({
            "REQUEST_METHOD": "POST", "SCRIPT_NAME": "", "PATH_INFO": PATH, "QUERY_STRING": "",
            "RAW_URI": PATH, "SERVER_PROTOCOL": "HTTP/1.1", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000",
            "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "40000", "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)), "HTTP_HOST": "127.0.0.1:8000", "HTTP_ACCEPT_ENCODING": "identity",
            "HTTP_X_TIMESTAMP": timestamp, "HTTP_X_SIGNATURE": sign(TOKEN, timestamp, body),
            "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr, "wsgi.multithread": False, "wsgi.multiprocess": True,
            "wsgi.run_once": False, "wsgi.input_terminated": True})
    return environs


def _drive(app: Callable, environs: list[dict], *, then: Callable[[], object] | None = None
           ) -> tuple[float, float, float, dict[bytes, int]]:
    """Call `app` once per environ as a WSGI server does, then `then()` if given, all on the clock;
    (process CPU s, thread CPU s, wall s, answers)."""
    answers: dict[bytes, int] = {}
    statuses: list[str] = []

    def start_response(status: str, headers: list, exc_info=None) -> Callable:
        statuses.append(status)
        return lambda data: None

    cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
    for environ in environs:
        result = app(environ, start_response)
        try:
            answer = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        key = statuses.pop().encode() + b" " + answer.strip()
        answers[key] = answers.get(key, 0) + 1
    if then is not None:
        then()
    cpu, thread, wall = time.process_time() - cpu, time.thread_time() - thread, time.perf_counter() - wall
    return cpu, thread, wall, answers


def _statements(receiver, app: Callable, environs: list[dict]) -> tuple[dict[str, float], float]:
    """SQL statements per delivery on the receiver's connections (request and writer), as SQLite traces them,
    and trigger programs per delivery: the trace gives a trigger's run as its statement's text again (bound
    values expanded), so a repeat of the text just traced is a trigger's, not a statement."""
    seen: list[str] = []
    connections = [receiver.db().conn, receiver.writer().conn]
    for conn in connections:
        conn.set_trace_callback(seen.append)
    try:
        _drive(app, environs)
    finally:
        for conn in connections:
            conn.set_trace_callback(None)
    counts: dict[str, float] = {}
    triggers, previous = 0, None
    for statement in seen:
        if statement == previous:
            triggers += 1
            continue
        previous = statement
        words = " ".join(statement.split()[:3])
        counts[words] = counts.get(words, 0) + 1 / len(environs)
    return counts, triggers / len(environs)


def _row(name: str, blocks: list[tuple[float, float, float]], events: int) -> str:
    us = [[value * 1e6 / events for value in block] for block in blocks]
    cpu, thread, wall = ([u[i] for u in us] for i in range(3))
    return (f"{name:<28} {events:>7} {len(blocks):>6} {statistics.median(cpu):>9.1f} {min(cpu):>7.1f}"
            f" {max(cpu):>7.1f} {statistics.median(thread):>10.1f} {statistics.median(wall):>9.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.receiver.cpu", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog="About 10 s at the defaults. One process, one core: other work on the machine moves it far less "
               "than bench.receiver, but compare numbers taken the same hour.")
    parser.add_argument("--events", type=int, default=2000, help="events per block (default 2000)")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per app, alternated A/B (default 6)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile one more receiver block and print its N costliest functions")
    args = parser.parse_args(argv)
    if not 1 <= args.events <= MAX_EVENTS:
        parser.error(f"--events must be between 1 and {MAX_EVENTS}")
    if not 1 <= args.blocks <= MAX_BLOCKS:
        parser.error(f"--blocks must be between 1 and {MAX_BLOCKS}")
    if not 0 <= args.profile <= 200:
        parser.error("--profile must be between 0 and 200")
    with tempfile.TemporaryDirectory(prefix="bench-receiver-cpu-") as work:
        return _run(Path(work), args)


def _run(work: Path, args: argparse.Namespace) -> int:
    # As `partnerkit serve`: prometheus_client picks its multiprocess value class when first imported.
    (work / "metrics").mkdir()
    if "prometheus_client" in sys.modules:
        print("note: prometheus_client was imported before the metrics directory was set", file=sys.stderr)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(work / "metrics")

    import sqlite3

    from partnerkit.config import load_config
    from partnerkit.store.db import connect, wal_checkpoint
    from receiver.app import create_app
    from receiver.signature import sign

    from bench.receiver.bare import create_bare_app
    from bench.receiver.load import _bodies

    config = load_config(environ={"PARTNERKIT_DB": str(work / "bench.db"), "PARTNERKIT_WEBHOOK_TOKENS": TOKEN,
                                  "PARTNERKIT_VOUCHER_KEY": VOUCHER_KEY})
    receiver_app, bare_app = create_app(config), create_bare_app()
    receiver = receiver_app.extensions["partnerkit_receiver"]
    events, sent, bad = args.events, 0, {}
    # The housekeeping thread checkpoints the WAL every 0.2 s, its CPU counted in whichever block runs then: at the
    # end of each receiver block the frames it left are checkpointed on the block's clock, so that no bare block
    # pays for them.
    checkpointer = connect(config.db_path)
    try:
        # Warm-up: each app's first calls, and the receiver's orders created (as the bench's warm-up and first
        # round do: its later rounds, nearly all of its events, find their order stored).
        for app, prefix in ((receiver_app, "warm-r"), (bare_app, "warm-b")):
            _, _, _, answers = _drive(app, _environs(_bodies(prefix, events), sign))
            sent += events if app is receiver_app else 0
            bad.update({k: v for k, v in answers.items() if not k.startswith(b"200 ")})
        gc.collect()
        gc.freeze()  # as each gunicorn worker does after building its app (receiver.gunicorn_app)
        measured: dict[str, list[tuple[float, float, float]]] = {"receiver": [], "bare": []}
        for block in range(args.blocks):
            order = ("receiver", "bare") if block % 2 == 0 else ("bare", "receiver")
            for name in order:
                app = receiver_app if name == "receiver" else bare_app
                environs = _environs(_bodies(f"cpu-{name[0]}{block}", events), sign)
                then = (lambda: wal_checkpoint(checkpointer)) if name == "receiver" else None
                cpu, thread, wall, answers = _drive(app, environs, then=then)
                measured[name].append((cpu, thread, wall))
                sent += events if name == "receiver" else 0
                expected = b'200 OK {"status":"accepted"}'
                bad.update({k: v for k, v in answers.items() if k != expected})
        statements, triggers = _statements(receiver, receiver_app, _environs(_bodies("sql", STATEMENT_EVENTS), sign))
        sent += STATEMENT_EVENTS
        if args.profile:
            import cProfile
            import pstats

            environs = _environs(_bodies("profile", events), sign)
            profiler = cProfile.Profile()
            profiler.enable()
            _drive(receiver_app, environs)
            profiler.disable()
            sent += events
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.profile)
            print(out.getvalue())
    finally:
        receiver.close()  # the housekeeping thread
        receiver.reopen_later()  # this thread's connections
        checkpointer.conn.close()
    conn = sqlite3.connect(config.db_path)
    try:
        stored, distinct, duplicates = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT dedup_key), COALESCE(SUM(duplicate_count), 0) FROM inbox").fetchone()
    finally:
        conn.close()

    print(f"{'target (WSGI call, 1 process)':<28} {'events':>7} {'blocks':>6} {'CPU us/ev':>9} {'min':>7} {'max':>7}"
          f" {'thread us':>10} {'wall us':>9}")
    print(f"{'':<28} {'/block':>7} {'':>6} {'median':>9} {'':>7} {'':>7} {'median':>10} {'median':>9}")
    print(_row("partnerkit receiver", measured["receiver"], events))
    print(_row("bare Flask app", measured["bare"], events))
    per_event = {name: [block[0] * 1e6 / events for block in blocks] for name, blocks in measured.items()}
    paired = [r - b for r, b in zip(per_event["receiver"], per_event["bare"])]
    receiver_us, bare_us = statistics.median(per_event["receiver"]), statistics.median(per_event["bare"])
    print(f"receiver - bare: {receiver_us - bare_us:.1f} us CPU per event (medians); paired blocks "
          f"{', '.join(f'{d:.0f}' for d in paired)}, median {statistics.median(paired):.1f}; "
          f"ratio of medians {receiver_us / bare_us:.2f}")
    print(f"SQL statements per delivery ({STATEMENT_EVENTS} deliveries): {sum(statements.values()):.1f} ("
          + ", ".join(f"{words} {n:.1f}" for words, n in sorted(statements.items(), key=lambda kv: -kv[1]))
          + f"), and {triggers:.1f} trigger programs")
    exact = stored == distinct == sent and duplicates == 0 and not bad
    print(f"inbox rows {stored}, sent {sent}, duplicates {duplicates}"
          + (f", unexpected answers {bad}" if bad else "")
          + f": {'every event stored exactly once' if exact else 'MISMATCH'}; load average {os.getloadavg()[0]:.1f}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
