"""The sandbox in its own process for the polling benchmark (so it has a core of its own).

Prints one JSON line (base URL and the seeded credentials), then serves until stdin closes.
Clock frozen (speed 0): only POST /sandbox/clock/advance moves it. Recharges never settle by
themselves: the benchmark settles them with POST /sandbox/recharges/{id}/settle.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> None:
    """Start the sandbox and block until the parent closes our stdin."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hourly-limit", type=int, default=1_000_000)
    args = parser.parse_args()

    from sandbox import SandboxServer, SandboxSettings

    settings = SandboxSettings(speed=0, processing_delay_s=10**7, hourly_limit=args.hourly_limit, seed=args.seed)
    with SandboxServer(settings, background=False) as server:
        print(json.dumps({"base_url": server.base_url,
                          "clients": [{"key": c.key, "secret": c.secret} for c in server.clients]}), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
