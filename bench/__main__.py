"""`python -m bench [NAME ...]`: run every benchmark (or the named ones), each in a fresh process.

A fresh interpreter per benchmark keeps one benchmark's memory and threads out of the next
one's numbers (the reconcile benchmark measures peak RSS). `python -m bench --help` lists them.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> list[str]:
    """Names of the benchmark subpackages, in a stable order."""
    return sorted(info.name for info in pkgutil.iter_modules([str(HERE)]) if info.ispkg)


# What each one measures and about how long it takes on a 2-core machine (README, "Benchmarks").
ABOUT = {
    "polling": "API calls of the kit's recharge poller against a naive one, 1000 recharges (about 90 s)",
    "receiver": "webhook acknowledgements per second and latency of `partnerkit serve` against a bare app (about 80 s)",
    "reconcile": "sync, match and report of a synthetic day of 100k and 1M records, each against its floor (about 5 min)",
    "soak": "the whole stack on loopback under crashes and provider faults, nothing lost (about 4 min)",
}


def usage() -> str:
    """The answer to --help: what runs, each benchmark in a line, and when to run them."""
    width = max(map(len, available()))
    lines = [f"  {name:<{width}}  {ABOUT.get(name, '')}".rstrip() for name in available()]
    return ("usage: python -m bench [NAME ...]\n\n"
            "Runs every benchmark, or the named ones, each in a fresh interpreter (`make bench` runs them all).\n"
            "`python -m bench.NAME --help` gives each one's options (bench.receiver has none: environment\n"
            "variables size it). Timings are comparable\n"
            "only on a quiet machine: run them with nothing else busy (not beside `make test`), and compare\n"
            "with the README's numbers.\n\n"
            "benchmarks:\n" + "\n".join(lines) + "\n\n"
            "Not run by `make bench`:\n"
            "  python -m bench.reconcile.history [--days N] [--size S]  the nightly job, the 15-minute sync, the\n"
            "      poller's pick, status, the list commands and the prune jobs on a store of N days of history\n"
            "      against one day (30 days of 20000 recharges: about 2.5 min and a store of a few hundred MB in\n"
            "      a temp directory; --help for its options)\n"
            "  python -m bench.receiver.cpu [--events N] [--blocks B] [--profile N]  CPU microseconds per event of\n"
            "      the receiver's WSGI call against the bare app's, in one process (about 10 s; steadier than\n"
            "      bench.receiver on a busy machine)\n")


def main(argv: list[str]) -> int:
    if any(arg in ("-h", "--help") for arg in argv):
        print(usage(), end="")
        return 0
    names = argv or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"bench: unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available())} "
              "(python -m bench --help)", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        print(f"\n=== bench.{name} ===", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, "-m", f"bench.{name}"], cwd=HERE.parent)
        print(f"=== bench.{name}: exit {code} in {time.monotonic() - started:.1f} s ===", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
