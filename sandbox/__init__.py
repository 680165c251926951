"""partnerkit sandbox: a local, faithful simulator of the provider's Partner API v1.

Independent of partnerkit, receiver and reconcile by design (DESIGN.md): its own signing,
its own Decimal money handling.  See docs/sandbox.md.
"""
from __future__ import annotations

import signal
import threading

from .app import create_app
from .clock import SandboxClock
from .settings import SandboxSettings
from .testing import SandboxServer

__all__ = ["create_app", "SandboxSettings", "SandboxServer", "SandboxClock", "serve"]


def _print(line: str) -> None:
    print(line, flush=True)


def serve(port: int = 8090, speed: float = 1.0, host: str = "127.0.0.1",
          allow_http_webhooks: bool = True, echo=_print,
          settings: SandboxSettings | None = None, *, webhook_envelope: str = "standard",
          webhook_chaos: bool = False) -> None:
    """Serve the sandbox until interrupted, printing base URL, credentials and new tokens.

    `settings`, when given, is used as it is (speed, allow_http_webhooks and the webhook defaults
    are then its own)."""
    settings = settings or SandboxSettings(speed=speed, allow_http_webhooks=allow_http_webhooks,
                                           webhook_envelope=webhook_envelope, webhook_chaos=webhook_chaos)
    server = SandboxServer(settings, background=True, host=host, port=port, quiet=False)
    sb = server.sandbox

    def announce(hook, token):
        echo(f"webhook {hook.id} registered for {hook.url}: token {token}")

    sb.webhook_listeners.append(announce)
    # SIGTERM (kill, systemd, docker stop) stops it as Ctrl-C does: the server shut down, one line said.
    # Installed before the first line is printed: whoever waits for that line may signal at once.
    main = threading.current_thread() is threading.main_thread()  # signals reach the main thread only
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        echo(f"sandbox listening on {server.base_url}  (API base {server.base_url}/api/v1, "
             f"speed x{settings.speed:g})")
        for c in server.clients:
            echo(f"  client {c.name}: X-API-Key {c.key}  X-API-Secret {c.secret}  "
                 f"signing secret {c.signing_secret}  credential_id {c.credential_id}")
        echo(f"  webhooks registered now: envelope {settings.webhook_envelope}, chaos "
             f"{'on' if settings.webhook_chaos else 'off'}, plain http to loopback "
             f"{'allowed' if settings.allow_http_webhooks else 'refused'} "
             "(PATCH /sandbox/webhooks/ID switches a registered one)")
        echo("  control endpoints under /sandbox (stats, clock, settings, webhooks); Ctrl-C to stop")
        # werkzeug's serve_forever ends quietly on KeyboardInterrupt (Ctrl-C, or SIGTERM through
        # _interrupt) and returns: only an interrupt that comes before it starts reaches the except.
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    echo("sandbox stopped")


def _interrupt(signum, frame):
    raise KeyboardInterrupt
