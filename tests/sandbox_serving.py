"""The sandbox on loopback for tests: the real SandboxServer, stopped without waiting out its poll.

`SandboxServer.start()` serves with a 0.05 s poll, and `stop()` waits for the loop's next poll to
see the shutdown: 25-50 ms of every test that starts a sandbox, over ten seconds of a full run.
Tests serve the same server (same app, same handler, same background thread) with a 5 ms poll.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from sandbox import SandboxServer, SandboxSettings

POLL_S = 0.005


def start_sandbox(running: SandboxServer, *, background: bool = True) -> SandboxServer:
    """Serve `running` (and its background scheduler, if `background`) in daemon threads; stop() as usual."""
    http = getattr(running, "_server", None)
    if http is None or getattr(running, "_thread", "absent") is not None:
        return running.start()  # a SandboxServer of another shape: its own start, its own poll
    running._thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": POLL_S},
                                       name="sandbox-http", daemon=True)
    running._thread.start()
    if background:
        running.sandbox.start_background()
    return running


@contextmanager
def serve_sandbox(settings: SandboxSettings | None = None, *, background: bool = True) -> Iterator[SandboxServer]:
    """`with SandboxServer(settings, background=...) as server:`, with a 5 ms shutdown poll."""
    from sandbox import SandboxServer

    running = SandboxServer(settings, background=background)
    try:
        yield start_sandbox(running, background=background)
    finally:
        running.stop()
