"""`python -m bench [NAME ...]`: run every benchmark (or the named ones), each in a fresh process.

A fresh interpreter per benchmark keeps one benchmark's memory and threads out of the next
one's numbers (the reconcile benchmark measures peak RSS).
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


def main(argv: list[str]) -> int:
    names = argv or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"bench: unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(available())}", file=sys.stderr)
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
