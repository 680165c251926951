"""`python -m sandbox --port P --speed X`: run the sandbox in the foreground."""
from __future__ import annotations

import argparse

from . import serve


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m sandbox",
                                     description="Local simulator of the Partner API v1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="sandbox seconds per real second (0 freezes the clock)")
    parser.add_argument("--no-http-webhooks", action="store_true",
                        help="refuse plain-http loopback webhook URLs")
    args = parser.parse_args(argv)
    serve(port=args.port, speed=args.speed, host=args.host,
          allow_http_webhooks=not args.no_http_webhooks)


if __name__ == "__main__":
    main()
