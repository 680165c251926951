"""partnerkit sandbox: a local, faithful simulator of the provider's Partner API v1.

Independent of partnerkit, receiver and reconcile by design (DESIGN.md): its own signing,
its own Decimal money handling.  See docs/sandbox.md.
"""
from __future__ import annotations

import signal
import threading
import time
from datetime import datetime, timezone

from . import ids
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
          webhook_chaos: bool = False, fixed_ids: bool = False) -> None:
    """Serve the sandbox until interrupted, printing base URL, credentials and new tokens.

    Its ids are numbered from the start time (sandbox/ids.py), never those of an earlier start; with
    `fixed_ids`, from the documented first ids (recharge 100001, order 5001, ...) as at every start.
    `settings`, when given, is used as it is (speed, allow_http_webhooks, the webhook defaults and
    id_block are then its own)."""
    started = datetime.now(timezone.utc)
    settings = settings or SandboxSettings(speed=speed, allow_http_webhooks=allow_http_webhooks,
                                           webhook_envelope=webhook_envelope, webhook_chaos=webhook_chaos,
                                           id_block=0 if fixed_ids else ids.block_at(started))
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
        # The client's setting is the bare address (it adds /api/v1 itself): printed as it is to be set.
        echo(f"sandbox listening on {server.base_url}  (PARTNERKIT_API_BASE_URL={server.base_url}, the API under "
             f"/api/v1, speed x{settings.speed:g})")
        for c in server.clients:
            echo(f"  client {c.name}: X-API-Key {c.key}  X-API-Secret {c.secret}  "
                 f"signing secret {c.signing_secret}  credential_id {c.credential_id}")
        echo(f"  webhooks registered now: envelope {settings.webhook_envelope}, chaos "
             f"{'on' if settings.webhook_chaos else 'off'}, plain http to loopback "
             f"{'allowed' if settings.allow_http_webhooks else 'refused'} "
             "(PATCH /sandbox/webhooks/ID switches a registered one)")
        echo(f"  ids of this start: {_first_ids_line(settings.id_block)}")
        echo("  control endpoints under /sandbox (stats, clock, settings, webhooks); Ctrl-C to stop")
        # werkzeug's serve_forever ends quietly on KeyboardInterrupt (Ctrl-C, or SIGTERM through
        # _interrupt) and returns: only an interrupt that comes before it starts reaches the except.
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        try:
            _outlive_block(settings.id_block)
        except KeyboardInterrupt:  # a second Ctrl-C (or SIGTERM) cuts the wait short
            pass
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    echo("sandbox stopped")


def _first_ids_line(block: int) -> str:
    first = ids.first_ids(block)
    numbers = (f"recharge {first['recharge']}, order {first['order']}, transaction {first['transaction']}, "
               f"webhook {first['webhook']} onwards")
    if block:
        return (f"{numbers} (numbered from the start time, never an earlier start's; `python -m sandbox "
                "--fixed-ids` numbers from recharge 100001, order 5001)")
    return f"{numbers} (fixed: the same at every start, so give each start a fresh partnerkit database)"


def _outlive_block(block: int) -> None:
    """Return only once the second of the start's block is over: the next start, numbered by its own start
    second, then never shares a block with this one (a sandbox stopped within a second of its start)."""
    if block:
        left = (ids.EPOCH.timestamp() + block + 1) - time.time()
        if 0 < left <= 1:
            time.sleep(left)


def _interrupt(signum, frame):
    raise KeyboardInterrupt
