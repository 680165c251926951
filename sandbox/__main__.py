"""`python -m sandbox --port P --speed X [--envelope F] [--chaos] [--no-http-webhooks] [--fixed-ids]`: the
sandbox in the foreground (docs/sandbox.md, "Running it")."""
from __future__ import annotations

import argparse

from . import serve
from .envelopes import FORMS


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m sandbox",
                                     description="Local simulator of the Partner API v1")
    parser.add_argument("--port", type=int, default=8090, help="port to listen on (default 8090; 0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="sandbox seconds per real second (0 freezes the clock)")
    parser.add_argument("--no-http-webhooks", action="store_true",
                        help="refuse plain-http loopback webhook URLs (https only, as the provider)")
    parser.add_argument("--envelope", choices=FORMS, default="standard",
                        help="envelope form of webhooks registered without one (default: standard)")
    parser.add_argument("--chaos", action="store_true",
                        help="webhooks registered without `chaos` get it: deliveries delayed, reordered "
                             "and sent twice")
    parser.add_argument("--fixed-ids", action="store_true",
                        help="number records from the documented first ids (recharge 100001, order 5001, "
                             "transaction 700001, webhook 1) as at every start, for scripts that expect them; "
                             "a database kept from an earlier start then holds other records under the same "
                             "ids. Default: numbered from the start time, never an earlier start's (recharge "
                             "91234567100001, order 91234567005001, ... for a start 91234567 s after 2024-01-01)")
    args = parser.parse_args(argv)
    serve(port=args.port, speed=args.speed, host=args.host,
          allow_http_webhooks=not args.no_http_webhooks, webhook_envelope=args.envelope,
          webhook_chaos=args.chaos, fixed_ids=args.fixed_ids)


if __name__ == "__main__":
    main()
