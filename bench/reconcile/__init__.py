"""`python -m bench.reconcile [--sizes 100000,1000000]`: load, match and report synthetic days, against their floor.

Each size runs in a fresh interpreter (bench.reconcile.run) so its peak RSS is its own. "load" is
what reconcile.sync does with the provider's pages of the day: the generation of the recharge pages
is not timed (gen s); the parse of the transaction pages' JSON is (parse s, part of load s).
"total" is load + match + report. See bench/reconcile/run.py for exactly what is timed.
After it, the same size's floor runs in a fresh interpreter of its own (bench.reconcile.floor): the
same day, timed the same way, but only the least any Python-over-SQLite load and match with our
schema must do (every record parsed and written once with plain `executemany`, one join read to
match, no report). "floor s" is its total and "x floor" partnerkit's total over it: the same-run
baseline, which moves with the machine as partnerkit's total does.
Targets (issue 5): 1M recharges + 1M transactions in at most 10 s and 300 MB peak RSS, and the
1M run at most 11 times the 100k run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(size: int, module: str = "bench.reconcile.run") -> dict:
    """Run one size of `module` (run.py, or floor.py) in a fresh subprocess and return its JSON measurements."""
    out = subprocess.run([sys.executable, "-m", module, str(size)], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    """The results as an aligned text table."""
    base = rows[0]["total_s"] if rows else 1
    lines = [f"{'size':>9} {'tx':>9} {'gen s':>6} {'parse s':>8} {'load s':>7} {'match s':>8} {'report s':>9} "
             f"{'total s':>8} {'peak MB':>8} {'drifts':>7} {'x first':>8} {'floor s':>8} {'x floor':>8} "
             f"{'drift ids sha256':>17}"]
    for r in rows:
        lines.append(f"{r['size']:>9} {r['transactions']:>9} {r['gen_s']:>6.2f} {r['parse_s']:>8.2f} {r['load_s']:>7.2f} "
                     f"{r['match_s']:>8.2f} "
                     f"{r['report_s']:>9.2f} {r['total_s']:>8.2f} {r['peak_mb']:>8.0f} {r['drifts']:>7} "
                     f"{r['total_s'] / base:>8.1f} {r['floor_s']:>8.2f} {r['total_s'] / r['floor_s']:>8.1f} "
                     f"{r['drift_digest']:>17}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reconcile", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated recharge counts")
    args = parser.parse_args(argv)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.append(measure(size))
        print(f"{size}: {rows[-1]['total_s']:.2f} s, {rows[-1]['peak_mb']:.0f} MB, "
              f"drifts by kind {json.dumps(rows[-1]['kinds'])}", file=sys.stderr, flush=True)
        floor = measure(size, "bench.reconcile.floor")
        rows[-1]["floor_s"] = floor["total_s"]
        print(f"{size} floor: {floor['total_s']:.2f} s (load {floor['load_s']:.2f}, match {floor['match_s']:.2f}),"
              f" {floor['peak_mb']:.0f} MB", file=sys.stderr, flush=True)
    print(table(rows))
    return 0
