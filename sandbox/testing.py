"""SandboxServer: the sandbox on a free loopback port in a daemon thread, for tests and demos."""
from __future__ import annotations

import threading

from werkzeug.serving import WSGIRequestHandler, make_server

from .app import create_app
from .settings import SandboxSettings


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args, **kwargs) -> None:   # tests want a silent server
        pass


class SandboxServer:
    """Context manager serving the sandbox on 127.0.0.1:<free port>.

    Attributes: base_url (without /api/v1), app, sandbox, clock, clients (seeded
    credentials with .key, .secret, .signing_secret).
    """

    def __init__(self, settings: SandboxSettings | None = None, background: bool = True,
                 host: str = "127.0.0.1", port: int = 0, quiet: bool = True):
        self.app = create_app(settings)
        self.sandbox = self.app.extensions["sandbox"]
        self.clock = self.sandbox.clock
        self.clients = list(self.sandbox.clients.values())
        self._server = make_server(host, port, self.app, threaded=True,
                                   request_handler=_QuietHandler if quiet else None)
        self.port = self._server.server_port
        self.base_url = f"http://{host}:{self.port}"
        self._background = background
        self._thread: threading.Thread | None = None
        self._serving = False

    def start(self) -> SandboxServer:
        """Start serving (and the background scheduler, unless background=False)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever,
                                            kwargs={"poll_interval": 0.05},
                                            name="sandbox-http", daemon=True)
            self._thread.start()
            if self._background:
                self.sandbox.start_background()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until stop() is called from another thread."""
        if self._background:
            self.sandbox.start_background()
        self._serving = True
        try:
            self._server.serve_forever(poll_interval=0.05)
        finally:
            self._serving = False

    def stop(self) -> None:
        """Stop serving and the background scheduler."""
        self.sandbox.stop_background()
        if self._thread is not None or self._serving:
            self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def run_due(self) -> dict:
        """Process everything due now (deterministic alternative to the background thread)."""
        return self.sandbox.run_due()

    def advance(self, seconds: float) -> dict:
        """Advance the sandbox clock and run everything then due."""
        self.clock.advance(seconds)
        return self.sandbox.run_due()

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
