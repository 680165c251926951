"""`python -m sandbox --port P --speed X [--envelope F] [--chaos] [--no-http-webhooks]`: the sandbox in the
foreground (docs/sandbox.md, "Running it")."""
from __future__ import annotations

import argparse

from . import serve
from .envelopes import FORMS


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m sandbox",
                                     description="Local simulator of the Partner API v1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="sandbox seconds per real second (0 freezes the clock)")
    parser.add_argument("--no-http-webhooks", action="store_true",
                        help="refuse plain-http loopback webhook URLs (https only, as the provider)")
    parser.add_argument("--envelope", choices=FORMS, default="standard",
                        help="envelope form of webhooks registered without one (default: standard)")
    parser.add_argument("--chaos", action="store_true",
                        help="webhooks registered without `chaos` get it: deliveries delayed, reordered "
                             "and sent twice")
    args = parser.parse_args(argv)
    serve(port=args.port, speed=args.speed, host=args.host,
          allow_http_webhooks=not args.no_http_webhooks, webhook_envelope=args.envelope,
          webhook_chaos=args.chaos)


if __name__ == "__main__":
    main()
